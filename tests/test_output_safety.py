"""Outputs of every wing: a unique temporary file beside the target, renamed; --force never replaces a
device, FIFO, symlink or one of the command's inputs; the output directory checked before the work."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from gpufield._files import atomic_path, atomic_write, check_output
from gpufield.cli import main
from gpufield.errors import InputError

XID_SYSLOG = "May 18 19:02:39 gpu-a03 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.\n"


def _run(capsys, *argv):
    rc = main(list(argv))
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def _one_error(rc: int, err: str, *names: str) -> None:
    assert rc == 2 and "Traceback" not in err, err
    lines = [ln for ln in err.splitlines() if ln.startswith(("gpufield: error:", "Error:"))]
    assert len(lines) == 1, err
    for n in names:
        assert n in lines[0], err


def test_char_device_refused_even_with_force_and_never_written():
    before = os.stat("/dev/null")
    with pytest.raises(InputError, match="character device"):
        check_output("/dev/null", force=True)
    after = os.stat("/dev/null")
    assert stat.S_ISCHR(after.st_mode) and (after.st_ino, after.st_rdev) == (before.st_ino, before.st_rdev)


def test_cli_html_dev_null_force_is_refused(capsys):
    rc, out, err = _run(capsys, "triage", "--quiet", "--html", "/dev/null", "--force")
    _one_error(rc, err, "/dev/null", "character device")
    assert out == "" and stat.S_ISCHR(os.stat("/dev/null").st_mode)


@pytest.fixture
def log(tmp_path):
    f = tmp_path / "kern.log"
    f.write_text(XID_SYSLOG)
    return f


def test_fifo_symlink_and_input_refused_with_force(capsys, tmp_path, log):
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    target = tmp_path / "precious.html"
    target.write_text("keep")
    link = tmp_path / "link.html"
    link.symlink_to(target)
    for path, why in ((fifo, "named pipe"), (link, "symbolic link"), (log, "one of the command's inputs")):
        rc, _, err = _run(capsys, "triage", str(log), "--quiet", "--html", str(path), "--force")
        _one_error(rc, err, str(path), why)
    assert stat.S_ISFIFO(fifo.lstat().st_mode) and link.is_symlink() and target.read_text() == "keep"
    assert log.read_text() == XID_SYSLOG
    rc, _, err = _run(capsys, "triage", str(log), "--quiet", "--db", str(log))
    _one_error(rc, err, str(log))
    assert log.read_text() == XID_SYSLOG and not list(tmp_path.glob(".*.tmp"))


def test_output_directory_checked_before_the_work(capsys, tmp_path, log, monkeypatch):
    import gpufield.triage

    def no_work(*a, **k):
        raise AssertionError("analysis ran before the output was checked")

    monkeypatch.setattr(gpufield.triage, "analyze", no_work)
    for opt in ("--html", "--db"):
        rc, _, err = _run(capsys, "triage", str(log), opt, str(tmp_path / "missing" / "out"))
        _one_error(rc, err, "directory does not exist", str(tmp_path / "missing"))
    rc, _, err = _run(capsys, "triage", str(log), "--html", str(tmp_path))
    _one_error(rc, err, "is a directory")


def test_atomic_write_replaces_whole_and_an_error_keeps_the_old_file(tmp_path):
    out = tmp_path / "r.txt"
    out.write_text("old")
    with pytest.raises(RuntimeError), atomic_path(out, force=True) as tmp:
        tmp.write_text("half")
        raise RuntimeError("interrupted")
    assert out.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["r.txt"]
    atomic_write(out, "new", force=True)
    assert out.read_text() == "new" and sorted(p.name for p in tmp_path.iterdir()) == ["r.txt"]
    with pytest.raises(InputError, match="refusing to overwrite"):
        atomic_write(out, "again")
    assert out.read_text() == "new"


def test_verify_run_out_fifo_or_input_refused(capsys, tmp_path):
    pytest.importorskip("onnx")
    import numpy as np
    from tests.verify.nets import mlp, save

    model = tmp_path / "net.onnx"
    save(mlp(np.random.default_rng(0), [2, 3, 2])[0], model)
    prop = tmp_path / "p.vnnlib"
    prop.write_text("(declare-const X_0 Real)\n(declare-const X_1 Real)\n(declare-const Y_0 Real)\n"
                    "(declare-const Y_1 Real)\n(assert (<= X_0 1))\n(assert (>= X_0 0))\n(assert (<= X_1 1))\n"
                    "(assert (>= X_1 0))\n(assert (<= Y_0 Y_1))\n")
    fifo = tmp_path / "r.fifo"
    os.mkfifo(fifo)
    before = model.read_bytes()
    for out, why in ((fifo, "named pipe"), (prop, "inputs")):
        rc, _, err = _run(capsys, "verify", "run", str(model), str(prop), "--out", str(out), "--force")
        _one_error(rc, err, str(out), why)
    assert stat.S_ISFIFO(fifo.lstat().st_mode) and model.read_bytes() == before and "Y_0 Y_1" in prop.read_text()


def test_verify_bench_out_fifo_refused_before_unlinking(capsys, tmp_path):
    (tmp_path / "instances.csv").write_text("onnx/a.onnx,vnnlib/a.vnnlib,60\n")
    fifo = tmp_path / "res.csv"
    os.mkfifo(fifo)
    rc, _, err = _run(capsys, "verify", "bench", str(tmp_path), "--out", str(fifo), "--force")
    _one_error(rc, err, str(fifo), "named pipe")
    assert stat.S_ISFIFO(fifo.lstat().st_mode)


def test_power_calibrate_out_symlink_refused(capsys, tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "prof"
    link.symlink_to(real)
    rc, _, err = _run(capsys, "power", "calibrate", "moe-agentic-b200", "--out", str(link), "--quiet")
    _one_error(rc, err, str(link), "symbolic link")
    assert list(real.iterdir()) == []


def test_html_atomic_no_temp_left(capsys, tmp_path, log):
    out = tmp_path / "r.html"
    rc, _, err = _run(capsys, "triage", str(log), "--quiet", "--html", str(out))
    assert rc == 0, err
    assert "<svg" in out.read_text() and sorted(p.name for p in tmp_path.iterdir()) == ["kern.log", "r.html"]
    assert Path(out).stat().st_nlink == 1


def test_power_profile_path_that_is_a_fifo_is_refused_not_read(tmp_path):
    import dataclasses

    from gpufield.power.profiles import Profile, ProfileKey, save_profile
    from gpufield.power.types import LaneSetting

    fifo = tmp_path / "p.json"
    os.mkfifo(fifo)
    key = ProfileKey(**{f.name: (1 if f.type in (int, "int") else "x") for f in dataclasses.fields(ProfileKey)})
    prof = Profile(key=key, setting=LaneSetting(), actuator="default", slo={})
    with pytest.raises(InputError, match="named pipe"):
        save_profile(prof, fifo)
    assert stat.S_ISFIFO(fifo.lstat().st_mode)


def test_power_decision_log_that_is_the_lanes_file_is_named_an_input(tmp_path):
    from gpufield.power.run_export import DecisionLog

    cfg = tmp_path / "lanes.toml"
    cfg.write_text("[controller]\n")
    with pytest.raises(InputError, match="decision_log is one of the command's inputs") as e:
        DecisionLog(str(cfg), inputs=[str(cfg)])
    assert e.value.path == str(cfg) and cfg.read_text() == "[controller]\n"
    with pytest.raises(InputError, match="never replaced") as e:  # power run has no --force to suggest
        DecisionLog(str(cfg))
    assert "--force" not in str(e.value)


def test_preflight_out_that_is_the_kernel_log_is_refused_even_with_force(capsys, tmp_path):
    log = tmp_path / "kern.log"
    log.write_text("[  1.0] NVRM: Xid (PCI:0000:17:00): 79, pid=1, GPU has fallen off the bus.\n")
    rc = main(["preflight", "--only", "kernel", "--kernel-log", str(log), "--out", str(log), "--force"])
    err = capsys.readouterr().err
    assert rc == 2 and "--out is one of the command's inputs" in err, err
    assert log.read_text().startswith("[  1.0] NVRM: Xid")


@pytest.mark.parametrize("kind", ["gz", "truncated-gz", "missing", "dir"])
def test_preflight_kernel_log_gz_is_read_and_a_bad_one_is_not_a_pass(capsys, tmp_path, kind):
    import gzip

    data = gzip.compress(b"[  1.0] NVRM: Xid (PCI:0000:17:00): 79, pid=1, GPU has fallen off the bus.\n")
    log = tmp_path / "dmesg.txt.gz"
    if kind == "gz":
        log.write_bytes(data)
    elif kind == "truncated-gz":
        log.write_bytes(data[:20])
    elif kind == "dir":
        log.mkdir()
    rc = main(["preflight", "--only", "kernel", "--kernel-log", str(log), "--json"])
    cap = capsys.readouterr()
    if kind in ("missing", "dir"):
        assert rc == 2 and str(log) in cap.err and "Traceback" not in cap.err, cap.err
        return
    import json

    (res,) = json.loads(cap.out)["checks"]
    assert rc == 1 and res["status"] == "fail", res  # was "pass: no Xid in 1 kernel log lines" of gzip bytes
    assert ("Xid 79" in res["reason"]) if kind == "gz" else ("truncated gzip" in res["reason"]), res


@pytest.mark.parametrize("args", [["--hostfile", "CTL", "--control-file", "CTL"],
                                  ["--exclude-file", "H", "--hostfile", "H"],
                                  ["--backoff-s", "inf"], ["--hang-floor-s", "inf"]])
def test_gpufield_run_outputs_never_over_its_control_file_and_finite_times(capsys, tmp_path, args):
    ctl = tmp_path / "ctl.json"
    ctl.write_text("{}")
    args = [str(ctl) if a == "CTL" else str(tmp_path / "h.txt") if a == "H" else a for a in args]
    rc = main(["run", "--run-dir", str(tmp_path / "rd"), *args, "--", "true"])
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err and ("name the same file" in err or "finite" in err), err
    assert ctl.read_text() == "{}" and not (tmp_path / "rd").exists()


def test_supervise_write_atomic_refuses_an_input(tmp_path):
    from gpufield.harden.supervise.export import write_atomic

    ctl = tmp_path / "ctl.json"
    ctl.write_text("{}")
    os.link(ctl, tmp_path / "hosts.txt")  # another name of the control file
    with pytest.raises(OSError, match="one of the command's inputs"):
        write_atomic(tmp_path / "hosts.txt", "vm\n", inputs=[ctl])
    assert ctl.read_text() == "{}"


def test_run_dir_or_state_dir_that_is_a_file_says_so(capsys, tmp_path):
    from gpufield.power.actuators.statelock import StateDirLock

    f = tmp_path / "afile"
    f.write_text("x")
    rc = main(["run", "--run-dir", str(f), "--", "true"])
    err = capsys.readouterr().err
    assert rc == 2 and "--run-dir exists and is not a directory" in err and str(f) in err, err
    with pytest.raises(InputError, match="state_dir exists and is not a directory"):
        StateDirLock(f).acquire()
    assert f.read_text() == "x"
