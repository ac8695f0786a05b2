"""Decode-lane calibration: cap sweep, cliff, margin, latency gate, and the actuator A/B (power.md 7.4).

The procedure is hardware-agnostic: it takes ``measure(setting) -> SweepPoint`` (real GPU through an
actuator, or the twin through :mod:`gpufield.power.twin.bench`) and ``gate(setting) -> GateResult``
(a replay of the peak-load segment). State machine of one sweep (zeus-style, explicit)::

    Descending --2 points in a row with ITL99 > SLO or T < stop_frac * T0, or at min--> Ascending --> Fitted --> Gated

``sweep_family`` runs it over one actuator family (power caps, SM-clock locks); ``calibrate_decode``
runs every family plus the vendor stand-ins and keeps the Pareto-best gated candidate (lowest J/token).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from gpufield.power.calibrate.knee import KneeFit, fit_knee
from gpufield.power.config import CalibrationConfig
from gpufield.power.types import LaneSetting

__all__ = ["SweepPoint", "GateResult", "FamilyResult", "DecodeCalibration", "sweep_family",
           "calibrate_decode", "flat_minimum"]


@dataclass(frozen=True, kw_only=True, slots=True)
class SweepPoint:
    """One measurement at one setting (calibration load).

    Attributes:
        x: the swept value (cap W or clock MHz); setting: what was applied.
        throughput_tok_s, itl_p50_s, itl_p99_s, power_w, j_per_token: measured.
        pass_index: 0 descending, 1 ascending.
    """

    x: float
    setting: LaneSetting
    throughput_tok_s: float
    itl_p50_s: float
    itl_p99_s: float
    power_w: float
    j_per_token: float
    pass_index: int = 0


@dataclass(frozen=True, kw_only=True, slots=True)
class GateResult:
    """Peak-load replay at a candidate: ITL p99 and mean e2e latency (s)."""

    itl_p99_s: float
    e2e_mean_s: float


@dataclass(frozen=True, kw_only=True, slots=True)
class FamilyResult:
    """Calibration of one actuator family.

    Attributes:
        family: ``"power_cap"``, ``"clock_lock"`` or a vendor stand-in name.
        points: every measurement (both passes).
        flat_min: lowest x whose every higher x stays on the flat part (NaN if none).
        knee: two-phase fit on the flat part's lowest three values and the first two past it (None when there is
            no drop, or when the drop is seen only at the
            sweep's last value so that the fit cannot place it; then ``flat_min`` alone anchors).
        chosen: the gated setting (None when nothing passed the gate).
        chosen_x: its x; j_per_token: its calibration-load energy per token.
        gate: the accepted gate result; gate_tries: how many candidates the gate saw.
    """

    family: str
    points: tuple[SweepPoint, ...]
    flat_min: float
    knee: KneeFit | None
    chosen: LaneSetting | None
    chosen_x: float
    j_per_token: float
    gate: GateResult | None
    gate_tries: int = 0


@dataclass(frozen=True, kw_only=True, slots=True)
class DecodeCalibration:
    """Result for one lane and load bucket: every family and the Pareto-best choice."""

    families: tuple[FamilyResult, ...]
    best: FamilyResult
    baseline: SweepPoint
    baseline_gate: GateResult
    slo_itl_p99_s: float
    config: CalibrationConfig = field(default_factory=CalibrationConfig)


def flat_minimum(points: Sequence[SweepPoint], base: SweepPoint, slo_itl_p99_s: float,
                 cfg: CalibrationConfig) -> float:
    """Lowest x such that every x' >= x keeps ``t >= 1 - eps_T``, ``l <= 1 + eps_L``, ITL99 <= (1-h) SLO.

    Passes are averaged per x first, and the throughput tolerance is widened by two standard errors
    of that mean, with the relative noise estimated from the differences between passes (one pass:
    no widening). Returns NaN if even the highest x fails.
    """
    xs = sorted({p.x for p in points}, reverse=True)
    pairs = [[p.throughput_tok_s for p in points if p.x == x] for x in xs]
    diffs = [(a[0] - a[1]) / base.throughput_tok_s for a in pairs if len(a) == 2]
    n_pass = max(len(a) for a in pairs)
    se = float(np.std(diffs) / math.sqrt(2) / math.sqrt(n_pass)) if len(diffs) >= 3 else 0.0
    flat = math.nan
    for x, thr in zip(xs, pairs, strict=True):
        lat = np.mean([p.itl_p99_s for p in points if p.x == x])
        t = float(np.mean(thr)) / base.throughput_tok_s
        if t >= 1 - cfg.eps_throughput - 2 * se and lat <= (1 + cfg.eps_latency) * base.itl_p99_s \
                and lat <= (1 - cfg.headroom) * slo_itl_p99_s:
            flat = x
        else:
            break
    return flat


def sweep_family(family: str, values: Sequence[float], make: Callable[[float], LaneSetting],
                 measure: Callable[[LaneSetting], SweepPoint], gate: Callable[[LaneSetting], GateResult],
                 *, base: SweepPoint, base_gate: GateResult, slo_itl_p99_s: float,
                 cfg: CalibrationConfig, margin: float, x_max: float,
                 snap_grid: Sequence[float] | None = None) -> FamilyResult:
    """Sweep ``values`` (highest first), fit the cliff, place the point above it, gate.

    Placement: ``max(flat_min + margin, knee + max(margin, knee_ci_high - knee))`` snapped up to the
    grid; the gate then raises it one step at a time until the peak-load replay passes. With
    ``cfg.descend`` the point then steps down (never below ``flat_min``) while the gate passes and the
    measured J/token falls.

    Args:
        family: name for reports. values: swept x, highest first. make: x -> setting.
        measure / gate: measurement and peak-load replay callables.
        base / base_gate: the vendor-default measurement and gate (normalisation and e2e baseline).
        slo_itl_p99_s: ITL p99 SLO (s). cfg: thresholds. margin: added above the cliff (x units).
        x_max: the highest allowed x (default limit / max clock): above it means "use the default".
        snap_grid: values the placed point snaps up to (default ``values``; clocks: every supported
            clock, so the margin is not inflated by the sweep step).
    """
    pts: list[SweepPoint] = []
    measured: list[float] = []
    past = 0
    for x in values:  # descending pass; stop after two points past the thresholds (the fit needs both)
        p = measure(make(x))
        pts.append(_with(p, x, 0))
        measured.append(x)
        past = past + 1 if (p.itl_p99_s > slo_itl_p99_s or
                            p.throughput_tok_s < cfg.stop_throughput_frac * base.throughput_tok_s) else 0
        if past >= 2:
            break
    if cfg.passes == 2:
        for x in reversed(measured):  # ascending pass cancels drift
            pts.append(_with(measure(make(x)), x, 1))
    # normalise by the default measured three times (baseline + both passes at the top value) rather
    # than by one noisy baseline
    top = [p.throughput_tok_s for p in pts if p.x == values[0]] + [base.throughput_tok_s]
    ref = SweepPoint(x=math.nan, setting=base.setting, throughput_tok_s=float(np.mean(top)),
                     itl_p50_s=base.itl_p50_s, itl_p99_s=base.itl_p99_s, power_w=base.power_w,
                     j_per_token=base.j_per_token)
    base = ref
    flat = flat_minimum(pts, base, slo_itl_p99_s, cfg)
    knee = None
    xs = np.array([p.x for p in pts])
    ys = np.array([p.throughput_tok_s for p in pts]) / base.throughput_tok_s
    # the knee is the end of the flat part: fit it on the end of the flat part and the first two
    # swept values past it. Further down other regimes begin (HBM in its lower state, compute-bound clocks) that
    # one lower segment cannot describe; fitted to the whole tail, the breakpoint is dragged up
    # into the part of the sweep that was measured flat. With fewer than two values past the flat
    # part the drop is seen only at the sweep's last value and the cliff is not resolved
    # The upper side is the flat part's lowest three values: over the whole flat part a trend
    # within the flat tolerance can win the split and put the knee far above the cliff (1380 MHz
    # over a sweep flat to 975 MHz in the twin's dense efficiency calibration)
    below = sorted((v for v in np.unique(xs) if not math.isnan(flat) and v < flat), reverse=True)
    above = sorted(v for v in np.unique(xs) if not math.isnan(flat) and v >= flat)
    keep = ((xs >= below[1]) & (xs <= above[min(2, len(above) - 1)]) if len(below) >= 2 and above
            else np.zeros(len(xs), bool))
    xs, ys = xs[keep], ys[keep]
    if len(np.unique(xs)) >= 3 and len(xs) >= 4:
        if ys.min() < 1 - cfg.eps_throughput:  # there is a drop to locate
            knee = fit_knee(xs, ys, n_boot=cfg.n_boot)
            if len(np.unique(xs[xs < knee.knee])) < 2:
                knee = None  # drop only at the sweep's last value: the cliff is not resolved
    if math.isnan(flat):
        return FamilyResult(family=family, points=tuple(pts), flat_min=flat, knee=knee, chosen=None,
                            chosen_x=math.nan, j_per_token=math.nan, gate=None)
    # margin in units of measured uncertainty (power.md 8.2): at least `margin` above the flat part,
    # and above the knee by the larger of `margin` and the knee's upper CI half-width
    placed = flat + margin
    if knee is not None:
        placed = max(placed, knee.knee + max(margin, knee.ci_high - knee.knee))
    step = abs(values[0] - values[1]) if len(values) > 1 else margin
    x = _snap_up(placed, snap_grid if snap_grid is not None else values)
    tries = 0

    def passes(g: GateResult) -> bool:
        return g.itl_p99_s <= (1 - cfg.headroom) * slo_itl_p99_s and \
            g.e2e_mean_s <= (1 + cfg.gate_e2e_tolerance) * base_gate.e2e_mean_s

    def _jpt(x: float) -> float:
        near = [p for p in pts if p.x == x] or [measure(make(x))]
        return float(np.mean([p.j_per_token for p in near]))

    while x <= x_max + 1e-9:
        tries += 1
        g = gate(make(x))
        if passes(g):
            jpt = _jpt(x)
            if cfg.descend:  # spend the remaining latency headroom while energy keeps falling
                for lower in sorted((v for v in values if flat <= v < x), reverse=True):
                    g2 = gate(make(lower))
                    tries += 1
                    j2 = _jpt(lower)
                    if not passes(g2) or j2 >= jpt:
                        break
                    x, g, jpt = lower, g2, j2
            return FamilyResult(family=family, points=tuple(pts), flat_min=flat, knee=knee, chosen=make(x),
                                chosen_x=x, j_per_token=jpt, gate=g, gate_tries=tries)
        x += step
    return FamilyResult(family=family, points=tuple(pts), flat_min=flat, knee=knee, chosen=None,
                        chosen_x=math.nan, j_per_token=math.nan, gate=None, gate_tries=tries)


def _with(p: SweepPoint, x: float, k: int) -> SweepPoint:
    return SweepPoint(x=x, setting=p.setting, throughput_tok_s=p.throughput_tok_s, itl_p50_s=p.itl_p50_s,
                      itl_p99_s=p.itl_p99_s, power_w=p.power_w, j_per_token=p.j_per_token, pass_index=k)


def _snap_up(x: float, grid: Sequence[float]) -> float:
    above = [g for g in grid if g >= x - 1e-9]
    return min(above) if above else max(grid)


def calibrate_decode(*, measure: Callable[[LaneSetting], SweepPoint], gate: Callable[[LaneSetting], GateResult],
                     default_limit_w: float, min_limit_w: float, sm_clocks_mhz: Sequence[int],
                     slo_itl_p99_s: float, cfg: CalibrationConfig,
                     vendor: dict[str, LaneSetting] | None = None) -> DecodeCalibration:
    """Calibrate a decode lane over power caps, SM-clock locks and vendor stand-ins.

    Args:
        measure / gate: see :func:`sweep_family`.
        default_limit_w / min_limit_w: the GPU's default limit and ``LimitConstraints`` minimum (W).
        sm_clocks_mhz: supported SM clocks, highest first.
        slo_itl_p99_s: ITL p99 SLO (s).
        cfg: calibration settings (mode-specific headroom and margin).
        vendor: stand-in settings to evaluate as single points, e.g. ``{"vendor-maxq": ...}``.

    Returns:
        :class:`DecodeCalibration`; ``best`` is the gated candidate with the lowest J/token, or the
        vendor default (family ``"default"``) if nothing passed.
    """
    base = measure(LaneSetting())
    base_gate = gate(LaneSetting())
    kw = dict(base=base, base_gate=base_gate, slo_itl_p99_s=slo_itl_p99_s, cfg=cfg)
    caps = list(np.arange(default_limit_w, min_limit_w - 1e-9, -cfg.step_w))
    fams = [sweep_family("power_cap", caps, lambda c: LaneSetting(power_limit_w=float(c), label=f"cap {c:.0f} W"),
                         measure, gate, margin=cfg.margin_for(default_limit_w), x_max=default_limit_w - cfg.step_w,
                         **kw)]
    fmin, fmax = int(min(sm_clocks_mhz)), int(max(sm_clocks_mhz))
    clocks = sorted({_snap_clock(fmax - k * cfg.clock_step_mhz, sm_clocks_mhz)
                     for k in range(int((fmax - fmin) / cfg.clock_step_mhz) + 1)}, reverse=True)
    fams.append(sweep_family("clock_lock", clocks, lambda f: LaneSetting(
        clock_window_mhz=(fmin, int(f)), label=f"clocks <= {int(f)} MHz"), measure, gate,
        margin=cfg.clock_step_mhz, x_max=clocks[1] if len(clocks) > 1 else fmax,
        snap_grid=[float(c) for c in sm_clocks_mhz], **kw))
    for name, s in (vendor or {}).items():
        p = measure(s)
        g = gate(s)
        ok = g.itl_p99_s <= (1 - cfg.headroom) * slo_itl_p99_s and \
            g.e2e_mean_s <= (1 + cfg.gate_e2e_tolerance) * base_gate.e2e_mean_s
        fams.append(FamilyResult(family=name, points=(p,), flat_min=math.nan, knee=None,
                                 chosen=s if ok else None, chosen_x=math.nan,
                                 j_per_token=p.j_per_token if ok else math.nan, gate=g if ok else None,
                                 gate_tries=1))
    ok = [f for f in fams if f.chosen is not None]
    best = min(ok, key=lambda f: f.j_per_token) if ok else FamilyResult(
        family="default", points=(base,), flat_min=math.nan, knee=None, chosen=LaneSetting(),
        chosen_x=default_limit_w, j_per_token=base.j_per_token, gate=base_gate)
    if best.j_per_token >= base.j_per_token:  # nothing beats the default: keep it
        best = FamilyResult(family="default", points=(base,), flat_min=math.nan, knee=None,
                            chosen=LaneSetting(), chosen_x=default_limit_w, j_per_token=base.j_per_token,
                            gate=base_gate)
    return DecodeCalibration(families=tuple(fams), best=best, baseline=base, baseline_gate=base_gate,
                             slo_itl_p99_s=slo_itl_p99_s, config=cfg)


def _snap_clock(f: float, clocks: Sequence[int]) -> int:
    above = [c for c in clocks if c >= f - 1e-9]
    return int(min(above)) if above else int(max(clocks))
