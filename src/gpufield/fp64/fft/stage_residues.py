"""Symmetric residues of the fused stage's row integers, exact and without rounding or conversion
instructions: one modulus from one float64 reduction (:func:`_sym_res_rn`), two odd moduli from one float64
reduction mod their product plus a float32 rounding each (:func:`_pair_res`), p = 256 from the low byte
(:func:`_low_word`). The schedule that picks one per modulus is
:func:`gpufield.fp64.kernels.fft_epilogue_consts.residue_schedule`, and :func:`_residue` follows it; the stage kernels of
:mod:`gpufield.fp64.fft.gemm_fused_epi` (Triton) and :mod:`gpufield.fp64.fft.gemm_fused_gluon` (Gluon) call
these helpers, and tests/fp64/test_fft_fused_epi.py checks them against Python's exact residues on every
half-integer boundary.

Inputs: v = hi 2^29 + lo (|v| < 2^60, 0 <= lo < 2^29) as hf = float64(hi) and lfm = float64(lo) + 1.5 2^52
(:func:`gpufield.fp64.fft.gemm_fused_epi._row_split`); any shape and layout.
"""

from __future__ import annotations

import triton
import triton.language as tl

from gpufield.fp64.kernels.fft_epilogue import _f64

MAGIC = tl.constexpr(6755399441055744.0)
"""1.5 * 2^52: adding it to a float64 |t| < 2^51 rounds t to the nearest integer (ties to even), which
then sits in the low 32 bits of the sum's bit pattern as a two's complement int32."""


@triton.jit
def _sym_res_rn(hf, lfm, invp, c29, PI: tl.constexpr, ASM: tl.constexpr = False):
    """Symmetric residue (int32) mod p = ``PI`` of v = hi 2^29 + lo from hf = float(hi) and
    lfm = float(lo) + 1.5 2^52, with 3 FP64 instructions and one integer multiply-add and no rounding or
    conversion instruction (FRND/F2I issue at a quarter of the rate):

    1. wm = hf (2^29 mod p) + lfm = w + 1.5 2^52 with w = hi (2^29 mod p) + lo, exact (|w| < 2^40: every
       integer of [2^52, 2^53) is a float64), so wm's low word is w mod 2^32; w = wm - 1.5 2^52, exact;
    2. t = w fl(1/p) + 1.5 2^52 holds q = rn(w / p) in its low word: |w fl(1/p) - w / p| <= 2^-18, and
       rounding the product before the addition (when no FMA is formed) adds at most 2^-20, while for odd
       p w / p is at least 1 / (2 p) >= 2^-9 from any half-integer, so the rounding is the exact one; for
       p = 256 fl(1/p) is exact and ties round to even;
    3. r = (w - q p) mod 2^32 from the two low words (one IMAD); |r| <= p / 2, so it is exact: for odd p
       already the symmetric residue in [-(p - 1) / 2, (p - 1) / 2];
    4. even p: a tie gave r = +p / 2, mapped to -p / 2 (range [-p/2, p/2 - 1]).

    ``ASM`` (compiled for CUDA): step 3 as one PTX ``mad.lo.s32`` (the same bits), which LLVM cannot
    narrow to 8-bit arithmetic before the int8 conversion (that costs ~18 byte-shuffle instructions per
    modulus and thread).

    Same values as :func:`gpufield.fp64.fft.gemm_triton._sym_res`; tests/fp64/test_fft_fused_epi.py checks
    it against Python's exact residue at every half-integer boundary of every INT8 modulus."""
    wm = hf * c29 + lfm
    t = (wm - MAGIC) * invp + MAGIC
    w_lo = wm.to(tl.int64, bitcast=True).to(tl.int32)
    q_lo = t.to(tl.int64, bitcast=True).to(tl.int32)
    if ASM:
        r = tl.inline_asm_elementwise("mad.lo.s32 $0, $1, $2, $3;", "=r,r,r,r", [q_lo, q_lo * 0 - PI, w_lo],
                                      dtype=tl.int32, is_pure=True, pack=1)
    else:
        r = w_lo - q_lo * PI
    if PI % 2 == 0:
        r = tl.where(r >= PI // 2, r - PI, r)
    return r


F32_MAGIC = tl.constexpr(12582912.0)
"""1.5 * 2^23: adding it to a float32 |t| < 2^22 rounds t to the nearest integer q, and the sum's bit
pattern is then 0x4B400000 + q."""
F32_MAGIC_BITS = tl.constexpr(0x4B400000)
"""The bit pattern of :data:`F32_MAGIC`; its low byte is 0."""


@triton.jit
def _sym_lo(r, rf, PI: tl.constexpr, ASM: tl.constexpr = False):
    """int32 whose LOW BYTE is the symmetric residue of r mod p = ``PI`` (odd), from r (int32, |r| < 2^15) and
    rf = float32(r): t = rf fl32(1/p) + 1.5 2^23 holds q = rn(r / p) (|rf fl32(1/p) - r / p| <= 2^-15, rounding
    the product first adds at most 2^-16, and r / p lies at least 1 / (2 p) > 2^-9 from a half-integer), and
    r - p bits(t) = (r - q p) - p 0x4B400000, whose low byte is that of r - q p because 0x4B400000 = 0 mod 256.
    Two instructions (FFMA, IMAD) with ``ASM``; the caller's int8 conversion keeps the low byte."""
    t = tl.fma(rf, 1.0 / PI, F32_MAGIC)
    qb = t.to(tl.int32, bitcast=True)
    if ASM:
        return tl.inline_asm_elementwise("mad.lo.s32 $0, $1, $2, $3;", "=r,r,r,r", [qb, qb * 0 - PI, r],
                                         dtype=tl.int32, is_pure=True, pack=1)
    else:  # the exact residue (no int32 wrap-around; one more instruction)
        return r - (qb - F32_MAGIC_BITS) * PI


@triton.jit
def _pair_res(hf, lfm, invp, c29, PA: tl.constexpr, PB: tl.constexpr, ASM: tl.constexpr = False):
    """Residues mod two odd moduli PA and PB (P = PA PB < 2^16) from one float64 reduction: r = the symmetric
    residue of v mod P (:func:`_sym_res_rn` with P's constants ``invp`` = fl(1/P), ``c29`` = 2^29 mod P: exact
    because |w| < 2^31 P + 2^29 < 2^47 and w / P lies at least 1 / (2 P) >= 2^-17 from a half-integer, against
    an error below 2^-20), then :func:`_sym_lo` per modulus (r mod PA = v mod PA). Returns two int32 whose low
    bytes are the residues; 3 FP64 + 7 other instructions for two moduli instead of 6 FP64 + 2
    (:func:`gpufield.fp64.kernels.fft_epilogue_consts.residue_schedule`)."""
    r = _sym_res_rn(hf, lfm, invp, c29, PA * PB, ASM)
    rf = (r + F32_MAGIC_BITS).to(tl.float32, bitcast=True) - F32_MAGIC  # float32(r), exact (|r| < 2^15)
    return _sym_lo(r, rf, PA, ASM), _sym_lo(r, rf, PB, ASM)


@triton.jit
def _low_word(lfm):
    """int32 whose low byte is the symmetric residue mod 256 of v = hi 2^29 + lo: the low word of lfm = lo +
    1.5 2^52 is lo (0 <= lo < 2^29), and 2^29 = 0 mod 256."""
    return lfm.to(tl.int64, bitcast=True).to(tl.int32)


@triton.jit
def _residue(hf, lfm, FB, PM: tl.constexpr, RK: tl.constexpr, i: tl.constexpr, ASM: tl.constexpr, nxt):
    """Modulus i's residue of the row integers as :func:`gpufield.fp64.kernels.fft_epilogue_consts.residue_schedule`
    says (``RK[i]``): the low byte, a pair's first (which also computes the next modulus's), a pair's second
    (``nxt``, from the call before) or one float64 reduction. ``FB``: the schedule's float64 constants (bit
    patterns). Returns (residue, ``nxt`` for the next call); int32 whose low byte is the residue (odd moduli
    of a pair) or the symmetric residue itself."""
    if RK[i] == 1:  # PAIR_FIRST: this and the next modulus from one reduction
        at, nxt = _pair_res(hf, lfm, _f64(FB[2 * i]), _f64(FB[2 * i + 1]), PM[i], PM[i + 1], ASM)
    elif RK[i] == 2:
        at = nxt
    elif RK[i] == 3:
        at = _low_word(lfm)
    else:
        at = _sym_res_rn(hf, lfm, _f64(FB[2 * i]), _f64(FB[2 * i + 1]), PM[i], ASM)
    return at, nxt
