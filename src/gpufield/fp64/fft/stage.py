"""One emulated DFT-GEMM stage: per-row scaling, residues, modular 3M GEMMs, fused epilogue.

For a batch X in C^{G x R x N} and integer twiddle matrices W_g in Z^{K x N} (one per group g; the
Bailey "fused twiddles" of stage 2 are one matrix per k1, see :mod:`gpufield.fp64.fft.sixstep`), the
stage computes Y[g, b, k] = sum_j W_g[k, j] X[g, b, j] with (fp64.md 4.2):

1. per-row scaling: e_b = frexp exponent of the row's largest |re|, |im|, s_b = b_x - e_b;
   X' = trunc(X * 2^s_b) as int64, |X'| < 2^b_x (exact for every element within b_x - 53
   binades of the row maximum; GEMMul8's truncation, shared with the Ozaki-II GEMM);
2. exact twiddle integers W' = round(W * 2^b_w) from :mod:`gpufield.fp64.fft.twiddles`;
3. symmetric residues for every modulus and the three residue-domain Karatsuba (3M) products
   T1 = xr.wr, T2 = xi.wi, T3 = ((xr+xi) mod p).((wr+wi) mod p), each one modular GEMM per modulus
   on the chosen Ozaki-II backend (``ModularBackend.modular_matmul``, fp64.md 2.4 "Complex"), or,
   with ``int8_group = g``, one block-diagonal INT8 GEMM per g moduli (the layout of
   ``Int8Backend.modular_matmul_grouped``) whose output the Triton epilogue reads in place; with
   ``int8_gemm="triton"`` all of a chunk's GEMMs in one launch (:mod:`gpufield.fp64.fft.gemm_triton`);
   with ``int8_gemm="fused_epi"`` steps 1-4 of a chunk in one launch, the epilogue on the dot
   accumulators in registers (:mod:`gpufield.fp64.fft.gemm_fused_epi`: no int32 product planes);
4. the epilogue (mod reduction, 3M combine, exact CRT, one rounding) on torch ops or the fused
   Triton kernel, Y = Y' * 2^-(s_b + b_w).

CRT uniqueness: |Re Y'|, |Im Y'| <= N * 2 * 2^(b_x + b_w), so the plan requires
log2 M >= b_x + b_w + log2(N_max = 32) + 1 + 2 (two bits of margin for the quotient estimate).

The G x R rows are processed as one flattened row range, in chunks sized from a memory budget
(:mod:`gpufield.fp64.fft.memory`: 264 B of workspace per output on INT8 with 16 moduli), so the int32
products of all moduli (12 r bytes per output) exist for one chunk at a time; a chunk may span several
groups (one residue and one epilogue launch for all of them; cuBLAS GEMMs are issued per group). The
twiddle operands are built once per stage shape and cached on the device (:mod:`gpufield.fp64.fft.operands`).

Shape legend: G groups, R rows, N stage length (inner), K outputs per row, L moduli.
"""

from __future__ import annotations

import numpy as np
import torch

from gpufield.errors import InputError, NumericsError
from gpufield.fp64.fft.epilogue import epilogue_tables, epilogue_torch, sym_mod
from gpufield.fp64.fft.kernel_config import stage_gemm
from gpufield.fp64.fft.plan import BACKENDS as BACKENDS
from gpufield.fp64.fft.plan import EPILOGUES as EPILOGUES
from gpufield.fp64.fft.plan import INT8_GEMMS as INT8_GEMMS
from gpufield.fp64.fft.plan import MAX_STAGE
from gpufield.fp64.fft.plan import EmulatedFftPlan as EmulatedFftPlan
from gpufield.fp64.fft.plan import auto_num_moduli as auto_num_moduli
from gpufield.fp64.ozaki.moduli import moduli_table


def _shifts_amax(x_RN: torch.Tensor, bits: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Row shifts (see :func:`row_shifts`) and the rows' largest |re|, |im| (NaN/Inf propagate into it)."""
    amax = torch.view_as_real(x_RN).abs().amax(dim=(-2, -1))
    e = torch.frexp(amax)[1].to(torch.int64)
    return bits - torch.where(amax > 0, e, -(1 << 20)), amax


def row_shifts(x_RN: torch.Tensor, bits: int) -> torch.Tensor:
    """Per-row shifts s = b_x - e_row, e_row the frexp exponent of the row's largest |re|, |im|.

    Args:
        x_RN: complex128 [..., N], finite.
        bits: b_x.

    Returns:
        int64 [...]: s, so that |trunc(x * 2^s)| < 2^bits (all-zero rows get a huge s; their integers are 0).
    """
    return _shifts_amax(x_RN, bits)[0]


def _quantize(x_RN: torch.Tensor, s: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    from gpufield.fp64.ozaki.residues import scale_trunc

    shape = x_RN.shape
    flat_s = s.reshape(-1)
    out = [scale_trunc(v.reshape(-1, shape[-1]), flat_s).to(torch.int64).reshape(shape)
           for v in (x_RN.real, x_RN.imag)]
    return out[0], out[1]


def quantize_rows(x_RN: torch.Tensor, bits: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-row scaling of complex rows to b-bit integers, truncating (step 1 of the module docstring).

    X' = trunc(X * 2^s) exactly (GEMMul8 ``trunc_scalbn``; the same as
    :func:`gpufield.fp64.ozaki.residues.scale_trunc` and the fused Triton residue kernel).

    Args:
        x_RN: complex128 [..., N], finite.
        bits: b_x.

    Returns:
        ``(xr, xi, s)``: int64 real/imag integers with |.| < 2^bits, and the int64 row shifts s.
    """
    s = row_shifts(x_RN, bits)
    xr, xi = _quantize(x_RN, s)
    return xr, xi, s


def _residues3(ar: torch.Tensor, ai: torch.Tensor, p_L: torch.Tensor, dtype: torch.dtype) -> list[torch.Tensor]:
    """Symmetric residues [L, ...] of the 3M operands ar, ai and (ar + ai) for every modulus."""
    p_L = p_L.reshape((-1,) + (1,) * ar.ndim)
    rr = sym_mod(ar[None], p_L)
    ri = sym_mod(ai[None], p_L)
    rs = sym_mod(rr + ri, p_L)
    return [t.to(dtype) for t in (rr, ri, rs)]


def check_finite_flags(flags: list[torch.Tensor]) -> None:
    """Raise NumericsError if any collected row maximum is Inf/NaN (one host sync for all of them).

    Raises:
        NumericsError: a stage saw Inf or NaN (in the input, or from overflow near DBL_MAX).
    """
    if flags and not bool(torch.isfinite(torch.stack(flags)).all()):
        raise NumericsError("emulated FFT input has Inf or NaN (or an intermediate stage overflowed past "
                            "DBL_MAX); the emulation only handles finite values")


def dft_stage(x_GRN: torch.Tensor, idx_GKN: np.ndarray, plan: EmulatedFftPlan, *, out: torch.Tensor | None = None,
              flags: list | None = None, chunk_outputs: int | None = None, out_shift: int = 0) -> torch.Tensor:
    """Y[g, b, k] = sum_j W_g[k, j] X[g, b, j] with emulated FP64 (see module docstring).

    The G x R rows are processed as one flattened row range in chunks of ``chunk_outputs`` outputs:
    one row-shift reduction, one residue launch and one epilogue launch per chunk for all groups
    together; only the tensor-core GEMMs are issued per group (their B operand differs), on the
    cached operands of :mod:`gpufield.fp64.fft.operands`. Nothing in the loop waits for the device.

    Args:
        x_GRN: complex128 [G, R, N] (N <= 32), on CPU or CUDA, any strides (the fused kernel reads the rows
            where they are; the other paths copy a chunk's rows when they do not form one strided block).
        idx_GKN: int array [G, K, N] of twiddle-table indices (forward roots).
        plan: :class:`EmulatedFftPlan`.
        out: optional complex128 [G, R, K] destination of any strides (e.g. a transposed view of the
            next stage's buffer); the results are written there and ``out`` is returned.
        flags: optional list; each chunk appends a 0-d device tensor (its largest |re|, |im|) and the
            finiteness check is left to the caller (:func:`check_finite_flags`, once per transform).
            None: the input is checked here (one host sync).
        chunk_outputs: outputs per chunk; None = :func:`gpufield.fp64.fft.memory.chunk_outputs_for`.
        out_shift: outputs are Y 2^-out_shift, in the stage's one rounding (the inverse transform's 1/N on
            its last stage).

    Returns:
        complex128 [G, R, K] on the input's device.

    Raises:
        NumericsError: non-finite input, when ``flags`` is None (the emulation has no Inf/NaN path).
        InputError: shapes do not match.
    """
    from gpufield.fp64.fft.memory import chunk_outputs_for, chunk_segments, place_rows, take_rows
    from gpufield.fp64.fft.operands import stage_operands

    G, R, N = x_GRN.shape
    if idx_GKN.shape[0] != G or idx_GKN.shape[2] != N or N > MAX_STAGE:
        raise InputError(f"stage shapes do not match: x {tuple(x_GRN.shape)}, twiddles {idx_GKN.shape}")
    if flags is None:
        check_finite_flags([torch.view_as_real(x_GRN).abs().amax()] if x_GRN.numel() else [])
    K = idx_GKN.shape[1]
    if out is not None and tuple(out.shape) != (G, R, K):
        raise InputError(f"out must be [{G}, {R}, {K}], got {tuple(out.shape)}")
    dev = x_GRN.device
    r = plan.resolved_num_moduli
    table = moduli_table(plan.moduli_kind, r)
    tab = epilogue_tables(plan.moduli_kind, r)
    bk = plan.modular_backend()
    kc = plan.kernels
    gsz = plan.int8_group
    ops = stage_operands(idx_GKN, plan.twiddle_bits, table.moduli, bk.residue_dtype, gsz, dev)
    wres, bd = ops["wres"], ops["bd"]
    if plan.epilogue == "triton":
        from functools import partial

        from gpufield.fp64.kernels.fft_epilogue import epilogue_triton
        from gpufield.fp64.kernels.residue import scale_residues_triton

        run_epi = partial(epilogue_triton, impl=kc.epilogue, asm=None if kc.epilogue_asm else False)
    else:
        run_epi = epilogue_torch
    Mrows = G * R
    rows = max(1, (chunk_outputs or chunk_outputs_for(plan, x_GRN.shape, dev)) // K)
    y = out
    if y is None and rows < Mrows:
        y = torch.empty((G, R, K), dtype=torch.complex128, device=dev)
    Q = -(-r // gsz)
    # the dispatch table's stage path (kernel_config.STAGE_PATHS): with fewer rows per twiddle group than the
    # smallest tile on CUDA (e.g. stage 2 of a 1-D transform) fused_epi runs per-group cuBLAS GEMMs, same bits
    gemm = stage_gemm(plan, dev.type == "cuda", R)
    if gemm == "torch":
        gemm = "cublas"  # the torch epilogue's GEMMs: ModularBackend.modular_matmul per group (loop below)
    for c0 in range(0, Mrows, rows):
        c1 = min(Mrows, c0 + rows)
        Rc = c1 - c0
        if gemm == "fused_epi":  # the whole chunk in one launch: no T, no residue planes
            from gpufield.fp64.fft.gemm_fused_epi import (
                _overlap,
                fused_epi_kwargs,
                fused_epi_stage_triton,
            )

            # the kernel reads the chunk's rows where they are in the [G, R] grid (no copy, any strides)
            direct = y is not None and not _overlap(y, x_GRN)  # rows written straight into y, unless in place
            res, _, amax = fused_epi_stage_triton(x_GRN, plan.input_bits, plan.twiddle_bits, tab, plan.variant,
                                                  ops, c0, R, out=y if direct else None, rows=Rc,
                                                  out_shift=out_shift, **fused_epi_kwargs(kc))
            if flags is not None:
                flags.append(amax.amax())
            if y is None:
                return res.view(G, R, K)
            if not direct:
                place_rows(y, res, c0, c1)
            continue
        xc = take_rows(x_GRN, c0, c1)
        if gsz > 1:  # block-diagonal grouped INT8 GEMMs into T, read in place by the kernel
            T = torch.empty((3, Q, Rc, gsz * K), dtype=torch.int32, device=dev)
        else:
            T = torch.empty((r, 3, Rc, K), dtype=torch.int32, device=dev)
        if gemm == "fused":  # shifts, residues and GEMMs in one launch
            from gpufield.fp64.fft.gemm_triton import fused_stage_gemm_triton

            s, amax = fused_stage_gemm_triton(xc, plan.input_bits, table.moduli, gsz, bd,
                                              T if gsz > 1 else T.transpose(0, 1), c0, R)
            xres = None
        else:
            s, amax = _shifts_amax(xc, plan.input_bits)
        if flags is not None:
            flags.append(amax.amax())
        if gemm == "fused":
            pass
        elif plan.epilogue == "triton":  # fused scaling + residues of re, im, re+im (one pass)
            # bounded: s = b_x - e_row keeps |x 2^s| < 2^b_x <= 2^60, so the big-value pass is never needed
            # (not launched, not compiled); non-finite inputs raise after the transform (flags)
            if gsz > 1:  # written straight in the grouped layout [3, Q, Rc, g*N] (no regrouping copy)
                xres = scale_residues_triton(xc, s, table, bk.residue_dtype, group=gsz, bounded=True)
            else:
                xres = scale_residues_triton(xc, s, table, bk.residue_dtype, bounded=True).view(3, r, Rc, N)
        else:
            xres = _residues3(*_quantize(xc, s), tab.tensors(str(dev))["p"], bk.residue_dtype)  # 3 x [L, Rc, N]
        shift = s + (plan.twiddle_bits + out_shift)  # per row; the Triton epilogue reads it per row (shift_row_len = K)
        epi_kw = {"shift_row_len": K} if plan.epilogue == "triton" else {}
        if plan.epilogue != "triton":
            shift = shift[:, None].expand(Rc, K).reshape(-1)
        if gemm == "triton":  # one launch for every group, component and moduli group
            from gpufield.fp64.fft.gemm_triton import stage_gemm_triton

            stage_gemm_triton(xres, bd, T if gsz > 1 else T.transpose(0, 1), c0, R)
        for gi, s0, s1 in chunk_segments(c0, c1, R) if gemm == "cublas" else ():
            for comp in range(3):
                if gsz > 1:
                    for q in range(Q):
                        bk._int_mm(xres[comp, q, s0:s1], bd[comp, gi, q], T[comp, q, s0:s1])
                elif plan.backend_name == "int8":  # _int_mm writes each [rows, K] plane T[l, comp] in place
                    bk.modular_matmul(xres[comp][:, s0:s1], wres[comp][:, gi], table, out=T[:, comp, s0:s1])
                else:
                    T[:, comp, s0:s1] = bk.modular_matmul(xres[comp][:, s0:s1], wres[comp][:, gi], table)
        del xres
        if gsz > 1:
            res = run_epi(T, shift, tab, plan.variant, grouped=(gsz, Rc, K), **epi_kw)
        else:
            res = run_epi(T.view(r, 3, -1), shift, tab, plan.variant, **epi_kw)
        del T
        if y is None:  # one chunk, no destination: the epilogue's output is the stage output
            return res.view(G, R, K)
        place_rows(y, res.view(Rc, K), c0, c1)
    return y
