"""Shadow mode: the full controller on real NVML reads, intents logged, nothing written (power.md 7.7).

* :func:`attest` reads, for every GPU, what a write would have changed: enforced / requested / default
  power limit, the clock-event reason bit 0x2 (locked or application clocks in effect), application
  clocks and current clocks. :func:`attestation_unchanged` compares two attestations.
* :class:`LatencyWindowSource` is a ``TelemetrySource`` over per-step latencies recorded by our own
  load generator (exact timestamps, no histogram buckets): prefill steps stand in for TTFT, decode
  steps for ITL.
* :func:`shadow_plan` derives the points a shadow run evaluates from the twin's model of the SKU:
  decode cap = the decode power floor (weight streaming at the HBM-gate clock) + max(25 W, 5% TGP);
  prefill window = (voltage knee, the GEMM clock under the default limit). A calibration profile
  replaces these once a GPU may be written.
* :func:`run_shadow` runs a :class:`~gpufield.power.runtime.RuntimeLoop` with a
  :class:`~gpufield.power.actuators.dryrun.DryRunActuator` and records ticks and intents.

Nothing here imports simpy or duckdb (the H200 shadow host has neither).
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from dataclasses import asdict
from typing import Any

import numpy as np

from gpufield.power.actuators.dryrun import DryRunActuator, ReadOnlyNvml
from gpufield.power.actuators.nvml import _text
from gpufield.power.config import GuardConfig
from gpufield.power.controller import LaneController, LaneLimits
from gpufield.power.runtime import RuntimeLoop, TickRecord
from gpufield.power.twin.gpu import Firmware, GpuModel
from gpufield.power.types import Lane, LaneSetting, LaneSignals

__all__ = ["attest", "attestation_unchanged", "LatencyWindowSource", "shadow_plan", "run_shadow"]

_LOCKED_BIT = 0x2


def attest(nvml: Any) -> dict[str, dict[str, Any]]:
    """Read-only snapshot of every GPU's control state (W, MHz); uses a :class:`ReadOnlyNvml` proxy."""
    nv = ReadOnlyNvml(nvml)
    out: dict[str, dict[str, Any]] = {}
    for i in range(nv.nvmlDeviceGetCount()):
        h = nv.nvmlDeviceGetHandleByIndex(i)
        reasons = int(nv.nvmlDeviceGetCurrentClocksEventReasons(h))
        d: dict[str, Any] = {
            "index": i, "name": _text(nv.nvmlDeviceGetName(h)),
            "enforced_limit_w": nv.nvmlDeviceGetEnforcedPowerLimit(h) / 1000.0,
            "power_limit_w": nv.nvmlDeviceGetPowerManagementLimit(h) / 1000.0,
            "default_limit_w": nv.nvmlDeviceGetPowerManagementDefaultLimit(h) / 1000.0,
            "clock_event_reasons": reasons, "locked_clocks_bit": bool(reasons & _LOCKED_BIT),
            "sm_clock_mhz": int(nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM)),
            "mem_clock_mhz": int(nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM)),
        }
        for key, fn in (("app_sm_clock_mhz", "nvmlDeviceGetApplicationsClock"),
                        ("default_app_sm_clock_mhz", "nvmlDeviceGetDefaultApplicationsClock")):
            try:
                d[key] = int(getattr(nv, fn)(h, nv.NVML_CLOCK_SM))
            except nv.NVMLError:
                d[key] = None
        out[_text(nv.nvmlDeviceGetUUID(h))] = d
    return out


_CONTROL_KEYS = ("enforced_limit_w", "power_limit_w", "default_limit_w", "locked_clocks_bit", "app_sm_clock_mhz")


def attestation_unchanged(before: dict, after: dict) -> tuple[bool, list[str]]:
    """Compare the control fields of two :func:`attest` results; ``(ok, differences)``.

    Also flags a power limit differing from the default (a GPU someone else left changed).
    """
    diffs = []
    for uuid, b in before.items():
        a = after.get(uuid)
        if a is None:
            diffs.append(f"{uuid}: missing after the run")
            continue
        for k in _CONTROL_KEYS:
            if b.get(k) != a.get(k):
                diffs.append(f"{uuid}: {k} {b.get(k)} -> {a.get(k)}")
        if a["enforced_limit_w"] != a["default_limit_w"]:
            diffs.append(f"{uuid}: enforced {a['enforced_limit_w']} W != default {a['default_limit_w']} W")
    return not diffs, diffs


class LatencyWindowSource:
    """Signals from latencies our own load generator records (thread-safe).

    Args:
        fast_s / slow_s: window lengths. clock: monotonic seconds.
    """

    def __init__(self, *, fast_s: float = 30.0, slow_s: float = 300.0, clock=time.monotonic) -> None:
        self.fast_s, self.slow_s, self.clock = fast_s, slow_s, clock
        self._q: dict[Lane, deque] = {Lane.PREFILL: deque(), Lane.DECODE: deque()}
        self._lock = threading.Lock()

    def record(self, lane: Lane, latency_s: float, weight: int = 1) -> None:
        """Record one step latency (s) of ``lane`` with ``weight`` tokens/requests."""
        with self._lock:
            self._q[lane].append((self.clock(), latency_s, weight))

    def _p99(self, lane: Lane, span: float, now: float) -> float:
        rows = [(v, w) for t, v, w in self._q[lane] if t >= now - span]
        if not rows:
            return math.nan
        v, w = np.array(rows).T
        order = np.argsort(v)
        cw = np.cumsum(w[order])
        return float(v[order][np.searchsorted(cw, 0.99 * cw[-1])])

    def signals(self, lane: Lane) -> LaneSignals:
        """p99 over the fast/slow windows (decode -> ITL fields, prefill -> TTFT fields)."""
        now = self.clock()
        with self._lock:
            q = self._q[lane]
            while q and q[0][0] < now - self.slow_s:
                q.popleft()
            fast, slow = self._p99(lane, self.fast_s, now), self._p99(lane, self.slow_s, now)
            age = now - q[-1][0] if q else math.inf
        if lane is Lane.DECODE:
            return LaneSignals(now_s=now, itl_p99_fast_s=fast, itl_p99_slow_s=slow, telemetry_age_s=age)
        return LaneSignals(now_s=now, ttft_p99_fast_s=fast, ttft_p99_slow_s=slow, telemetry_age_s=age)


def shadow_plan(gpu: GpuModel, step_w: float = 25.0) -> dict[Lane, LaneSetting]:
    """Twin-derived points for a shadow run (see the module docstring)."""
    floor_w = float(gpu.power_w(gpu.hbm_gate_mhz, 0, gpu.stream_sm_activity, gpu.mem_efficiency))
    cap = math.ceil((floor_w + max(step_w, 0.05 * gpu.tdp_w)) / step_w) * step_w
    c = gpu.sm_clocks_mhz
    table = np.stack([gpu.power_w(c, m, 1.0, gpu.gemm_mem_activity) for m in range(len(gpu.mem_clocks_mhz))], 1)
    fw = Firmware(gpu)
    for _ in range(400):
        op = fw.choose(table, 0.05)
    hi = int(c[op.clock_index])
    lo = min(gpu.snap_clock_mhz(gpu.voltage_knee_mhz, up=True), hi)
    return {Lane.DECODE: LaneSetting(power_limit_w=float(min(cap, gpu.tdp_w)), label=f"cap {cap:.0f} W (twin floor)"),
            Lane.PREFILL: LaneSetting(clock_window_mhz=(lo, hi), label=f"clocks {lo}-{hi} MHz (twin)")}


def run_shadow(*, nvml: Any, lane: Lane, setting: LaneSetting, guard: GuardConfig, limits: LaneLimits,
               source: Any, duration_s: float, period_s: float, log_path: str | None = None
               ) -> tuple[list[TickRecord], list[dict]]:
    """Run one lane's controller in shadow mode on every GPU NVML sees.

    Returns:
        ``(ticks, intents)``: tick records (start, duration, settings) and intents as dicts.
    """
    with DryRunActuator(nvml=nvml, log_path=log_path) as act:
        loop = RuntimeLoop({lane: act.gpus}, {lane: LaneController(lane, setting, limits, guard)}, source, act,
                           period_s=period_s)
        ticks = loop.run(duration_s)
        intents = [asdict(i) for i in act.intents]
    return ticks, intents
