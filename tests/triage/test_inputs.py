"""Inputs of triage: '-' and piped stdin, journalctl -o json, host folders, compression, missing paths,
str paths refused, FIFOs that never block, progress on a terminal.

Log lines: the Xid 79 line is the NVIDIA driver's format (tests/triage/data, the bundled example);
journal entries use the field names of systemd.journal-fields(7) / journalctl(1) ``-o json``.
"""

from __future__ import annotations

import bz2
import gzip
import io
import json
import lzma
import os
import stat
import sys
import threading
import time
from pathlib import Path

import pytest

from gpufield.cli import main
from gpufield.errors import InputError
from gpufield.triage import analyze
from gpufield.triage import inputs as inputs_mod

XID = "[  269.516977] NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus.\n"
XID_SYSLOG = "May 18 19:02:39 gpu-a03 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.\n"


def _pipe_stdin(monkeypatch, data: bytes) -> None:
    """Replace sys.stdin by the read end of a real pipe whose writer sends ``data`` and closes."""
    r, w = os.pipe()

    def write() -> None:
        with os.fdopen(w, "wb") as fh:
            fh.write(data)

    t = threading.Thread(target=write, daemon=True)
    t.start()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(os.fdopen(r, "rb")))


def _cli(capsys, *argv):
    rc = main(["triage", *argv])
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


# --- str refused, PathLike accepted -----------------------------------------------------------------

@pytest.mark.parametrize("bad", ["kern.log", "/", b"/var/log"])
def test_a_string_is_refused_not_walked(bad):
    t0 = time.monotonic()
    with pytest.raises(TypeError, match="list of paths"):
        analyze(bad)
    assert time.monotonic() - t0 < 5  # refused before any walk ("/" would walk the file system)


def test_a_single_pathlike_is_one_path(tmp_path):
    f = tmp_path / "kern.log"
    f.write_text(XID_SYSLOG)
    res = analyze(f)
    assert res.verdict.cls == "GPU_FELL_OFF_BUS" and res.inputs == [str(f)] and not res.example


# --- stdin ------------------------------------------------------------------------------------------

def test_piped_stdin_is_read_not_the_bundled_example(capsys, monkeypatch):
    _pipe_stdin(monkeypatch, XID_SYSLOG.encode())
    rc, out, err = _cli(capsys, "--json")
    assert rc == 0, err
    d = json.loads(out)
    assert d["example"] is False and d["inputs"] == ["-"]
    root = d["incidents"][0]["root"]
    assert d["incidents"][0]["class"] == "GPU_FELL_OFF_BUS" and root["host"] == "gpu-a03"
    assert root["file"] == "<stdin>" and root["line"] == 1


def test_dash_reads_gzip_from_stdin(capsys, monkeypatch):
    _pipe_stdin(monkeypatch, gzip.compress(("ordinary line\n" * 50 + XID_SYSLOG).encode()))
    rc, out, err = _cli(capsys, "-", "--json")
    assert rc == 0, err
    root = json.loads(out)["incidents"][0]["root"]
    assert (root["file"], root["line"]) == ("<stdin>", 51)


def test_captured_stdin_runs_the_example(capsys):
    # pytest's capture replaces sys.stdin by an object without a file descriptor: nothing to read
    assert not inputs_mod.stdin_has_input()
    rc, out, _ = _cli(capsys, "--quiet")
    assert rc == 0 and out.startswith("GPU_FELL_OFF_BUS") and "node-b" in out  # the bundled example


NO_INPUT = "gpufield: error: no input: standard input is empty"


def test_stdin_dev_null_is_read_and_is_no_input(capsys, monkeypatch):
    with open(os.devnull) as null:
        monkeypatch.setattr(sys, "stdin", null)
        assert inputs_mod.stdin_has_input()
        rc, out, err = _cli(capsys, "--quiet")
    assert rc == 2 and out == "" and err.startswith(NO_INPUT)


def test_empty_stdin_is_an_error_not_the_example(capsys, monkeypatch):
    _pipe_stdin(monkeypatch, b"")
    rc, out, err = _cli(capsys, "--quiet")
    assert rc == 2 and out == "" and err.startswith(NO_INPUT)


def test_empty_stdin_beside_an_empty_file_names_both(capsys, monkeypatch, tmp_path):
    (tmp_path / "e.log").write_bytes(b"")
    _pipe_stdin(monkeypatch, b"")
    rc, out, err = _cli(capsys, "-", str(tmp_path / "e.log"), "--quiet")
    assert rc == 2 and "<stdin>: empty file" in err and "e.log: empty file" in err


def _gpufield_triage(stdin, *argv: str):
    import subprocess

    src = str(Path(__file__).resolve().parents[2] / "src")
    env = {**os.environ, "PYTHONPATH": src + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run([sys.executable, "-m", "gpufield", "triage", *argv], stdin=stdin, capture_output=True,
                          text=True, env=env, timeout=120)


def test_real_process_dev_null_says_no_input_and_exits_2():
    with open(os.devnull, "rb") as null:
        p = _gpufield_triage(null, "--quiet")
    assert p.returncode == 2 and p.stdout == "" and p.stderr.startswith(NO_INPUT), p.stderr
    assert "Traceback" not in p.stderr and "node-b" not in p.stdout  # not the bundled example


def test_real_process_on_a_terminal_runs_the_example():
    import pty

    main_fd, term = pty.openpty()
    try:
        p = _gpufield_triage(term, "--quiet")
    finally:
        os.close(term)
        os.close(main_fd)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("GPU_FELL_OFF_BUS") and "node-b" in p.stdout


# --- journalctl -o json -----------------------------------------------------------------------------

def _entry(ts_us: int, msg, host="gpu-b17", **extra) -> str:
    e = {"__CURSOR": f"s=6b1c;i={ts_us}", "__REALTIME_TIMESTAMP": str(ts_us), "__MONOTONIC_TIMESTAMP": "269516977",
         "_BOOT_ID": "0f3c9a", "_TRANSPORT": "kernel", "PRIORITY": "4", "SYSLOG_FACILITY": "0",
         "SYSLOG_IDENTIFIER": "kernel", "_SOURCE_MONOTONIC_TIMESTAMP": "269516977", "_HOSTNAME": host,
         "MESSAGE": msg, **extra}
    return json.dumps(e) + "\n"


def test_journal_json_export_gives_time_host_and_line(tmp_path):
    ts_us = 1716058960223456  # 2024-05-18T19:02:40.223456Z
    xid = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus."
    f = tmp_path / "journal.json"
    f.write_text(_entry(ts_us - 10**6, "usb 1-1: new high-speed USB device number 2 using xhci_hcd")
                 + _entry(ts_us, xid))
    res = analyze([f])
    v = res.verdict
    assert v.cls == "GPU_FELL_OFF_BUS" and v.host == "gpu-b17" and v.gpu == "0000:3b:00.0"
    e = v.root
    assert (e.line, e.ts_ns, e.mono_s, e.raw) == (2, ts_us * 1000, 269.516977, xid)
    assert e.fields["journal"]["transport"] == "kernel"


def test_journal_json_message_as_byte_array(tmp_path):
    # journalctl writes a MESSAGE that is not printable UTF-8 as an array of byte values
    msg = b"NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python\xff, GPU has fallen off the bus.\x01"
    f = tmp_path / "journal.json"
    f.write_text(_entry(1716058960223456, list(msg), host="gpu-c01"))
    v = analyze([f]).verdict
    assert v.cls == "GPU_FELL_OFF_BUS" and v.host == "gpu-c01" and "\ufffd" in v.root.raw


# --- folders per host, compression ------------------------------------------------------------------

def test_host_from_folder_when_lines_name_none(tmp_path):
    job = tmp_path / "job-4711"
    (job / "gpu-b17").mkdir(parents=True)
    (job / "gpu-b18").mkdir()
    (job / "gpu-b17" / "dmesg.txt").write_text(XID)  # raw dmesg: no host on the line
    (job / "gpu-b18" / "dmesg.txt").write_text("[  12.000000] usb 1-1: new device\n")
    v = analyze([job]).verdict
    assert v.cls == "GPU_FELL_OFF_BUS" and v.host == "gpu-b17"


@pytest.mark.parametrize(("suffix", "compress"), [(".gz", gzip.compress), (".bz2", bz2.compress),
                                                  (".xz", lzma.compress)])
def test_compressed_files(tmp_path, suffix, compress):
    f = tmp_path / f"kern.log{suffix}"
    f.write_bytes(compress(("filler line\n" * 1000 + XID_SYSLOG).encode()))
    v = analyze([f]).verdict
    assert v.cls == "GPU_FELL_OFF_BUS" and v.root.line == 1001 and v.host == "gpu-a03"


# --- missing paths ----------------------------------------------------------------------------------

def test_missing_among_several_is_an_error_naming_every_missing_one(tmp_path):
    good = tmp_path / "kern.log"
    good.write_text(XID_SYSLOG)
    with pytest.raises(InputError) as ei:
        analyze([good, tmp_path / "a.log", tmp_path / "b.log"])
    assert "a.log" in str(ei.value) and "b.log" in str(ei.value) and "--allow-missing" in str(ei.value)
    res = analyze([good, tmp_path / "a.log"], allow_missing=True)
    assert res.verdict.cls == "GPU_FELL_OFF_BUS" and any("a.log" in w for w in res.stats["warnings"])
    with pytest.raises(InputError, match="no such file"):
        analyze([tmp_path / "a.log"], allow_missing=True)  # nothing left to read


# --- FIFOs ------------------------------------------------------------------------------------------

def test_fifo_without_a_writer_is_refused_not_waited_on(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(inputs_mod, "FIFO_WAIT_S", 0.3)
    fifo = tmp_path / "pipe.log"
    os.mkfifo(fifo)
    t0 = time.monotonic()
    rc, out, err = _cli(capsys, str(fifo), "--quiet")
    assert time.monotonic() - t0 < 30
    assert rc == 2 and out == "" and "pipe.log" in err and "no writer" in err and "Traceback" not in err
    assert stat.S_ISFIFO(fifo.lstat().st_mode)


def test_fifo_with_a_writer_is_read_as_a_stream(tmp_path, monkeypatch):
    monkeypatch.setattr(inputs_mod, "FIFO_WAIT_S", 20.0)
    fifo = tmp_path / "pipe.log"
    os.mkfifo(fifo)

    def writer() -> None:
        with open(fifo, "w") as fh:  # blocks until the reader opened it
            for i in range(200):
                fh.write(f"step {i} | loss 2.0\n")
            fh.write(XID_SYSLOG)

    t = threading.Thread(target=writer, daemon=True)
    t.start()
    res = analyze([fifo])
    t.join(5)
    assert res.verdict.cls == "GPU_FELL_OFF_BUS" and res.verdict.root.line == 201
    assert res.verdict.root.file == str(fifo)


# --- progress ---------------------------------------------------------------------------------------

def test_progress_callback_sees_every_byte(tmp_path):
    f = tmp_path / "big.log"
    body = ("x" * 99 + "\n") * 120_000 + XID_SYSLOG  # 12 MB: two 8 MiB blocks
    f.write_text(body)
    seen: list[tuple[str, int]] = []
    analyze([f], progress=lambda p, n: seen.append((p, n)))
    assert len(seen) == 2 and sum(n for _, n in seen) == len(body) and {p for p, _ in seen} == {str(f)}


def test_cli_progress_bar_only_on_a_terminal_and_for_big_inputs(tmp_path, monkeypatch):
    from gpufield.cli import triage as cli

    small = tmp_path / "s.log"
    small.write_text(XID_SYSLOG)
    big = tmp_path / "b.log"
    big.write_bytes(b"y" * (cli.PROGRESS_MIN_BYTES + 1))
    monkeypatch.delenv("TTY_COMPATIBLE", raising=False)
    with cli._progress([str(big)], False) as p:  # stderr is not a terminal under pytest
        assert p is None
    monkeypatch.setenv("TTY_COMPATIBLE", "1")
    monkeypatch.setenv("FORCE_COLOR", "1")
    with cli._progress([str(small)], False) as p:
        assert p is None
    with cli._progress([str(big)], True) as p:  # --quiet / --json
        assert p is None
    with cli._progress([str(big)], False) as p:
        assert callable(p)
        p(str(big), 1024)
    assert Path(big).stat().st_size > 0
