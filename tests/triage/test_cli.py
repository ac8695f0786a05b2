"""CLI tests through ``gpufield.cli.main`` (the installed entry point) and typer's CliRunner."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpufield.cli import app, main

CASES = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "triage-cases"


def run(capsys, *argv):
    rc = main(["triage", *argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_bare_triage_runs_the_bundled_example(capsys):
    rc, out, _ = run(capsys)
    assert rc == 0
    assert "GPU_FELL_OFF_BUS" in out and "node-b" in out and "EXCLUDE_NODE" in out


def test_json_and_quiet(capsys):
    rc, out, _ = run(capsys, "--json")
    assert rc == 0
    d = json.loads(out)
    assert d["example"] is True and d["incidents"][0]["class"] == "GPU_FELL_OFF_BUS"
    rc, out, _ = run(capsys, "--quiet")
    assert rc == 0 and len(out.strip().splitlines()) == 1 and out.startswith("GPU_FELL_OFF_BUS")


def test_paths_and_explicit_analyze_agree(capsys, shared_dir):
    f = str(CASES / "18-xid48-dbe-cuda-validator.log")
    rc1, out1, _ = run(capsys, f, "--json")
    rc2, out2, _ = run(capsys, "analyze", "--json", f)
    assert rc1 == rc2 == 0
    assert json.loads(out1)["incidents"][0]["class"] == json.loads(out2)["incidents"][0]["class"] == "ECC_UNCORRECTABLE"


def test_a_path_named_like_the_subcommand(capsys, tmp_path, monkeypatch):
    d = tmp_path / "eval"
    d.mkdir()
    (d / "dmesg.txt").write_text("[ 12.5] NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.\n")
    monkeypatch.chdir(tmp_path)
    rc, out, _ = run(capsys, "./eval", "--quiet")  # ./eval is a path; bare "eval" is the subcommand
    assert rc == 0 and out.startswith("GPU_FELL_OFF_BUS")


@pytest.mark.parametrize("make", ["missing", "empty_dir", "binary"])
def test_unreadable_input_exits_nonzero_with_a_message(capsys, tmp_path, make):
    if make == "missing":
        target = tmp_path / "nope.log"
    elif make == "empty_dir":
        target = tmp_path / "empty"
        target.mkdir()
    else:
        target = tmp_path / "core.bin"
        target.write_bytes(bytes(range(256)) * 64)
    rc, out, err = run(capsys, str(target))
    assert rc == 2 and out == ""
    assert "gpufield: error:" in err and str(target.name) in err


def test_html_output_never_overwrites_without_force(capsys, tmp_path):
    page = tmp_path / "report.html"
    page.write_text("keep me", encoding="utf-8")
    rc, _, err = run(capsys, "--html", str(page))
    assert rc == 2 and "refusing to overwrite" in err and page.read_text(encoding="utf-8") == "keep me"
    rc, out, _ = run(capsys, "--html", str(page), "--force", "--quiet")
    assert rc == 0 and "<svg" in page.read_text(encoding="utf-8")


def test_db_option_writes_a_store(capsys, tmp_path):
    pytest.importorskip("duckdb")
    db = tmp_path / "events.duckdb"
    rc, _, _ = run(capsys, "--db", str(db), "--quiet")
    assert rc == 0 and db.is_file()
    rc, _, err = run(capsys, "--db", str(db), "--quiet")
    assert rc == 2 and "refusing to overwrite" in err


def test_eval_subcommand_json(capsys, shared_dir):
    rc, out, _ = run(capsys, "eval", str(CASES), "--json", "--min-accuracy", "0.95")
    assert rc == 0  # 26/27: case 34 (masked straggler), see tests/triage/test_eval.py
    d = json.loads(out)
    assert d["cases"] == len(d["results"]) >= 27
    assert d["accuracy"] >= 0.95
    assert {"per_class", "confusion", "strict_accuracy", "calibration"} <= set(d)


def test_eval_below_threshold_exits_1(capsys, tmp_path, shared_dir):
    # a corpus whose label is deliberately wrong for its log: the eval must report it as a miss
    (tmp_path / "x.log").write_text((CASES / "13-xid79-gpu-lost-syslog.log").read_text())
    (tmp_path / "INDEX.md").write_text("| # | Case file | Expected class |\n|---|---|---|\n"
                                       "| 01 | `x.log` | `NAN_LOSS` |\n")
    rc, out, _ = run(capsys, "eval", str(tmp_path), "--json", "--min-accuracy", "0.5")
    assert rc == 1
    d = json.loads(out)
    assert d["accuracy"] == 0.0 and d["confusion"] == [{"expected": "NAN_LOSS", "predicted": "GPU_FELL_OFF_BUS",
                                                        "count": 1}]


def test_typer_runner_help_lists_subcommands():
    res = CliRunner().invoke(app, ["triage", "--help"])
    assert res.exit_code == 0
    assert "analyze" in res.output and "eval" in res.output


def test_a_healthy_log_is_a_verdict_too(capsys, tmp_path):
    f = tmp_path / "train.log"
    f.write_text("".join(f"step {s} | loss {2.0 - s / 1000:.4f} | lr 1e-4\n" for s in range(200)), encoding="utf-8")
    rc, out, _ = run(capsys, str(f))
    assert rc == 0 and "No failure signature found" in out
    rc, out, _ = run(capsys, str(f), "--json")
    assert rc == 0 and json.loads(out)["verdict"] is None and json.loads(out)["incidents"] == []


def test_a_missing_path_among_readable_ones_is_an_error_unless_allowed(capsys, tmp_path, shared_dir):
    good = str(CASES / "13-xid79-gpu-lost-syslog.log")
    rc, out, err = run(capsys, str(tmp_path / "typo.log"), good, "--quiet")
    assert rc == 2 and out == "" and "typo.log" in err and "--allow-missing" in err and "Traceback" not in err
    rc, out, err = run(capsys, str(tmp_path / "typo.log"), good, "--quiet", "--allow-missing")
    assert rc == 0 and out.startswith("GPU_FELL_OFF_BUS")
    assert "warning" in err and "typo.log" in err
