"""The fused stage's CRT fold and final rounding on the FP64 pipe (exact), instead of 32-bit integer limbs.

Why: Nsight Compute on the H200 (runs 30 and 35) shows the Gluon stage kernel throttled by its math pipes
(``math_pipe_throttle`` the largest stall with ``not_selected``), and the integer fold is 11 multiply-adds
per modulus on the one FMA-heavy pipe (22 cycles of a 2-cycle pipe per 12 issued instructions) while the
FP64 pipe, as fast as the integer one on Hopper, sat at 12-22 %. Here a modulus costs the Barrett
reduction (3 integer instructions), one move, one DADD, three DFMA and one integer multiply-add for the
quotient (session 10; a DFMA until then: with the FP64 pipe the busy one, run 47, the quotient went back to
the integer pipe); the lift and rounding ~40 instructions instead of ~120. Static sm_90 count of the Gluon
stage kernel (N = 16, 128 registers): 391 SASS per real output against 500 (run 36, same output digests:
N = 16 stage 0.88-1.01 ms against 1.03-1.13 ms; FP64 pipe 45 % busy, ALU and FMA-heavy 25 % each, were 22,
48, 49); with the integer quotient 1028 instead of 1164 FP64 instructions per thread (run 49: N = 16
0.785-0.797 against 0.794-0.812 ms, N = 32 1.971-1.973 against 1.985-2.007 ms).

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
3. the quotient in 32-bit fixed point on the integer pipe (session 10: the FP64 pipe limits the modulus
   loop, H200 run 47): Q = 2^15 + sum_i d_i f_i with f_i = round(2^16 q_i^s / p_i) (|f_i| <= 2^15; one IMAD
   per modulus on c'_i, the -k_i f_i folded into the start value), q = Q >> 16 = floor(Y' / M + 1/2) because
   the truncation error is at most sum_i |d_i| 2^-17 < 2^-5, so q is exact for every |Y| < M (1/2 - 2^-5)
   (:data:`QUOT_RANGE`); a stage guarantees |Y| <= M / 4 (the plan's moduli count). T_l = S_l - q M_l
   (balanced digits of M, exact: |T_l| < 2^53 units), so Y = T_0 + T_1 + T_2 exactly;
4. RN(T_0 + T_1 + T_2) by Boldo and Melquiond's correctly rounded sum of three numbers (IEEE Trans.
   Computers 57(4), 2008, the variation for any three floating-point numbers): two TwoSums, the error
   terms added with rounding to odd (emulated from a TwoSum and the last bit of its sum), one final
   addition; every value is an integer, so nothing underflows;
5. the scaling by 2^-shift in two power-of-two factors, as :func:`gpufield.fp64.fft.epilogue.ldexp_exact`
   (subnormal results round once, like ``math.ldexp`` of the correctly rounded Y).

Shape legend: R moduli; D = 3 digits; accumulators are tuples (S_0, S_1, S_2, Q): three float64 tensors and
one int32 tensor of any shape and layout (also Gluon layouts: constants are made as ``x * 0 + v``).
"""

from __future__ import annotations

import functools
import math
import struct

import triton
import triton.language as tl

from gpufield.errors import InputError
from gpufield.fp64.fft.epilogue import EpilogueTables
from gpufield.fp64.kernels.fft_epilogue import _f64, _mod

DIGIT_BITS = 42
"""Width of the balanced digits of C_i^s and M: |d| * 128 * 16 moduli stays below 2^53."""
N_DIGITS = 3
QUOT_BITS = 16
"""Fraction bits of the fixed-point quotient fractions f_i (step 3 of the module docstring)."""
QUOT_RANGE = 0.5 - 2.0**-5
"""The fold is exact for |Y| < QUOT_RANGE * M (checked per moduli set by :func:`f64_constants`)."""
QUOT_SHIFT = tl.constexpr(QUOT_BITS)
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
        ``FD`` [R * 3] scaled digits d_il 2^(42 l) (row-major), ``FQ`` [R + 1] the quotient fractions
        f_i = round(2^16 q_i^s / p_i) and last the quotient's start value 2^15 - sum_i k_i f_i (Python ints,
        constexprs of both kernels), ``FK`` [R] -(2^52 + floor(p_i / 2)), ``FM`` [3] -M_l 2^(42 l).

    Raises:
        InputError: a partial sum or lift term of this moduli set could reach 2^53 (not exact in float64), the
            quotient could leave int32, or its truncation error could reach 2^-5.
    """
    from gpufield.fp64.ozaki.moduli import moduli_table

    if variant not in ("crt", "kulisch"):
        raise InputError(f"the FP64 fold runs variants 'crt' and 'kulisch', got {variant!r}")
    t = moduli_table(tab.kind, tab.num_moduli)
    F = QUOT_BITS
    M, w = tab.M, DIGIT_BITS
    ks = [p // 2 for p in tab.moduli]
    digits, fracs = [], []
    for C, q, p in zip(t.crt_C, t.crt_q, tab.moduli, strict=True):
        if 2 * C > M:  # symmetric constant: C - M = (M / p)(q - p)
            C, q = C - M, q - p
        digits.append(_balanced(C, N_DIGITS, w))
        fracs.append((q * (1 << F) + p // 2) // p)
    m_dig = _balanced(M, N_DIGITS, w)
    s_bound = [sum(k * abs(d[j]) for k, d in zip(ks, digits, strict=True)) for j in range(N_DIGITS)]
    start = (1 << (F - 1)) - sum(k * f for k, f in zip(ks, fracs, strict=True))
    q_hi = start + sum(max(0, (p - 1) * f) for p, f in zip(tab.moduli, fracs, strict=True))
    q_lo = start + sum(min(0, (p - 1) * f) for p, f in zip(tab.moduli, fracs, strict=True))
    q_max = (max(abs(q_hi), abs(q_lo)) >> F) + 1
    err = sum(max(k, p - 1 - k) for k, p in zip(ks, tab.moduli, strict=True)) / 2.0 ** (F + 1)
    if (max(q_hi, -q_lo) >= 1 << 31 or err >= 0.5 - QUOT_RANGE
            or any(s + q_max * abs(m) >= 1 << 53 for s, m in zip(s_bound, m_dig, strict=True))):
        raise InputError(f"{tab.num_moduli} {tab.kind} moduli: the FP64 fold would not be exact")
    return dict(
        FD=tuple(_bits(math.ldexp(float(d[j]), w * j)) for d in digits for j in range(N_DIGITS)),
        FQ=tuple(fracs) + (start,),
        FK=tuple(_bits(-float((1 << 52) + k)) for k in ks),
        FM=tuple(_bits(-math.ldexp(float(m), w * j)) for j, m in enumerate(m_dig)),
    )


@triton.jit
def _init_f64(x, Q0: tl.constexpr):
    """Accumulators (S_0, S_1, S_2, Q) shaped and laid out like the int32 tensor ``x``: zero sums, Q = ``Q0``
    (the quotient's start value, ``FQ[R]`` of :func:`f64_constants`)."""
    z = (x * 0).to(tl.float64)  # +0.0 (a -0.0 start could leave Y = 0 as -0.0)
    return z, z, z, x * 0 + Q0


@triton.jit
def _fold_f64(a, x, i: tl.constexpr, PM: tl.constexpr, BM: tl.constexpr, BB: tl.constexpr, BSH: tl.constexpr,
              FD, FQ: tl.constexpr, FK, ASM: tl.constexpr = False):
    """Modulus i's int32 products x (any shape; congruent mod p_i to the output's integer) folded into the
    accumulators ``a`` = (S_0, S_1, S_2, Q) (steps 1-3 of the module docstring). ``ASM`` (compiled for CUDA):
    the quotient's multiply-add as one PTX ``mad.lo.s32`` (the same bits): LLVM otherwise reassociates the
    R-term sum into a tree, which keeps every modulus's residue live (215 spill instructions at N = 16)."""
    c = _mod(x, BB[i], BM[i], PM[i], BSH)  # [0, p_i)
    w = c.to(tl.uint32, bitcast=True).to(tl.int64) | EXP_BIAS_2_52  # zero-extended: one move for the high word
    d = w.to(tl.float64, bitcast=True) + _f64(FK[i])  # 2^52 + c - (2^52 + k_i) = c - k_i, exact
    s0 = tl.fma(d, _f64(FD[3 * i]), a[0])
    s1 = tl.fma(d, _f64(FD[3 * i + 1]), a[1])
    s2 = tl.fma(d, _f64(FD[3 * i + 2]), a[2])
    if ASM:  # the quotient on the integer pipe (one IMAD)
        q = tl.inline_asm_elementwise("mad.lo.s32 $0, $1, $2, $3;", "=r,r,r,r", [c, c * 0 + FQ[i], a[3]],
                                      dtype=tl.int32, is_pure=True, pack=1)
    else:
        q = a[3] + c * FQ[i]
    return s0, s1, s2, q


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
    q = (a[3] >> QUOT_SHIFT).to(tl.float64)  # floor(Y' / M + 1/2), exact (step 3)
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
