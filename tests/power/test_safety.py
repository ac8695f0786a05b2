"""Safety of the actuators and the runtime loop: state-dir lock across real processes, the read-only
allow-list against every pynvml attribute, mixed lanes, read-back/reconcile, thermal, clock limits."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pynvml
import pytest

from gpufield.errors import ActuationError
from gpufield.power.actuators.dryrun import NVML_READ_CALLS, DryRunActuator, ReadOnlyNvml
from gpufield.power.actuators.nvml import NvmlActuator
from gpufield.power.config import GuardConfig, WriteConfig
from gpufield.power.controller import LaneController, LaneLimits
from gpufield.power.guard import Fallback
from gpufield.power.runtime import RuntimeLoop
from gpufield.power.types import Lane, LaneSetting, LaneSignals
from gpufield.testing import FakeNvml, h200

REPO = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(REPO / "src")}

HOLDER = textwrap.dedent("""
    import sys, time
    from gpufield.power.actuators.nvml import NvmlActuator
    from gpufield.power.config import WriteConfig
    from gpufield.testing import FakeNvml, h200

    nv = FakeNvml([h200(0)])
    nv.nvmlInit()
    u = nv.nvmlDeviceGetUUID(nv.nvmlDeviceGetHandleByIndex(0))
    cfg = WriteConfig(allow_uuids=frozenset({u}), i_own_this_gpu=True, state_dir=sys.argv[1])
    act = NvmlActuator(cfg, nvml=nv, install_signal_handlers=False).__enter__()
    act.set_power_limit(u, 350.0)
    print("ready", act.lock_takeover, flush=True)
    time.sleep(60)
""")

SECOND = textwrap.dedent("""
    import json, sys
    from gpufield.errors import ActuationError
    from gpufield.power.actuators.nvml import NvmlActuator
    from gpufield.power.config import WriteConfig
    from gpufield.testing import FakeNvml, h200

    nv = FakeNvml([h200(0)])
    nv.nvmlInit()
    g = nv.gpus[0]
    g.power_limit_mw = 350_000  # the GPU as the first process left it (its live cap)
    u = nv.nvmlDeviceGetUUID(nv.nvmlDeviceGetHandleByIndex(0))
    cfg = WriteConfig(allow_uuids=frozenset({u}), i_own_this_gpu=True, state_dir=sys.argv[1])
    out = {}
    try:
        with NvmlActuator(cfg, nvml=nv, install_signal_handlers=False) as act:
            out["restored"] = act.orphans_restored
            out["takeover"] = act.lock_takeover
    except ActuationError as e:
        out["refused"] = str(e)
    out["limit_mw"] = g.power_limit_mw
    out["setters"] = [c[0] for c in nv.setter_calls]
    print(json.dumps(out), flush=True)
""")


def _second(state: Path) -> dict:
    r = subprocess.run([sys.executable, "-c", SECOND, str(state)], capture_output=True, text=True, env=ENV,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_second_actuator_process_refuses_and_a_dead_holders_lock_is_taken_over(tmp_path):
    state = tmp_path / "state"
    first = subprocess.Popen([sys.executable, "-c", HOLDER, str(state)], stdout=subprocess.PIPE, text=True,
                             env=ENV)
    try:
        assert first.stdout.readline().split()[0] == "ready"
        saved = next(state.glob("GPU-*.json")).read_text()
        out = _second(state)
        assert f"PID {first.pid}" in out["refused"] and "locked by another actuator" in out["refused"]
        assert out["setters"] == [] and out["limit_mw"] == 350_000  # the live cap was not "restored"
        assert next(state.glob("GPU-*.json")).read_text() == saved  # nor its state deleted
        first.send_signal(signal.SIGKILL)  # dies without restoring: its state file and lock stay
        first.wait(timeout=30)
    finally:
        if first.poll() is None:
            first.kill()
    out = _second(state)
    assert "refused" not in out
    assert f"left by PID {first.pid} (no longer running)" in out["takeover"]
    assert out["restored"] and out["limit_mw"] == 700_000  # the dead run's orphan is restored
    assert not list(state.glob("GPU-*.json"))


def _public_calls() -> list[str]:
    return [n for n in dir(pynvml) if callable(getattr(pynvml, n)) and not isinstance(getattr(pynvml, n), type)]


def test_read_only_proxy_refuses_every_call_not_on_the_allow_list():
    ro = ReadOnlyNvml(pynvml)
    calls = _public_calls()
    refused = [n for n in calls if n not in NVML_READ_CALLS]
    assert len(refused) > 300  # nvidia-ml-py 13.615.71 has ~466 callables; the allow-list is small
    for n in refused:
        with pytest.raises(ActuationError, match="allow-list"):
            getattr(ro, n)
    for n in ("nvmlDevicePowerSmoothingSetState", "nvmlDeviceCreateGpuInstance", "nvmlDeviceClearFieldValues",
              "nvmlDeviceSetPowerManagementLimit", "_nvmlGetFunctionPointer", "nvmlLib", "CDLL", "cdll"):
        with pytest.raises(ActuationError):
            getattr(ro, n)
    # what passes: allow-listed reads, constants, error classes, ctypes structures
    setter_words = ("Set", "Reset", "Clear", "Create", "Destroy", "Modify", "Update", "Register", "Alloc",
                    "Free", "Enable", "Disable", "Start", "Stop", "Unlock")
    for n in NVML_READ_CALLS & set(calls):
        assert getattr(ro, n) is getattr(pynvml, n)
        assert n in ("nvmlInit", "nvmlInitWithFlags", "nvmlShutdown", "nvmlErrorString") or "Get" in n, n
        assert not any(w in n for w in setter_words), n
    assert ro.NVML_CLOCK_SM == pynvml.NVML_CLOCK_SM and ro.NVMLError is pynvml.NVMLError
    assert ro.c_nvmlFieldValue_t is pynvml.c_nvmlFieldValue_t


def _loop(act, gpus, setting, **kw):
    lim = LaneLimits(default_limit_w=700, max_clock_mhz=1980, step_w=25, clock_step_mhz=90)
    g = GuardConfig(itl_p99_slo_s=0.05, ttft_p99_slo_s=2.0)

    class Sig:
        def signals(self, lane):
            return LaneSignals(now_s=time.monotonic(), itl_p99_fast_s=0.01, itl_p99_slow_s=0.01)
    return RuntimeLoop({Lane.DECODE: gpus}, {Lane.DECODE: LaneController(Lane.DECODE, setting, lim, g)}, Sig(), act,
                       period_s=0.01, sleep=lambda s: None, **kw)


def _writer(tmp_path, n=2, allow=(0,)):
    nv = FakeNvml([h200(i) for i in range(n)])
    nv.nvmlInit()
    uu = [nv.nvmlDeviceGetUUID(nv.nvmlDeviceGetHandleByIndex(i)) for i in range(n)]
    cfg = WriteConfig(allow_uuids=frozenset(uu[i] for i in allow), i_own_this_gpu=True, state_dir=str(tmp_path))
    return nv, uu, NvmlActuator(cfg, nvml=nv, install_signal_handlers=False)


def test_a_lane_mixing_allowed_and_read_only_gpus_is_refused_at_start(tmp_path):
    nv, uu, act = _writer(tmp_path)
    with act:
        with pytest.raises(ActuationError, match="mixes writable GPUs"):
            _loop(act, uu, LaneSetting(power_limit_w=450.0))
        _loop(act, uu[:1], LaneSetting(power_limit_w=450.0))  # all allowed: fine
    assert nv.setter_calls == []


def test_external_writer_is_detected_logged_reconciled_then_yielded_to(tmp_path, caplog):
    nv, uu, act = _writer(tmp_path, n=1)
    with act:
        loop = _loop(act, uu, LaneSetting(power_limit_w=450.0, label="cap 450 W"), yield_after=2)
        loop.tick()
        assert nv.gpus[0].power_limit_mw == 450_000
        n_writes = len(nv.setter_calls)
        assert not loop.tick().drift and len(nv.setter_calls) == n_writes  # steady: nothing written
        nv.gpus[0].power_limit_mw = 300_000  # someone runs nvidia-smi -pl 300
        with caplog.at_level(logging.WARNING, logger="gpufield.power"):
            rec = loop.tick()
        assert rec.drift and "450.0 -> 300.0" in rec.drift[0]
        assert "changed outside this controller" in caplog.text
        assert nv.gpus[0].power_limit_mw == 450_000  # re-applied once, with the reason logged
        nv.gpus[0].power_limit_mw = 300_000  # and again: the loop stops fighting
        rec = loop.tick()
        assert rec.drift and "not written" in rec.error and Lane.DECODE in loop.yielded
        assert nv.gpus[0].power_limit_mw == 300_000


def test_thermal_reason_read_back_reaches_the_guard(tmp_path):
    class HotNvml(FakeNvml):
        def nvmlDeviceGetCurrentClocksEventReasons(self, handle):
            return super().nvmlDeviceGetCurrentClocksEventReasons(handle) | pynvml.nvmlClocksEventReasonSwThermalSlowdown
    nv = HotNvml.spy([h200(0)])
    with DryRunActuator(nvml=nv) as act:
        loop = _loop(act, act.gpus, LaneSetting(power_limit_w=450.0))
        rec = loop.tick()
        ctl = loop.controllers[Lane.DECODE]
        assert isinstance(ctl.guard.state, Fallback) and ctl.guard.reason == "thermal slowdown"
        assert rec.settings["decode"] == "default"
    assert nv.setter_calls == []


def test_clock_windows_outside_the_gpus_limits_are_refused(tmp_path):
    nv, uu, act = _writer(tmp_path, n=1)
    with act:
        for lo, hi, why in ((100, 200, "supported SM clocks 345-1980"), (900, 2100, "supported"),
                            (345, 500, "below 30%")):
            with pytest.raises(ActuationError, match=why):
                act.set_clock_window(uu[0], lo, hi)
        assert act.set_clock_window(uu[0], 1000, 1400) == (1005, 1395)
    assert [c for c in nv.setter_calls if c[0] == "nvmlDeviceSetGpuLockedClocks"] == [
        ("nvmlDeviceSetGpuLockedClocks", (0, 1005, 1395))]
    spy = FakeNvml.spy([h200(0)])
    with DryRunActuator(nvml=spy) as dry:
        with pytest.raises(ActuationError, match="supported"):
            dry.set_clock_window(dry.gpus[0], 100, 200)
        assert dry.intents == []
