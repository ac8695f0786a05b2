"""The fused DFT-GEMM stage with the input residues on the tensor cores (Gluon, Hopper): byte digits of the
exact row integers against digit-expanded twiddle residues, so no per-modulus residue arithmetic is left
on the CUDA cores.

The Gluon stage kernel (:mod:`gpufield.fp64.fft.gemm_fused_gluon`) spends most of its time before its first
wgmma (H200 run 39, Nsight Compute warp-state samples: 59 % of them, for 39 % of the instructions): for each
of the L = 16 moduli and each input value it forms the symmetric residue (2 DFMA, 1 DADD, 1 IMAD) and packs
it to int8, about 144 of its 373 instructions per real output, on the busiest pipe (FP64). Here the
residues are never formed. With v = trunc(x 2^s) (|v| < 2^60) written in balanced base-256 digits,
v = sum_d x_d 2^(8 d), x_d in [-128, 128), d = 0..7,

    sum_j W_kj v_j = sum_{j, d} (W_kj 2^(8 d)) x_jd  ===  sum_{j, d} B_i[k, (j, d)] x_jd   (mod p_i)

with B_i[k, (j, d)] the symmetric residue of W_kj 2^(8 d) mod p_i (int8). So one int8 GEMM per modulus with
8 times the depth (K = 16 NP instead of 2 NP) gives a product congruent mod p_i to the old one, and the
epilogue only uses residues mod p_i: every later bit is the same. The digits are the same for every
modulus and cost four integer instructions per value: u = v + 0x8080808080808080, D = u XOR
0x8080808080808080; byte d of D is x_d as int8 (byte_d(u) - 128). |product| <= 16 NP 128^2 <= 2^23
(N <= 32): the fold's Barrett constants take that bound (:data:`DIGIT_DOT_BOUND`).

The price is the digit-expanded twiddle operand: [2 BK, 16 NP] int8 per modulus (8 KB at N = 16, 32 KB at
N = 32), 64 (N = 16) or 128 (N = 32) bytes per real output read from L2, streamed per modulus through a
ring of four shared-memory buffers with cp.async two moduli ahead (one CTA barrier per modulus), and 8
times the tensor-core work.

Shape legend: as :mod:`gpufield.fp64.fft.gemm_fused_epi` (Rc chunk rows, NP padded stage length, BR rows
and BK outputs per program, L moduli); KD = 16 NP digit columns.
"""

from __future__ import annotations

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    warpgroup_mma,
    warpgroup_mma_wait,
)

from gpufield.fp64.fft.gemm_fused_epi import _load_rows
from gpufield.fp64.fft.gemm_triton import _abs_inf, _fmax, _row_scale
from gpufield.fp64.kernels.fft_epilogue import _finish, _fold_j, _init_like
from gpufield.fp64.kernels.fft_epilogue_f64 import _finish_f64, _fold_f64, _init_f64

DIGITS = 8
"""Balanced base-256 digits per exact row integer (|v| < 2^60 < 2^63 - 2^56: the offset sum cannot wrap)."""

DIGIT_DOT_BOUND = 1 << 23
"""|product| <= 16 NP 128^2 <= 2^23 for NP <= 32: the Barrett range of the fold in this kernel."""

OFFSET = gl.constexpr(-0x7F7F7F7F7F7F7F80)
"""0x8080808080808080 as a signed int64: adding it puts 128 into every byte (carries included)."""

RING = gl.constexpr(4)
"""Shared-memory buffers of the streamed twiddle operand: modulus i + 2 is copied into the buffer of
modulus i - 2, which every warpgroup has finished reading once all warps passed modulus i's barrier."""


def operand_digits(b4m_t: torch.Tensor, moduli: tuple[int, ...]) -> torch.Tensor:
    """Digit-expanded 4M twiddle operand: B_i[c, 8 m + d] = symmetric residue of b4m_t[i, c, m] 2^(8 d) mod p_i.

    Args:
        b4m_t: int8 [G, L, 2 K, 2 NP], the K-major 4M operand (rows 2 k + c: output k's real / imaginary part;
            columns 2 j + h: x_j's real / imaginary part), symmetric residues mod p_i.
        moduli: the L moduli.

    Returns:
        int8 [G, L, 2 K, 16 NP], contiguous, on the operand's device.
    """
    G, L, C, M = b4m_t.shape
    p = torch.tensor(moduli, dtype=torch.int64, device=b4m_t.device).view(1, L, 1, 1, 1)
    c = torch.tensor([[pow(2, 8 * d, q) for d in range(DIGITS)] for q in moduli], dtype=torch.int64,
                     device=b4m_t.device).view(1, L, 1, 1, DIGITS)
    prod = b4m_t.to(torch.int64)[..., None] * c
    sym = torch.remainder(prod + p // 2, p) - p // 2  # [-p/2, p/2): int8 for every p <= 256
    return sym.to(torch.int8).reshape(G, L, C, M * DIGITS).contiguous()


@gluon.jit
def _digits(x, rows, rmask, BITS, s_ptr, amax_ptr):
    """Rows x (float64 [BR, 2 NP], padding 0) -> (D, s): the row shifts (stored with the row maxima, as
    :func:`gpufield.fp64.fft.gemm_fused_epi._row_split`) and D, whose bytes are the balanced base-256 digits
    of v = trunc(x 2^s), digit 0 in the low byte (int64 [BR, 2 NP])."""
    f1, f2, s = _row_scale(gl.reduce(_abs_inf(x), 1, _fmax), rows, rmask, BITS, s_ptr, amax_ptr)
    v = ((x * f1) * f2).to(gl.int64)  # exact x 2^s, truncated; padding 0 (digits 0)
    return (v + OFFSET) ^ OFFSET, s


@gluon.jit
def _copy_b(dst, base, boff, bmask, pred):
    """Start the cp.async of one modulus's digit-expanded twiddle tile (when ``pred``) and close the group
    (always, so that the waits count one group per modulus)."""
    if pred:
        async_copy.async_copy_global_to_shared(dst, base + boff, mask=bmask)
    async_copy.commit_group()


@gluon.jit
def _product(a_smem, b_tile, b_later, later_base, boff, bmask, later: gl.constexpr, zero):
    """Once this modulus's twiddle tile has arrived in every thread, start its product (asynchronous wgmma)
    and the copy of the tile two moduli later into ``b_later`` (whose last reader, the wgmma two moduli
    earlier, every warp has waited for before this barrier). Returns the wgmma token."""
    async_copy.wait_group(1)  # this thread's part of the tile (copy groups complete in order)
    gl.thread_barrier()
    fence_async_shared()
    tok = warpgroup_mma(a_smem, b_tile.permute((1, 0)), zero, use_acc=False, is_async=True)
    _copy_b(b_later, later_base, boff, bmask, later)
    return tok


@gluon.jit
def _fused_epi_digits_kernel(X_ptr, B_ptr, Y_ptr, s_ptr, amax_ptr,
                             Rc, RG, c0, N, K, S_xg, S_xr, S_xe, XOFF, S_bg, S_bi, BITS, TW, S_yg, S_yr, S_yk,
                             YOFF, NGS, NP: gl.constexpr, BR: gl.constexpr, BK: gl.constexpr,
                             XROWS: gl.constexpr, R: gl.constexpr, PM: gl.constexpr, BM: gl.constexpr,
                             BB: gl.constexpr, CL: gl.constexpr, SI: gl.constexpr, FL: gl.constexpr,
                             FI: gl.constexpr, ML: gl.constexpr, W: gl.constexpr, L: gl.constexpr,
                             FW: gl.constexpr, NF: gl.constexpr, QSH: gl.constexpr, NW: gl.constexpr,
                             BSH: gl.constexpr, ASM: gl.constexpr, FOLD: gl.constexpr, FD: gl.constexpr,
                             FQ: gl.constexpr, FK: gl.constexpr, FM: gl.constexpr,
                             num_warps: gl.constexpr):
    XV: gl.constexpr = max(1, min(8, BR * 2 * NP // (32 * num_warps)))
    XL: gl.constexpr = gl.BlockedLayout([1, XV], [32 // (2 * NP // XV), 2 * NP // XV], [num_warps, 1], [1, 0])
    KD: gl.constexpr = 16 * NP
    # twiddle tile copies: 16 contiguous bytes per thread, KD / 16 threads per row
    BT: gl.constexpr = gl.BlockedLayout([1, 16], [32 // (KD // 16), KD // 16], [num_warps, 1], [1, 0])
    WN: gl.constexpr = num_warps // 4  # warpgroups side by side along the outputs
    ACC: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, WN],
                                                  instr_shape=[16, 2 * BK // WN, 32])
    A_SH: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BR, KD], gl.int8)
    A32_SH: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BR, KD // 4], gl.int32)
    B_SH: gl.constexpr = gl.NVMMASharedLayout.get_default_for([2 * BK, KD], gl.int8)

    pid = gl.program_id(0)
    t0 = (pid % NGS) * RG + (pid // NGS) * BR
    g_lo = (c0 + t0) // RG  # all rows of a program lie in one group (one division)
    r_lo = c0 + t0 - g_lo * RG

    # the twiddle tiles of the first two moduli start streaming before the rows are read
    cb = gl.arange(0, 2 * BK, layout=gl.SliceLayout(1, BT))
    jb = gl.arange(0, KD, layout=gl.SliceLayout(0, BT))
    kcol = 2 * gl.program_id(1) * BK + cb
    boff = (kcol * KD)[:, None] + jb[None, :]
    bmask = (kcol < 2 * K)[:, None] & (jb < KD)[None, :]
    bbase = B_ptr + g_lo.to(gl.int64) * S_bg
    b_smem = ()
    for _i in gl.static_range(RING):
        b_smem = b_smem + (gl.allocate_shared_memory(gl.int8, [2 * BK, KD], B_SH),)
    for i in gl.static_range(2):
        _copy_b(b_smem[i], bbase + i * S_bi, boff, bmask, i < R)

    rows = t0 + gl.arange(0, BR, layout=gl.SliceLayout(1, XL))
    rmask = rows < Rc
    if XROWS:  # rows one complex element apart: load along the rows, exchange into XL (as the Gluon kernel)
        XT: gl.constexpr = gl.BlockedLayout([1, 2], [32, 1], [BR // 32, num_warps * 32 // BR], [1, 0])
        i_t = gl.arange(0, BR, layout=gl.SliceLayout(1, XT))
        jj_t = gl.arange(0, 2 * NP, layout=gl.SliceLayout(0, XT))
        roff_t = g_lo.to(gl.int64) * S_xg + (r_lo + i_t).to(gl.int64) * S_xr - XOFF
        x = gl.convert_layout(_load_rows(X_ptr, roff_t, t0 + i_t, jj_t, Rc, N, S_xe), XL)
    else:
        jj = gl.arange(0, 2 * NP, layout=gl.SliceLayout(0, XL))
        roff = g_lo.to(gl.int64) * S_xg + (rows - t0 + r_lo).to(gl.int64) * S_xr - XOFF
        x = _load_rows(X_ptr, roff, rows, jj, Rc, N, S_xe)
    dig, s = _digits(x, rows, rmask, BITS, s_ptr, amax_ptr)
    # the digit bytes as int32 words (low word first: digit d of value m at byte 8 m + d), stored once and
    # read by every modulus's wgmma as the int8 [BR, KD] operand (same 128-byte swizzle, same bytes)
    words = gl.join(dig.to(gl.int32), (dig >> 32).to(gl.int32)).reshape([BR, KD // 4])
    a32 = gl.allocate_shared_memory(gl.int32, [BR, KD // 4], A32_SH, words)
    a_smem = a32._reinterpret(gl.int8, [BR, KD], A_SH)

    zero = gl.zeros([BR, 2 * BK], gl.int32, layout=ACC)
    if FOLD:
        a64 = _init_f64(zero)
    else:
        sacc = _init_like(SI, L, zero)
        facc = _init_like(FI, NF, zero)
    tok = _product(a_smem, b_smem[0], b_smem[2 % RING], bbase + 2 * S_bi, boff, bmask, 2 < R, zero)
    for i in gl.static_range(1, R):
        nxt = _product(a_smem, b_smem[i % RING], b_smem[(i + 2) % RING], bbase + (i + 2) * S_bi, boff, bmask,
                       i + 2 < R, zero)
        acc = warpgroup_mma_wait(num_outstanding=1, deps=(tok, ))  # fold modulus i - 1 while i's product runs
        if FOLD:
            a64 = _fold_f64(a64, acc, i - 1, PM, BM, BB, BSH, FD, FQ, FK)
        else:
            sacc, facc = _fold_j(sacc, facc, acc, i - 1, PM, BM, BB, CL, FL, L, NF, BSH, ASM)
        tok = nxt
    acc = warpgroup_mma_wait(num_outstanding=0, deps=(tok, ))
    if FOLD:
        a64 = _fold_f64(a64, acc, R - 1, PM, BM, BB, BSH, FD, FQ, FK)
    else:
        sacc, facc = _fold_j(sacc, facc, acc, R - 1, PM, BM, BB, CL, FL, L, NF, BSH, ASM)

    shift = gl.convert_layout((s + TW).to(gl.int32), gl.SliceLayout(1, ACC))
    if FOLD:
        y = _finish_f64(a64, shift[:, None], FM)
    else:
        y = _finish(sacc, facc, shift[:, None], ML, W, L, FW, NF, QSH, NW)
    i_o = gl.arange(0, BR, layout=gl.SliceLayout(1, ACC))
    yoff = g_lo.to(gl.int64) * S_yg + (r_lo + i_o).to(gl.int64) * S_yr - YOFF
    col = gl.arange(0, 2 * BK, layout=gl.SliceLayout(0, ACC))
    k = gl.program_id(1) * BK + col // 2
    optr = Y_ptr + yoff[:, None] + (k.to(gl.int64) * S_yk + col % 2)[None, :]
    gl.store(optr, y, mask=(t0 + i_o < Rc)[:, None] & (k < K)[None, :])
