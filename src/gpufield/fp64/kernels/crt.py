"""Triton kernel: mod-p reduction + exact CRT (31-bit limbs) + symmetric lift + one rounding (fp64.md 1.6, 4.1).

Per output (i, j): reads the L raw products (int32/int64, congruent mod p_l), reduces each to the symmetric
range, accumulates the quotient estimate q = rint(sum r_l q_l/p_l) in float64 and J = 6 limb sums
s_j = sum_l r_l C_lj - q M_j in int64 (|s_j| < 2**46), propagates carries, takes sign and magnitude, and
rounds |X| * 2**-(s_i + t_j) to the nearest float64 (ties to even, subnormals exact) from the top 55 bits
and a sticky bit. Integer-only apart from the quotient estimate (the "Kulisch" CRT of Parts 2-3).
Bit-identical to ``gpufield.fp64.ozaki.crt.crt_limbs_torch``.

Shape legend: L moduli, M rows, N columns; J = 6 limbs (M <= 2**186).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from gpufield.errors import NumericsError
from gpufield.fp64.ozaki.moduli import LIMB_BITS, ModuliTable

J_MAX = 6
_MASK31 = (1 << LIMB_BITS) - 1


@triton.jit
def _pow2(e):
    return ((e + 1023) << 52).to(tl.float64, bitcast=True)


@triton.jit
def _norm6(s0, s1, s2, s3, s4, s5):
    v = s0
    t0 = v & 0x7FFFFFFF
    v = s1 + (v >> 31)
    t1 = v & 0x7FFFFFFF
    v = s2 + (v >> 31)
    t2 = v & 0x7FFFFFFF
    v = s3 + (v >> 31)
    t3 = v & 0x7FFFFFFF
    v = s4 + (v >> 31)
    t4 = v & 0x7FFFFFFF
    t5 = s5 + (v >> 31)
    return t0, t1, t2, t3, t4, t5


@triton.jit
def _bitlen(u, j: tl.constexpr):
    ex = ((u.to(tl.float64).to(tl.int64, bitcast=True) >> 52) & 0x7FF) - 1022  # bit length for u >= 1
    return tl.where(u > 0, ex + 31 * j, 0)


@triton.jit
def _take(u, j: tl.constexpr, pos, kept, sticky):
    sft = 31 * j - pos + 1
    left = (sft >= 0) & (sft < 62)
    kept += tl.where(left, u << tl.minimum(tl.maximum(sft, 0), 61), 0)
    right = (sft < 0) & (sft > -63)
    rs = tl.minimum(tl.maximum(-sft, 0), 62)
    kept += tl.where(right, u >> rs, 0)
    lost = u & ((tl.full(u.shape, 1, tl.int64) << rs) - 1)
    sticky = sticky | (right & (lost != 0)) | ((sft <= -63) & (u != 0))
    return kept, sticky


@triton.jit
def _rint(x):
    """Round half to even of |x| < 2**51 with float64 arithmetic (the 2**52 trick), as torch.round."""
    big = 4503599627370496.0  # 2**52
    ax = tl.abs(x)
    r = (ax + big) - big
    return tl.where(x < 0, -r, r).to(tl.int64)


@triton.jit
def _sym_residue(x, p, invp):
    """Symmetric residue of an int64 |x| < 2**62 without 64-bit division (float64 quotient + int32 rem)."""
    q = tl.floor(x.to(tl.float64) * invp).to(tl.int64)  # off by <= ~8
    r = ((x - q * p).to(tl.int32) % p.to(tl.int32)).to(tl.int64)
    r = tl.where(r < 0, r + p, r)
    return tl.where(r >= (p + 1) // 2, r - p, r)


@triton.jit
def _finish(a0, a1, a2, a3, a4, a5, qf, sh, mlimb_ptr, BLOCK: tl.constexpr):
    """X = sum - q M in limbs, sign/magnitude, and one correct rounding of X * 2**-sh."""
    q = _rint(qf)  # half to even, as torch.round in the reference
    a0 -= q * tl.load(mlimb_ptr + 0)
    a1 -= q * tl.load(mlimb_ptr + 1)
    a2 -= q * tl.load(mlimb_ptr + 2)
    a3 -= q * tl.load(mlimb_ptr + 3)
    a4 -= q * tl.load(mlimb_ptr + 4)
    a5 -= q * tl.load(mlimb_ptr + 5)
    t0, t1, t2, t3, t4, t5 = _norm6(a0, a1, a2, a3, a4, a5)
    neg = t5 < 0
    sg = tl.where(neg, -1, 1).to(tl.int64)
    u0, u1, u2, u3, u4, u5 = _norm6(a0 * sg, a1 * sg, a2 * sg, a3 * sg, a4 * sg, a5 * sg)
    nb = tl.maximum(tl.maximum(tl.maximum(_bitlen(u0, 0), _bitlen(u1, 1)), tl.maximum(_bitlen(u2, 2), _bitlen(u3, 3))),
                    tl.maximum(_bitlen(u4, 4), _bitlen(u5, 5)))
    pos = tl.maximum(tl.maximum(nb - 53, sh - 1074), 0)
    kept = tl.full((BLOCK,), 0, tl.int64)
    sticky = tl.full((BLOCK,), 0, tl.int1)
    kept, sticky = _take(u0, 0, pos, kept, sticky)
    kept, sticky = _take(u1, 1, pos, kept, sticky)
    kept, sticky = _take(u2, 2, pos, kept, sticky)
    kept, sticky = _take(u3, 3, pos, kept, sticky)
    kept, sticky = _take(u4, 4, pos, kept, sticky)
    kept, sticky = _take(u5, 5, pos, kept, sticky)
    guard = (kept & 1) == 1
    kept = kept >> 1
    up = guard & (sticky | ((kept & 1) == 1))
    kept = kept + up.to(tl.int64)
    e = pos - sh
    e1 = tl.where(e < -1022, e + 600, tl.minimum(e, 1023))
    e2 = tl.minimum(e - e1, 1023)
    mag = kept.to(tl.float64) * _pow2(e1)
    mag = mag * _pow2(e2)
    return tl.where(neg, -mag, mag)


@triton.jit
def _digit_combine(ptr, si_dig, coef, mask):
    d = tl.cast(si_dig, tl.int64)
    c0 = tl.load(ptr, mask=mask, other=0.0).to(tl.int64)  # exact integers < 2**24
    c1 = tl.load(ptr + d, mask=mask, other=0.0).to(tl.int64)
    c2 = tl.load(ptr + 2 * d, mask=mask, other=0.0).to(tl.int64)
    return tl.load(coef) * c0 + tl.load(coef + 1) * c1 + tl.load(coef + 2) * c2


@triton.jit
def _crt_kernel(
    res_ptr, res2_ptr, res3_ptr, si_grp, si_row, si_dig, coef_ptr, s_ptr, t_ptr, N, MN, mod_ptr, invp_ptr,
    qp_ptr, climb_ptr, mlimb_ptr, out_ptr, out2_ptr, L, COMPLEX: tl.constexpr,
    GROUP: tl.constexpr, DIGITS: tl.constexpr, BLOCK: tl.constexpr,
):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < MN
    i = offs // N
    j = offs - i * N
    sh = tl.load(s_ptr + i, mask=mask, other=0) + tl.load(t_ptr + j, mask=mask, other=0)
    # product of modulus l for output (i, j) at (l // GROUP)*si_grp + i*si_row + (l % GROUP)*N + j (int64)
    in_off = i * tl.cast(si_row, tl.int64) + j
    sgrp = tl.cast(si_grp, tl.int64)
    qf = tl.full((BLOCK,), 0.0, tl.float64)
    a0 = tl.full((BLOCK,), 0, tl.int64)
    a1 = tl.full((BLOCK,), 0, tl.int64)
    a2 = tl.full((BLOCK,), 0, tl.int64)
    a3 = tl.full((BLOCK,), 0, tl.int64)
    a4 = tl.full((BLOCK,), 0, tl.int64)
    a5 = tl.full((BLOCK,), 0, tl.int64)
    qg = tl.full((BLOCK,), 0.0, tl.float64)
    b0 = tl.full((BLOCK,), 0, tl.int64)
    b1 = tl.full((BLOCK,), 0, tl.int64)
    b2 = tl.full((BLOCK,), 0, tl.int64)
    b3 = tl.full((BLOCK,), 0, tl.int64)
    b4 = tl.full((BLOCK,), 0, tl.int64)
    b5 = tl.full((BLOCK,), 0, tl.int64)
    mi = 0  # runtime while-loop: one compiled kernel for every number of moduli (and interpretable)
    while mi < L:
        p = tl.load(mod_ptr + mi)
        invp = tl.load(invp_ptr + mi)
        qp = tl.load(qp_ptr + mi)
        c0 = tl.load(climb_ptr + mi * 6 + 0).to(tl.int64)  # int32 limbs: r * c is one widening multiply
        c1 = tl.load(climb_ptr + mi * 6 + 1).to(tl.int64)
        c2 = tl.load(climb_ptr + mi * 6 + 2).to(tl.int64)
        c3 = tl.load(climb_ptr + mi * 6 + 3).to(tl.int64)
        c4 = tl.load(climb_ptr + mi * 6 + 4).to(tl.int64)
        c5 = tl.load(climb_ptr + mi * 6 + 5).to(tl.int64)
        lo = (mi // GROUP) * sgrp + (mi % GROUP) * N + in_off
        if DIGITS:  # FP8: x = a*C0 + b*C1 + c*C2 from the 3 exact FP32 digit products
            x = _digit_combine(res_ptr + lo, si_dig, coef_ptr + mi * 3, mask)
        else:
            x = tl.load(res_ptr + lo, mask=mask, other=0).to(tl.int64)
        if COMPLEX:  # residue-domain Karatsuba: re = T1 - T2, im = T3 - T1 - T2
            if DIGITS:
                x2 = _digit_combine(res2_ptr + lo, si_dig, coef_ptr + mi * 3, mask)
                x3 = _digit_combine(res3_ptr + lo, si_dig, coef_ptr + mi * 3, mask)
            else:
                x2 = tl.load(res2_ptr + lo, mask=mask, other=0).to(tl.int64)
                x3 = tl.load(res3_ptr + lo, mask=mask, other=0).to(tl.int64)
            y = _sym_residue(x3 - x - x2, p, invp)
            x = x - x2
            qg += y.to(tl.float64) * qp
            b0 += y * c0
            b1 += y * c1
            b2 += y * c2
            b3 += y * c3
            b4 += y * c4
            b5 += y * c5
        r = _sym_residue(x, p, invp)
        qf += r.to(tl.float64) * qp
        a0 += r * c0
        a1 += r * c1
        a2 += r * c2
        a3 += r * c3
        a4 += r * c4
        a5 += r * c5
        mi += 1
    tl.store(out_ptr + offs, _finish(a0, a1, a2, a3, a4, a5, qf, sh, mlimb_ptr, BLOCK), mask=mask)
    if COMPLEX:
        tl.store(out2_ptr + offs, _finish(b0, b1, b2, b3, b4, b5, qg, sh, mlimb_ptr, BLOCK), mask=mask)


_CONST_CACHE: dict = {}


def _consts(table: ModuliTable, device):
    key = (table.kind, table.num_moduli, str(device))
    if key not in _CONST_CACHE:
        if table.num_limbs > J_MAX:
            raise NumericsError(f"M needs {table.num_limbs} limbs; the CRT kernel supports {J_MAX}")
        cl = [list(row) + [0] * (J_MAX - len(row)) for row in table.C_limbs_LJ]
        ml = list(table.M_limbs_J) + [0] * (J_MAX - table.num_limbs)
        _CONST_CACHE[key] = (
            torch.tensor(table.moduli, dtype=torch.int64, device=device),
            torch.tensor([1.0 / p for p in table.moduli], dtype=torch.float64, device=device),
            torch.tensor(table.q_over_p, dtype=torch.float64, device=device),
            torch.tensor(cl, dtype=torch.int32, device=device),
            torch.tensor(ml, dtype=torch.int64, device=device),
        )
    return _CONST_CACHE[key]


def crt_triton_rows_cols(
    res_LMN: torch.Tensor, s_M: torch.Tensor, t_N: torch.Tensor, table: ModuliTable,
    T2_LMN: torch.Tensor | None = None, T3_LMN: torch.Tensor | None = None, group: int = 1,
    digits: bool = False,
):
    """Launch the CRT kernel with separate row and column shifts (no [M, N] shift tensor in memory).

    Args:
        res_LMN: int32/int64 products congruent to the residues (T1 for complex): [L, M, N] contiguous
            when ``group == 1``, else the grouped layout [G, M, g*N] of ``Int8Backend.modular_matmul_grouped``;
            with ``digits`` the float32 [L, 3, M, N] digit products of ``Fp8Backend.modular_matmul_digits``.
        s_M: int64 [M]; t_N: int64 [N].
        table: moduli table.
        T2_LMN, T3_LMN: complex 3M products A_i B_i and (A_r+A_i)(B_r+B_i), same layout and dtype as T1.
            When given, re = CRT(T1 - T2) and im = CRT(T3 - T1 - T2) come out of one pass over T1, T2, T3.
        group: moduli per group of the grouped layout (1 = plane per modulus).
        digits: inputs are FP8 digit products, recombined in the kernel with per-modulus coefficients
            (square p = s^2: (s, s, 1); Karatsuba: (240, -15, 16), i.e. 256 C0 + 16 (C2 - C0 - C1) + C1).

    Returns:
        float64 [M, N], or (re, im) when T2/T3 are given.
    """
    M, N = s_M.shape[0], t_N.shape[0]
    res = res_LMN.contiguous()
    cplx = T2_LMN is not None
    r2 = T2_LMN.contiguous() if cplx else res
    r3 = T3_LMN.contiguous() if cplx else res
    si_dig = 0
    if digits:
        si_grp, si_row, si_dig = 3 * M * N, N, M * N
    elif group == 1:
        si_grp, si_row = M * N, N
    else:
        si_grp, si_row = M * group * N, group * N
    mods, invp, qp, cl, ml = _consts(table, res.device)
    coef = _digit_coefs(table, res.device)
    out = torch.empty((M, N), dtype=torch.float64, device=res.device)
    out2 = torch.empty((M, N), dtype=torch.float64, device=res.device) if cplx else out
    if M * N:
        BLOCK = 256
        _crt_kernel[(triton.cdiv(M * N, BLOCK),)](
            res, r2, r3, si_grp, si_row, si_dig, coef, s_M.to(torch.int64).contiguous(),
            t_N.to(torch.int64).contiguous(), N, M * N, mods, invp, qp, cl, ml, out, out2,
            L=table.num_moduli, COMPLEX=cplx, GROUP=group, DIGITS=digits, BLOCK=BLOCK,
        )
    return (out, out2) if cplx else out


def _digit_coefs(table: ModuliTable, device) -> torch.Tensor:
    key = ("coef", table.kind, table.num_moduli, str(device))
    if key not in _CONST_CACHE:
        rows = []
        for mi in range(table.num_moduli):
            s = table.square_root(mi)
            rows.append([s, s, 1] if s is not None else [240, -15, 16])
        _CONST_CACHE[key] = torch.tensor(rows, dtype=torch.int64, device=device)
    return _CONST_CACHE[key]


def crt_triton(res_LMN: torch.Tensor, shift_MN: torch.Tensor, table: ModuliTable) -> torch.Tensor:
    """CRT kernel for an explicit [M, N] shift tensor (ModularBackend.reconstruct signature).

    Args:
        res_LMN: int32/int64 [L, M, N].
        shift_MN: int64 [M, N] (any tensor broadcastable from s_i + t_j; it is read as given).
        table: moduli table.

    Returns:
        float64 [M, N].
    """
    L = res_LMN.shape[0]
    flat = res_LMN.reshape(L, 1, -1)
    zeros = torch.zeros(1, dtype=torch.int64, device=res_LMN.device)
    out = crt_triton_rows_cols(flat, zeros, shift_MN.reshape(-1), table)
    return out.reshape(shift_MN.shape)
