"""The runtime SLO guard: an explicit state machine per lane (power.md 7.5).

States (frozen dataclasses, joined in :data:`GuardState`)::

    AtCalibrated --slow breach | leading indicator (dwell ok)--> Raised(1)
    Raised(k)    --slow breach | leading indicator (dwell ok)--> Raised(k+1)   (k+1 > max -> Fallback)
    Raised(k)    --healthy for relax_s (dwell ok)------------> Raised(k-1) or AtCalibrated
    any          --fast breach x fast_breaches | stale | NVML error | thermal--> Fallback
    Fallback     --healthy for recover_s---------------------> Raised(max_level)

"Notch" ``k`` is interpreted by the lane controller (decode: cap + k steps; prefill: floor + k clock
steps). Fallback means vendor defaults. A fast breach or fail-safe acts at once; every other move
waits ``dwell_s`` since the lane's last change, and at most one move happens per tick.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpufield.power.config import GuardConfig
from gpufield.power.types import Lane, LaneSignals

__all__ = ["AtCalibrated", "Raised", "Fallback", "GuardState", "SloGuard"]


@dataclass(frozen=True, slots=True)
class AtCalibrated:
    """At the calibrated point. Allowed next: Raised(1), Fallback."""

    since_s: float


@dataclass(frozen=True, slots=True)
class Raised:
    """``level`` notches above the calibrated point. Allowed next: Raised(level+-1), AtCalibrated, Fallback."""

    level: int
    since_s: float


@dataclass(frozen=True, slots=True)
class Fallback:
    """Vendor defaults after a fast breach or a fail-safe. Allowed next: Raised(max_level)."""

    since_s: float
    reason: str


GuardState = AtCalibrated | Raised | Fallback


def _gt(x: float, y: float) -> bool:
    return not math.isnan(x) and x > y


class SloGuard:
    """One lane's guard. Call :meth:`step` every control period with fresh signals.

    Args:
        lane: which SLO applies (decode: ITL p99; prefill: TTFT p99 up to the handoff).
        config: thresholds and windows.
    """

    def __init__(self, lane: Lane, config: GuardConfig) -> None:
        self.lane, self.cfg = lane, config
        self.state: GuardState = AtCalibrated(0.0)
        self.reason = "start"
        self._fast_count = 0
        self._queue_since: float | None = None
        self._healthy_since: float | None = None

    def _slo(self) -> float:
        return self.cfg.itl_p99_slo_s if self.lane is Lane.DECODE else self.cfg.ttft_p99_slo_s

    def _p99(self, s: LaneSignals) -> tuple[float, float]:
        if self.lane is Lane.DECODE:
            return s.itl_p99_fast_s, s.itl_p99_slow_s
        return s.ttft_p99_fast_s, s.ttft_p99_slow_s

    def _move(self, new: GuardState, reason: str) -> GuardState:
        self.state, self.reason = new, reason
        self._healthy_since = None
        return new

    def step(self, s: LaneSignals) -> GuardState:
        """Advance one tick and return the new state (see the module docstring for the rules)."""
        cfg, now, st = self.cfg, s.now_s, self.state
        slo = self._slo()
        fast, slow = self._p99(s)
        # fail-safe first: stale telemetry, NVML error, thermal slowdown
        if s.telemetry_age_s > cfg.stale_periods * cfg.period_s or s.nvml_error or s.thermal_slowdown:
            why = ("stale telemetry" if s.telemetry_age_s > cfg.stale_periods * cfg.period_s
                   else "NVML error" if s.nvml_error else "thermal slowdown")
            self._fast_count = 0
            return st if isinstance(st, Fallback) else self._move(Fallback(now, why), why)
        self._fast_count = self._fast_count + 1 if _gt(fast, slo) else 0
        if self._fast_count >= cfg.fast_breaches and not isinstance(st, Fallback):
            return self._move(Fallback(now, "fast breach"), f"fast p99 {fast:.4g}s > SLO {slo:.4g}s")
        # leading indicators (decode only: a request waiting for a decode slot or KV space means the
        # lane is out of capacity; a short prefill queue is normal and shows up in TTFT anyway)
        if s.queue_depth > 0 and self.lane is Lane.DECODE:
            self._queue_since = now if self._queue_since is None else self._queue_since
        else:
            self._queue_since = None
        queued = self._queue_since is not None and now - self._queue_since >= cfg.queue_s
        pressure = _gt(slow, cfg.slow_frac * slo) or _gt(fast, cfg.slow_frac * slo) or queued \
            or (self.lane is Lane.DECODE and s.kv_usage > cfg.kv_usage_max)
        healthy = not pressure and not _gt(fast, cfg.relax_frac * slo) and not _gt(slow, cfg.relax_frac * slo)
        if healthy:
            self._healthy_since = now if self._healthy_since is None else self._healthy_since
        else:
            self._healthy_since = None
        calm_for = now - self._healthy_since if self._healthy_since is not None else -1.0
        calm = calm_for >= cfg.relax_s
        dwell_ok = now - st.since_s >= cfg.dwell_s
        if isinstance(st, Fallback):
            return self._move(Raised(cfg.max_level, now), "recovered") if calm_for >= cfg.recover_s else st
        level = st.level if isinstance(st, Raised) else 0
        if pressure and dwell_ok:
            why = "queue" if queued else "kv usage" if (self.lane is Lane.DECODE and s.kv_usage > cfg.kv_usage_max) \
                else "slow p99"
            if level + 1 > cfg.max_level:
                return self._move(Fallback(now, why), why)
            return self._move(Raised(level + 1, now), why)
        if calm and dwell_ok and level > 0:
            return self._move(Raised(level - 1, now) if level > 1 else AtCalibrated(now), "relax")
        return st
