"""Actuators against the fake NVML: no setter in read-only/dry-run, interlock, clamp, verify, restore."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from gpufield.errors import ActuationError
from gpufield.power.actuators.dryrun import DryRunActuator, ReadOnlyNvml
from gpufield.power.actuators.nvml import NvmlActuator
from gpufield.power.config import GuardConfig, WriteConfig
from gpufield.power.controller import LaneController, LaneLimits
from gpufield.power.guard import Fallback
from gpufield.power.runtime import RuntimeLoop
from gpufield.power.types import Lane, LaneSetting, LaneSignals
from gpufield.testing import FakeNvml, h200

REPO = Path(__file__).resolve().parents[2]


class _Sig:
    """TelemetrySource that always reports a breach-free decode lane."""

    def signals(self, lane):
        return LaneSignals(now_s=time.monotonic(), itl_p99_fast_s=0.01, itl_p99_slow_s=0.01)


def _loop(act, gpus, setting):
    lim = LaneLimits(default_limit_w=700, max_clock_mhz=1980, step_w=25, clock_step_mhz=90)
    g = GuardConfig(itl_p99_slo_s=0.05, ttft_p99_slo_s=2.0)
    return RuntimeLoop({Lane.DECODE: gpus}, {Lane.DECODE: LaneController(Lane.DECODE, setting, lim, g)},
                       _Sig(), act, period_s=0.01, sleep=lambda s: None)


def test_read_only_default_never_calls_a_setter(tmp_path):
    spy = FakeNvml.spy([h200(0), h200(1)])
    with NvmlActuator(WriteConfig(state_dir=str(tmp_path)), nvml=spy, install_signal_handlers=False) as act:
        uuid = act.gpus[0]
        assert act.read(uuid).enforced_limit_w == 700.0
        with pytest.raises(ActuationError, match="read-only"):
            act.set_power_limit(uuid, 500.0)
        with pytest.raises(ActuationError, match="read-only"):
            act.set_clock_window(uuid, 900, 1400)
        rec = _loop(act, act.gpus, LaneSetting(power_limit_w=450.0)).tick()
        assert "read-only" in rec.error
    assert spy.setter_calls == []


def test_allow_list_alone_or_flag_alone_is_not_enough(tmp_path):
    nv = FakeNvml([h200(0)])
    nv.nvmlInit()
    uuid = nv.nvmlDeviceGetUUID(nv.nvmlDeviceGetHandleByIndex(0))
    for cfg in (WriteConfig(allow_uuids=frozenset({uuid}), state_dir=str(tmp_path)),
                WriteConfig(i_own_this_gpu=True, state_dir=str(tmp_path))):
        with NvmlActuator(cfg, nvml=nv, install_signal_handlers=False) as act:
            with pytest.raises(ActuationError, match="read-only"):
                act.set_power_limit(uuid, 500.0)
    assert nv.setter_calls == []


def test_dry_run_logs_intents_and_cannot_reach_a_setter(tmp_path):
    spy = FakeNvml.spy([h200(0)])
    log = tmp_path / "intents.jsonl"
    with DryRunActuator(nvml=spy, log_path=log) as act:
        uuid = act.gpus[0]
        loop = _loop(act, [uuid], LaneSetting(power_limit_w=450.0, clock_window_mhz=(1000, 1400)))
        for _ in range(3):
            loop.tick()
        assert act.set_power_limit(uuid, 50.0, lane="decode", reason="t") == 200.0  # clamped like NVML would
        with pytest.raises(ActuationError, match="allow-list"):
            act._nvml.nvmlDeviceSetPowerManagementLimit  # noqa: B018  (the proxy refuses the name)
    assert spy.setter_calls == []
    rows = [json.loads(x) for x in log.read_text().splitlines()]
    assert rows[0]["action"] == "power_limit" and rows[0]["value"] == 450.0 and rows[0]["lane"] == "decode"
    assert rows[1]["action"] == "clock_window" and rows[1]["value"] == [1005, 1395]  # snapped to 15 MHz steps
    assert len(rows) == 3  # applied once (no change afterwards) + the explicit call
    with pytest.raises(ActuationError):
        ReadOnlyNvml(spy).nvmlDeviceResetGpuLockedClocks  # noqa: B018


def test_interlocked_writes_clamp_verify_and_restore(tmp_path):
    nv = FakeNvml([h200(0), h200(1)])
    nv.nvmlInit()
    u0 = nv.nvmlDeviceGetUUID(nv.nvmlDeviceGetHandleByIndex(0))
    u1 = nv.nvmlDeviceGetUUID(nv.nvmlDeviceGetHandleByIndex(1))
    cfg = WriteConfig(allow_uuids=frozenset({u0}), i_own_this_gpu=True, state_dir=str(tmp_path))
    with NvmlActuator(cfg, nvml=nv, install_signal_handlers=False) as act:
        assert act.set_power_limit(u0, 100.0) == 200.0  # clamped to the 200 W minimum
        assert nv.gpus[0].power_limit_mw == 200_000
        assert json.loads((tmp_path / f"{u0}.json").read_text())["power_limit_mw"] == 700_000
        assert act.set_clock_window(u0, 1000, 1400) == (1005, 1395)
        assert nv.gpus[0].locked_clocks_mhz == (1005, 1395)
        with pytest.raises(ActuationError, match="read-only"):
            act.set_power_limit(u1, 500.0)  # not on the allow-list
        nv.gpus[0].external_limit_mw = 300_000  # an out-of-band limiter wins: reported, not hidden
        assert act.set_power_limit(u0, 450.0) == 300.0
    assert nv.gpus[0].power_limit_mw == 700_000 and nv.gpus[0].locked_clocks_mhz is None
    assert nv.gpus[1].power_limit_mw == 700_000
    assert not (tmp_path / f"{u0}.json").exists()
    assert all(c[1][0] == 0 for c in nv.setter_calls)  # only GPU 0 was ever written


def test_a_write_that_does_not_read_back_is_an_error(tmp_path):
    nv = FakeNvml([h200(0)])
    nv.nvmlInit()
    u0 = nv.nvmlDeviceGetUUID(nv.nvmlDeviceGetHandleByIndex(0))
    cfg = WriteConfig(allow_uuids=frozenset({u0}), i_own_this_gpu=True, state_dir=str(tmp_path))
    with NvmlActuator(cfg, nvml=nv, install_signal_handlers=False) as act:
        nv.gpus[0].errors["nvmlDeviceSetPowerManagementLimit"] = 4  # NVML_ERROR_NO_PERMISSION
        with pytest.raises(ActuationError, match="failed"):
            act.set_power_limit(u0, 450.0)
        del nv.gpus[0].errors["nvmlDeviceSetPowerManagementLimit"]


def test_orphan_state_from_a_crashed_run_is_restored_at_start(tmp_path):
    nv = FakeNvml([h200(0)])
    nv.nvmlInit()
    u0 = nv.nvmlDeviceGetUUID(nv.nvmlDeviceGetHandleByIndex(0))
    nv.gpus[0].power_limit_mw = 350_000  # left behind by a run that died
    nv.gpus[0].locked_clocks_mhz = (900, 1200)
    (tmp_path / f"{u0}.json").write_text(json.dumps({"uuid": u0, "power_limit_mw": 700_000,
                                                      "clocks_locked_by_us": True}))
    ro = WriteConfig(state_dir=str(tmp_path))  # read-only: leaves the orphan alone
    with NvmlActuator(ro, nvml=nv, install_signal_handlers=False) as act:
        assert act.orphans_restored == []
    assert nv.gpus[0].power_limit_mw == 350_000
    cfg = WriteConfig(allow_uuids=frozenset({u0}), i_own_this_gpu=True, state_dir=str(tmp_path))
    with NvmlActuator(cfg, nvml=nv, install_signal_handlers=False) as act:
        assert act.orphans_restored == [u0]
    assert nv.gpus[0].power_limit_mw == 700_000 and nv.gpus[0].locked_clocks_mhz is None


CHILD = textwrap.dedent("""
    import json, sys, time
    from gpufield.power.actuators.nvml import NvmlActuator
    from gpufield.power.config import WriteConfig
    from gpufield.testing import FakeNvml, h200

    nv = FakeNvml([h200(0)])
    nv.nvmlInit()
    u = nv.nvmlDeviceGetUUID(nv.nvmlDeviceGetHandleByIndex(0))
    out = sys.argv[2]

    def dump(*_):
        g = nv.gpus[0]
        with open(out, "w") as f:
            json.dump({"limit_mw": g.power_limit_mw, "locked": g.locked_clocks_mhz}, f)
    import signal

    def on_term(signum, frame):  # the service's own handler: the actuator must chain to it
        dump()
        sys.exit(143)
    signal.signal(signal.SIGTERM, on_term)
    cfg = WriteConfig(allow_uuids=frozenset({u}), i_own_this_gpu=True, state_dir=sys.argv[1])
    act = NvmlActuator(cfg, nvml=nv).__enter__()
    act.set_power_limit(u, 300.0)
    act.set_clock_window(u, 900, 1200)
    dump()
    print("ready", flush=True)
    time.sleep(60)
""")


def test_sigterm_restores_the_gpu(tmp_path):
    out = tmp_path / "state.json"
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    p = subprocess.Popen([sys.executable, "-c", CHILD, str(tmp_path / "st"), str(out)], stdout=subprocess.PIPE,
                         env=env, text=True)
    try:
        assert p.stdout.readline().strip() == "ready"
        assert json.loads(out.read_text()) == {"limit_mw": 300_000, "locked": [900, 1200]}
        p.send_signal(signal.SIGTERM)
        rc = p.wait(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
    assert rc == 143  # the previous handler ran after the restore
    assert json.loads(out.read_text()) == {"limit_mw": 700_000, "locked": None}
    assert not list((tmp_path / "st").glob("GPU-*.json"))


def test_runtime_failsafe_on_nvml_error_restores_and_falls_back(tmp_path):
    nv = FakeNvml([h200(0)])
    nv.nvmlInit()
    u0 = nv.nvmlDeviceGetUUID(nv.nvmlDeviceGetHandleByIndex(0))
    cfg = WriteConfig(allow_uuids=frozenset({u0}), i_own_this_gpu=True, state_dir=str(tmp_path))
    with NvmlActuator(cfg, nvml=nv, install_signal_handlers=False) as act:
        loop = _loop(act, [u0], LaneSetting(power_limit_w=450.0, clock_window_mhz=(1000, 1400)))
        nv.gpus[0].errors["nvmlDeviceSetGpuLockedClocks"] = 15  # NVML_ERROR_GPU_IS_LOST... any failure
        rec = loop.tick()
        assert "lock clocks" in rec.error
        assert nv.gpus[0].power_limit_mw == 700_000  # the half-applied cap was rolled back
        del nv.gpus[0].errors["nvmlDeviceSetGpuLockedClocks"]
        rec2 = loop.tick()  # the guard saw nvml_error and holds the lane at defaults
        assert rec2.settings["decode"] == "default" and not rec2.error
        assert isinstance(loop.controllers[Lane.DECODE].guard.state, Fallback)


def test_sim_actuator_drives_the_twin_firmware_and_restores():
    from gpufield.power.actuators.sim import SimActuator
    from gpufield.power.twin.gpu import Firmware, load_gpu_model

    m = load_gpu_model("B200")
    fws = {f"GPU-sim-{i}": Firmware(m) for i in range(2)}
    with SimActuator(fws) as act:
        loop = _loop(act, list(fws), LaneSetting(power_limit_w=100.0, clock_window_mhz=(1000, 1400)))
        assert not loop.tick().error
        for fw in fws.values():
            assert fw.cap_w == m.min_limit_w  # clamped to the B200's 400 W minimum
            assert fw.window_mhz == (1005, 1395)  # snapped to 7.5 MHz steps, reported as NVML does
        assert act.read("GPU-sim-0").clocks_locked
    assert all(fw.cap_w == m.tdp_w and fw.window_mhz == (int(m.sm_clocks_mhz[-1]), int(m.sm_clocks_mhz[0]))
               for fw in fws.values())
