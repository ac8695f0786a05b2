"""Exact integer twiddle tables for the emulated FFT, verified bit for bit at import.

The DFT-GEMM stages multiply b-bit scaled integers by b_w-bit scaled integer twiddles
``round(cos(2*pi*m/N_MAX) * 2**b_w)`` and ``round(sin(2*pi*m/N_MAX) * 2**b_w)``. Every twiddle of a
power-of-two length N <= N_MAX (including the Bailey "fused" twiddles, which are single roots of
unity, see :mod:`gpufield.fp64.fft.sixstep`) is an entry of this one table, indexed by the exact
integer angle index ``m`` (reduced mod N_MAX in integer arithmetic, never as a float angle).

Following the research notes (fp64.md section 4.3/4.5): the table is computed with mpmath at 40
significant digits (~133 bits) from exact angle indices, then verified against an independent
evaluation in ``numpy.longdouble`` (64-bit significand on x86-64; where the long-double value is
within 2^(b_w - 58) of a rounding tie the entry is re-derived with mpmath at 100 digits) and against the exact
symmetries cos(x) = cos(-x), sin(x) = cos(pi/2 - x). A mismatch raises :class:`NumericsError` at
import, so a bad table can never reach a transform.

Shape legend: ``_M`` = angle index m in [0, N_MAX).
"""

from __future__ import annotations

import functools

import numpy as np

from gpufield.errors import NumericsError

N_MAX = 1024
"""Largest per-axis length whose twiddles live in the table (1024 = 32 x 32 Bailey split)."""

DEFAULT_TWIDDLE_BITS = 56
"""Default b_w: 56 bits beats numpy's float64 FFT error (fp64.md 4.3: 1.83e-16 vs 2.74e-16)."""


def _mp_table(bits: int, dps: int) -> tuple[list[int], list[int]]:
    import mpmath

    ctx = mpmath.mp.clone() if hasattr(mpmath.mp, "clone") else mpmath.mp
    old = ctx.dps
    ctx.dps = dps
    try:
        scale = ctx.mpf(2) ** bits
        cos_m, sin_m = [], []
        for m in range(N_MAX):
            ang = 2 * ctx.pi * m / N_MAX
            cos_m.append(int(ctx.nint(ctx.cos(ang) * scale)))
            sin_m.append(int(ctx.nint(ctx.sin(ang) * scale)))
    finally:
        ctx.dps = old
    return cos_m, sin_m


def _verify(bits: int, cos_m: list[int], sin_m: list[int]) -> None:
    """Cross-check an mpmath table against long double and exact symmetries; raise on mismatch."""
    m = np.arange(N_MAX, dtype=np.longdouble)
    pi_ld = np.longdouble("3.14159265358979323846264338327950288")
    ang = 2 * pi_ld * m / N_MAX
    scale = np.longdouble(2) ** bits
    for name, got, ld in (("cos", cos_m, np.cos(ang) * scale), ("sin", sin_m, np.sin(ang) * scale)):
        frac = np.abs(ld - np.floor(ld) - np.longdouble(0.5))
        # long double carries ~2^-62 relative error here, i.e. ~2^(bits-62) absolute: entries within
        # 2^(bits-58) of a rounding tie are re-derived with mpmath at 100 digits instead
        near_tie = frac < np.longdouble(2.0) ** (bits - 58)
        ld_round = [int(v) for v in np.rint(ld)]
        bad = [i for i in range(N_MAX) if ld_round[i] != got[i] and not near_tie[i]]
        if bad:
            raise NumericsError(
                f"twiddle table ({name}, b_w={bits}) disagrees with long double at m={bad[:5]}"
            )
        if near_tie.any():  # re-derive the near-ties at 100 digits
            hi_cos, hi_sin = _mp_table(bits, 100)
            hi = hi_cos if name == "cos" else hi_sin
            ties = [i for i in range(N_MAX) if near_tie[i] and hi[i] != got[i]]
            if ties:
                raise NumericsError(f"twiddle table ({name}) unstable at m={ties[:5]}")
    q = N_MAX // 4
    for i in range(N_MAX):
        j = (N_MAX - i) % N_MAX
        if cos_m[i] != cos_m[j] or sin_m[i] != -sin_m[j]:
            raise NumericsError(f"twiddle table breaks cos/sin parity at m={i}")
        if cos_m[i] != sin_m[(q - i) % N_MAX]:
            raise NumericsError(f"twiddle table breaks cos(x)=sin(pi/2-x) at m={i}")
    if cos_m[0] != 1 << bits or sin_m[q] != 1 << bits or sin_m[0] != 0:
        raise NumericsError("twiddle table has wrong exact values at m=0 or m=N/4")


@functools.cache
def twiddle_table(bits: int = DEFAULT_TWIDDLE_BITS) -> tuple[np.ndarray, np.ndarray]:
    """Verified integer twiddles ``round(cos/sin(2*pi*m/1024) * 2**bits)`` for m in [0, 1024).

    Args:
        bits: b_w, the twiddle scale in bits, 8 <= bits <= 62 (so every entry fits int64).

    Returns:
        ``(cos_M, sin_M)``: two int64 numpy arrays of shape (1024,), read-only.

    Raises:
        InputError: ``bits`` out of range.
        NumericsError: the mpmath table failed the long-double or symmetry verification.
    """
    from gpufield.errors import InputError

    if not 8 <= int(bits) <= 62:
        raise InputError(f"twiddle bits must be in [8, 62], got {bits}")
    cos_m, sin_m = _mp_table(int(bits), 40)
    _verify(int(bits), cos_m, sin_m)
    out = []
    for t in (cos_m, sin_m):
        a = np.array(t, dtype=np.int64)
        a.setflags(write=False)
        out.append(a)
    return out[0], out[1]


def root_index(n: int, exponent: np.ndarray) -> np.ndarray:
    """Table index of the root of unity ``exp(-2*pi*i*exponent/n)`` (forward sign convention).

    Args:
        n: transform length, a power of two dividing 1024.
        exponent: integer array (any shape) of exponents; reduced mod n exactly.

    Returns:
        int64 array of the same shape: m in [0, 1024) with the root equal to cos(2 pi m/1024) -
        i sin(2 pi m/1024).
    """
    exponent = np.asarray(exponent, dtype=np.int64)
    return (exponent % n) * (N_MAX // n)


# Verify the default table when the module is imported (the paper's "verified bit-exactly").
twiddle_table(DEFAULT_TWIDDLE_BITS)
