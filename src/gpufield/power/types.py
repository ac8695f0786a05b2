"""Value types shared by the power wing's actuators, controllers, calibration and twin.

All are frozen dataclasses in SI units (W, MHz, s); NVML's mW exist only at the NVML boundary.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass

__all__ = ["Lane", "Mode", "LaneSetting", "LaneSignals", "GpuCaps", "GpuState", "Intent", "MIN_CLOCK_TOP_FRAC"]

#: a clock window must reach at least this fraction of the GPU's maximum SM clock ([RECON]: the
#: deepest window the twin's oracle or any calibration uses is far above it; H200: 594 of 1980 MHz)
MIN_CLOCK_TOP_FRAC = 0.3


class Lane(enum.StrEnum):
    """Role of a group of GPUs in prefill/decode-disaggregated serving."""

    PREFILL = "prefill"
    DECODE = "decode"


class Mode(enum.StrEnum):
    """Controller modes (power.md 7.5).

    ``performance``: vendor defaults; ``balanced``: calibrated point with headroom h = 10% and margin
    max(step, 5% TGP); ``efficiency``: h = 5%, margin = one step; ``vendor-maxq`` / ``vendor-maxp``:
    one vendor-profile stand-in on every GPU; ``shadow``: balanced decisions, logged, never applied.
    """

    PERFORMANCE = "performance"
    BALANCED = "balanced"
    EFFICIENCY = "efficiency"
    VENDOR_MAXQ = "vendor-maxq"
    VENDOR_MAXP = "vendor-maxp"
    SHADOW = "shadow"


@dataclass(frozen=True, kw_only=True, slots=True)
class LaneSetting:
    """What a lane's GPUs should run at; ``None`` fields mean the vendor default.

    Attributes:
        power_limit_w: board power limit (W).
        clock_window_mhz: locked SM-clock window ``(lo, hi)`` (MHz).
        workload_profile: an NVML workload power profile to request (``"max-q"``, ``"max-p"``, ...: the
            names of :data:`gpufield.power.actuators.wpp.PROFILE_IDS`), the third decode actuator.
        label: short name for reports (``"default"``, ``"cap 650 W"``, ``"maxq"``).
    """

    power_limit_w: float | None = None
    clock_window_mhz: tuple[int, int] | None = None
    label: str = "default"
    workload_profile: str | None = None

    def __post_init__(self) -> None:
        if self.power_limit_w is not None and not (self.power_limit_w > 0 and math.isfinite(self.power_limit_w)):
            raise ValueError(f"power_limit_w must be a positive number, got {self.power_limit_w}")
        if self.clock_window_mhz is not None:
            lo, hi = self.clock_window_mhz
            if not 0 < lo <= hi:
                raise ValueError(f"clock_window_mhz needs 0 < lo <= hi, got ({lo}, {hi})")
        if self.workload_profile is not None and not (isinstance(self.workload_profile, str) and self.workload_profile):
            raise ValueError(f"workload_profile must be a profile name, got {self.workload_profile!r}")

    @property
    def is_default(self) -> bool:
        """True when nothing differs from the vendor default."""
        return self.power_limit_w is None and self.clock_window_mhz is None and self.workload_profile is None


DEFAULT = LaneSetting()


@dataclass(frozen=True, kw_only=True, slots=True)
class LaneSignals:
    """What a lane's controller sees at one tick (latencies in s; NaN = no sample in the window).

    Attributes:
        now_s: time of the tick.
        itl_p99_fast_s / itl_p99_slow_s: ITL p99 over the fast (30 s) / slow (5 min) window.
        ttft_p99_fast_s / ttft_p99_slow_s: TTFT p99 over the same windows (prefill lane: TTFT up to
            the KV handoff, i.e. the part the prefill lane owns).
        queue_depth: requests waiting for the lane.
        kv_usage: decode KV-cache use (0..1).
        telemetry_age_s: age of the newest telemetry sample (stale when large).
        nvml_error: the last NVML read or write failed.
        thermal_slowdown: a thermal clock-event reason is set.
    """

    now_s: float
    itl_p99_fast_s: float = math.nan
    itl_p99_slow_s: float = math.nan
    ttft_p99_fast_s: float = math.nan
    ttft_p99_slow_s: float = math.nan
    queue_depth: int = 0
    kv_usage: float = 0.0
    telemetry_age_s: float = 0.0
    nvml_error: bool = False
    thermal_slowdown: bool = False


@dataclass(frozen=True, kw_only=True, slots=True)
class GpuCaps:
    """What a GPU supports (from NVML, converted to W/MHz).

    Attributes:
        uuid / name: NVML identity.
        min_limit_w / max_limit_w / default_limit_w: ``LimitConstraints`` and ``DefaultLimit``.
        sm_clocks_mhz: supported graphics clocks, highest first.
        mem_clocks_mhz: supported memory clocks, highest first.
    """

    uuid: str
    name: str
    min_limit_w: float
    max_limit_w: float
    default_limit_w: float
    sm_clocks_mhz: tuple[int, ...]
    mem_clocks_mhz: tuple[int, ...]

    def clamp_limit_w(self, power_w: float) -> float:
        """Clamp a requested limit into the constraints (W)."""
        return min(max(power_w, self.min_limit_w), self.max_limit_w)

    def check_window(self, lo_mhz: float, hi_mhz: float, *, min_top_frac: float = MIN_CLOCK_TOP_FRAC
                     ) -> tuple[int, int]:
        """Validate a requested SM-clock window against this GPU's own clocks and snap it (MHz).

        Returns:
            ``(lo, hi)`` snapped inward to supported clocks.

        Raises:
            ValueError: ``lo > hi``, a bound outside the supported range ``[min, max]`` (refused, not
                clamped: a 100-200 MHz request on a GPU whose lowest clock is 345 MHz is a mistake),
                a top below ``min_top_frac`` x the maximum clock, or no supported clock inside.
        """
        c = self.sm_clocks_mhz
        fmin, fmax = min(c), max(c)
        if not (math.isfinite(lo_mhz) and math.isfinite(hi_mhz)) or lo_mhz > hi_mhz:
            raise ValueError(f"clock window {lo_mhz}-{hi_mhz} MHz: need finite lo <= hi")
        if lo_mhz < fmin or hi_mhz > fmax:
            raise ValueError(f"clock window {lo_mhz}-{hi_mhz} MHz leaves this GPU's supported SM clocks "
                             f"{fmin}-{fmax} MHz")
        if hi_mhz < min_top_frac * fmax:
            raise ValueError(f"clock window {lo_mhz}-{hi_mhz} MHz tops out below {min_top_frac:.0%} of the "
                             f"maximum SM clock ({min_top_frac * fmax:.0f} of {fmax} MHz)")
        lo, hi = self.snap_clock_mhz(lo_mhz, up=True), self.snap_clock_mhz(hi_mhz, up=False)
        if lo > hi:
            raise ValueError(f"no supported SM clock inside {lo_mhz}-{hi_mhz} MHz")
        return lo, hi

    def snap_clock_mhz(self, clock_mhz: float, *, up: bool) -> int:
        """Nearest supported SM clock at/above (``up``) or at/below ``clock_mhz``, clamped to range."""
        c = self.sm_clocks_mhz
        if up:
            ok = [x for x in c if x >= clock_mhz]
            return min(ok) if ok else max(c)
        ok = [x for x in c if x <= clock_mhz]
        return max(ok) if ok else min(c)


@dataclass(frozen=True, kw_only=True, slots=True)
class GpuState:
    """One read of a GPU's control state and telemetry (SI units).

    Attributes:
        uuid: GPU UUID; t_s: monotonic time of the read.
        power_w: instant power (field 186, or the 1 s average where the field is unsupported).
        energy_j: total energy counter (``nvmlDeviceGetTotalEnergyConsumption`` / 1000).
        sm_clock_mhz / mem_clock_mhz: current clocks.
        enforced_limit_w / default_limit_w: enforced and default power limits.
        clocks_locked: clock-event reason 0x2 (applications/locked clocks) is set.
        reasons: raw clock-event reason bitmask.
        power_violation_s: cumulative time the power cap throttled the clock (field 74 / 1e9).
    """

    uuid: str
    t_s: float
    power_w: float
    energy_j: float
    sm_clock_mhz: int
    mem_clock_mhz: int
    enforced_limit_w: float
    default_limit_w: float
    clocks_locked: bool
    reasons: int
    power_violation_s: float = math.nan


@dataclass(frozen=True, kw_only=True, slots=True)
class Intent:
    """A write the controller wants (logged by the dry-run actuator; applied by the others).

    Attributes:
        t_s: wall time (s since the epoch); lane / gpu: target; action: ``"power_limit"``,
        ``"clock_window"``, ``"reset_clocks"`` or ``"restore"``; value: W, ``(lo, hi)`` MHz or None;
        reason: why (guard state, calibration point, ...).
    """

    t_s: float
    lane: str
    gpu: str
    action: str
    value: float | tuple[int, int] | None
    reason: str
