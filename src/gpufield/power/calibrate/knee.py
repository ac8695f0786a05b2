"""Cliff detection: two-segment piecewise-linear fit with a bootstrap interval (power.md 7.4).

The model is continuous at the breakpoint ``x_k``::

    y = a + b_lo * min(x - x_k, 0) + b_hi * max(x - x_k, 0)

fitted by least squares for every candidate ``x_k`` on a fine grid between the second-lowest and
second-highest ``x``; the breakpoint is the candidate with the smallest residual sum of squares. The
95% interval comes from a residual bootstrap (the sweep's x are a fixed design: resample the
residuals of the best fit, add them back, refit).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["KneeFit", "fit_knee"]


@dataclass(frozen=True, kw_only=True, slots=True)
class KneeFit:
    """A fitted breakpoint (same unit as ``x``: W for caps, MHz for clocks).

    Attributes:
        knee: breakpoint estimate; ci_low / ci_high: 95% bootstrap interval.
        slope_below / slope_above: fitted slopes left / right of the knee (units of y per x).
        sse: residual sum of squares of the best fit.
    """

    knee: float
    ci_low: float
    ci_high: float
    slope_below: float
    slope_above: float
    sse: float


def _fit(x: np.ndarray, y: np.ndarray, grid: np.ndarray) -> tuple[float, float, float, float]:
    # all candidate breakpoints at once: X has shape (G, n, 3), normal equations batched
    d = x[None, :] - grid[:, None]
    X = np.stack([np.ones_like(d), np.minimum(d, 0.0), np.maximum(d, 0.0)], axis=2)
    XtX = np.einsum("gni,gnj->gij", X, X) + 1e-12 * np.eye(3)
    Xty = np.einsum("gni,n->gi", X, y)
    coef = np.linalg.solve(XtX, Xty[..., None])[..., 0]
    sse = np.sum((np.einsum("gni,gi->gn", X, coef) - y[None, :]) ** 2, axis=1)
    g = int(np.argmin(sse))
    return float(grid[g]), float(coef[g, 1]), float(coef[g, 2]), float(sse[g])


def fit_knee(x, y, *, n_boot: int = 200, grid_points: int = 120, seed: int = 0) -> KneeFit:
    """Fit the knee of ``y(x)`` (e.g. normalised throughput vs power cap).

    Args:
        x, y: samples, shape ``(n,)``, ``n >= 4``; repeated ``x`` (several passes) are fine.
        n_boot: bootstrap resamples for the interval.
        grid_points: candidate breakpoints.
        seed: bootstrap seed.

    Raises:
        ValueError: fewer than 4 samples or fewer than 3 distinct ``x``.
    """
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    ux = np.unique(x)
    if len(x) < 4 or len(ux) < 3:
        raise ValueError(f"fit_knee needs >= 4 samples at >= 3 distinct x, got {len(x)} at {len(ux)}")
    grid = np.linspace(ux[1], ux[-2], grid_points) if len(ux) > 3 else np.linspace(ux[0], ux[-1], grid_points)
    k, lo, hi, sse = _fit(x, y, grid)
    rng = np.random.default_rng(seed)
    d = x - k
    X = np.column_stack([np.ones_like(x), np.minimum(d, 0.0), np.maximum(d, 0.0)])
    coef, *_ = np.linalg.lstsq(X, y, rcond=None)
    fitted = X @ coef
    resid = y - fitted
    boots = [_fit(x, fitted + rng.choice(resid, len(resid), replace=True), grid)[0] for _ in range(n_boot)]
    ci = np.percentile(boots, [2.5, 97.5]) if boots else np.array([k, k])
    return KneeFit(knee=k, ci_low=float(ci[0]), ci_high=float(ci[1]), slope_below=lo,
                   slope_above=hi, sse=sse)
