"""Configuration of calibration, the SLO guard and the write interlock (frozen, validated).

Defaults follow power.md sections 7.4 (calibration) and 7.5 (guard); all are [RECON] values.
Durations are in seconds (``_s`` suffix) rather than ``timedelta`` because they enter arithmetic in
the twin at every tick; the CLI accepts seconds as well.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpufield.power.types import Mode

__all__ = ["CalibrationConfig", "GuardConfig", "WriteConfig", "mode_calibration"]


@dataclass(frozen=True, kw_only=True, slots=True)
class CalibrationConfig:
    """Latency-gated calibration (power.md 7.4).

    Attributes:
        step_w: cap sweep step (25 W on H100/H200, 25-50 W on B200).
        clock_step_mhz: SM-clock lock sweep step (60-105 MHz).
        settle_s / measure_s: settle and measure time per sweep point (real hardware: 15 / 45).
        eps_throughput: allowed relative throughput loss on the flat part (2%).
        eps_latency: allowed relative ITL-p99 rise on the flat part (5%).
        headroom: ``h``: calibrated points must keep ITL p99 <= (1 - h) * SLO.
        margin_w: margin above the cliff; ``None`` = ``max(step_w, margin_tdp_frac * TGP)``.
        margin_tdp_frac: 5% of TGP.
        stop_throughput_frac: stop the descending sweep below this fraction of default throughput.
        gate_e2e_tolerance: ``delta``: gate accepts mean e2e <= (1 + delta) * baseline.
        n_boot: bootstrap resamples for the knee interval.
        passes: sweep passes (descending then ascending cancels thermal drift).
        descend: after gating the cliff + margin point, keep stepping down the sweep grid (never
            below the flat part) while the latency gate still passes and the measured J/token still
            falls (efficiency mode: gives back the margin where the gate shows it is not needed).
    """

    step_w: float = 25.0
    clock_step_mhz: float = 90.0
    settle_s: float = 15.0
    measure_s: float = 45.0
    eps_throughput: float = 0.02
    eps_latency: float = 0.05
    headroom: float = 0.10
    margin_w: float | None = None
    margin_tdp_frac: float = 0.05
    stop_throughput_frac: float = 0.90
    gate_e2e_tolerance: float = 0.05
    n_boot: int = 200
    passes: int = 2
    descend: bool = False

    def __post_init__(self) -> None:
        if self.step_w <= 0 or self.clock_step_mhz <= 0:
            raise ValueError(f"step_w({self.step_w}) and clock_step_mhz({self.clock_step_mhz}) must be > 0")
        if self.settle_s < 0 or self.measure_s <= 0:
            raise ValueError("settle_s must be >= 0 and measure_s > 0")
        for n in ("eps_throughput", "eps_latency", "headroom", "margin_tdp_frac", "gate_e2e_tolerance"):
            if not 0 <= getattr(self, n) < 1:
                raise ValueError(f"{n} must lie in [0, 1), got {getattr(self, n)}")
        if not 0 < self.stop_throughput_frac <= 1:
            raise ValueError("stop_throughput_frac must lie in (0, 1]")
        if self.passes not in (1, 2) or self.n_boot < 0:
            raise ValueError("passes must be 1 or 2 and n_boot >= 0")

    def margin_for(self, tdp_w: float) -> float:
        """Margin above the cliff in W: ``margin_w`` or ``max(step_w, margin_tdp_frac * tdp_w)``."""
        return self.margin_w if self.margin_w is not None else max(self.step_w, self.margin_tdp_frac * tdp_w)


def mode_calibration(mode: Mode, base: CalibrationConfig | None = None) -> CalibrationConfig:
    """Calibration settings of a mode: balanced h=10%, margin max(step, 5% TGP); efficiency h=5%,
    margin = one step, and descend past the cliff while the latency gate holds."""
    base = base or CalibrationConfig()
    fields = {f: getattr(base, f) for f in base.__dataclass_fields__}
    if mode is Mode.EFFICIENCY:
        fields.update(headroom=0.05, margin_w=base.step_w, descend=True)
    return CalibrationConfig(**fields)


@dataclass(frozen=True, kw_only=True, slots=True)
class GuardConfig:
    """Runtime SLO guard (power.md 7.5). Latency SLOs in s; times in s.

    Attributes:
        itl_p99_slo_s / ttft_p99_slo_s: the SLOs guarded (decode lane: ITL; prefill lane: TTFT
            budget up to the KV handoff).
        fast_breaches: consecutive fast-window breaches (p99 > SLO) that send the lane to defaults.
        slow_frac: slow-window p99 above ``slow_frac * SLO`` steps one notch up.
        relax_frac / relax_s: p99 below ``relax_frac * SLO`` for ``relax_s`` relaxes one notch.
        recover_s: calm time after which Fallback returns to the highest notch (``max_level``), from
            where the lane relaxes one notch per ``relax_s`` ([RECON]: a burst should not cost the
            whole run; 2 min = 4 fast windows).
        queue_s: waiting queue non-empty this long is a leading indicator; kv_usage_max likewise.
        dwell_s: minimum time between changes of one lane (fast breach and fail-safe ignore it).
        stale_periods: telemetry older than this many control periods -> fail-safe.
        period_s: control period.
        max_level: notches above the calibrated point before reaching defaults.
    """

    itl_p99_slo_s: float
    ttft_p99_slo_s: float
    fast_breaches: int = 2
    slow_frac: float = 0.9
    relax_frac: float = 0.7
    relax_s: float = 600.0
    recover_s: float = 120.0
    queue_s: float = 10.0
    kv_usage_max: float = 0.9
    dwell_s: float = 60.0
    stale_periods: int = 3
    period_s: float = 5.0
    max_level: int = 4

    def __post_init__(self) -> None:
        if self.itl_p99_slo_s <= 0 or self.ttft_p99_slo_s <= 0:
            raise ValueError("SLOs must be > 0 s")
        if not 0 < self.relax_frac < self.slow_frac <= 1:
            raise ValueError(f"need 0 < relax_frac({self.relax_frac}) < slow_frac({self.slow_frac}) <= 1")
        if self.fast_breaches < 1 or self.stale_periods < 1 or self.max_level < 1:
            raise ValueError("fast_breaches, stale_periods and max_level must be >= 1")
        if min(self.relax_s, self.recover_s, self.queue_s, self.dwell_s) < 0 or self.period_s <= 0:
            raise ValueError("times must be >= 0 and period_s > 0")


@dataclass(frozen=True, kw_only=True, slots=True)
class WriteConfig:
    """The write interlock of :class:`~gpufield.power.actuators.nvml.NvmlActuator`.

    A GPU is written only if its UUID is in ``allow_uuids`` *and* ``i_own_this_gpu`` is True
    (the CLI's explicit ``--i-own-this-gpu`` flag). The default allows nothing: read-only.

    Attributes:
        allow_uuids: GPU UUIDs that may be written (``GPU-...``).
        i_own_this_gpu: explicit write flag.
        state_dir: where the original settings are saved before the first write (orphan restore).
    """

    allow_uuids: frozenset[str] = field(default_factory=frozenset)
    i_own_this_gpu: bool = False
    state_dir: str = "/var/tmp/gpufield-power"

    def __post_init__(self) -> None:
        bad = [u for u in self.allow_uuids if not u.startswith(("GPU-", "MIG-"))]
        if bad:
            raise ValueError(f"allow_uuids must be NVML UUIDs starting with 'GPU-', got {bad}")

    def may_write(self, uuid: str) -> bool:
        """True if both interlocks allow writing ``uuid``."""
        return self.i_own_this_gpu and uuid in self.allow_uuids
