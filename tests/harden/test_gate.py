"""The validation gate (gpufield.harden.gate): real processes, real preflight."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from gpufield.harden import preflight_gate


def test_default_gate_is_the_real_preflight_and_agrees_with_its_exit_status():
    # the gate's verdict is preflight's own exit status on this machine (0: no check failed)
    rc = subprocess.run([sys.executable, "-m", "gpufield", "preflight", "--skip", "comm", "--json"],
                        capture_output=True, text=True, check=False)
    report = json.loads(rc.stdout)
    assert rc.returncode == report["exit_code"]
    lines: list[str] = []
    assert preflight_gate(log=lines.append)("localhost") is (rc.returncode == 0)
    assert lines and "localhost" in lines[0] and f"exit status {rc.returncode}" in lines[0]


def test_host_is_substituted_and_failures_never_raise():
    gate = preflight_gate("sh -c 'test {host} = node-good'")
    assert gate("node-good") is True
    assert gate("node-bad") is False
    assert preflight_gate("/nonexistent/gate-binary {host}")("h") is False
    lines: list[str] = []
    assert preflight_gate("sleep 5", timeout_s=0.2, log=lines.append)("h") is False
    assert "did not finish within 0.2 s" in lines[0]


@pytest.mark.parametrize("cmd, t", [("", 1.0), ("true", 0.0), ("true", float("nan"))])
def test_bad_gate_arguments(cmd, t):
    with pytest.raises(ValueError):
        preflight_gate(cmd, timeout_s=t)
