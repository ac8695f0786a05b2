"""``gpufield preflight`` on this machine (no NVIDIA driver): JSON schema, exit codes, --out safety, bad input."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from gpufield.cli import main
from gpufield.harden.preflight import SCHEMA, check_names

# the all-reduce is covered by test_preflight_allreduce.py; here it would only repeat its seconds
FAST = ["--skip", "comm", "--min-free-disk-gib", "0", "--checkpoint-dir"]


def _json(capsys, argv):
    code = main(argv)
    out = capsys.readouterr()
    return code, json.loads(out.out), out.err


def test_json_on_this_machine(capsys, tmp_path):
    code, doc, _ = _json(capsys, ["preflight", "--json", *FAST, str(tmp_path)])
    assert doc["schema"] == SCHEMA
    assert set(doc) >= {"host", "started_utc", "elapsed_s", "status", "exit_code", "counts", "checks", "nvml_wedged"}
    names = [c["name"] for c in doc["checks"]]
    assert names == list(check_names())  # --skip comm: the all-reduce is listed as skipped, not dropped
    comm = [c for c in doc["checks"] if c["name"].startswith("comm.")]
    assert comm and all(c["status"] == "skip" and "--skip" in c["reason"] and c["elapsed_s"] == 0 for c in comm)
    assert doc["checks"][0]["name"] == "gpu.visible"
    for c in doc["checks"]:
        assert set(c) == {"name", "status", "severity", "reason", "values", "fix", "elapsed_s"}
        assert c["status"] in ("pass", "warn", "fail", "skip") and c["elapsed_s"] >= 0
    by = {c["name"]: c for c in doc["checks"]}
    nvml_ok = shutil.which("nvidia-smi") is not None
    if not nvml_ok:  # this CPU machine: GPU checks skip, CPU checks really ran
        assert all(by[n]["status"] == "skip" and "no NVIDIA driver / NVML not found" in by[n]["reason"]
                   for n in names if n.startswith("gpu."))
    st = os.statvfs(tmp_path)
    assert by["host.disk"]["status"] == "pass"
    assert by["host.disk"]["values"]["free_gib"] == pytest.approx(st.f_bavail * st.f_frsize / 2**30, abs=0.5)
    assert by["host.shm"]["status"] in ("pass", "fail")
    assert sum(doc["counts"].values()) == len(names)
    assert code == doc["exit_code"] == (1 if doc["status"] == "fail" else 0)


def test_exit_codes_fail_and_strict(capsys, tmp_path, monkeypatch):
    code, doc, _ = _json(capsys, ["preflight", "--json", "--only", "host.disk", "--checkpoint-dir", str(tmp_path),
                                  "--min-free-disk-gib", "1e12"])
    assert code == 1 and doc["status"] == "fail" and doc["checks"][0]["severity"] == "critical"
    monkeypatch.setenv("NCCL_P2P_DISABLE", "1")
    code, doc, _ = _json(capsys, ["preflight", "--json", "--only", "env.nccl"])
    assert code == 0 and doc["status"] == "warn"
    code, doc, _ = _json(capsys, ["preflight", "--json", "--only", "env.nccl", "--strict"])
    assert code == 1 and doc["exit_code"] == 1


def test_out_file_written_atomically_and_never_clobbered(capsys, tmp_path):
    out = tmp_path / "pf.json"
    argv = ["preflight", "--only", "env", "--out", str(out)]
    assert main(argv) == 0
    capsys.readouterr()
    doc = json.loads(out.read_text())
    assert doc["schema"] == SCHEMA and [c["name"] for c in doc["checks"]] == ["env.nccl", "env.socket_ifname"]
    out.write_text("keep")
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.strip().count("\n") == 0 and "file exists" in err and "--force" in err
    assert out.read_text() == "keep"
    assert main([*argv, "--force"]) == 0
    assert json.loads(out.read_text())["schema"] == SCHEMA
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pf.json"]  # no temp file left beside it
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    capsys.readouterr()
    assert main(["preflight", "--only", "env", "--out", str(fifo), "--force"]) == 2
    assert "named pipe (FIFO); refusing to replace it" in capsys.readouterr().err  # _files.check_output names the kind
    assert fifo.exists() and not fifo.is_file()


@pytest.mark.parametrize(("argv", "needle"), [
    (["--only", "gpu.bogus"], "unknown check 'gpu.bogus'"),
    (["--skip", "nope"], "unknown check 'nope'"),
    (["--expect-gpus", "eight"], "--expect-gpus: expected a whole number >= 0, got 'eight'"),
    (["--expect-gpus", "-1"], "--expect-gpus: expected a whole number >= 0"),
    (["--nvml-timeout-s", "0"], "--nvml-timeout-s: expected a positive number"),
    (["--allreduce-ranks", "1"], "allreduce_cpu_ranks must be a whole number in 2..64"),
    (["--allreduce-backend", "mpi"], "allreduce_backend must be auto, gloo or nccl"),
    (["--only", "kernel", "--skip", "kernel"], "no check selected"),  # a prolog checking nothing must not pass
])
def test_bad_input_is_one_line_exit_2(capsys, argv, needle):
    assert main(["preflight", *argv]) == 2
    err = capsys.readouterr().err
    assert needle in err and err.startswith("gpufield: error: ") and err.strip().count("\n") == 0


def test_list(capsys):
    assert main(["preflight", "--list"]) == 0
    listed = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    assert listed == list(check_names())
