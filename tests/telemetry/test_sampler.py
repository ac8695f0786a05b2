"""NvmlSampler thread and the energy cross-check (counter delta vs trapezoid of sampled power)."""

from __future__ import annotations

import time

import pytest

from gpufield.errors import TelemetryError
from gpufield.telemetry import NvmlReader, NvmlSampler, energy_cross_check
from gpufield.testing import FakeNvml, h200


def _manual(n):
    return NvmlReader(n, clock_ns=lambda: int(round(n._clock() * 1e9)))


def test_cross_check_constant_power_is_exact():
    n = FakeNvml([h200(0, load=1.0), h200(1)])
    out = []
    with _manual(n) as r:
        for _ in range(11):
            out += r.sample()
            n.advance(0.1)
    c = energy_cross_check(out, index=0)
    assert c.duration_s == pytest.approx(1.0)
    assert c.counter_j == pytest.approx(700.0, abs=1e-3)  # mJ counter truncation only
    assert c.integrated_j == pytest.approx(700.0, rel=1e-12)
    assert c.ok
    idle = energy_cross_check(out, index=1)
    assert idle.integrated_j == pytest.approx(80.4, rel=1e-12)


def test_cross_check_step_change_matches_hand_trapezoid():
    n = FakeNvml([h200(0, load=1.0)])
    out = []
    with _manual(n) as r:
        out += r.sample()
        n.advance(0.5)
        n.set_load(0, 0.0)  # 700 W -> 80.4 W half-way between samples
        n.advance(0.5)
        out += r.sample()
    c = energy_cross_check(out)
    assert c.counter_j == pytest.approx(0.5 * 700 + 0.5 * 80.4, abs=1e-3)  # what the GPU used
    assert c.integrated_j == pytest.approx(0.5 * (700 + 80.4) * 1.0)  # what two samples can see
    assert c.rel_diff == pytest.approx(0.0, abs=1e-6)  # symmetric step: trapezoid happens to be exact


def test_cross_check_flags_disagreement():
    n = FakeNvml([h200(0, load=1.0)])
    out = []
    with _manual(n) as r:
        out += r.sample()
        n.advance(1.0)
        n.gpus[0].energy_mj += 50_000  # a counter running 7 % ahead (zeus #181 style anomaly)
        out += r.sample()
    c = energy_cross_check(out)
    assert not c.ok and c.rel_diff == pytest.approx(700 / 750 - 1, abs=1e-6)


def test_cross_check_errors():
    n = FakeNvml([h200(0), h200(1)])
    with _manual(n) as r:
        a = r.sample()
        n.advance(1)
        b = r.sample()
    with pytest.raises(TelemetryError, match="pass index"):
        energy_cross_check(a + b)
    with pytest.raises(TelemetryError, match=">= 2 samples"):
        energy_cross_check(a, index=0)
    n.gpus[0].energy_mj = 0
    with _manual(n) as r:
        c = r.sample()
    with pytest.raises(TelemetryError, match="backwards"):
        energy_cross_check(b + c, index=0)


def test_sampler_thread_with_real_clock():
    n = FakeNvml([h200(0, load=1.0)], clock=time.monotonic, read_only=True)
    batches = []
    with NvmlReader(n) as r, NvmlSampler(r, interval_s=0.02, callback=batches.append) as s:
        time.sleep(0.25)
    assert 5 <= s.batches <= 20 and len(batches) == s.batches
    assert len(s.samples) == s.batches and not s.errors
    ts = [x.ts_ns for x in s.samples]
    assert ts == sorted(ts)
    c = energy_cross_check(s.samples)
    assert c.ok, c
    assert n.setter_calls == []


def test_sampler_keeps_going_after_errors_and_ring_buffer_bounds():
    class Flaky:
        calls = 0

        def sample(self):
            self.calls += 1
            if self.calls == 2:
                raise RuntimeError("boom")
            return [self.calls, self.calls]

    s = NvmlSampler(Flaky(), interval_s=0.005, max_samples=3)
    s.start()
    with pytest.raises(TelemetryError):
        s.start()
    time.sleep(0.05)
    s.stop()
    assert len(s.errors) == 1 and s.batches >= 3
    assert len(s.samples) == 3 and s.samples[-1] == s.samples[-2]  # only the newest 3 kept
    with pytest.raises(ValueError):
        NvmlSampler(Flaky(), interval_s=0)
