"""Triton batched INT8 GEMM for a DFT-GEMM stage chunk: every twiddle group, 3M component and moduli group
in ONE launch (the cuBLAS path issues 3 Q ``_int_mm`` calls per group: 96 per stage 2 at 256^3, g = 8).

For chunk rows m (flattened over [G, R] from row c0, so row m belongs to twiddle group (c0 + m) // R),
component c and moduli group q:

    T[c, q, m, :] = A[c, q, m, :] @ Bd[c, (c0 + m) // R, q]^T

with A the grouped residues [3, Q, Rc, g N] of ``scale_residues_triton(..., group=g)`` (g = 1: the
plane-per-modulus residues [3, L, Rc, N]) and Bd the block-diagonal twiddle residues [3, G, Q, g K, g N] of
:func:`gpufield.fp64.fft.operands.stage_operands`. A row block that spans several groups runs one masked
``tl.dot`` per group (rows of other groups zeroed), so any chunk boundary works.

Exactness: int8 x int8 products accumulated in int32 (``out_dtype=tl.int32``); each output is a sum of
at most N <= 32 nonzero products |a b| <= 128 * 128 (the zero blocks and masked rows add exact zeros):
|T| < 2^19, far inside int32, so every result equals the cuBLAS ``_int_mm`` result bit for bit. The
operand tiles are padded with zeros to >= 32 (the int8 MMA K step) by masked loads.

Shape legend: C = 3 components, Q moduli groups, Rc chunk rows, G twiddle groups, gN / gK the grouped
inner / output widths.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _stage_gemm_kernel(A_ptr, B_ptr, T_ptr, Rc, R, c0, G, GN, GK, NQ,
                       S_ac, S_aq, S_am, S_bc, S_bg, S_bq, S_tc, S_tq, S_tm,
                       BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, NGM: tl.constexpr):
    pid = tl.program_id(0)
    cq = tl.program_id(1)
    comp = cq // NQ
    q = cq - comp * NQ
    rows = pid * BM + tl.arange(0, BM)
    rmask = rows < Rc
    n = tl.arange(0, BN)
    k = tl.arange(0, BK)
    a = tl.load(A_ptr + comp.to(tl.int64) * S_ac + q.to(tl.int64) * S_aq + rows.to(tl.int64)[:, None] * S_am
                + n[None, :], mask=rmask[:, None] & (n < GN)[None, :], other=0)
    g_lo = (c0 + pid * BM) // R
    bmask = (n < GN)[:, None] & (k < GK)[None, :]
    if NGM == 1:  # the block lies inside one twiddle group
        b = tl.load(B_ptr + comp * S_bc + g_lo * S_bg + q * S_bq + k[None, :] * GN + n[:, None],
                    mask=bmask, other=0)  # [BN, BK] = Bd[c, g, q]^T
        acc = tl.dot(a, b, out_dtype=tl.int32)
    else:  # up to NGM groups: one masked dot each (rows of other groups zeroed)
        grow = (c0 + rows) // R
        acc = tl.zeros((BM, BK), dtype=tl.int32)
        for j in tl.static_range(NGM):
            gi = g_lo + j
            b = tl.load(B_ptr + comp * S_bc + gi * S_bg + q * S_bq + k[None, :] * GN + n[:, None],
                        mask=bmask & (gi < G), other=0)
            am = tl.where((grow == gi)[:, None], a, tl.zeros_like(a))
            acc += tl.dot(am, b, out_dtype=tl.int32)
    tl.store(T_ptr + comp.to(tl.int64) * S_tc + q.to(tl.int64) * S_tq + rows.to(tl.int64)[:, None] * S_tm
             + k[None, :], acc, mask=rmask[:, None] & (k < GK)[None, :])


def _block(R: int, c0: int, cap: int, small: int) -> tuple[int, int]:
    """(rows per program, max twiddle groups per program): the largest power of two <= cap dividing R and
    c0 (then one group per block), else ``small`` rows spanning up to ceil((small - 1) / R) + 1 groups."""
    bm = cap
    while bm >= 16:
        if R % bm == 0 and c0 % bm == 0:
            return bm, 1
        bm //= 2
    return small, -(-(small - 1) // R) + 1


def _pow2_at_least(n: int, lo: int = 32) -> int:
    return max(lo, 1 << (n - 1).bit_length())


def stage_gemm_triton(A_CQMX: torch.Tensor, Bd_CGQKN: torch.Tensor, T_CQMY: torch.Tensor, c0: int, R: int,
                      block_m: int | None = None) -> torch.Tensor:
    """One launch: T[c, q, m] = A[c, q, m] @ Bd[c, (c0 + m) // R, q]^T for every c, q and chunk row m.

    Args:
        A_CQMX: int8 [3, Q, Rc, g N] residues; the last dimension contiguous.
        Bd_CGQKN: int8 [3, G, Q, g K, g N] block-diagonal twiddle residues, contiguous.
        T_CQMY: int32 destination [3, Q, Rc, g K] (any strides with a contiguous last dimension: e.g. the
            plane-per-modulus buffer [r, 3, Rc, K] viewed as [3, r, Rc, K] through ``transpose(0, 1)``).
        c0: the chunk's first row in the flattened [G, R] row grid.
        R: rows per twiddle group.
        block_m: largest rows per program (default on CUDA 128, 64 for widths > 128; on CPU, the Triton interpreter, 4096); the
            block is the largest power of two <= block_m dividing R and c0, so that it lies in one
            twiddle group (else 32 rows, 16 on CPU, with one masked dot per group it touches).

    Returns:
        ``T_CQMY``.

    Raises:
        ValueError: shapes or dtypes do not match.
    """
    C, Q, Rc, gN = A_CQMX.shape
    _, G, Qb, gK, gNb = Bd_CGQKN.shape
    if (Qb, gNb) != (Q, gN) or tuple(T_CQMY.shape) != (C, Q, Rc, gK) or A_CQMX.dtype != torch.int8 \
            or Bd_CGQKN.dtype != torch.int8 or T_CQMY.dtype != torch.int32:
        raise ValueError(f"stage GEMM shapes/dtypes do not match: A {tuple(A_CQMX.shape)} {A_CQMX.dtype}, "
                         f"Bd {tuple(Bd_CGQKN.shape)} {Bd_CGQKN.dtype}, T {tuple(T_CQMY.shape)} {T_CQMY.dtype}")
    if A_CQMX.stride(3) != 1 or T_CQMY.stride(3) != 1 or not Bd_CGQKN.is_contiguous():
        raise ValueError("stage GEMM needs contiguous last dimensions and a contiguous Bd")
    if Rc == 0:
        return T_CQMY
    cuda = A_CQMX.device.type == "cuda"
    cap = block_m or ((128 if max(gN, gK) <= 128 else 64) if cuda else 4096)  # acc regs: BM x BK int32
    bm, ngm = _block(R, c0, cap, 32 if cuda else 16)
    grid = (triton.cdiv(Rc, bm), C * Q)
    _stage_gemm_kernel[grid](
        A_CQMX, Bd_CGQKN, T_CQMY, Rc, R, c0, G, gN, gK, Q,
        A_CQMX.stride(0), A_CQMX.stride(1), A_CQMX.stride(2), Bd_CGQKN.stride(0), Bd_CGQKN.stride(1),
        Bd_CGQKN.stride(2), T_CQMY.stride(0), T_CQMY.stride(1), T_CQMY.stride(2),
        BM=bm, BN=_pow2_at_least(gN), BK=_pow2_at_least(gK), NGM=ngm, num_warps=8 if cuda else 4,
    )
    return T_CQMY
