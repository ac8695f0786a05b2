"""Prefill-lane calibration: an SM-clock window whose floor is the TTFT guarantee (power.md 1.3, 7.4).

Prefill is compute-bound, so service time follows ``t_p(f) = t_p(f_max) (f_max/f)^beta``; ``beta`` is
fitted from a clock sweep. With the TTFT budget ``B = (1-h) SLO - t_x - t_d1`` and a p99 queueing
allowance at the provisioned peak rate (DistServe models prefill as M/D/1 with mean wait
``rho S / (2 (1 - rho))``; a p99 SLO needs a tail, so we use the M/M/1 p99 wait
``ln(100 rho) / (mu - lambda)``, which bounds the M/D/1 tail), the floor is the lowest supported clock
with ``t_p99(f) + W_q99(f) <= B``. The floor must
be enforceable: the board has to hold it under the power limit on the heaviest prompts
(``P(f_lo) <= 0.95 * enforced limit``); otherwise the lane keeps the vendor default and says why. The
window top is the energy sweet spot ``argmin_{f >= f_lo} J/token(f)`` (power.md 1.3) of the sweep
*smoothed* by local quadratic regression (:func:`smooth_j_per_token`): each point carries ~2%
measurement noise, so a pointwise minimum, or "the fastest clock within 2% of it", lands wherever
one point happened to read low (a 885 MHz top over a 697 MHz floor in the twin's MoE scenario, with
J/token still falling towards the floor). When the unconstrained sweet spot lies below the floor the
window closes to a lock at the floor: any clock above it costs energy and buys TTFT the SLO does not
ask for.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from gpufield.power.types import LaneSetting

__all__ = ["PrefillPoint", "PrefillCalibration", "calibrate_prefill", "md1_wait_s", "mm1_wait_p99_s", "fit_beta",
           "smooth_j_per_token"]


@dataclass(frozen=True, kw_only=True, slots=True)
class PrefillPoint:
    """Prefill measured with the SM clock locked at ``clock_mhz``.

    Attributes:
        clock_mhz: the lock; service_mean_s / service_p99_s: per-request prefill time;
        j_per_token: lane energy per prefilled token over a replay (idle gaps included); power_peak_w: power on the heaviest prompts;
        held: the clock actually held (no cap-forced drop below the lock).
    """

    clock_mhz: int
    service_mean_s: float
    service_p99_s: float
    j_per_token: float
    power_peak_w: float
    held: bool


@dataclass(frozen=True, kw_only=True, slots=True)
class PrefillCalibration:
    """Result: the window (or the default with a reason) and the evidence.

    Attributes:
        setting: the lane's setting; floor_mhz / top_mhz: the window (NaN-free ints when set).
        beta: fitted clock exponent; budget_s: TTFT budget for prefill incl. queueing.
        enforceable: the floor holds under the power limit; reason: why the default was kept, if so.
        points: the sweep.
    """

    setting: LaneSetting
    floor_mhz: int
    top_mhz: int
    beta: float
    budget_s: float
    enforceable: bool
    reason: str
    points: tuple[PrefillPoint, ...]


def mm1_wait_p99_s(rate_per_s: float, service_s: float) -> float:
    """99th-percentile M/M/1 waiting time ``ln(100 rho) / (mu - lambda)`` (s), 0 if ``rho <= 0.01``.

    A conservative stand-in for the p99 queueing of prefill (exponential service has a heavier tail
    than DistServe's deterministic M/D/1); TTFT is a p99 SLO, so the allowance is a p99 too.
    """
    rho = rate_per_s * service_s
    if rho >= 1:
        return math.inf
    return max(0.0, math.log(100.0 * rho)) / (1.0 / service_s - rate_per_s) if rho > 0.01 else 0.0


def md1_wait_s(rate_per_s: float, service_s: float) -> float:
    """Mean M/D/1 queueing delay ``rho S / (2 (1 - rho))`` (s); ``inf`` when ``rho >= 1``."""
    rho = rate_per_s * service_s
    return math.inf if rho >= 1 else rho * service_s / (2.0 * (1.0 - rho))


def fit_beta(clocks_mhz: Sequence[float], service_s: Sequence[float]) -> float:
    """Least-squares ``beta`` in ``log t = c - beta log f``.

    Raises:
        ValueError: fewer than two distinct clocks.
    """
    f = np.log(np.asarray(clocks_mhz, float))
    t = np.log(np.asarray(service_s, float))
    if len(np.unique(f)) < 2:
        raise ValueError("fit_beta needs at least two distinct clocks")
    slope = np.polyfit(f, t, 1)[0]
    return float(-slope)


def smooth_j_per_token(clocks_mhz: Sequence[float], j_per_token: Sequence[float], at_mhz: Sequence[float],
                       *, span_points: float = 3.5) -> np.ndarray:
    """Local quadratic regression (LOESS, tricube weights) of ``log J/token`` over the clock sweep.

    Args:
        clocks_mhz / j_per_token: the sweep, shape ``(n,)``, ``n >= 3``.
        at_mhz: clocks to evaluate at (MHz), inside the swept range.
        span_points: half-width of the tricube kernel in units of the median sweep step (3.5: the
            three neighbours on each side get weight).

    Returns:
        Smoothed J/token at ``at_mhz``, float64 ``(len(at_mhz),)``.

    Raises:
        ValueError: fewer than 3 distinct clocks.

    Follows Cleveland, "Robust locally weighted regression and smoothing scatterplots", JASA 74
    (1979), without the robustness iterations.
    """
    f = np.asarray(clocks_mhz, float)
    y = np.log(np.asarray(j_per_token, float))
    uf = np.unique(f)
    if len(uf) < 3:
        raise ValueError("smooth_j_per_token needs at least 3 distinct clocks")
    h = span_points * float(np.median(np.diff(uf)))
    out = []
    for f0 in np.asarray(at_mhz, float):
        u = np.abs(f - f0) / h
        w = np.where(u < 1, (1 - u ** 3) ** 3, 0.0)
        if np.count_nonzero(w) < 3:  # too few neighbours for a quadratic: widen to the 3 nearest
            w = np.zeros_like(f)
            w[np.argsort(np.abs(f - f0))[:3]] = 1.0
        X = np.column_stack([np.ones_like(f), f - f0, (f - f0) ** 2])
        sw = np.sqrt(w)
        coef, *_ = np.linalg.lstsq(X * sw[:, None], y * sw, rcond=None)
        out.append(float(np.exp(coef[0])))
    return np.asarray(out)


def calibrate_prefill(*, measure: Callable[[int], PrefillPoint], sm_clocks_mhz: Sequence[int],
                      clock_step_mhz: float, peak_rate_per_s: float, instances: int, ttft_p99_slo_s: float,
                      headroom: float, kv_transfer_p99_s: float, first_decode_s: float,
                      enforced_limit_w: float, gate: Callable[[LaneSetting], float] | None = None,
                      sweet_tol: float = 0.0) -> PrefillCalibration:
    """Choose the prefill clock window.

    Args:
        measure: clock (MHz) -> :class:`PrefillPoint` under a lock at that clock.
        sm_clocks_mhz: supported clocks, highest first. clock_step_mhz: sweep step.
        peak_rate_per_s: provisioned peak request rate of the lane; instances: prefill instances.
        ttft_p99_slo_s: TTFT SLO; headroom: ``h``.
        kv_transfer_p99_s / first_decode_s: parts of TTFT outside the prefill lane (s).
        enforced_limit_w: the prefill GPUs' enforced power limit (W).
        gate: optional peak replay returning the TTFT p99 (s) at a setting; the floor is raised one
            sweep step at a time until it meets ``(1-h) SLO``.
        sweet_tol: the window top is the fastest supported clock ``>= f_lo`` whose *smoothed* J/token
            is within this fraction of the smoothed minimum (0: the sweet spot itself; a positive
            value trades that much prefill energy for TTFT).
    """
    clocks = sorted(set(int(c) for c in sm_clocks_mhz), reverse=True)
    fmax, fmin = clocks[0], clocks[-1]
    sweep = sorted({min((c for c in clocks if c >= fmax - k * clock_step_mhz), default=fmax)
                    for k in range(int((fmax - fmin) / clock_step_mhz) + 1)}, reverse=True)
    pts = [measure(f) for f in sweep]
    beta = fit_beta([p.clock_mhz for p in pts], [p.service_mean_s for p in pts])
    top = pts[0]
    budget = (1 - headroom) * ttft_p99_slo_s - kv_transfer_p99_s - first_decode_s
    lam = peak_rate_per_s / max(1, instances)

    def ok(f: float) -> bool:
        scale = (fmax / f) ** beta
        return top.service_p99_s * scale + mm1_wait_p99_s(lam, top.service_mean_s * scale) <= budget

    feasible = [c for c in clocks if ok(c)]
    if not feasible:
        return PrefillCalibration(setting=LaneSetting(), floor_mhz=fmax, top_mhz=fmax, beta=beta,
                                  budget_s=budget, enforceable=False, points=tuple(pts),
                                  reason=f"TTFT budget {budget:.3f} s not met even at {fmax} MHz: keep default")
    floor = min(feasible)
    at_floor = min((p for p in pts if p.clock_mhz >= floor), key=lambda p: p.clock_mhz)
    if not at_floor.held or at_floor.power_peak_w > 0.95 * enforced_limit_w:
        return PrefillCalibration(setting=LaneSetting(), floor_mhz=floor, top_mhz=fmax, beta=beta,
                                  budget_s=budget, enforceable=False, points=tuple(pts),
                                  reason=(f"floor {floor} MHz not enforceable: {at_floor.power_peak_w:.0f} W"
                                          f" > 0.95 x {enforced_limit_w:.0f} W limit: keep default"))
    held = [p for p in pts if p.held]
    cands = [c for c in clocks if floor <= c <= max((p.clock_mhz for p in held), default=0)]
    if len({p.clock_mhz for p in held}) >= 3 and cands:  # sweet spot of the smoothed sweep
        j = smooth_j_per_token([p.clock_mhz for p in held], [p.j_per_token for p in held], cands)
        hi = max(c for c, v in zip(cands, j, strict=True) if v <= (1 + sweet_tol) * j.min())
    else:
        hi = at_floor.clock_mhz
    hi = max(hi, floor)

    def make(lo: int) -> LaneSetting:
        return LaneSetting(clock_window_mhz=(lo, max(hi, lo)), label=f"clocks {lo}-{max(hi, lo)} MHz")

    setting = make(floor)
    if gate is not None:
        while gate(setting) > (1 - headroom) * ttft_p99_slo_s:
            higher = [c for c in sweep if c > setting.clock_window_mhz[0]]
            if not higher:
                return PrefillCalibration(setting=LaneSetting(), floor_mhz=fmax, top_mhz=fmax, beta=beta,
                                          budget_s=budget, enforceable=True, points=tuple(pts),
                                          reason="TTFT gate failed at every floor: keep default")
            setting = make(min(higher))
    lo, hi2 = setting.clock_window_mhz
    return PrefillCalibration(setting=setting, floor_mhz=lo, top_mhz=hi2, beta=beta, budget_s=budget,
                              enforceable=True, reason="", points=tuple(pts))
