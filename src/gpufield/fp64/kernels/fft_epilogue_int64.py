"""Triton kernel (int64 lanes): the per-output epilogue of an emulated DFT-GEMM stage.

The Triton epilogue of the ``"garner"`` variant (``EmulatedFftPlan(variant="garner", epilogue="triton")``:
the only variant this kernel alone runs) and, for ``"crt"`` / ``"kulisch"``, the A/B alternative of the
32-bit kernel :mod:`.fft_epilogue` (``KernelConfig(epilogue="int64")``; same bits).

Per complex output (fp64.md 1.6, 2.4; Part 3's "per-output integer epilogue"): read the r x 3 raw
3M products (int32), then in registers

1. modular reduction + residue-domain Karatsuba combine: c_re = T1 - T2, c_im = T3 - T1 - T2 mod p
   (symmetric), as int32 [BLOCK, RP] tiles (RP = r padded to a power of two), reduced with an FP32
   reciprocal and one correction step each way (no integer division);
2. exact reconstruction into 7 signed 32-bit limbs (int64 lanes), by one of three variants:
   ``VARIANT == 0`` Garner (balanced mixed radix, O(r^2) modular ops, Horner into limbs);
   ``VARIANT == 1`` CRT in fixed point: limb sums sum_i c_i C_{i,j} and the 40-bit quotient
   fraction sum_i c_i q_i/p_i on the integer pipe, two-sided lift S - q M;
   ``VARIANT == 2`` Kulisch split: the bulk [BLOCK, RP] @ [RP, CP] (9-bit limbs of C_i and of the
   36-bit fraction) as one FP16-in/FP32-accumulate ``tl.dot`` on the tensor cores (exact: every
   partial sum < 2^24), the remainder (placing 9-bit columns into 32-bit limbs, carries, lift) on
   the integer pipe;
3. carry normalization, sign/magnitude, a 62-bit round-to-odd window with sticky bit, one int64 ->
   float64 rounding, exact power-of-two scaling by 2^-shift (two factors; subnormal results round
   like ``math.ldexp``); store re and im interleaved (complex128).

Bit-identical to :func:`gpufield.fp64.fft.epilogue.epilogue_torch` (tests/fp64/test_fft_kernels.py
runs both; on CPU through ``TRITON_INTERPRET=1``, which :mod:`gpufield.fp64.kernels` sets when no
CUDA device is present).

Shape legend: R moduli (r), O complex outputs (n_out), RP = R padded, CP = bulk columns padded, NL = 7 limbs.
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from gpufield.errors import InputError
from gpufield.fp64.crt_tables import (
    BULK_FRAC_BITS,
    BULK_LIMB,
    FRAC_BITS,
    VARIANTS,
    EpilogueTables,
)

NL = 7
"""Limbs held per output in the kernel (enough for 20 INT8 or FP8 moduli)."""

COMPILED: dict = {}
"""(moduli kind, r, variant) -> the last launched compiled kernel (its ``asm`` holds the PTX), for
reading the generated code (``COMPILED[key].asm["ptx"]``) after a launch."""


@triton.jit
def _pow2(e):
    return ((e + 1023) << 52).to(tl.float64, bitcast=True)


@triton.jit
def _symmod(x, p, invp):
    """Symmetric x mod p for int32 |x| < 2^26 without integer division: q = floor(x * fl(1/p)) in
    FP32 is off by at most one (|x/p| * 2^-23 < 1/2 for p >= 173), fixed by one step each way."""
    q = tl.floor(x.to(tl.float32) * invp).to(tl.int32)
    r = x - q * p
    r = tl.where(r < 0, r + p, r)
    r = tl.where(r >= p, r - p, r)
    return tl.where(r >= (p + 1) // 2, r - p, r)


@triton.jit
def _norm(x0, x1, x2, x3, x4, x5, x6):
    x1 += x0 >> 32
    x0 = x0 & 0xFFFFFFFF
    x2 += x1 >> 32
    x1 = x1 & 0xFFFFFFFF
    x3 += x2 >> 32
    x2 = x2 & 0xFFFFFFFF
    x4 += x3 >> 32
    x3 = x3 & 0xFFFFFFFF
    x5 += x4 >> 32
    x4 = x4 & 0xFFFFFFFF
    x6 += x5 >> 32
    x5 = x5 & 0xFFFFFFFF
    return x0, x1, x2, x3, x4, x5, x6


@triton.jit
def _col(t, cols, j):
    return tl.sum(tl.where(cols[None, :] == j, t, 0), axis=1)


@triton.jit
def _bitlen(u, j: tl.constexpr):
    ex = ((u.to(tl.float64).to(tl.int64, bitcast=True) >> 52) & 0x7FF) - 1022
    return tl.where(u > 0, ex + 32 * j, 0)


@triton.jit
def _take(u, j: tl.constexpr, sh, K, sticky):
    pos = 32 * j - sh
    left = u << tl.minimum(tl.maximum(pos, 0), 62)
    rs = tl.minimum(tl.maximum(-pos, 0), 63)
    right = u >> rs
    K += tl.where(pos >= 0, left, right)
    sticky = sticky | ((pos < 0) & ((right << rs) != u))
    return K, sticky


@triton.jit
def _to_float(x0, x1, x2, x3, x4, x5, x6, shift):
    neg = x6 < 0
    x0 = tl.where(neg, -x0, x0)
    x1 = tl.where(neg, -x1, x1)
    x2 = tl.where(neg, -x2, x2)
    x3 = tl.where(neg, -x3, x3)
    x4 = tl.where(neg, -x4, x4)
    x5 = tl.where(neg, -x5, x5)
    x6 = tl.where(neg, -x6, x6)
    x0, x1, x2, x3, x4, x5, x6 = _norm(x0, x1, x2, x3, x4, x5, x6)
    bl = tl.maximum(tl.maximum(tl.maximum(_bitlen(x0, 0), _bitlen(x1, 1)), tl.maximum(_bitlen(x2, 2), _bitlen(x3, 3))),
                    tl.maximum(tl.maximum(_bitlen(x4, 4), _bitlen(x5, 5)), _bitlen(x6, 6)))
    sh = tl.maximum(bl - 62, 0)
    K = tl.zeros_like(x0)
    sticky = x0 != x0
    K, sticky = _take(x0, 0, sh, K, sticky)
    K, sticky = _take(x1, 1, sh, K, sticky)
    K, sticky = _take(x2, 2, sh, K, sticky)
    K, sticky = _take(x3, 3, sh, K, sticky)
    K, sticky = _take(x4, 4, sh, K, sticky)
    K, sticky = _take(x5, 5, sh, K, sticky)
    K, sticky = _take(x6, 6, sh, K, sticky)
    K = K | sticky.to(tl.int64)
    e = sh - shift
    e1 = tl.minimum(tl.maximum(e, -1000), 1000)
    e2 = tl.minimum(tl.maximum(e - e1, -1000), 1000)
    f = K.to(tl.float64) * _pow2(e1)
    f = f * _pow2(e2)
    return tl.where(neg, f * -1.0, f)  # not -f: Triton negates as 0 - f, which loses the sign of a zero


@triton.jit
def _reconstruct(c, p, invp, cols, p_ptr, C_ptr, M_ptr, frac_ptr, inv_ptr, bulk_ptr,
                 R: tl.constexpr, RP: tl.constexpr, CP: tl.constexpr, NB: tl.constexpr,
                 VARIANT: tl.constexpr, FRAC: tl.constexpr, BFRAC: tl.constexpr, BLIMB: tl.constexpr):
    if VARIANT == 0:  # Garner, balanced digits
        t = c  # int32 digits; (t - v) * inv < 2^11 * 2^11 stays in the fast-mod range
        for j in tl.static_range(R - 1):
            v = _col(t, cols, j)
            invj = tl.load(inv_ptr + j * RP + cols).to(tl.int32)
            upd = _symmod((t - v[:, None]) * invj[None, :], p[None, :], invp[None, :])
            t = tl.where(cols[None, :] > j, upd, t)
        t = t.to(tl.int64)
        x0 = _col(t, cols, R - 1)
        x1 = tl.zeros_like(x0)
        x2 = tl.zeros_like(x0)
        x3 = tl.zeros_like(x0)
        x4 = tl.zeros_like(x0)
        x5 = tl.zeros_like(x0)
        x6 = tl.zeros_like(x0)
        for jj in tl.static_range(R - 1):
            pj = tl.load(p_ptr + (R - 2 - jj))
            x0, x1, x2, x3, x4, x5, x6 = _norm(x0 * pj + _col(t, cols, R - 2 - jj), x1 * pj, x2 * pj,
                                               x3 * pj, x4 * pj, x5 * pj, x6 * pj)
    else:
        c = c.to(tl.int64)
        if VARIANT == 1:  # CRT limb sums on the integer pipe
            x0 = tl.sum(c * tl.load(C_ptr + 0 * RP + cols)[None, :], axis=1)
            x1 = tl.sum(c * tl.load(C_ptr + 1 * RP + cols)[None, :], axis=1)
            x2 = tl.sum(c * tl.load(C_ptr + 2 * RP + cols)[None, :], axis=1)
            x3 = tl.sum(c * tl.load(C_ptr + 3 * RP + cols)[None, :], axis=1)
            x4 = tl.sum(c * tl.load(C_ptr + 4 * RP + cols)[None, :], axis=1)
            x5 = tl.sum(c * tl.load(C_ptr + 5 * RP + cols)[None, :], axis=1)
            x6 = tl.sum(c * tl.load(C_ptr + 6 * RP + cols)[None, :], axis=1)
            Q = tl.sum(c * tl.load(frac_ptr + cols)[None, :], axis=1)
            q = (Q + (1 << (FRAC - 1))) >> FRAC
        else:  # Kulisch: bulk on the tensor cores, remainder on the integer pipe
            ccols = tl.arange(0, CP)
            bulk = tl.load(bulk_ptr + cols[:, None] * CP + ccols[None, :])
            s = tl.dot(c.to(tl.float16), bulk, out_dtype=tl.float32).to(tl.int64)
            bit = ccols * BLIMB
            limb = bit // 32
            sv = s << (bit % 32)[None, :]
            isb = (ccols < NB)[None, :]
            x0 = tl.sum(tl.where(isb & (limb == 0)[None, :], sv, 0), axis=1)
            x1 = tl.sum(tl.where(isb & (limb == 1)[None, :], sv, 0), axis=1)
            x2 = tl.sum(tl.where(isb & (limb == 2)[None, :], sv, 0), axis=1)
            x3 = tl.sum(tl.where(isb & (limb == 3)[None, :], sv, 0), axis=1)
            x4 = tl.sum(tl.where(isb & (limb == 4)[None, :], sv, 0), axis=1)
            x5 = tl.sum(tl.where(isb & (limb == 5)[None, :], sv, 0), axis=1)
            x6 = tl.sum(tl.where(isb & (limb == 6)[None, :], sv, 0), axis=1)
            fsh = tl.maximum(ccols - NB, 0) * BLIMB
            isf = ((ccols >= NB) & (ccols < NB + BFRAC // BLIMB))[None, :]
            Q = tl.sum(tl.where(isf, s << fsh[None, :], 0), axis=1)
            q = (Q + (1 << (BFRAC - 1))) >> BFRAC
        x0 -= q * tl.load(M_ptr + 0)
        x1 -= q * tl.load(M_ptr + 1)
        x2 -= q * tl.load(M_ptr + 2)
        x3 -= q * tl.load(M_ptr + 3)
        x4 -= q * tl.load(M_ptr + 4)
        x5 -= q * tl.load(M_ptr + 5)
        x6 -= q * tl.load(M_ptr + 6)
        x0, x1, x2, x3, x4, x5, x6 = _norm(x0, x1, x2, x3, x4, x5, x6)
    return x0, x1, x2, x3, x4, x5, x6


@triton.jit
def _fft_epilogue_kernel(
    T_ptr, n_out, K, S_c, S_q, S_s, S_m, shift_ptr, out_ptr, p_ptr, invp_ptr, C_ptr, M_ptr, frac_ptr, inv_ptr, bulk_ptr,
    R: tl.constexpr, RP: tl.constexpr, CP: tl.constexpr, NB: tl.constexpr, VARIANT: tl.constexpr,
    FRAC: tl.constexpr, BFRAC: tl.constexpr, BLIMB: tl.constexpr, BLOCK: tl.constexpr,
    GROUP: tl.constexpr,
):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    omask = offs < n_out
    cols = tl.arange(0, RP)
    p = tl.load(p_ptr + cols).to(tl.int32)
    invp = tl.load(invp_ptr + cols)
    m2 = omask[:, None] & (cols < R)[None, :]
    # element (modulus l, component c, row m, column k) at c*S_c + (l//GROUP)*S_q + (l%GROUP)*S_s + m*S_m + k
    o32 = offs.to(tl.int32)  # a chunk holds < 2^31 outputs: 32-bit division
    m = o32 // K
    q = cols // GROUP
    base = (q.to(tl.int64) * S_q + (cols - q * GROUP).to(tl.int64) * S_s)[None, :] + \
        (m.to(tl.int64) * S_m + (o32 - m * K))[:, None]
    t1 = tl.load(T_ptr + base, mask=m2, other=0)
    t2 = tl.load(T_ptr + base + S_c, mask=m2, other=0)
    t3 = tl.load(T_ptr + (base + S_c) + S_c, mask=m2, other=0)
    shift = tl.load(shift_ptr + offs, mask=omask, other=0)
    c_re = _symmod(t1 - t2, p[None, :], invp[None, :])
    x0, x1, x2, x3, x4, x5, x6 = _reconstruct(c_re, p, invp, cols, p_ptr, C_ptr, M_ptr, frac_ptr, inv_ptr, bulk_ptr,
                                              R, RP, CP, NB, VARIANT, FRAC, BFRAC, BLIMB)
    tl.store(out_ptr + 2 * offs, _to_float(x0, x1, x2, x3, x4, x5, x6, shift), mask=omask)
    c_im = _symmod(t3 - t1 - t2, p[None, :], invp[None, :])
    x0, x1, x2, x3, x4, x5, x6 = _reconstruct(c_im, p, invp, cols, p_ptr, C_ptr, M_ptr, frac_ptr, inv_ptr, bulk_ptr,
                                              R, RP, CP, NB, VARIANT, FRAC, BFRAC, BLIMB)
    tl.store(out_ptr + 2 * offs + 1, _to_float(x0, x1, x2, x3, x4, x5, x6, shift), mask=omask)


def _pow2_ceil(n: int, lo: int = 16) -> int:
    return max(lo, 1 << (n - 1).bit_length())


@functools.cache
def _padded_tables(tab: EpilogueTables, device: str) -> dict:
    r = tab.num_moduli
    RP = _pow2_ceil(r)
    nb = tab.n_bulk_limbs
    CP = _pow2_ceil(nb + BULK_FRAC_BITS // BULK_LIMB)
    if tab.n_limbs > NL:
        raise InputError(f"{r} {tab.kind} moduli need {tab.n_limbs} limbs > {NL} held by the kernel")
    dev = torch.device(device)
    p = torch.ones(RP, dtype=torch.int64)
    p[:r] = torch.tensor(tab.moduli)
    C = torch.zeros((NL, RP), dtype=torch.int64)
    C[: tab.n_limbs, :r] = torch.tensor(tab.C_limbs).T
    M = torch.zeros(NL, dtype=torch.int64)
    M[: tab.n_limbs] = torch.tensor(tab.M_limbs)
    frac = torch.zeros(RP, dtype=torch.int64)
    frac[:r] = torch.tensor(tab.frac)
    inv = torch.zeros((RP, RP), dtype=torch.int64)
    inv[:r, :r] = torch.tensor(tab.garner_inv)
    bulk = torch.zeros((RP, CP), dtype=torch.float16)
    bulk[:r, : len(tab.bulk[0])] = torch.tensor(tab.bulk, dtype=torch.float16)
    invp = (1.0 / p.to(torch.float64)).to(torch.float32)
    t = dict(p=p, invp=invp, C=C, M=M, frac=frac, inv=inv, bulk=bulk)
    return {"RP": RP, "CP": CP, "NB": nb, **{k: v.to(dev) for k, v in t.items()}}


def plane_layout(T: torch.Tensor, grouped: tuple[int, int, int] | None):
    """Element strides of the int32 product planes, for both epilogue kernels.

    Args:
        T: int32 planes, ``[r, 3, O]`` (ungrouped) or ``[3, Q, R_rows, g*K]`` (grouped, see
            ``Int8Backend.modular_matmul_grouped``).
        grouped: ``(g, R_rows, K)`` or None.

    Returns:
        ``(n_out, K, g, (S_c, S_q, S_s, S_m))``: complex outputs, row length, moduli per group and the
        strides of component, modulus group, row and modulus slot.

    Raises:
        InputError: a chunk of 2^31 outputs or more (the kernels index with int32).
    """
    if grouped is None:
        n_out = T.shape[2]
        K, g = 1, 1  # rows of length 1: offs = m, k = 0
        strides = (n_out, 3 * n_out, 0, 1)
    else:
        g, rows, K = grouped
        n_out = rows * K
        strides = (T.shape[1] * rows * g * K, rows * g * K, K, g * K)
    if n_out >= 2**31:
        raise InputError(f"epilogue chunk of {n_out} outputs exceeds 2^31")
    return n_out, K, g, strides


def epilogue_triton(T_R3O: torch.Tensor, shift_O: torch.Tensor, tab: EpilogueTables, variant: str,
                    block: int | None = None, grouped: tuple[int, int, int] | None = None,
                    num_warps: int | None = None) -> torch.Tensor:
    """Fused stage epilogue (same contract as :func:`gpufield.fp64.fft.epilogue.epilogue_torch`).

    Args:
        T_R3O: int32 [r, 3, O] raw 3M products per modulus (contiguous); or, with ``grouped``, the
            grouped layout [3, Q, R_rows, g*K] of ``Int8Backend.modular_matmul_grouped`` outputs
            (moduli q*g..q*g+g-1 side by side in a row; O = R_rows * K).
        shift_O: int64 [O] exponent shifts.
        tab: epilogue tables of the moduli used.
        variant: ``"garner"``, ``"crt"`` or ``"kulisch"``.
        block: outputs per program (power of two >= 16); default on CUDA 32 with 2 warps (crt/kulisch)
            and 128 with 4 warps (garner), the fastest measured (docs/perf-notes.md), and on CPU (the
            Triton interpreter, which runs programs one after another) up to 2^14 so that numpy
            vectorizes over a few large programs.
        grouped: ``(g, R_rows, K)`` for the grouped layout; None for [r, 3, O].
        num_warps: warps per program (None: Triton's default, 4); a tuning knob only (every output is
            computed independently with exact integer arithmetic, so the bits do not depend on it).

    Returns:
        complex128 [O].

    Raises:
        InputError: unknown variant, or too many limbs.
    """
    if variant not in VARIANTS:
        raise InputError(f"reconstruction variant must be one of {VARIANTS}, got {variant!r}")
    T = T_R3O.to(torch.int32).contiguous()  # |T| <= 2^25 for every backend (fast FP32 mod needs < 2^26)
    n_out, K, g, (S_c, S_q, S_s, S_m) = plane_layout(T, grouped)
    tb = _padded_tables(tab, str(T.device))
    out = torch.empty(2 * n_out, dtype=torch.float64, device=T.device)
    if block is None:
        block = (128 if variant == "garner" else 32) if T.device.type == "cuda" else min(1 << 14, _pow2_ceil(n_out))
    grid = (triton.cdiv(n_out, block),)
    if num_warps is None and T.device.type == "cuda":  # the fastest measured launches (docs/perf-notes.md)
        num_warps = 4 if variant == "garner" else 2
    launch = {} if num_warps is None else {"num_warps": num_warps}
    COMPILED[(tab.kind, tab.num_moduli, variant)] = _fft_epilogue_kernel[grid](
        T, n_out, K, S_c, S_q, S_s, S_m, shift_O.to(torch.int64).contiguous(), out, tb["p"], tb["invp"], tb["C"],
        tb["M"], tb["frac"], tb["inv"], tb["bulk"], R=tab.num_moduli, RP=tb["RP"], CP=tb["CP"], NB=tb["NB"],
        VARIANT=VARIANTS.index(variant), FRAC=FRAC_BITS, BFRAC=BULK_FRAC_BITS, BLIMB=BULK_LIMB, BLOCK=block,
        GROUP=g, **launch,
    )
    return torch.view_as_complex(out.view(n_out, 2))
