"""Independent oracles for the emulated FFT (tests and the GPU self-check).

* :func:`stage_exact_python`: the DFT-GEMM stage in Python integers (per-row scaling with
  ``math.frexp`` and exact ``Fraction`` truncation, exact integer dot products, one ``math.ldexp(float(Y), -shift)``
  rounding). Every backend x variant x epilogue must equal it bit for bit.
* :func:`dft_mpmath`: O(N^2) DFT along every axis in mpmath at ``dps`` digits (small sizes).
* :func:`dft_longdouble`: DFT along every axis by dense long-double DFT matrices (angles from exact
  integer indices j*k mod N), ~1e-19 relative accuracy on x86-64; for sizes where mpmath is slow.
* :func:`rel_l2`: relative L2 error computed in long double.

Shape legend: G groups, R rows, N inner length, K outputs per row.
"""

from __future__ import annotations

import math

import numpy as np

from gpufield.fp64.fft.twiddles import twiddle_table


def stage_exact_python(x_GRN: np.ndarray, idx_GKN: np.ndarray, input_bits: int, twiddle_bits: int) -> np.ndarray:
    """Exact-integer reference of one emulated stage (see :mod:`gpufield.fp64.fft.stage`).

    Args:
        x_GRN: complex128 [G, R, N].
        idx_GKN: int [G, K, N] twiddle-table indices (forward roots cos - i sin).
        input_bits: b_x.
        twiddle_bits: b_w.

    Returns:
        complex128 [G, R, K].
    """
    c, s = twiddle_table(twiddle_bits)
    G, R, N = x_GRN.shape
    K = idx_GKN.shape[1]
    out = np.empty((G, R, K), dtype=np.complex128)
    for g in range(G):
        wr = [[int(c[idx_GKN[g, k, j]]) for j in range(N)] for k in range(K)]
        wi = [[-int(s[idx_GKN[g, k, j]]) for j in range(N)] for k in range(K)]
        for b in range(R):
            vals = [v for z in x_GRN[g, b] for v in (z.real, z.imag) if v != 0.0]
            e = max((math.frexp(v)[1] for v in vals), default=-(1 << 20))
            sft = input_bits - e
            xr = [_trunc_scaled(float(z.real), sft) for z in x_GRN[g, b]]
            xi = [_trunc_scaled(float(z.imag), sft) for z in x_GRN[g, b]]
            for k in range(K):
                yr = sum(xr[j] * wr[k][j] - xi[j] * wi[k][j] for j in range(N))
                yi = sum(xr[j] * wi[k][j] + xi[j] * wr[k][j] for j in range(N))
                out[g, b, k] = complex(_ldexp_int(yr, -(sft + twiddle_bits)), _ldexp_int(yi, -(sft + twiddle_bits)))
    return out


def _trunc_scaled(v: float, sft: int) -> int:
    """trunc(v * 2^sft) exactly, via Fraction arithmetic on the exact binary value of v."""
    if v == 0.0:
        return 0
    from fractions import Fraction

    q = Fraction(v) * (Fraction(2) ** sft)
    return int(q)  # int() of a Fraction truncates toward zero


def _ldexp_int(y: int, e: int) -> float:
    if y == 0:
        return 0.0
    try:
        return math.ldexp(float(y), e)
    except OverflowError:
        return math.copysign(math.inf, y)


def dft_mpmath(x: np.ndarray, dps: int = 40) -> np.ndarray:
    """DFT along every axis (numpy.fft.fftn convention) in mpmath; result as long-double complex.

    Args:
        x: complex array, 1-3 axes, small (O(N^2) per axis in Python).
        dps: mpmath decimal digits.

    Returns:
        ``np.clongdouble`` array of x's shape.
    """
    import mpmath

    ctx = mpmath.mp.clone() if hasattr(mpmath.mp, "clone") else mpmath.mp
    old = ctx.dps
    ctx.dps = dps
    try:
        a = np.empty(x.shape, dtype=object)
        for i, v in np.ndenumerate(x):
            a[i] = ctx.mpc(float(v.real), float(v.imag))
        for axis in range(x.ndim):
            n = x.shape[axis]
            roots = [ctx.expjpi(ctx.mpf(-2 * m) / n) for m in range(n)]
            moved = np.moveaxis(a, axis, -1)
            res = np.empty(moved.shape, dtype=object)
            for idx in np.ndindex(moved.shape[:-1]):
                row = moved[idx]
                for k in range(n):
                    res[idx + (k,)] = ctx.fsum(row[j] * roots[(j * k) % n] for j in range(n))
            a = np.moveaxis(res, -1, axis)
        out = np.empty(x.shape, dtype=np.clongdouble)
        for i, v in np.ndenumerate(a):
            out[i] = np.longdouble(str(ctx.nstr(v.real, 30))) + 1j * np.longdouble(str(ctx.nstr(v.imag, 30)))
        return out
    finally:
        ctx.dps = old


def _dft_matrix_ld(n: int) -> np.ndarray:
    jk = np.outer(np.arange(n), np.arange(n)) % n
    pi = np.longdouble("3.14159265358979323846264338327950288")
    ang = -2 * pi * jk.astype(np.longdouble) / n
    return np.cos(ang) + 1j * np.sin(ang)


def dft_longdouble(x: np.ndarray) -> np.ndarray:
    """DFT along every axis with dense long-double DFT matrices (exact integer angle indices).

    Args:
        x: complex array, 1-3 axes (cost O(N^(d+1)) per axis).

    Returns:
        ``np.clongdouble`` array of x's shape.
    """
    a = x.astype(np.clongdouble)
    for axis in range(x.ndim):
        F = _dft_matrix_ld(x.shape[axis])
        a = np.moveaxis(np.moveaxis(a, axis, -1) @ F.T, -1, axis)
    return a


def rel_l2(y: np.ndarray, ref: np.ndarray) -> float:
    """||y - ref||_2 / ||ref||_2 computed in long double.

    Args:
        y: complex array (any precision).
        ref: reference of the same shape (e.g. long double).

    Returns:
        float relative error.
    """
    d = y.astype(np.clongdouble) - ref.astype(np.clongdouble)
    num = np.sqrt(np.sum(d.real**2 + d.imag**2))
    den = np.sqrt(np.sum(ref.real.astype(np.longdouble) ** 2 + ref.imag.astype(np.longdouble) ** 2))
    return float(num / den)
