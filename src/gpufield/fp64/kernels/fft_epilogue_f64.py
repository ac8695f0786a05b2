"""The fused stage's CRT fold and final rounding on the FP64 pipe (exact), instead of 32-bit integer limbs.

Why: the integer fold is 11 multiply-adds per modulus on the one FMA-heavy pipe, while the FP64 pipe (as fast
as the integer one on Hopper) has room. Here a modulus costs the Barrett reduction (3 integer instructions),
one move, one DADD and three DFMA (the quotient comes from the digit sums once per output); the lift and
rounding ~40 instructions instead of ~120. Profiles, static counts and stage times: docs/perf-notes.md.

The arithmetic (the integers are exactly those of :func:`gpufield.fp64.fft.epilogue.reconstruct_crt`, so
every output bit is the same as the 32-bit kernel's; tested bit for bit against it and the exact oracle):

1. c'_i = (x + k_i) mod p_i in [0, p_i) (k_i = floor(p_i / 2); Barrett with a bias B_i = k_i mod p_i, as the
   integer fold), so d_i = c'_i - k_i is x's symmetric residue; d_i as a float64 is the bit pattern 2^52 + c'_i
   (c'_i in the low word) plus the constant -(2^52 + k_i), exact;
2. the CRT constants are taken symmetric, C_i^s = C_i - M when C_i > M / 2 (then q_i^s = q_i - p_i), and
   split in balanced 42-bit digits d_il (|d_il| <= 2^41 + 1). Three FP64 sums S_l = sum_i d_i (d_il 2^(42 l))
   are exact: every partial sum stays below 2^53 units (checked per moduli set by :func:`f64_constants`).
   Y' changes by -M sum_{flipped} d_i against the integer path, which the quotient absorbs, so Y = Y' - q M
   is the same integer;
3. the quotient once per output from the digit sums: q = rint(fl(fl(S_0 + S_1) + S_2) fl(1 / M))
   by two DADD, one DFMA with 1.5 2^52 added (round to nearest integer) and one DADD. The sums' rounding
   and the product's are below 2^-51 sum_l |S_l| / M, under 2^-40 for the default 16 INT8 moduli
   (:func:`f64_constants` checks < 2^-5 per moduli set), so q = floor(Y' / M + 1/2) for every
   |Y| < M (1/2 - 2^-5) (:data:`QUOT_RANGE`); a stage guarantees |Y| <= M / 4 (the plan's moduli count).
   (The top digit sum S_2 alone would not do for fewer than 13 INT8 moduli: docs/perf-notes.md.)
   T_l = S_l - q M_l (balanced digits of M, exact: |T_l| < 2^53 units), so Y = T_0 + T_1 + T_2 exactly;
4. RN(T_0 + T_1 + T_2) by Boldo and Melquiond's correctly rounded sum of three numbers (IEEE Trans.
   Computers 57(4), 2008, the variation for any three floating-point numbers): two TwoSums, the error
   terms added with rounding to odd (emulated from a TwoSum and the last bit of its sum), one final
   addition; every value is an integer, so nothing underflows;
5. the scaling by 2^-shift in two power-of-two factors, as :func:`gpufield.fp64.fft.epilogue.ldexp_exact`
   (subnormal results round once, like ``math.ldexp`` of the correctly rounded Y).

Shape legend: R moduli; D = 3 digits; accumulators are tuples (S_0, S_1, S_2): three float64 tensors of any
shape and layout (also Gluon layouts: constants are made as ``x * 0 + v``).
"""

from __future__ import annotations

import functools
import math
import struct
from fractions import Fraction

import triton
import triton.language as tl

from gpufield.errors import InputError
from gpufield.fp64.crt_tables import EpilogueTables
from gpufield.fp64.kernels.fft_epilogue import _f64, _mod

DIGIT_BITS = 42
"""Width of the balanced digits of C_i^s and M: |d| * 128 * 16 moduli stays below 2^53."""
N_DIGITS = 3
QUOT_RANGE = 0.5 - 2.0**-5
"""The fold is exact for |Y| < QUOT_RANGE * M (checked per moduli set by :func:`f64_constants`)."""
MAGIC = tl.constexpr(6755399441055744.0)
"""1.5 * 2^52: t + MAGIC - MAGIC is t rounded to the nearest integer for |t| < 2^51."""
EXP_BIAS_2_52 = tl.constexpr(0x4330000000000000)
"""Bit pattern of 2^52: OR-ed with an int in [0, 2^32) gives the float64 2^52 + that int, exactly."""


def _bits(v: float) -> int:
    return struct.unpack("<q", struct.pack("<d", v))[0]


def _balanced(x: int, n: int, w: int) -> list[int]:
    """Digits d_0..d_{n-1} with x = sum d_l 2^(w l), d_l in [-2^(w-1), 2^(w-1)) for l < n - 1 (the last
    takes the rest)."""
    out = []
    for _ in range(n - 1):
        d = ((x + (1 << (w - 1))) % (1 << w)) - (1 << (w - 1))
        out.append(d)
        x = (x - d) >> w
    return out + [x]


@functools.cache
def f64_constants(tab: EpilogueTables, variant: str) -> dict:
    """Compile-time constants of the FP64 fold (float64 bit patterns as Python ints).

    Args:
        tab: the moduli set's epilogue tables.
        variant: ``"crt"`` or ``"kulisch"``: both share this fold (their fused kernels differ only in name).

    Returns:
        dict of kernel constants (constexprs of the Triton kernels, int64 arguments of the Gluon kernel):
        ``FD`` [R * 3] scaled digits d_il 2^(42 l) (row-major), ``FK`` [R] -(2^52 + floor(p_i / 2)), ``FM`` [4]
        -M_l 2^(42 l) and last fl(1 / M) (the quotient's factor, step 3).

    Raises:
        InputError: a partial sum or lift term of this moduli set could reach 2^53 (not exact in float64), or
            the quotient's error could reach 2^-5.
    """
    from gpufield.fp64.ozaki.moduli import moduli_table

    if variant not in ("crt", "kulisch"):
        raise InputError(f"the FP64 fold runs variants 'crt' and 'kulisch', got {variant!r}")
    t = moduli_table(tab.kind, tab.num_moduli)
    M, w = tab.M, DIGIT_BITS
    ks = [p // 2 for p in tab.moduli]
    digits = []
    for C in t.crt_C:
        if 2 * C > M:  # symmetric constant C - M
            C -= M
        digits.append(_balanced(C, N_DIGITS, w))
    m_dig = _balanced(M, N_DIGITS, w)
    s_bound = [sum(max(k, p - 1 - k) * abs(d[j]) for k, p, d in zip(ks, tab.moduli, digits, strict=True))
               for j in range(N_DIGITS)]
    y_max = sum(max(k, p - 1 - k) * abs(sum(d[j] << (w * j) for j in range(N_DIGITS)))
                for k, p, d in zip(ks, tab.moduli, digits, strict=True))
    q_max = y_max // M + 1
    # step 3: two additions and the product, each rounding at most 2^-53 of a value below sum_l |S_l|, and
    # fl(1 / M) (relative 2^-53): at most 2^-51 sum_l |S_l| / M
    err = 2.0**-51 * (sum(b << (w * j) for j, b in enumerate(s_bound)) / M)
    if (err >= 0.5 - QUOT_RANGE
            or any(s + q_max * abs(m) >= 1 << 53 for s, m in zip(s_bound, m_dig, strict=True))):
        raise InputError(f"{tab.num_moduli} {tab.kind} moduli: the FP64 fold would not be exact")
    return dict(
        FD=tuple(_bits(math.ldexp(float(d[j]), w * j)) for d in digits for j in range(N_DIGITS)),
        FK=tuple(_bits(-float((1 << 52) + k)) for k in ks),
        FM=tuple(_bits(-math.ldexp(float(m), w * j)) for j, m in enumerate(m_dig)) + (_bits(float(Fraction(1, M))),),
    )


@triton.jit
def _init_f64(x):
    """Accumulators (S_0, S_1, S_2) shaped and laid out like the int32 tensor ``x``: zero sums."""
    z = (x * 0).to(tl.float64)  # +0.0 (a -0.0 start could leave Y = 0 as -0.0)
    return z, z, z


@triton.jit
def _fold_f64(a, x, i: tl.constexpr, PM: tl.constexpr, BM: tl.constexpr, BB: tl.constexpr, BSH: tl.constexpr,
              FD, FK):
    """Modulus i's int32 products x (any shape; congruent mod p_i to the output's integer) folded into the
    accumulators ``a`` = (S_0, S_1, S_2) (steps 1-2 of the module docstring)."""
    c = _mod(x, BB[i], BM[i], PM[i], BSH)  # [0, p_i)
    w = c.to(tl.uint32, bitcast=True).to(tl.int64) | EXP_BIAS_2_52  # zero-extended: one move for the high word
    d = w.to(tl.float64, bitcast=True) + _f64(FK[i])  # 2^52 + c - (2^52 + k_i) = c - k_i, exact
    s0 = tl.fma(d, _f64(FD[3 * i]), a[0])
    s1 = tl.fma(d, _f64(FD[3 * i + 1]), a[1])
    s2 = tl.fma(d, _f64(FD[3 * i + 2]), a[2])
    return s0, s1, s2


@triton.jit
def _two_sum(a, b):
    """s = fl(a + b) and the exact error e = a + b - s (Knuth; six additions, no branch)."""
    s = a + b
    bv = s - a
    av = s - bv
    return s, (a - av) + (b - bv)


@triton.jit
def _finish_f64(a, shift, FM):
    """float64 of Y 2^-shift from the accumulators (steps 3-5); ``shift`` (int32) broadcasts."""
    q = tl.fma((a[0] + a[1]) + a[2], _f64(FM[3]), MAGIC) - MAGIC  # floor(Y' / M + 1/2), exact (step 3)
    t0 = tl.fma(q, _f64(FM[0]), a[0])
    t1 = tl.fma(q, _f64(FM[1]), a[1])
    t2 = tl.fma(q, _f64(FM[2]), a[2])
    uh, ul = _two_sum(t1, t0)
    th, tl_ = _two_sum(t2, uh)
    v, ve = _two_sum(tl_, ul)  # v = RN(tl + ul); round to odd: an inexact even v moves one ulp toward ve
    vb = v.to(tl.int64, bitcast=True)
    step = tl.where((ve > 0) == (v > 0), vb * 0 + 1, vb * 0 - 1)
    vb = tl.where((ve != 0) & ((vb & 1) == 0), vb + step, vb)
    z = th + vb.to(tl.float64, bitcast=True)
    e = -shift
    e1 = tl.minimum(tl.maximum(e, -1000), 1000)
    e2 = tl.minimum(tl.maximum(e - e1, -1000), 1000)
    z = z * ((e1 + 1023).to(tl.int64) << 52).to(tl.float64, bitcast=True)
    return z * ((e2 + 1023).to(tl.int64) << 52).to(tl.float64, bitcast=True)
