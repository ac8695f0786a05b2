"""Fully fused DFT-GEMM stage chunk (``int8_gemm="fused_epi"``): row shifts, scaling, residues, the INT8
dots of every modulus (re and im), and the 32-bit epilogue in ONE launch; only the complex128 outputs
reach memory (16 B per output instead of 192 B of int32 products written and read back). This module
holds the Triton kernel (every device, and the interpreter on CPU) and the launcher; on Hopper the
launcher runs the same arithmetic as a Gluon kernel (:mod:`gpufield.fp64.fft.gemm_fused_gluon`, 1.5-1.8x
faster on an H200, same bits) wherever its tile shape fits (:func:`_gluon_fits`).

One program owns a tile of BR chunk rows x BK outputs per row. It reads its rows once, as float64
[BR, 2 NP] (column 2 j + h: real / imaginary part of x_j, contiguous in memory), computes the row shifts
and the exact integers X' = trunc(x 2^s) (as in
:func:`gpufield.fp64.fft.gemm_triton.fused_stage_gemm_triton`), split once into float64 hi/lo halves.
Then, one modulus p_i at a time (the outer loop, unrolled):

1. symmetric residues of X' (:mod:`gpufield.fp64.fft.stage_residues`: float64 arithmetic, exact, with no rounding or
   conversion instruction; by the schedule of
   :func:`gpufield.fp64.kernels.fft_epilogue_consts.residue_schedule` p = 256 is the low byte and pairs of
   odd moduli share one float64 reduction), which in that column order are already the
   int8 operand [BR, 2 NP];
2. one int8 dot with the 4M twiddle operand (:func:`operand_4m`: column 2 k of rows [wr; -wi], column
   2 k + 1 of rows [wi; wr]): Re = xr wr - xi wi and Im = xr wi + xi wr of every output side by side,
   exactly in int32 (|.| < 2^20). These are congruent mod p_i to the 3M combinations T1 - T2 and
   T3 - T1 - T2 that the standalone epilogue forms, and the epilogue only uses their residues mod p_i, so
   every later bit is the same; this needs no (re + im) residues and one dot instead of three. Rows of a
   tile spanning twiddle groups take one masked dot per group;
3. :func:`gpufield.fp64.kernels.fft_epilogue._fold_j`: Barrett mod p_i (constants for |x| <= 2^20,
   :data:`DOT_BOUND`: one multiply-high and no shift) and the multiply-adds into the
   CRT limb and quotient-chunk sums. The CRT bulk is a linear combination of the per-modulus residues,
   so after step 3 the two accumulators are dead: 2 int32 dot accumulators per output plus the L + NF
   sums live at a time, never the 48 raw products. With ``fold="f64"`` (:data:`FOLDS`) the same
   residues go into three exact FP64 sums instead (:func:`gpufield.fp64.kernels.fft_epilogue_f64._fold_f64`).

Finally :func:`gpufield.fp64.kernels.fft_epilogue._finish` (lift, carries, one rounding, scaling by
2^-(s + b_w); or :func:`gpufield.fp64.kernels.fft_epilogue_f64._finish_f64`, the same bits) and one store
per output. The same helpers run in the standalone epilogue kernel, and every
residue mod p_i is the same as on the unfused paths, so the outputs are bit-identical to them and to the exact
CPU oracle (tests/fp64/test_fft_fused_epi.py).

Shape legend: Rc chunk rows, N stage length (NP padded, >= 16), K outputs per row (BK padded), BR rows
per program, G twiddle groups, L moduli.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from gpufield.errors import InputError
from gpufield.fp64.fft.epilogue import EpilogueTables
from gpufield.fp64.fft.gemm_triton import (
    _abs_inf,
    _block,
    _fmax,
    _pow2_at_least,
    _row_scale,
)
from gpufield.fp64.fft.stage_residues import MAGIC, _low_word, _residue
from gpufield.fp64.kernels import interpreter_on
from gpufield.fp64.kernels.fft_epilogue import _finish, _fold_j, _init_like
from gpufield.fp64.kernels.fft_epilogue_consts import (
    RESIDUE_PAIRS,
    barrett_constants,
    kernel_constants,
    residue_schedule,
)
from gpufield.fp64.kernels.fft_epilogue_f64 import _finish_f64, _fold_f64, _init_f64, f64_constants

DOT_BOUND = 1 << 20
"""|Re|, |Im| <= 2 N 128^2 <= 2^20 for N <= 32 (int8 residues and twiddle residues, |.| <= 128): the Barrett
range of the fold (:func:`gpufield.fp64.kernels.fft_epilogue_consts.barrett_constants`, shift 0)."""

COMPILED: dict = {}
"""(moduli kind, r, variant) -> the last launched compiled fused kernel (``asm`` holds PTX/cubin)."""


@triton.jit
def _row_split(x, rows, rmask, BITS, s_ptr, amax_ptr):
    """Rows x (float64 [BR, 2 NP], padding 0) -> (hf, lfm, s): the row shifts s (stored with the row maxima,
    :func:`gpufield.fp64.fft.gemm_triton._row_scale`), the exact integers v = trunc(x 2^s) (|v| < 2^60)
    split as v = hi 2^29 + lo, hf = float(hi) and lfm = float(lo) + 1.5 2^52 (exact): the inputs of
    :func:`gpufield.fp64.fft.stage_residues._sym_res_rn`. Shared by the Triton and Gluon stage kernels (any layout)."""
    f1, f2, s = _row_scale(tl.reduce(_abs_inf(x), 1, _fmax), rows, rmask, BITS, s_ptr, amax_ptr)
    v = ((x * f1) * f2).to(tl.int64)  # exact x 2^s, truncated; padding 0 (residue 0)
    hv = v >> 29
    return hv.to(tl.float64), (v - (hv << 29)).to(tl.float64) + MAGIC, s


@triton.jit
def _grid_offsets(rows, c0, RG, S_g, S_r, OFF):
    """Offsets (int64, complex128 units) of chunk rows ``rows`` in a [G, R] row grid of any strides: grid row
    m = c0 + row at (m // RG) S_g + (m % RG) S_r - OFF (one division per row; m < 2^31)."""
    m = c0 + rows
    gm = m // RG
    return gm.to(tl.int64) * S_g + (m - gm * RG).to(tl.int64) * S_r - OFF


@triton.jit
def _load_rows(X_ptr, roff, rows, jj, Rc, N, S_xe):
    """Chunk rows ``rows`` at offsets ``roff`` (:func:`_grid_offsets`, complex128 units) as float64 [BR, 2 NP]
    (column 2 j + h: real / imaginary part of x_j, j S_xe complex elements further; zero outside the chunk and
    past 2 N). Shared by the Triton and Gluon stage kernels (any layout). The offsets are doubled here, so the
    compiler sees every (re, im) pair start 16-byte aligned and loads a pair with one 128-bit load."""
    xm = (rows < Rc)[:, None] & (jj < 2 * N)[None, :]
    off = 2 * (roff[:, None] + ((jj // 2).to(tl.int64) * S_xe)[None, :]) + (jj % 2)[None, :]
    return tl.load(X_ptr + off, mask=xm, other=0.0)


@triton.jit
def _b_tile(B_ptr, i: tl.constexpr, S_bg, S_bi, g, boff, bmask):
    """Modulus i's 4M operand tile [2 NP, 2 BK] of twiddle group g (zero outside the group's K)."""
    return tl.load(B_ptr + i * S_bi + g * S_bg + boff, mask=bmask, other=0)


@triton.jit
def _fused_epi_kernel(X_ptr, B_ptr, Y_ptr, s_ptr, amax_ptr,
                      Rc, RG, c0, G, N, K, S_xg, S_xr, S_xe, XOFF, S_bg, S_bi, BITS, TW, S_yg, S_yr, S_yk,
                      YOFF, NGS,
                      NP: tl.constexpr, BR: tl.constexpr, BK: tl.constexpr,
                      NGM: tl.constexpr, R: tl.constexpr, PM: tl.constexpr, FB: tl.constexpr, RK: tl.constexpr,
                      BM: tl.constexpr,
                      BB: tl.constexpr, CL: tl.constexpr, SI: tl.constexpr, FL: tl.constexpr,
                      FI: tl.constexpr, ML: tl.constexpr, W: tl.constexpr, L: tl.constexpr,
                      FW: tl.constexpr, NF: tl.constexpr, QSH: tl.constexpr, NW: tl.constexpr,
                      BSH: tl.constexpr, ASM: tl.constexpr, FOLD: tl.constexpr, FD: tl.constexpr,
                      FK: tl.constexpr, FM: tl.constexpr):
    pid = tl.program_id(0)
    # NGS > 1 (chunk of NGS whole twiddle groups): consecutive programs take the same row block of
    # consecutive groups, whose outputs are neighbours when the destination's group stride is one element
    t0 = (pid % NGS) * RG + (pid // NGS) * BR
    rows = t0 + tl.arange(0, BR)
    rmask = rows < Rc
    # the rows as real [BR, 2 NP] (column 2 j + h: re / im of x_j), the layout of the 4M operand's rows
    jj = tl.arange(0, 2 * NP)
    x = _load_rows(X_ptr, _grid_offsets(rows, c0, RG, S_xg, S_xr, XOFF), rows, jj, Rc, N, S_xe)
    hf, lfm, s = _row_split(x, rows, rmask, BITS, s_ptr, amax_ptr)
    k = tl.program_id(1) * BK + tl.arange(0, BK)  # this program's outputs of each row
    # 4M operand tile [2 NP, 2 BK]: column 2 k + c is output k's real (c = 0) or imaginary (c = 1) part
    kc = 2 * tl.program_id(1) * BK + tl.arange(0, 2 * BK)
    boff = jj[:, None] * (2 * K) + kc[None, :]
    bmask = (jj < 2 * NP)[:, None] & (kc < 2 * K)[None, :]
    g_lo = (c0 + t0) // RG
    grow = (c0 + rows) // RG
    zero = tl.zeros((BR, BK, 2), dtype=tl.int32)
    if FOLD:
        a64 = _init_f64(zero)
    else:
        sacc = _init_like(SI, L, zero)
        facc = _init_like(FI, NF, zero)
    if NGM == 1:
        b = _b_tile(B_ptr, 0, S_bg, S_bi, g_lo, boff, bmask)
    at2 = _low_word(lfm)  # (a pair's second residue, set by its first)
    for i in tl.static_range(R):
        at, at2 = _residue(hf, lfm, FB, PM, RK, i, ASM, at2)
        at = at.to(tl.int8)
        if NGM == 1:
            if i + 1 < R:  # the next modulus's tile is loaded while this one is folded
                bn = _b_tile(B_ptr, i + 1, S_bg, S_bi, g_lo, boff, bmask)
            acc = tl.dot(at, b, out_dtype=tl.int32)
            if i + 1 < R:
                b = bn
        else:
            acc = tl.zeros((BR, 2 * BK), dtype=tl.int32)
            for jg in tl.static_range(NGM):
                gi = g_lo + jg
                bj = _b_tile(B_ptr, i, S_bg, S_bi, gi, boff, bmask & (gi < G))
                am_ = tl.where((grow == gi)[:, None], at, tl.zeros_like(at))
                acc += tl.dot(am_, bj, out_dtype=tl.int32)
        if FOLD:
            a64 = _fold_f64(a64, tl.reshape(acc, (BR, BK, 2)), i, PM, BM, BB, BSH, FD, FK)
        else:
            sacc, facc = _fold_j(sacc, facc, tl.reshape(acc, (BR, BK, 2)), i, PM, BM, BB, CL, FL, L, NF, BSH,
                                 ASM)
    shift = (s + TW).to(tl.int32)
    if FOLD:
        y = _finish_f64(a64, shift[:, None, None], FM)
    else:
        y = _finish(sacc, facc, shift[:, None, None], ML, W, L, FW, NF, QSH, NW)
    # output row m = c0 + row of the [G, R] grid at (m // R) S_yg + (m % R) S_yr - YOFF (complex128 units)
    roff = _grid_offsets(rows, c0, RG, S_yg, S_yr, YOFF)
    optr = Y_ptr + 2 * (roff[:, None, None] + (k.to(tl.int64) * S_yk)[None, :, None]) + tl.arange(0, 2)[None, None, :]
    tl.store(optr, y, mask=rmask[:, None, None] & (k < K)[None, :, None])


def _groups_spanned(Rc: int, R: int, c0: int, bm: int) -> int:
    """Most twiddle groups one program's rows [c0 + pid bm, c0 + pid bm + bm) can touch (exact for one
    program, else the worst case over programs)."""
    if bm >= Rc:
        return (c0 + Rc - 1) // R - c0 // R + 1
    if R % bm == 0 and c0 % bm == 0:
        return 1
    return -(-(bm - 1) // R) + 1


DEFAULT_LAUNCH = {16: (64, 8, 128), 32: (64, 16, None)}
"""Padded stage length NP -> (largest rows per program, warps, register cap or None) of the Triton kernel on
CUDA (the Gluon kernel's are :data:`GLUON_LAUNCH`), the shapes measured fastest on one H200
(benchmarks/fp64_fused_epi_shapes.py; every shape gives the same bits). The measurements behind them:
docs/perf-notes.md, "issue 30: the kernel house"; counted with ``fused_static_count`` of
tools/fp64_sass_count.py."""


GLUON_LAUNCH = {16: (64, 8, 128, 1), 32: (64, 8, 128, 2)}
"""Padded stage length NP -> (rows per program, warps, register cap, column passes) of the Gluon kernel
(Hopper), the shapes measured fastest on one H200 with the rows in the six-step layout (benchmarks/
fp64_fused_epi_shapes.py ``--layout sixstep``; same bits for every shape). Measurements: docs/perf-notes.md,
"issue 30: the kernel house".
"""


def fused_epi_kwargs(kc) -> dict:
    """The keyword arguments of :func:`fused_epi_stage_triton` that a
    :class:`~gpufield.fp64.fft.kernel_config.KernelConfig` sets (None where it keeps the default)."""
    ln = kc.launch or ()
    return {"impl": kc.implementation, "fold": kc.fold, "max_registers": kc.max_nreg, "pairs": kc.residue_pairs,
            "asm": None if kc.epilogue_asm else False, "launch": ln or None}


def row_blocks(bm: int, np_: int, num_warps: int) -> int:
    """Row blocks of the Gluon kernel's residue phase: the [bm, 2 np_] row tile in blocks of at most 8 float64
    values per thread (more values live at once spill at 128 registers: 32-118 spill instructions at sm_90
    for 16 values per thread), one block after the other; blocks of at least 32 rows (a warp loads 32
    consecutive rows in the six-step layout), so 64 rows make at most 2 blocks."""
    return max(1, min(bm * 2 * np_ // (256 * num_warps), bm // 32))


def operand_4m(wres: list[torch.Tensor], moduli: tuple[int, ...], NP: int) -> torch.Tensor:
    """The 4M twiddle operand of the fused kernel from the per-modulus twiddle residues.

    Row 2 j + h multiplies x_j's real (h = 0) or imaginary (h = 1) residue; column 2 k + c gives output
    k's real (c = 0: rows [wr; -wi], so xr wr - xi wi = T1 - T2 mod p) or imaginary part (c = 1: rows
    [wi; wr], xr wi + xi wr = T3 - T1 - T2 mod p). One dot per modulus then yields both parts of every
    output side by side; -wi is re-reduced to a symmetric residue (int8 for every p).

    Args:
        wres: int8 [L, G, K, N] residues of wr, wi (and wr + wi, unused) from
            :func:`gpufield.fp64.fft.operands.stage_operands`.
        moduli: the L moduli.
        NP: padded stage length (rows 2 N .. 2 NP - 1 are zero).

    Returns:
        int8 [G, L, 2 NP, 2 K], contiguous, on the residues' device.
    """
    wr, wi = (w.to(torch.int32) for w in wres[:2])
    p = torch.tensor(moduli, dtype=torch.int32, device=wr.device).view(-1, 1, 1, 1)
    nwi = torch.remainder(-wi + p // 2, p) - p // 2
    L, G, K, N = wr.shape
    b = torch.zeros((G, L, 2 * NP, K, 2), dtype=torch.int8, device=wr.device)
    for c, (w0, w1) in enumerate(((wr, nwi), (wi, wr))):  # [L, G, K, N] x 2 -> [G, L, 2 N, K]
        b[:, :, :2 * N, :, c] = torch.stack([w0, w1], dim=-1).reshape(L, G, K, 2 * N).permute(1, 0, 3, 2).to(torch.int8)
    return b.view(G, L, 2 * NP, 2 * K)


IMPLS = ("gluon", "triton")
"""Kernels of the fused stage: ``"gluon"`` (default: :mod:`gpufield.fp64.fft.gemm_fused_gluon` wherever it
fits, see :func:`_gluon_fits`, else the Triton kernel) and ``"triton"`` (:func:`_fused_epi_kernel` always).
Both give the same bits (``KernelConfig.implementation``; timings: docs/perf-notes.md)."""


def _resolve_impl(impl: str | None) -> str:
    """``impl``, else ``"gluon"``.

    Raises:
        ValueError: not in :data:`IMPLS`.
    """
    impl = impl or "gluon"
    if impl not in IMPLS:
        raise ValueError(f"fused_epi impl must be one of {IMPLS}, got {impl!r}")
    return impl


FOLDS = ("int", "f64")
"""CRT folds of the fused stage (same bits): ``"int"``, the 32-bit integer limbs of
:mod:`gpufield.fp64.kernels.fft_epilogue`, and ``"f64"``, exact FP64 digit sums and a correctly rounded
three-term sum (:mod:`gpufield.fp64.kernels.fft_epilogue_f64`), which moves the fold from the
integer multiply-add pipe to the FP64 pipe. Default (``KernelConfig.fold`` None): ``"f64"`` in the Gluon
kernel, ``"int"`` in the Triton kernel (where the FP64 fold spills); timings: docs/perf-notes.md."""


def _fold_constants(tab: EpilogueTables, variant: str, fold: str | None, gluon: bool) -> dict:
    """The fold's kernel constants: ``FOLD`` and the FP64 fold's ``FD``, ``FK``, ``FM``
    (:func:`gpufield.fp64.kernels.fft_epilogue_f64.f64_constants`; zeros, never read, for the integer fold),
    for the fold :func:`_resolve_fold` picks. A default FP64 fold (``fold`` None) falls back to the integer one (same bits) for moduli sets whose FP64 sums
    would not be exact (17 or more INT8 moduli, e.g. 60-bit inputs and 60-bit twiddles).

    Raises:
        InputError: the FP64 fold asked for explicitly and not exact for these moduli.
        ValueError: an unknown fold (:func:`_resolve_fold`).
    """
    if _resolve_fold(fold, gluon) == "f64":
        try:
            return {"FOLD": True} | f64_constants(tab, variant)
        except InputError as e:
            if fold:
                raise InputError(f"fold={fold!r}: {e}; the integer fold (fold='int') gives the same bits") from None
    r = tab.num_moduli
    return {"FOLD": False, "FD": (0,) * (3 * r), "FK": (0,) * r, "FM": (0,) * 4}


def _resolve_fold(fold: str | None, gluon: bool) -> str:
    """``fold``, else ``"f64"`` for the Gluon kernel and ``"int"`` for the Triton kernel.

    Raises:
        ValueError: not one of :data:`FOLDS`.
    """
    fold = fold or ("f64" if gluon else "int")
    if fold not in FOLDS:
        raise ValueError(f"fused_epi fold must be one of {FOLDS}, got {fold!r}")
    return fold


def _gluon_device(impl: str, dev: torch.device) -> bool:
    """``impl`` (resolved) is ``"gluon"``, the device a Hopper GPU (wgmma) and Gluon importable."""
    if impl != "gluon" or dev.type != "cuda" or torch.cuda.get_device_capability(dev)[0] != 9:
        return False
    try:
        import gpufield.fp64.fft.gemm_fused_gluon  # noqa: F401  (experimental Triton API)
    except ImportError:
        return False
    return True


def _gluon_fits(impl: str, dev: torch.device, bm: int, ngm: int, bk: int, num_warps: int, passes: int = 1) -> bool:
    """Whether this launch runs the Gluon kernel: :func:`_gluon_device`, one twiddle group per program, 64
    rows (one wgmma M) and an int8 wgmma N (2 BK / (passes x warpgroups)) that is a multiple of 8."""
    if not _gluon_device(impl, dev):
        return False
    wn = num_warps // 4
    cb = 2 * bk // passes
    return (ngm == 1 and bm == 64 and num_warps in (4, 8, 16, 32) and 2 * bk % passes == 0 and cb % wn == 0
            and (cb // wn) % 8 == 0)


def _overlap(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether the byte extents of two strided tensors on the same storage intersect (conservative)."""
    if a.untyped_storage().data_ptr() != b.untyped_storage().data_ptr() or a.numel() == 0 or b.numel() == 0:
        return False

    def extent(t: torch.Tensor) -> tuple[int, int]:
        lo = t.data_ptr()
        return lo, lo + t.element_size() * (1 + sum((n - 1) * st for n, st in zip(t.shape, t.stride(), strict=True)))

    (a0, a1), (b0, b1) = extent(a), extent(b)
    return a0 < b1 and b0 < a1


def fused_epi_stage_triton(x: torch.Tensor, bits: int, twiddle_bits: int, tab: EpilogueTables, variant: str,
                           ops: dict, c0: int, R: int, block_m: int | None = None,
                           num_warps: int | None = None, asm: bool | None = None, block_k: int | None = None,
                           out: torch.Tensor | None = None, max_registers: int | None = None,
                           swizzle: bool | None = None,
                           impl: str | None = None,
                           fold: str | None = None,
                           rows: int | None = None,
                           passes: int | None = None,
                           out_shift: int = 0,
                           launch: tuple[int, ...] | None = None,
                           pairs: int | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A whole stage chunk in one launch: Y[m, k] = sum_j W_{(c0+m)//R}[k, j] x[m, j] in emulated FP64.

    Bit-identical to ``fused_stage_gemm_triton`` (or ``row_shifts`` + residues + any stage GEMM)
    followed by :func:`gpufield.fp64.kernels.fft_epilogue.epilogue_triton` with per-row shifts
    ``s + twiddle_bits``.

    Args:
        x: complex128 [Rc, N] chunk rows, or the stage's whole [G, R, N] row grid whose flattened rows
            c0 .. c0 + Rc - 1 form the chunk (``rows`` = Rc); any strides, N <= 32. The kernel reads the
            rows where they are (two-level row addressing as for ``out``; no copy): with consecutive rows
            one complex element apart, as a six-step pass over the outermost axis reads them, the Gluon
            kernel loads along the rows.
        bits: b_x (<= 60).
        twiddle_bits: b_w (the output scale is 2^-(s + b_w + out_shift)).
        tab: epilogue tables of the r INT8 moduli.
        variant: ``"crt"`` or ``"kulisch"`` (the 32-bit epilogue's variants).
        ops: the (cached) dict of :func:`gpufield.fp64.fft.operands.stage_operands` for these moduli
            (``wres``: int8 [L, G, K, N] x 3); the 4M operand (:func:`operand_4m`) is built once and kept
            in it under ``"b4m"``.
        c0: the chunk's first row in the flattened [G, R] row grid.
        R: rows per twiddle group.
        block_m: largest rows per program (default on CUDA: :data:`GLUON_LAUNCH` of the padded N where the
            Gluon kernel runs with that table's launch, i.e. on Hopper with aligned 64-row tiles, else
            :data:`DEFAULT_LAUNCH`; 4096 on CPU).
        num_warps: warps per program (default as ``block_m``).
        asm: PTX ``mad.lo.s32`` limb sums (as the standalone epilogue; None: on for CUDA).
        block_k: outputs of a row per program (power of two >= 16; default all K, padded): a smaller
            tile splits the row's outputs over programs, each recomputing the row's residues (fewer
            registers, more residue work). ``launch`` = ``(rows, warps[, outputs[, passes]])`` fills the
            arguments not given on CUDA (``KernelConfig.launch``; benchmarks/fp64_fused_epi_shapes.py).
            Every launch shape gives the same bits.
        out: optional complex128 [G, R, K] destination of any strides (e.g. a transposed view of the next
            stage's input): the kernel writes the chunk's rows c0 .. c0 + Rc - 1 of the flattened [G, R]
            grid straight into it (no [Rc, K] buffer, no copy).
        max_registers: registers per thread ptxas may use (Triton ``maxnreg``; CUDA only): at 128 two
            programs of 8 warps fit an SM, at the price of some spills. None: as ``block_m``; ``0``: no cap.
            Same bits.
        swizzle: order the programs group-interleaved (program t takes row block t // n of group t % n
            for a chunk of n whole groups) when ``out`` has a group stride of one element; None: on CUDA
            when the chunk allows it, False: never, True: also in the interpreter. Same bits.
        impl: ``"gluon"`` or ``"triton"`` (:data:`IMPLS`); None: ``"gluon"``. The Gluon kernel runs only where it fits
            (:func:`_gluon_fits`: Hopper, aligned 64-row tiles), else the Triton one. Same bits.
        fold: ``"int"`` or ``"f64"`` (:data:`FOLDS`); None: ``"f64"`` where the Gluon kernel runs and ``"int"`` for the
            Triton kernel. Same bits.
        rows: Rc when ``x`` is the [G, R, N] grid (default G R - c0); must be None for [Rc, N] rows.
        passes: Gluon kernel only: a program folds its 2 BK output columns in this many slices, one slice's
            twiddle tiles in shared memory at a time (less shared memory and fewer registers per program for
            the same residue work; 1 or 2, also ``launch``'s 4th field); None: :data:`GLUON_LAUNCH`
            of the padded N, or 1 when the launch is given in warps (``num_warps`` or ``launch``). The
            Triton kernel (non-Hopper GPUs, ``impl="triton"``, tiles the Gluon kernel does not take) has no
            passes and ignores it. Same bits.
        out_shift: an extra power of two in the one rounding: outputs Y 2^-(s + b_w + out_shift), e.g. the
            inverse transform's 1/N on its last stage (no second rounding, no overflow of an output that
            only fits after the division).
        launch: see ``block_k`` (CUDA only; ignored in the interpreter).
        pairs: modulus pairs sharing one float64 reduction in the residue schedule; None:
            :data:`~gpufield.fp64.kernels.fft_epilogue_consts.RESIDUE_PAIRS` of the padded N (as many as fit).
            Same bits.

    Returns:
        ``(y, s, amax)``: complex128 [Rc, K] outputs (``out`` itself when given), int64 [Rc] row shifts,
        float64 [Rc] row maxima (Inf where a row has Inf/NaN).

    Raises:
        ValueError: shapes or dtypes do not match (``x`` neither [Rc, N] rows nor the [G, R, N] grid, or
            ``rows`` given with [Rc, N] rows), a variant other than crt/kulisch, chunk rows outside
            the [G, R] grid, ``out`` sharing memory with ``x`` (:func:`gpufield.fp64.fft.stage.dft_stage`
            then writes through a buffer), ``block_m`` / ``block_k`` not a power of two >= 16, ``passes`` not
            1 or 2, or ``impl``
            not in :data:`IMPLS`, or ``fold`` not in :data:`FOLDS`.
    """
    wres = ops["wres"]
    L, G, K, Nw = wres[0].shape
    x = x.resolve_conj()
    if x.ndim == 3:  # the whole [G, R, N] grid: chunk rows c0 .. c0 + Rc - 1
        if tuple(x.shape[:2]) != (G, R):
            raise ValueError(f"x must be the [{G}, {R}, N] row grid or [Rc, N] chunk rows, got {tuple(x.shape)}")
        Rc = G * R - c0 if rows is None else rows
    elif x.ndim == 2 and rows is None:
        Rc = x.shape[0]
    else:
        raise ValueError(f"x must be [Rc, N] chunk rows (rows=None) or the [G, R, N] grid, got {tuple(x.shape)}")
    N = x.shape[-1]
    impl = _resolve_impl(impl)
    _resolve_fold(fold, False)  # a bad fold is refused before any work, like a bad impl
    if variant not in ("crt", "kulisch"):
        raise ValueError(f"fused_epi runs the 32-bit epilogue: variant 'crt' or 'kulisch', got {variant!r}")
    if x.dtype != torch.complex128 or Nw != N or wres[0].dtype != torch.int8 or L != tab.num_moduli or N > 32:
        raise ValueError("fused_epi stage shapes/dtypes do not match")
    for name, v in (("block_m", block_m), ("block_k", block_k)):
        if v is not None and (v < 16 or v & (v - 1)):
            raise ValueError(f"{name} must be a power of two >= 16, got {v}")
    if c0 < 0 or Rc < 0 or c0 + Rc > G * R:
        raise ValueError(f"chunk rows [{c0}, {c0 + Rc}) outside the stage's {G} x {R} row grid")
    if out is not None and _overlap(out, x):
        raise ValueError("out must not share memory with the input rows (programs would overwrite rows "
                         "other programs still read)")
    dev = x.device
    s = torch.empty(Rc, dtype=torch.int64, device=dev)
    amax = torch.empty(Rc, dtype=torch.float64, device=dev)
    if out is not None:
        if out.dtype != torch.complex128 or tuple(out.shape) != (G, R, K) or out.device != dev:
            raise ValueError(f"out must be complex128 [{G}, {R}, {K}] on {dev}, got {out.dtype} {tuple(out.shape)}")
        y = torch.view_as_real(out)
        ystr = (out.stride(0), out.stride(1), out.stride(2), 0)  # complex128 units, as every stride below
    else:
        y = torch.empty(2 * Rc * K, dtype=torch.float64, device=dev)
        ystr = (K * R, K, 1, K * c0)  # [Rc, K] rows from c0
    if Rc == 0:
        return (out if out is not None else torch.view_as_complex(y.view(0, K, 2))), s, amax
    if Rc * K >= 2**31:
        raise ValueError(f"fused_epi chunk of {Rc * K} outputs exceeds 2^31")
    if not (1 <= bits <= 60 and 1 <= twiddle_bits <= 60):  # |x 2^s| < 2^60 keeps the row integers in int64
        raise ValueError(f"fused_epi needs input and twiddle bits in [1, 60], got {bits} and {twiddle_bits}")
    if 64 * N << (bits + twiddle_bits) >= 15 * tab.M:  # |Y| <= 2 N 2^(b_x + b_w) < QUOT_RANGE M = (15 / 32) M
        raise ValueError(f"{tab.num_moduli} moduli are too few for {bits}-bit inputs and {twiddle_bits}-bit twiddles "
                         f"at N = {N} (the FP64 fold's quotient is exact for |Y| < (15/32) M)")
    cuda = dev.type == "cuda"
    NP = _pow2_at_least(N, 16)  # the joined (re, im) operand is 2 NP >= 32 wide: the int8 MMA K step
    if ops.get("b4m") is None or ops["b4m"].shape[2] != 2 * NP:
        ops["b4m"] = operand_4m(wres, tab.moduli, NP)
    b4 = ops["b4m"]
    shape = launch if cuda else None
    if shape:
        block_m, num_warps = block_m or shape[0], num_warps or shape[1]
        block_k = block_k or (shape[2] if len(shape) > 2 else None)
        passes = passes or (shape[3] if len(shape) > 3 else None)
    if passes not in (None, 1, 2):
        where = f"launch={tuple(shape)!r}: " if shape and len(shape) > 3 else ""
        raise ValueError(f"{where}passes must be 1 or 2, got {passes!r}")
    BK = min(_pow2_at_least(K, 16), _pow2_at_least(block_k or K, 16))

    def _shape(table: tuple) -> tuple[int, int, int, int]:
        """(passes, rows per program, groups per program, warps) with ``table``'s values where none given;
        a launch given in warps (argument or ``launch``) keeps one column pass unless passes are given."""
        cap = block_m or table[0]
        bm, ngm = _block(R, c0, cap, cap)  # unaligned chunks keep the tile shape, one masked dot per group
        return passes or (1 if num_warps else table[3]), bm, ngm, num_warps or table[1]

    if cuda:  # the Gluon kernel's launch table where it runs (Hopper, a fitting tile), else the Triton kernel's
        table = DEFAULT_LAUNCH[NP] + (1,)
        if _gluon_device(impl, dev):
            kp, bm, ngm, warps = _shape(GLUON_LAUNCH[NP])
            if _gluon_fits(impl, dev, bm, ngm, BK, warps, kp):
                table = GLUON_LAUNCH[NP]
        passes, bm, ngm, warps = _shape(table)
    else:  # interpreter: few large programs (each costs ~1 s of Python); one masked dot per group spanned
        bm = min(block_m or 4096, _pow2_at_least(Rc, 16))
        while (ngm := _groups_spanned(Rc, R, c0, bm)) > 16 and bm > 16:
            bm //= 2
        passes, warps = 1, num_warps or 4
    if asm is None:
        asm = cuda
    asm = asm and not interpreter_on()
    launch = {"num_warps": warps}
    if cuda:
        reg = table[2] if max_registers is None else max_registers  # 0: no cap
        if reg:
            launch["maxnreg"] = reg
    # group-interleaved program order when the destination's group stride is one complex element (a
    # six-step stage 2): neighbouring programs then fill each 32-byte sector together
    ngs = Rc // R if (out is not None and swizzle is not False and out.stride(0) == 1 and c0 % R == 0
                      and Rc % R == 0 and R % bm == 0 and ngm == 1 and (swizzle or cuda)) else 1
    xv = torch.view_as_real(x)  # the kernel reads rows where they are (strides in complex128 units)
    if x.ndim == 3:
        xstr = (x.stride(0), x.stride(1), x.stride(2), 0)
    else:  # [Rc, N] rows of the chunk: grid row m at (m - c0) S_r
        xstr = (R * x.stride(0), x.stride(0), x.stride(1), c0 * x.stride(0))
    xrows = xstr[1] == 1  # consecutive rows one complex element apart: the Gluon kernel loads along rows
    grid = (triton.cdiv(Rc, bm), triton.cdiv(K, BK))
    try:
        rk, fb = (residue_schedule(tab.moduli, pairs) if pairs is not None
                  else residue_schedule(tab.moduli, RESIDUE_PAIRS[NP], strict=False))  # default: as many as fit
    except InputError as e:
        raise InputError(f"residue_pairs={pairs}: {e}") from None
    consts = kernel_constants(tab, variant) | barrett_constants(tab.moduli, DOT_BOUND)
    gluon = _gluon_fits(impl, dev, bm, ngm, BK, launch["num_warps"], passes)
    consts |= _fold_constants(tab, variant, fold, gluon)
    if gluon:
        from gpufield.fp64.fft.gemm_fused_gluon import _fused_epi_gluon_kernel

        if ops.get("b4m_t") is None or ops["b4m_t"].shape[3] != 2 * NP:
            ops["b4m_t"] = b4.transpose(2, 3).contiguous()  # [G, L, 2 K, 2 NP]: K-major tiles for 8-bit wgmma
        bt = ops["b4m_t"]
        COMPILED[(tab.kind, tab.num_moduli, variant)] = _fused_epi_gluon_kernel[grid](
            xv, bt, y, s, amax, Rc, R, c0, N, K, *xstr, bt.stride(0), bt.stride(1), bits,
            twiddle_bits + out_shift, *ystr, ngs, NP=NP, BR=bm, BK=BK, ASM=asm, XROWS=xrows, FB=fb, RK=rk,
            KP=passes, RH=row_blocks(bm, NP, launch["num_warps"]), **consts,
            **launch)
    else:
        COMPILED[(tab.kind, tab.num_moduli, variant)] = _fused_epi_kernel[grid](
            xv, b4, y, s, amax, Rc, R, c0, G, N, K,
            *xstr, b4.stride(0), b4.stride(1), bits, twiddle_bits + out_shift, *ystr, ngs,
            NP=NP, BR=bm, BK=BK, NGM=ngm, ASM=asm, FB=fb, RK=rk, **consts, **launch)
    return (out if out is not None else torch.view_as_complex(y.view(Rc, K, 2))), s, amax
