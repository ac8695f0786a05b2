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


# ---------------------------------------------------------------------------------------------------
# Fused variant: row shifts + scaling + residues computed in registers from the complex128 rows, then the
# same block-diagonal dots; the residue planes and the row-shift reductions never reach memory.


@triton.jit
def _p2(e):
    return ((e + 1023) << 52).to(tl.float64, bitcast=True)


@triton.jit
def _fmax(a, b):  # own combine function (interpretable, see kernels/residue.py)
    return tl.maximum(a, b)


@triton.jit
def _sym_res(v, p, invp, c29):
    """Symmetric residue of int64 v (|v| < 2^62) mod p (float64 [1, G, 1] tables): v = hi 2^29 + lo,
    w = hi (2^29 mod p) + lo is exact in float64 (|w| < 2^42), q = floor(w / p) is off by at most one."""
    hi = v >> 29
    lo = v - (hi << 29)
    w = hi.to(tl.float64) * c29 + lo.to(tl.float64)
    r = w - tl.floor(w * invp) * p
    r = tl.where(r < 0, r + p, r)
    r = tl.where(r >= p, r - p, r)
    return tl.where(r >= tl.floor((p + 1) * 0.5), r - p, r)


@triton.jit
def _row_scale(amax, rows, rmask, BITS, s_ptr, amax_ptr):
    """Row shift s = BITS - e (e the frexp exponent of ``amax``, float64 [BR]; subnormals through an exact
    2^64 scaling; zero rows: e = -2^20) and the two exact power-of-two factors 2^s1, 2^s2 (s1 + s2 = s,
    each in [-1000, 1000]) as [BR, 1]; stores ``s`` (int64) and ``amax`` at ``s_ptr``/``amax_ptr``."""
    sub = amax < 2.2250738585072014e-308
    am = tl.where(sub, amax * 18446744073709551616.0, amax)
    e = ((am.to(tl.int64, bitcast=True) >> 52) & 0x7FF) - 1022 - tl.where(sub, 64, 0)
    e = tl.where(amax > 0, e, -(1 << 20))
    s = BITS - e
    tl.store(s_ptr + rows, s, mask=rmask)
    tl.store(amax_ptr + rows, amax, mask=rmask)
    s1 = tl.minimum(tl.maximum(s, -1000), 1000)
    s2 = tl.minimum(tl.maximum(s - s1, -1000), 1000)
    return _p2(s1)[:, None], _p2(s2)[:, None], s


@triton.jit
def _abs_inf(x):
    """|x| with NaN -> Inf (before any max, so the row's finiteness flag sees it)."""
    a = tl.abs(x)
    return tl.where(a == a, a, float("inf"))


@triton.jit
def _row_scaled(X_ptr, rows, rmask, j, xm, S_xm, S_xn, BITS, s_ptr, amax_ptr):
    """Rows ``[BR, NP]`` of complex input scaled by ``2^s`` and truncated to int64 (exact, |.| < 2^60).

    ``s = BITS - e`` per row with ``e`` the frexp exponent of the row's largest |re|, |im| (see
    :func:`_row_scale`, which also stores ``s`` and the row maximum, Inf where the row holds Inf/NaN).
    Returns ``(re, im, s)``.
    """
    xo = rows.to(tl.int64)[:, None] * S_xm + (j * S_xn)[None, :]
    xr = tl.load(X_ptr + xo, mask=xm, other=0.0)
    xi = tl.load(X_ptr + xo + 1, mask=xm, other=0.0)
    amax = tl.reduce(tl.maximum(_abs_inf(xr), _abs_inf(xi)), 1, _fmax)
    f1, f2, s = _row_scale(amax, rows, rmask, BITS, s_ptr, amax_ptr)
    return ((xr * f1) * f2).to(tl.int64), ((xi * f1) * f2).to(tl.int64), s


@triton.jit
def _fused_stage_gemm_kernel(X_ptr, B_ptr, T_ptr, s_ptr, amax_ptr, p_ptr, invp_ptr, c29_ptr,
                             Rc, R, c0, G, N, GK, S_xm, S_xn, S_bc, S_bg, S_bq, S_tc, S_tq, S_tm, BITS,
                             NQ: tl.constexpr, GRP: tl.constexpr, NP: tl.constexpr, BM: tl.constexpr,
                             BK: tl.constexpr, NGM: tl.constexpr):
    pid = tl.program_id(0)
    rows = pid * BM + tl.arange(0, BM)
    rmask = rows < Rc
    j = tl.arange(0, NP)
    xm = rmask[:, None] & (j < N)[None, :]
    xr, xi, _ = _row_scaled(X_ptr, rows, rmask, j, xm, S_xm, S_xn, BITS, s_ptr, amax_ptr)
    vr = xr[:, None, :]  # exact x 2^s (|.| < 2^60), truncated: [BM, 1, NP]
    vi = xi[:, None, :]
    jn = (j < N)[None, None, :]
    li = tl.arange(0, GRP)
    k = tl.arange(0, BK)
    # rows of the block-diagonal operand in the padded layout li*NP + j -> Bd column li*N + j
    kk = tl.arange(0, GRP * NP)
    kl = kk // NP
    kj = kk - kl * NP
    bmask = (kj < N)[:, None] & (k < GK)[None, :]
    boff = (kl * N + kj)[:, None] + k[None, :] * (GRP * N)
    g_lo = (c0 + pid * BM) // R
    grow = (c0 + rows) // R
    for q in tl.static_range(NQ):
        p = tl.load(p_ptr + q * GRP + li)[None, :, None]
        invp = tl.load(invp_ptr + q * GRP + li)[None, :, None]
        c29 = tl.load(c29_ptr + q * GRP + li)[None, :, None]
        pi = p.to(tl.int32)
        rr = _sym_res(vr, p, invp, c29).to(tl.int32)  # [BM, GRP, NP]
        ri = _sym_res(vi, p, invp, c29).to(tl.int32)
        rs = rr + ri
        rs = tl.where(rs >= (pi + 1) // 2, rs - pi, rs)
        rs = tl.where(rs < -(pi // 2), rs + pi, rs)
        for comp in tl.static_range(3):
            if comp == 0:
                rc = rr
            elif comp == 1:
                rc = ri
            else:
                rc = rs
            at = tl.reshape(tl.where(jn, rc, 0).to(tl.int8), (BM, GRP * NP))
            bq = B_ptr + comp * S_bc + q * S_bq
            if NGM == 1:
                acc = tl.dot(at, tl.load(bq + g_lo * S_bg + boff, mask=bmask, other=0), out_dtype=tl.int32)
            else:
                acc = tl.zeros((BM, BK), dtype=tl.int32)
                for jg in tl.static_range(NGM):
                    gi = g_lo + jg
                    b = tl.load(bq + gi * S_bg + boff, mask=bmask & (gi < G), other=0)
                    am_ = tl.where((grow == gi)[:, None], at, tl.zeros_like(at))
                    acc += tl.dot(am_, b, out_dtype=tl.int32)
            tl.store(T_ptr + comp * S_tc + q * S_tq + rows.to(tl.int64)[:, None] * S_tm + k[None, :], acc,
                     mask=rmask[:, None] & (k < GK)[None, :])


def fused_stage_gemm_triton(x_MN: torch.Tensor, bits: int, moduli: tuple[int, ...], group: int,
                            Bd_CGQKN: torch.Tensor, T_CQMY: torch.Tensor, c0: int, R: int,
                            block_m: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Row shifts, scaling, residues and the stage GEMM of a chunk in one launch (bit-identical to
    ``row_shifts`` + ``scale_residues_triton(..., group=g)`` + :func:`stage_gemm_triton`).

    Per row: s = bits - e (e the frexp exponent of the largest |re|, |im|), X' = trunc(x 2^s) exactly (two
    exact power-of-two factors), symmetric residues of X'_re, X'_im and (r_re + r_im) wrapped for the g
    moduli of each group, computed in float64 from X' = hi 2^29 + lo (exact), then the block-diagonal dots.

    Args:
        x_MN: complex128 [Rc, N] chunk rows (row stride any, element stride any).
        bits: b_x (<= 60).
        moduli: the r INT8 moduli.
        group: g.
        Bd_CGQKN, T_CQMY, c0, R, block_m: as :func:`stage_gemm_triton` (T [3, Q, Rc, g K]).

    Returns:
        ``(s, amax)``: int64 [Rc] row shifts and float64 [Rc] row maxima (Inf where the row has Inf/NaN).

    Raises:
        ValueError: shapes or dtypes do not match.
    """
    Rc, N = x_MN.shape
    C, G, Q, gK, gN = Bd_CGQKN.shape
    if x_MN.dtype != torch.complex128 or gN != group * N or tuple(T_CQMY.shape) != (3, Q, Rc, gK) \
            or T_CQMY.dtype != torch.int32 or T_CQMY.stride(3) != 1 or not Bd_CGQKN.is_contiguous():
        raise ValueError("fused stage GEMM shapes/dtypes do not match")
    dev = x_MN.device
    s = torch.empty(Rc, dtype=torch.int64, device=dev)
    amax = torch.empty(Rc, dtype=torch.float64, device=dev)
    if Rc == 0:
        return s, amax
    tabs = _fused_tables(moduli, Q * group, str(dev))
    cuda = dev.type == "cuda"
    NP = max(_pow2_at_least(N, 1), -(-32 // group))
    # [BM, g, NP] int32 residues and float64 temporaries live in registers: small row blocks on the GPU
    cap = block_m or ((16 if max(group * NP, gK) > 128 else 32) if cuda else 4096)
    bm, ngm = _block(R, c0, cap, min(cap, 32) if cuda else 16)
    xv = torch.view_as_real(x_MN)
    _fused_stage_gemm_kernel[(triton.cdiv(Rc, bm),)](
        xv, Bd_CGQKN, T_CQMY, s, amax, tabs[0], tabs[1], tabs[2], Rc, R, c0, G, N, gK,
        xv.stride(0), xv.stride(1), Bd_CGQKN.stride(0), Bd_CGQKN.stride(1), Bd_CGQKN.stride(2),
        T_CQMY.stride(0), T_CQMY.stride(1), T_CQMY.stride(2), bits,
        NQ=Q, GRP=group, NP=NP, BM=bm, BK=_pow2_at_least(gK), NGM=ngm, num_warps=8 if cuda else 4,
    )
    return s, amax


_TABLES: dict = {}


def _fused_tables(moduli: tuple[int, ...], n: int, device: str) -> tuple[torch.Tensor, ...]:
    """float64 p, fl(1/p), 2^29 mod p for the moduli padded to n (padding p = 1: residues 0)."""
    key = (moduli, n, device)
    if key not in _TABLES:
        ps = list(moduli) + [1] * (n - len(moduli))
        _TABLES[key] = tuple(torch.tensor(v, dtype=torch.float64, device=device) for v in
                             (ps, [1.0 / p for p in ps], [float((1 << 29) % p) for p in ps]))
    return _TABLES[key]
