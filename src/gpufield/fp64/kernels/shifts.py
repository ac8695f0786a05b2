"""Triton kernel: fast-mode row shifts in one read-only pass pair (Ozaki-II scaling, fp64.md 2.3).

Bit-identical to ``gpufield.fp64.ozaki.scaling.fast_shifts``: per row, e = floor(log2 amax) (exact, also for
subnormals), q_k = max(ceil(|x_k| 2**(Q - e)), [x_k != 0]), ss = sum q_k^2 in int64 (exact),
s = floor((H + Q) - log2_upper_int(ss)/2) - e. Everything is exact integer arithmetic or a single IEEE
operation in the same order as the torch reference, so CPU and GPU shifts agree bit for bit.
Reads the operand twice (amax, then ss) and writes one int64 per row.

Shape legend: R rows (of A, or of B^T), K inner dimension.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from gpufield.fp64.ozaki.moduli import ModuliTable


@triton.jit
def _pow2(e):
    return ((e + 1023) << 52).to(tl.float64, bitcast=True)


@triton.jit
def _fmax(a, b):
    return tl.maximum(a, b)


@triton.jit
def _iadd(a, b):
    return a + b


@triton.jit
def _bitlen_pos(x):
    """Exact bit length of int64 x >= 1 (float64 exponent, corrected when rounding overshoots)."""
    b = ((x.to(tl.float64).to(tl.int64, bitcast=True) >> 52) & 0x7FF) - 1022
    over = (x >> tl.minimum(tl.maximum(b - 1, 0), 63)) == 0
    return tl.where(over, b - 1, b)


@triton.jit
def _fast_shift_kernel(
    x_ptr, x2_ptr, stride_r, stride_k, R, K, out_ptr, tab_ptr, HQ, Q,
    COMPLEX: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_K: tl.constexpr,
):
    rows = (tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)).to(tl.int64)
    rmask = rows < R
    cols0 = tl.arange(0, BLOCK_K).to(tl.int64)
    amax = tl.full((BLOCK_R,), 0.0, tl.float64)
    k0 = 0
    while k0 < K:
        cols = k0 + cols0
        m = rmask[:, None] & (cols[None, :] < K)
        off = rows[:, None] * stride_r + cols[None, :] * stride_k
        a = tl.abs(tl.load(x_ptr + off, mask=m, other=0.0))
        amax = tl.maximum(amax, tl.reduce(a, 1, _fmax))
        if COMPLEX:
            a2 = tl.abs(tl.load(x2_ptr + off, mask=m, other=0.0))
            amax = tl.maximum(amax, tl.reduce(a2, 1, _fmax))
        k0 += BLOCK_K
    bits = amax.to(tl.int64, bitcast=True)
    ex = (bits >> 52) & 0x7FF
    mant = bits & 0xFFFFFFFFFFFFF
    e_sub = _bitlen_pos(tl.maximum(mant, 1)) - 1075  # subnormal amax: exponent of its leading bit
    e = tl.where(ex > 0, ex - 1023, e_sub)
    e = tl.where(amax > 0, e, 0)
    sc = tl.minimum(tl.maximum(Q - e, -2044), 2046)  # mul_pow2 of the reference, same two steps
    sc1 = tl.minimum(tl.maximum(sc, -1022), 1023)
    p1 = _pow2(sc1)
    p2 = _pow2(sc - sc1)
    ss = tl.full((BLOCK_R,), 0, tl.int64)
    k0 = 0
    while k0 < K:
        cols = k0 + cols0
        m = rmask[:, None] & (cols[None, :] < K)
        off = rows[:, None] * stride_r + cols[None, :] * stride_k
        x = tl.abs(tl.load(x_ptr + off, mask=m, other=0.0))
        q = tl.ceil(x * p1[:, None] * p2[:, None]).to(tl.int64)
        q = tl.maximum(q, (x != 0).to(tl.int64))
        ss += tl.reduce(q * q, 1, _iadd)
        if COMPLEX:
            x2 = tl.abs(tl.load(x2_ptr + off, mask=m, other=0.0))
            q2 = tl.ceil(x2 * p1[:, None] * p2[:, None]).to(tl.int64)
            q2 = tl.maximum(q2, (x2 != 0).to(tl.int64))
            ss += tl.reduce(q2 * q2, 1, _iadd)
        k0 += BLOCK_K
    ss = tl.maximum(ss, 1)
    b = _bitlen_pos(ss)
    sh = tl.maximum(b - 8, 0)
    mtop = ss >> sh
    m1 = tl.where(b > 8, mtop + 1, mtop)
    lgu = tl.load(tab_ptr + tl.minimum(tl.maximum(m1, 1), 256)) + sh.to(tl.float64)
    s = tl.floor(HQ - lgu * 0.5).to(tl.int64) - e
    tl.store(out_ptr + rows, tl.where(amax > 0, s, 0), mask=rmask)


@triton.jit
def _row_amax_exponent(x_ptr, x2_ptr, stride_r, stride_k, rows, rmask, cols0, K,
                       COMPLEX: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_K: tl.constexpr):
    amax = tl.full((BLOCK_R,), 0.0, tl.float64)
    k0 = 0
    while k0 < K:
        cols = k0 + cols0
        m = rmask[:, None] & (cols[None, :] < K)
        off = rows[:, None] * stride_r + cols[None, :] * stride_k
        amax = tl.maximum(amax, tl.reduce(tl.abs(tl.load(x_ptr + off, mask=m, other=0.0)), 1, _fmax))
        if COMPLEX:
            amax = tl.maximum(amax, tl.reduce(tl.abs(tl.load(x2_ptr + off, mask=m, other=0.0)), 1, _fmax))
        k0 += BLOCK_K
    bits = amax.to(tl.int64, bitcast=True)
    ex = (bits >> 52) & 0x7FF
    e_sub = _bitlen_pos(tl.maximum(bits & 0xFFFFFFFFFFFFF, 1)) - 1075
    e = tl.where(ex > 0, ex - 1023, e_sub)
    return tl.where(amax > 0, e, 0)


@triton.jit
def _bound_operand_kernel(
    x_ptr, x2_ptr, stride_r, stride_k, R, K, hi_ptr, sigma_ptr, UFP,
    COMPLEX: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_K: tl.constexpr,
):
    rows = (tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)).to(tl.int64)
    rmask = rows < R
    cols0 = tl.arange(0, BLOCK_K).to(tl.int64)
    e = _row_amax_exponent(x_ptr, x2_ptr, stride_r, stride_k, rows, rmask, cols0, K, COMPLEX, BLOCK_R, BLOCK_K)
    sigma = (UFP - (2 if COMPLEX else 1)) - e
    tl.store(sigma_ptr + rows, sigma, mask=rmask)
    sc = tl.minimum(tl.maximum(sigma, -2044), 2046)  # mul_pow2 of the reference, same two steps
    sc1 = tl.minimum(tl.maximum(sc, -1022), 1023)
    p1 = _pow2(sc1)
    p2 = _pow2(sc - sc1)
    k0 = 0
    while k0 < K:
        cols = k0 + cols0
        m = rmask[:, None] & (cols[None, :] < K)
        off = rows[:, None] * stride_r + cols[None, :] * stride_k
        x = tl.abs(tl.load(x_ptr + off, mask=m, other=0.0))
        h = tl.maximum(tl.ceil(x * p1[:, None] * p2[:, None]).to(tl.int32), (x != 0).to(tl.int32))
        if COMPLEX:
            x2 = tl.abs(tl.load(x2_ptr + off, mask=m, other=0.0))
            h += tl.maximum(tl.ceil(x2 * p1[:, None] * p2[:, None]).to(tl.int32), (x2 != 0).to(tl.int32))
        tl.store(hi_ptr + rows[:, None] * K + cols[None, :], h.to(tl.int8), mask=m)
        k0 += BLOCK_K


def bound_operand_triton(X_RK: torch.Tensor, ufp: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Accurate-mode bound operand in one kernel: (hi int8 [R, K] in [0, 2**ufp], sigma int64 [R]).

    Same values as ``gpufield.fp64.ozaki.scaling.bound_operand`` (which returns hi as int64).
    """
    R, K = X_RK.shape
    hi = torch.zeros((R, K), dtype=torch.int8, device=X_RK.device)
    sigma = torch.zeros(R, dtype=torch.int64, device=X_RK.device)
    if R == 0 or K == 0:
        return hi, sigma
    cplx = X_RK.is_complex()
    x1, x2 = (X_RK.real, X_RK.imag) if cplx else (X_RK, X_RK)
    BR, BK = 32, 64
    _bound_operand_kernel[(triton.cdiv(R, BR),)](
        x1, x2, x1.stride(0), x1.stride(1), R, K, hi, sigma, ufp, COMPLEX=cplx, BLOCK_R=BR, BLOCK_K=BK,
    )
    return hi, sigma


def fast_shifts_triton(X_RK: torch.Tensor, table: ModuliTable, H: float, Q: int) -> torch.Tensor:
    """Launch the fast-shift kernel (called by ``fast_shifts`` on the Triton path).

    Args:
        X_RK: float64 or complex128 [R, K], finite, any strides (B^T views included).
        table: moduli table (unused beyond documentation of H).
        H: the reference's T/2 budget. Q: quantisation bits (20, or 10 for K >= 2**20).

    Returns:
        int64 [R] shifts, bit-identical to the torch reference.
    """
    from gpufield.fp64.ozaki.scaling import _LOG2_UP

    R, K = X_RK.shape
    out = torch.zeros(R, dtype=torch.int64, device=X_RK.device)
    if R == 0 or K == 0:
        return out
    cplx = X_RK.is_complex()
    x1, x2 = (X_RK.real, X_RK.imag) if cplx else (X_RK, X_RK)
    tab = torch.tensor(_LOG2_UP, dtype=torch.float64, device=X_RK.device)
    BR, BK = 32, 64
    _fast_shift_kernel[(triton.cdiv(R, BR),)](
        x1, x2, x1.stride(0), x1.stride(1), R, K, out, tab, float(H + Q), Q,
        COMPLEX=cplx, BLOCK_R=BR, BLOCK_K=BK,
    )
    return out
