"""The fused DFT-GEMM stage kernel written in Gluon (Triton's explicit-layout dialect) for Hopper: the same
arithmetic and bits as :mod:`gpufield.fp64.fft.gemm_fused_epi`, with the data movement chosen by hand.

Why a second kernel: the Triton kernel stages every modulus's residues and twiddle tile through shared memory
between two barriers and spills its row values at two programs per SM (profiles: docs/perf-notes.md).

Here one program (BR rows x BK outputs, 2 BK columns: output k's real part in column 2 k, imaginary in
2 k + 1) does:

1. loads the L twiddle tiles of its group into shared memory ([L, CB, 2 NP] int8, K-major as 8-bit wgmma
   requires; CB = 2 BK / KP columns, see 5.): with column passes and at least 4 bytes per thread by
   asynchronous copies (cp.async, no registers) that complete behind steps 2-3, else through registers
   (with one row block after the rows' loads are issued);
2. loads its rows (float64 [BR, 2 NP]) where they are in the stage's [G, R] row grid, in RH blocks of at most
   8 values per thread (:func:`gpufield.fp64.fft.gemm_fused_epi.row_blocks`), each next block's loads
   issued before this block's residues are computed (their latency behind that work); when consecutive
   rows are one complex element apart (``XROWS``, every stage of a six-step pass, which reads its input in
   place) it loads along the rows (a warp reads 32 rows' (re, im) pairs, 512 contiguous bytes) and exchanges
   the tile through shared memory into the row layout; then the row shifts and the exact split hi 2^29 + lo
   (as the Triton kernel, through the same helpers);
3. writes the symmetric residues of all L moduli (the schedule of
   :func:`gpufield.fp64.kernels.fft_epilogue_consts.residue_schedule`: p = 256 from the low byte, at N = 16
   four pairs of odd moduli from one float64 reduction each) to shared memory ([L, BR, 2 NP] int8,
   K-major), waits for any tile copies, then ONE fence and barrier: the row values are dead before the
   modulus loop starts (no spills);
4. per modulus one asynchronous wgmma, issued one modulus ahead so that the tensor cores can work while
   the previous modulus is folded (``FOLD``: the exact FP64 fold of
   :mod:`gpufield.fp64.kernels.fft_epilogue_f64`, the default, or the 32-bit integer one of
   :func:`gpufield.fp64.kernels.fft_epilogue._fold_j`); no barrier in the loop.
5. the matching finish (lift and one rounding) in the accumulator layout and one store per output; with
   KP = 2 column passes (:data:`gpufield.fp64.fft.gemm_fused_epi.GLUON_LAUNCH` at N = 32) steps 4-5 run
   once per half of the output columns, the second half's twiddle tiles copied into the same buffers
   between two barriers: half the shared memory for the tiles, so that two programs of 8 warps fit an SM.

The float64 constants of the residues and of the FP64 fold (``FB``, ``FD``, ``FK``, ``FM``: bit patterns
as int64) are kernel arguments, not constexprs as in the Triton kernel: ptxas then reads them from the
constant bank (operands or ULDC) instead of building each 64-bit immediate with two UMOV per thread
(sm_90 count at N = 16: 393 -> 373 SASS per real output). Row and grid strides arrive in complex128 units and
are doubled in the kernel, so the compiler sees each (re, im) pair 16-byte aligned and moves it with one
128-bit load or store. Measured stage times against the Triton kernel: docs/perf-notes.md.

Hopper only (wgmma, sm_90); Gluon kernels do not run in the Triton interpreter, so CI checks that it
compiles for sm_90 (tests/fp64/test_fft_fused_gluon.py) and the GPU runs compare it bit for bit with the
Triton kernel and the exact CPU oracle.

Shape legend: as :mod:`gpufield.fp64.fft.gemm_fused_epi` (Rc chunk rows, NP padded stage length, BR rows
and BK outputs per program, L moduli).
"""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere.async_copy import (
    async_copy_global_to_shared,
    commit_group,
    wait_group,
)
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    warpgroup_mma,
    warpgroup_mma_wait,
)

from gpufield.fp64.fft.gemm_fused_epi import _load_rows, _row_split
from gpufield.fp64.fft.stage_residues import _low_word, _residue
from gpufield.fp64.kernels.fft_epilogue import _finish, _fold_j, _init_like
from gpufield.fp64.kernels.fft_epilogue_f64 import _finish_f64, _fold_f64, _init_f64


@gluon.jit
def _rows_raw(X_ptr, t0, g_lo, r_lo, i0: gl.constexpr, Rc, N, S_xg, S_xr, S_xe, XOFF, RB: gl.constexpr,
              NP: gl.constexpr, XROWS: gl.constexpr, XL: gl.constexpr, XT: gl.constexpr):
    """Rows t0 + i0 .. t0 + i0 + RB - 1 of the program's tile as float64 [RB, 2 NP], loaded in the load layout:
    with ``XROWS`` (consecutive rows one complex element apart: a six-step pass over the outermost axis) ``XT``,
    each thread one row's (re, im) pair of 16 bytes, a warp 32 consecutive rows (512 bytes) per column pair;
    else ``XL``, along each row. :func:`_rows_xl` puts it into ``XL``."""
    if XROWS:
        i_t = i0 + gl.arange(0, RB, layout=gl.SliceLayout(1, XT))
        jj_t = gl.arange(0, 2 * NP, layout=gl.SliceLayout(0, XT))
        roff_t = g_lo.to(gl.int64) * S_xg + (r_lo + i_t).to(gl.int64) * S_xr - XOFF
        return _load_rows(X_ptr, roff_t, t0 + i_t, jj_t, Rc, N, S_xe)
    else:
        i_x = i0 + gl.arange(0, RB, layout=gl.SliceLayout(1, XL))
        jj = gl.arange(0, 2 * NP, layout=gl.SliceLayout(0, XL))
        roff = g_lo.to(gl.int64) * S_xg + (r_lo + i_x).to(gl.int64) * S_xr - XOFF
        return _load_rows(X_ptr, roff, t0 + i_x, jj, Rc, N, S_xe)


@gluon.jit
def _rows_xl(x, XROWS: gl.constexpr, XL: gl.constexpr):
    """A :func:`_rows_raw` tile in the row layout ``XL`` (with ``XROWS`` one exchange through shared memory)."""
    if XROWS:
        return gl.convert_layout(x, XL)
    else:
        return x


@gluon.jit
def _fused_epi_gluon_kernel(X_ptr, B_ptr, Y_ptr, s_ptr, amax_ptr,
                            Rc, RG, c0, N, K, S_xg, S_xr, S_xe, XOFF, S_bg, S_bi, BITS, TW, S_yg, S_yr, S_yk,
                            YOFF, NGS, NP: gl.constexpr, BR: gl.constexpr, BK: gl.constexpr, XROWS: gl.constexpr,
                            R: gl.constexpr, PM: gl.constexpr, FB, RK: gl.constexpr, BM: gl.constexpr,
                            BB: gl.constexpr, CL: gl.constexpr, SI: gl.constexpr, FL: gl.constexpr,
                            FI: gl.constexpr, ML: gl.constexpr, W: gl.constexpr, L: gl.constexpr,
                            FW: gl.constexpr, NF: gl.constexpr, QSH: gl.constexpr, NW: gl.constexpr,
                            BSH: gl.constexpr, ASM: gl.constexpr, FOLD: gl.constexpr, FD, FK, FM,
                            KP: gl.constexpr, RH: gl.constexpr, num_warps: gl.constexpr):
    # row tile [RB, 2 NP] float64 (RH blocks of RB = BR / RH rows, one after the other: fewer registers):
    # XV = min(8, RB 2 NP / threads) consecutive columns per thread, 2 NP / XV threads per row, 32 XV / (2 NP)
    # rows per warp (RB rows over all warps: no replication, e.g. 8 columns at (N = 16, 8 warps), 4 at
    # (16, 16) and (32, 32)); twiddle tiles [CB, 2 NP] int8 likewise with TV = CB 2 NP / (32 num_warps)
    # consecutive bytes per thread (each byte loaded once)
    RB: gl.constexpr = BR // RH
    XV: gl.constexpr = max(1, min(8, RB * 2 * NP // (32 * num_warps)))
    XL: gl.constexpr = gl.BlockedLayout([1, XV], [32 // (2 * NP // XV), 2 * NP // XV], [num_warps, 1], [1, 0])
    # KP column passes: the program's 2 BK output columns in KP slices of CB = 2 BK / KP, each folded and
    # stored before the next slice's twiddle tiles replace it in shared memory (less shared memory per
    # program for the same residue work)
    CB: gl.constexpr = 2 * BK // KP
    TV: gl.constexpr = max(1, CB * 2 * NP // (32 * num_warps))
    TL: gl.constexpr = gl.BlockedLayout([1, TV], [32 // (2 * NP // TV), 2 * NP // TV], [num_warps, 1], [1, 0])
    WN: gl.constexpr = num_warps // 4  # warpgroups side by side along the outputs
    ACC: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, WN],
                                                  instr_shape=[16, CB // WN, 32])
    A_SH: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BR, 2 * NP], gl.int8)
    B_SH: gl.constexpr = gl.NVMMASharedLayout.get_default_for([CB, 2 * NP], gl.int8)
    XT: gl.constexpr = gl.BlockedLayout([1, 2], [32, 1], [RB // 32, num_warps * 32 // RB], [1, 0])

    pid = gl.program_id(0)
    t0 = (pid % NGS) * RG + (pid // NGS) * BR
    # all rows of a program lie in one group g_lo of the [G, R] grid (:func:`_gluon_fits`): one division
    g_lo = (c0 + t0) // RG
    r_lo = c0 + t0 - g_lo * RG
    # the row loads first, the twiddle tiles' latency behind them (with row blocks: the first block's loads)
    xr = _rows_raw(X_ptr, t0, g_lo, r_lo, 0, Rc, N, S_xg, S_xr, S_xe, XOFF, RB, NP, XROWS, XL, XT)
    if RH == 1:
        x = _rows_xl(xr, XROWS, XL)

    # the group's L twiddle tiles, K-major: element (c, j) of modulus i at B_ptr + g S_bg + i S_bi + c 2 NP + j
    cb = gl.arange(0, CB, layout=gl.SliceLayout(1, TL))
    jb = gl.arange(0, 2 * NP, layout=gl.SliceLayout(0, TL))
    kcol = 2 * gl.program_id(1) * BK + cb
    toff = (kcol * (2 * NP))[:, None] + jb[None, :]  # int32 offsets in a tile; the rest is one scalar per tile
    b_grp = B_ptr + g_lo.to(gl.int64) * S_bg
    bmask = (kcol < 2 * K)[:, None] & (jb < 2 * NP)[None, :]
    # one allocation per tile (distinct buffers: no barrier between their stores). With column passes
    # (ASYNC_B) filled by asynchronous copies (cp.async: no registers) that run while the rows are loaded and
    # their residues computed, waited for before the barrier that precedes the first wgmma; else loaded into
    # registers first and stored (docs/perf-notes.md: cp.async measured slower at N = 16). cp.async moves
    # 4, 8 or 16 bytes per thread: TV >= 4.
    ASYNC_B: gl.constexpr = KP > 1 and TV >= 4
    b_smem = ()
    if ASYNC_B:
        for i in gl.static_range(R):
            b_smem = b_smem + (gl.allocate_shared_memory(gl.int8, [CB, 2 * NP], B_SH),)
            async_copy_global_to_shared(b_smem[i], b_grp + i * S_bi + toff, mask=bmask)
        commit_group()
    else:
        tiles = ()
        for i in gl.static_range(R):
            tiles = tiles + (gl.load(b_grp + i * S_bi + toff, mask=bmask, other=0),)
        for i in gl.static_range(R):
            b_smem = b_smem + (gl.allocate_shared_memory(gl.int8, [CB, 2 * NP], B_SH, tiles[i]),)
    a_smem = ()
    for _i in gl.static_range(R):
        a_smem = a_smem + (gl.allocate_shared_memory(gl.int8, [BR, 2 * NP], A_SH),)
    for hr in gl.static_range(RH):
        if RH > 1:
            x = _rows_xl(xr, XROWS, XL)
            if hr + 1 < RH:  # the next block's loads in flight while this block's residues are computed
                xr = _rows_raw(X_ptr, t0, g_lo, r_lo, (hr + 1) * RB, Rc, N, S_xg, S_xr, S_xe, XOFF, RB, NP,
                               XROWS, XL, XT)
        rows = t0 + hr * RB + gl.arange(0, RB, layout=gl.SliceLayout(1, XL))
        # the row split after the tiles are stored (or their copies started): no tile registers live here
        hf, lfm, s = _row_split(x, rows, rows < Rc, BITS, s_ptr, amax_ptr)
        at2 = _low_word(lfm)  # (a pair's second residue, set by its first)
        for i in gl.static_range(R):
            at, at2 = _residue(hf, lfm, FB, PM, RK, i, ASM, at2)
            if RH == 1:
                a_smem[i].store(at.to(gl.int8))
            else:
                a_smem[i].slice(hr * RB, RB, dim=0).store(at.to(gl.int8))
    if ASYNC_B:
        wait_group(0)
    fence_async_shared()
    gl.thread_barrier()

    for h in gl.static_range(KP):
        if h > 0:  # every warp's wgmmas of the last slice are done: its twiddle tiles give way to this one's
            gl.thread_barrier()
            hmask = ((kcol + h * CB) < 2 * K)[:, None] & (jb < 2 * NP)[None, :]
            for i in gl.static_range(R):
                tile = (b_grp + (i * S_bi + h * CB * 2 * NP)) + toff
                if ASYNC_B:
                    async_copy_global_to_shared(b_smem[i], tile, mask=hmask)
                else:
                    b_smem[i].store(gl.load(tile, mask=hmask, other=0))
            if ASYNC_B:
                commit_group()
                wait_group(0)
            fence_async_shared()
            gl.thread_barrier()
        zero = gl.zeros([BR, CB], gl.int32, layout=ACC)
        if FOLD:
            a64 = _init_f64(zero)
        else:
            sacc = _init_like(SI, L, zero)
            facc = _init_like(FI, NF, zero)
        tok = warpgroup_mma(a_smem[0], b_smem[0].permute((1, 0)), zero, use_acc=False, is_async=True)
        for i in gl.static_range(R):
            if i + 1 < R:  # the next modulus's product runs on the tensor cores while this one is folded
                nxt = warpgroup_mma(a_smem[i + 1], b_smem[i + 1].permute((1, 0)), zero, use_acc=False,
                                    is_async=True)
                acc = warpgroup_mma_wait(num_outstanding=1, deps=(tok, ))
                tok = nxt
            else:
                acc = warpgroup_mma_wait(num_outstanding=0, deps=(tok, ))
            if FOLD:
                a64 = _fold_f64(a64, acc, i, PM, BM, BB, BSH, FD, FK)
            else:
                sacc, facc = _fold_j(sacc, facc, acc, i, PM, BM, BB, CL, FL, L, NF, BSH, ASM)
        i_o = gl.arange(0, BR, layout=gl.SliceLayout(1, ACC))
        if RH == 1:
            shift = gl.convert_layout((s + TW).to(gl.int32), gl.SliceLayout(1, ACC))
        else:  # every block's shifts, stored by _row_split before the barrier
            shift = (gl.load(s_ptr + t0 + i_o, mask=t0 + i_o < Rc, other=0) + TW).to(gl.int32)
        if FOLD:
            y = _finish_f64(a64, shift[:, None], FM)
        else:
            y = _finish(sacc, facc, shift[:, None], ML, W, L, FW, NF, QSH, NW)
        # output row m = c0 + row of the [G, R] grid at (m // R) S_yg + (m % R) S_yr - YOFF (complex128
        # units); column 2 k + c holds part c of output k
        yoff = g_lo.to(gl.int64) * S_yg + (r_lo + i_o).to(gl.int64) * S_yr - YOFF
        col = h * CB + gl.arange(0, CB, layout=gl.SliceLayout(0, ACC))
        k = gl.program_id(1) * BK + col // 2
        optr = Y_ptr + 2 * (yoff[:, None] + (k.to(gl.int64) * S_yk)[None, :]) + (col % 2)[None, :]
        gl.store(optr, y, mask=(t0 + i_o < Rc)[:, None] & (k < K)[None, :])
