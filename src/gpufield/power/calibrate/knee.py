"""Cliff detection: two-phase (segmented) regression with a bootstrap interval (power.md 7.4).

The model is two straight lines that meet at the breakpoint ``x_k`` or jump there::

    y = a + b_hi * (x - x_k)              for x >= x_k
    y = a + c + b_lo * (x - x_k)          for x <  x_k        (c: the step at the cliff, <= 0 for a drop)

The step term matters: a decode lane's cliff is often a *step*, not a hinge. When the cap (or a
low SM clock) forces HBM into its lower clock state, bandwidth drops by a fixed fraction at once
(H200 3201 -> 2201 MHz, B200 3996 -> 3402 MHz, power.md 6.2), and below the step throughput may stay
level for a while. A continuous two-segment fit cannot bend that sharply: it tilts its lower segment
through the points past the step and drags the breakpoint up into the part of the sweep that was
measured flat (a 1060 MHz knee over a sweep flat down to 975 MHz and 11% lower at 885 MHz, in the
twin's dense scenario). Two-phase regression with a free step (Hinkley, "Inference in two-phase
regression", JASA 66, 1971) contains the hinge as the special case ``c = 0``.

With the step free, the fit depends only on which samples fall on either side, so the candidate
breakpoints are the midpoints between consecutive distinct ``x``; the breakpoint is the candidate with
the smallest residual sum of squares (ties: the highest, the conservative side of a cliff). The 95%
interval comes from a residual bootstrap (the sweep's x are a fixed design: resample the residuals of
the best fit, add them back, refit), so it is resolved to the sweep's step.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["KneeFit", "fit_knee"]


@dataclass(frozen=True, kw_only=True, slots=True)
class KneeFit:
    """A fitted breakpoint (same unit as ``x``: W for caps, MHz for clocks).

    Attributes:
        knee: breakpoint estimate (a midpoint between two swept values); ci_low / ci_high: 95%
            bootstrap interval.
        slope_below / slope_above: fitted slopes left / right of the knee (units of y per x).
        step: fitted jump of ``y`` when crossing the knee downwards (y units; negative for a drop).
        sse: residual sum of squares of the best fit.
    """

    knee: float
    ci_low: float
    ci_high: float
    slope_below: float
    slope_above: float
    sse: float
    step: float = 0.0


def _design(x: np.ndarray, grid: np.ndarray) -> np.ndarray:
    d = x[None, :] - grid[:, None]
    lo = (d < 0).astype(float)
    return np.stack([np.ones_like(d), lo, np.minimum(d, 0.0), np.maximum(d, 0.0)], axis=2)  # (G, n, 4)


def _fit(x: np.ndarray, y: np.ndarray, grid: np.ndarray, X: np.ndarray | None = None
         ) -> tuple[int, np.ndarray, float]:
    # all candidate breakpoints at once, normal equations batched; the tiny ridge keeps a side with
    # a single distinct x (slope not identified) solvable without changing its residuals
    X = _design(x, grid) if X is None else X
    XtX = np.einsum("gni,gnj->gij", X, X) + 1e-9 * np.eye(X.shape[2])
    Xty = np.einsum("gni,n->gi", X, y)
    coef = np.linalg.solve(XtX, Xty[..., None])[..., 0]
    sse = np.sum((np.einsum("gni,gi->gn", X, coef) - y[None, :]) ** 2, axis=1)
    # ties (equal up to rounding) go to the highest breakpoint: grid is ascending
    g = int(np.nonzero(sse <= sse.min() * (1 + 1e-9) + 1e-15)[0].max())
    return g, coef[g], float(sse[g])


def fit_knee(x, y, *, n_boot: int = 200, seed: int = 0) -> KneeFit:
    """Fit the knee of ``y(x)`` (e.g. normalised throughput vs power cap).

    Args:
        x, y: samples, shape ``(n,)``, ``n >= 4``; repeated ``x`` (several passes) are fine.
        n_boot: bootstrap resamples for the interval.
        seed: bootstrap seed.

    Returns:
        :class:`KneeFit`; the breakpoint leaves at least two distinct ``x`` above it and one below
        when there are four or more distinct ``x`` (otherwise at least one on each side).

    Raises:
        ValueError: fewer than 4 samples or fewer than 3 distinct ``x``.
    """
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    ux = np.unique(x)
    if len(x) < 4 or len(ux) < 3:
        raise ValueError(f"fit_knee needs >= 4 samples at >= 3 distinct x, got {len(x)} at {len(ux)}")
    mids = (ux[:-1] + ux[1:]) / 2.0  # ascending
    grid = mids[:-1] if len(ux) > 3 else mids  # keep >= 2 distinct x on the (flat) upper side
    X = _design(x, grid)
    g, coef, sse = _fit(x, y, grid, X)
    k = float(grid[g])
    fitted = X[g] @ coef
    resid = y - fitted
    rng = np.random.default_rng(seed)
    boots = [grid[_fit(x, fitted + rng.choice(resid, len(resid), replace=True), grid, X)[0]]
             for _ in range(n_boot)]
    ci = np.percentile(boots, [2.5, 97.5]) if boots else np.array([k, k])
    return KneeFit(knee=k, ci_low=float(ci[0]), ci_high=float(ci[1]), slope_below=float(coef[2]),
                   slope_above=float(coef[3]), sse=sse, step=float(coef[1]))
