"""`gpufield power run` with a wedged NVML: every call has a deadline, the tick ends, the lanes fail safe.

NVML is gpufield.testing.FakeNvml in spy mode (any setter raises) whose ``nvmlDeviceGetPowerUsage``
*really blocks* (``hang``: the calling thread waits on an event until the test releases it), the way
a wedged driver leaves a thread stuck in the kernel. Engine metrics come from the local server of
test_power_run (real-format fixtures).
"""

from __future__ import annotations

import json
import threading
import time

import pytest
from test_power_run import _config, _Engine, _gauges, _records, _wait

from gpufield.power.lanes_config import load_run_config
from gpufield.power.serve import run_lanes
from gpufield.testing import FakeNvml, h200

TIMEOUT_S = 0.3


@pytest.fixture()
def engine():
    e = _Engine()
    yield e
    e.close()


def test_a_blocking_nvml_call_fails_the_lanes_safe_within_the_deadline(tmp_path, engine):
    p = _config(tmp_path, engine.url)
    p.write_text(p.read_text().replace("fake_load = ", f"call_timeout_s = {TIMEOUT_S}\nfake_load = "))
    cfg = load_run_config(p)
    assert cfg.nvml_call_timeout_s == TIMEOUT_S
    fake = FakeNvml([h200(i) for i in range(3)], read_only=True, clock=time.monotonic)
    stop, out, log = threading.Event(), {}, tmp_path / "decisions.jsonl"

    def run() -> None:
        try:
            out["summary"] = run_lanes(cfg, nvml=fake, stop=stop, echo=lambda m: None)
        except BaseException as e:  # noqa: BLE001 - reported by the assertions below
            out["error"] = e
    t = threading.Thread(target=run, daemon=True)
    t.start()
    try:
        _wait(lambda: sum(r["event"] == "tick_end" for r in _records(log)) >= 2)
        port = _records(log)[0]["metrics_port"]
        fake.hang.add("nvmlDeviceGetPowerUsage")  # from now on the driver never answers this call
        _wait(lambda: sum(r["event"] == "tick_end" for r in _records(log)) >= 6)
        g = _gauges(port)
        n_calls = len(fake.calls)
        stop.set()
        t.join(timeout=30)
        assert not t.is_alive(), "the run did not stop: a tick is stuck in NVML"
        # no call reached the driver after the one that blocked (stop's attestation included)
        assert len(fake.calls) == n_calls and fake.calls[-1][0] == "nvmlDeviceGetPowerUsage"
    finally:
        stop.set()
        fake.release()
    assert "error" not in out, out.get("error")
    s = out["summary"]
    recs = _records(log)
    wedge = next(i for i, r in enumerate(recs) if r["event"] == "fail_safe")
    ends = [r for r in recs[wedge - 8:] if r["event"] == "tick_end"]
    # the tick in which the call blocked ends after one deadline (plus the lane's own work), not never
    assert max(r["duration_s"] for r in ends) < TIMEOUT_S + 1.0
    assert sum(r["event"] == "tick_end" for r in recs[wedge:]) >= 3  # and the loop went on ticking
    fs = [r for r in recs if r["event"] == "fail_safe"]
    assert {r["lane"] for r in fs} == {"decode", "prefill"}
    assert all(r["call"] == "nvmlDeviceGetPowerUsage" and r["timeout_s"] == TIMEOUT_S and not r["applied"] for r in fs)
    intents = [r for r in recs[wedge:] if r["event"] == "intent"]
    assert sorted(r["gpu"] for r in intents) == sorted(h200(i).uuid for i in range(3))  # one per GPU, once
    assert all(r["action"] == "restore" and r["applied"] is False for r in intents)
    after = [r for r in recs[wedge:] if r["event"] == "tick"]
    assert after and all(r["guard"] == "fallback" and "not written (NVML wedged" in r["error"] for r in after[2:])
    assert fake.setter_calls == []
    assert g[("gpufield_power_nvml_wedged", ())] == 1.0
    for lane in ("decode", "prefill"):
        assert g[("gpufield_power_nvml_timeouts_total", (("call", "nvmlDeviceGetPowerUsage"), ("lane", lane)))] == 1.0
    assert s.unchanged is False and "not read back" in s.diffs[0]
    assert json.loads(log.read_text().splitlines()[-1])["event"] == "stop"
