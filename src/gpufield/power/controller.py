"""Lane controllers: calibrated point + SLO guard -> the setting a lane should run at.

A :class:`LaneController` implements the ``Policy`` protocol for one lane; :class:`PairPolicy` routes
``policy(lane, signals)`` calls of the twin (or of :mod:`gpufield.power.runtime`) to the two lanes.
Notch semantics: decode with a cap raises the cap by ``step_w`` per notch; decode or prefill with a
clock window shifts the whole window (floor and top) up by ``clock_step_mhz`` per notch. Reaching the vendor
default (cap >= default limit, floor >= max clock) returns the default setting. A workload power
profile is a discrete knob: the first notch drops it (a profile-only setting then is the default).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from gpufield.power.config import GuardConfig
from gpufield.power.guard import AtCalibrated, Fallback, Raised, SloGuard
from gpufield.power.types import DEFAULT, Lane, LaneSetting, LaneSignals, Mode

__all__ = ["LaneLimits", "LaneController", "PairPolicy", "static_policy", "vendor_setting"]


@dataclass(frozen=True, kw_only=True, slots=True)
class LaneLimits:
    """What one notch means on this lane's GPUs (W, MHz).

    Raises:
        ValueError: non-positive steps or inconsistent limits.
    """

    default_limit_w: float
    max_clock_mhz: int
    step_w: float
    clock_step_mhz: float

    def __post_init__(self) -> None:
        if self.step_w <= 0 or self.clock_step_mhz <= 0 or self.default_limit_w <= 0:
            raise ValueError("LaneLimits: steps and default limit must be > 0")


def raise_setting(base: LaneSetting, level: int, lim: LaneLimits) -> LaneSetting:
    """``base`` moved ``level`` notches toward the vendor default (see the module docstring)."""
    if level <= 0 or base.is_default:
        return base
    cap = base.power_limit_w
    win = base.clock_window_mhz
    if cap is not None:
        cap = cap + level * lim.step_w
        if cap >= lim.default_limit_w:
            cap = None
    if win is not None:
        lo = int(win[0] + level * lim.clock_step_mhz)
        hi = int(win[1] + level * lim.clock_step_mhz)
        win = None if lo >= lim.max_clock_mhz else (lo, min(hi, lim.max_clock_mhz))
    if cap is None and win is None:
        return DEFAULT
    parts = ([f"cap {cap:.0f} W"] if cap is not None else []) + ([f"clocks {win[0]}-{win[1]} MHz"] if win else [])
    return LaneSetting(power_limit_w=cap, clock_window_mhz=win, label=" + ".join(parts) + f" (+{level})")


class LaneController:
    """Calibrated setting of one lane under its SLO guard.

    Args:
        lane: the lane. calibrated: the profile's setting. limits: notch sizes.
        guard: guard configuration (``None``: no guard, the calibrated point is held statically).
        on_change: called with ``(signals, old, new, reason)`` when the setting changes (intent log).
    """

    def __init__(self, lane: Lane, calibrated: LaneSetting, limits: LaneLimits,
                 guard: GuardConfig | None,
                 on_change: Callable[[LaneSignals, LaneSetting, LaneSetting, str], None] | None = None) -> None:
        self.lane, self.calibrated, self.limits = lane, calibrated, limits
        self.guard = SloGuard(lane, guard) if guard is not None else None
        self.current = calibrated
        self.on_change = on_change

    def decide(self, signals: LaneSignals) -> LaneSetting:
        """One control tick: update the guard and return the setting to apply."""
        if self.guard is None:
            new = self.calibrated
        else:
            st = self.guard.step(signals)
            if isinstance(st, Fallback):
                new = DEFAULT
            elif isinstance(st, Raised):
                new = raise_setting(self.calibrated, st.level, self.limits)
            else:
                assert isinstance(st, AtCalibrated)
                new = self.calibrated
        if new != self.current:
            old, self.current = self.current, new
            if self.on_change is not None:
                self.on_change(signals, old, new, self.guard.reason if self.guard else "static")
        return new


class PairPolicy:
    """Routes ``policy(lane, signals)`` to a prefill and a decode :class:`LaneController`."""

    def __init__(self, prefill: LaneController, decode: LaneController) -> None:
        self.lanes = {Lane.PREFILL: prefill, Lane.DECODE: decode}

    def __call__(self, lane: Lane, signals: LaneSignals) -> LaneSetting:
        """Policy protocol: the setting for ``lane`` at this tick."""
        return self.lanes[Lane(lane)].decide(signals)


def static_policy(prefill: LaneSetting, decode: LaneSetting) -> Callable[[Lane, LaneSignals], LaneSetting]:
    """A policy that holds fixed settings (baselines and the oracle)."""
    table = {Lane.PREFILL: prefill, Lane.DECODE: decode}

    def policy(lane: Lane, signals: LaneSignals) -> LaneSetting:
        return table[Lane(lane)]
    policy.static = True  # type: ignore[attr-defined]  # the twin skips computing signals
    return policy


def vendor_setting(mode: Mode, *, maxq_limit_w: float, maxq_clock_mhz: int, min_clock_mhz: int) -> LaneSetting:
    """Stand-in for NVIDIA's workload power profiles, the same on every GPU (power.md 2.1).

    Max-P stands in as the vendor default. Max-Q stands in as a lowered TGP plus an SM-clock ceiling,
    sized by :func:`gpufield.power.calibrate.vendor.maxq_standin` to NVIDIA's published Max-Q target
    (>= 97% of performance on compute-bound work). These are stand-ins, not the firmware profiles.
    """
    if mode is Mode.VENDOR_MAXP:
        return LaneSetting(label="maxp (default)")
    if mode is Mode.VENDOR_MAXQ:
        return LaneSetting(power_limit_w=maxq_limit_w, clock_window_mhz=(min_clock_mhz, maxq_clock_mhz),
                           label=f"maxq stand-in ({maxq_limit_w:.0f} W, <= {maxq_clock_mhz} MHz)")
    raise ValueError(f"{mode} is not a vendor mode")
