"""The CLI entry point as a process: ``python -m gpufield`` and a stdout closed by its reader."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from gpufield.cli import EXIT_STDOUT_CLOSED


def _gpufield(*args: str, stdout=subprocess.PIPE) -> subprocess.CompletedProcess:
    # standard input is a terminal, as for a user typing the command: bare "gpufield triage" then
    # triages the bundled example (with stdin redirected, even from /dev/null, it reads stdin instead)
    import pty

    main, term = pty.openpty()
    try:
        return subprocess.run([sys.executable, "-m", "gpufield", *args], stdin=term, stdout=stdout,
                              stderr=subprocess.PIPE, text=True, timeout=300)
    finally:
        os.close(term)
        os.close(main)


def test_python_m_gpufield_runs_the_cli():
    p = _gpufield("--help")
    assert p.returncode == 0 and "python -m gpufield" in p.stdout and "triage" in p.stdout
    p = _gpufield("triage", "--quiet")
    assert p.returncode == 0 and p.stdout.startswith("GPU_FELL_OFF_BUS"), p.stderr
    p = _gpufield("triage", "/nonexistent/job.log")  # exit codes come through main()
    assert p.returncode == 2 and "gpufield: error:" in p.stderr


@pytest.mark.skipif(not hasattr(os, "pipe") or sys.platform == "win32", reason="POSIX pipes")
@pytest.mark.parametrize("args", [
    ("triage",),                    # rich panel (rich turns EPIPE into SystemExit(1))
    ("triage", "--json"),           # sys.stdout.write: EPIPE at the final flush
    ("triage", "--quiet"),          # print
    ("--help",),                    # typer/click help
    ("fp64", "model"),              # rich table of another wing
], ids=lambda a: " ".join(a))
def test_closed_stdout_ends_quietly_with_the_sigpipe_status(args):
    """``gpufield triage | head -1``: no traceback, no 'Exception ignored', status 141 like coreutils.

    The read end is closed before the command starts, so every write fails (no race with head).
    """
    r, w = os.pipe()
    os.close(r)
    try:
        p = _gpufield(*args, stdout=w)
    finally:
        os.close(w)
    assert p.stderr == ""
    assert p.returncode == EXIT_STDOUT_CLOSED == 141
