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
   with ``int8_group = g``, one block-diagonal INT8 GEMM per g moduli
   (``Int8Backend.modular_matmul_grouped``) whose output the Triton epilogue reads in place;
4. the epilogue (mod reduction, 3M combine, exact CRT, one rounding) on torch ops or the fused
   Triton kernel, Y = Y' * 2^-(s_b + b_w).

CRT uniqueness: |Re Y'|, |Im Y'| <= N * 2 * 2^(b_x + b_w), so the plan requires
log2 M >= b_x + b_w + log2(N_max = 32) + 1 + 2 (two bits of margin for the quotient estimate).

The stage is processed in chunks of ``chunk_outputs`` outputs (per group g and row block), so the
int32 products of all moduli (12 r bytes per output) exist for one chunk at a time.

Shape legend: G groups, R rows, N stage length (inner), K outputs per row, L moduli.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from gpufield.errors import InputError, NumericsError
from gpufield.fp64.fft.epilogue import VARIANTS, epilogue_tables, epilogue_torch, sym_mod
from gpufield.fp64.fft.twiddles import twiddle_table
from gpufield.fp64.ozaki.moduli import RAW_MODULI, moduli_table

BACKENDS = ("cpu", "int8", "fp8")
"""Backend names: the Ozaki-II modular GEMM backends of :mod:`gpufield.fp64.ozaki.backends`
(``cpu`` = ``CpuExactBackend``, exact int64 products; ``int8`` = ``torch._int_mm``; ``fp8`` =
``torch._scaled_mm`` on E4M3 digits, 3 GEMMs per modulus, exact on Hopper for k = 32)."""

MAX_STAGE = 32
"""Largest DFT length of one GEMM stage (the GEMM inner dimension k)."""

EPILOGUES = ("torch", "triton")


def _needed_log2_m(input_bits: int, twiddle_bits: int) -> float:
    return input_bits + twiddle_bits + np.log2(MAX_STAGE) + 1 + 2


@dataclass(frozen=True, kw_only=True, slots=True)
class EmulatedFftPlan:
    """How the emulated FFT runs.

    Attributes:
        backend: ``"cpu"`` (exact float64 BLAS residue GEMMs), ``"int8"`` (torch._int_mm) or
            ``"fp8"`` (torch._scaled_mm on E4M3 digits).
        variant: CRT reconstruction, ``"garner"``, ``"crt"`` or ``"kulisch"``.
        moduli: ``"int8"`` or ``"fp8"`` moduli table; None = the backend's own (cpu: int8).
        num_moduli: number of moduli r; None = the smallest r that keeps the CRT unique.
        input_bits: b_x, bits of the per-row scaled input integers (default 58: with truncation,
            58 bits keep wide-exponent-range inputs at ~0.4x numpy's error; 56 gives ~0.7x).
        twiddle_bits: b_w, bits of the twiddle integers (default 56, fp64.md 4.3).
        epilogue: ``"torch"`` (reference ops) or ``"triton"`` (the fused Triton kernels: scaling +
            residues, :func:`gpufield.fp64.kernels.residue.scale_residues_triton`, and the stage
            epilogue, :mod:`gpufield.fp64.kernels.fft_epilogue`; CUDA, or TRITON_INTERPRET=1 on CPU).
        chunk_outputs: complex outputs per GEMM+epilogue chunk (memory bound on intermediates:
            about 12*r bytes per output with int32 products).
        int8_group: INT8 backend with the Triton epilogue: g moduli per block-diagonal ``_int_mm``
            (``Int8Backend.modular_matmul_grouped``: a k = 32 GEMM is far below peak in cuBLAS, g
            products side by side make it g times wider); 1 = one GEMM per modulus. A power of two <= 16.

    Raises:
        InputError: any field out of range, or ``num_moduli`` too small for CRT uniqueness.
    """

    backend: str = "cpu"
    variant: str = "crt"
    moduli: str | None = None
    num_moduli: int | None = None
    input_bits: int = 58
    twiddle_bits: int = 56
    epilogue: str = "torch"
    chunk_outputs: int = 1 << 20
    int8_group: int = 1

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise InputError(f"backend must be one of {BACKENDS}, got {self.backend!r}")
        if self.variant not in VARIANTS:
            raise InputError(f"variant must be one of {VARIANTS}, got {self.variant!r}")
        if self.epilogue not in EPILOGUES:
            raise InputError(f"epilogue must be one of {EPILOGUES}, got {self.epilogue!r}")
        if self.moduli not in (None, "int8", "fp8"):
            raise InputError(f"moduli must be 'int8' or 'fp8', got {self.moduli!r}")
        if self.backend != "cpu" and self.moduli not in (None, self.backend):
            raise InputError(f"backend {self.backend!r} runs only on {self.backend} moduli")
        for name in ("input_bits", "twiddle_bits"):
            if not 8 <= getattr(self, name) <= 60:
                raise InputError(f"{name} must be in [8, 60], got {getattr(self, name)}")
        if self.int8_group not in (1, 2, 4, 8, 16):
            raise InputError(f"int8_group must be 1, 2, 4, 8 or 16, got {self.int8_group}")
        if self.int8_group > 1 and (self.backend != "int8" or self.epilogue != "triton"):
            raise InputError("int8_group > 1 needs backend='int8' and epilogue='triton'")
        if self.chunk_outputs < 1024:
            raise InputError(f"chunk_outputs must be >= 1024, got {self.chunk_outputs}")
        if self.num_moduli is not None:
            t = moduli_table(self.moduli_kind, self.num_moduli)
            need = _needed_log2_m(self.input_bits, self.twiddle_bits)
            if t.log2_M < need:
                raise InputError(
                    f"{self.num_moduli} {self.moduli_kind} moduli give log2 M = {t.log2_M:.1f} < {need:.1f} "
                    f"needed for {self.input_bits}-bit inputs and {self.twiddle_bits}-bit twiddles"
                )

    @property
    def moduli_kind(self) -> str:
        """The moduli table used (``"int8"`` or ``"fp8"``)."""
        if self.moduli is not None:
            return self.moduli
        return "fp8" if self.backend == "fp8" else "int8"

    @property
    def resolved_num_moduli(self) -> int:
        """r: the given count, or the smallest keeping the CRT unique for these bit widths."""
        if self.num_moduli is not None:
            return self.num_moduli
        return auto_num_moduli(self.moduli_kind, self.input_bits, self.twiddle_bits)


def auto_num_moduli(kind: str, input_bits: int = 58, twiddle_bits: int = 56) -> int:
    """Smallest number of ``kind`` moduli whose product M keeps the stage CRT unique.

    Raises:
        InputError: even all moduli of the table are not enough.
    """
    need = _needed_log2_m(input_bits, twiddle_bits)
    for r in range(2, len(RAW_MODULI[kind]) + 1):
        if moduli_table(kind, r).log2_M >= need:
            return r
    raise InputError(f"no {kind} moduli count reaches log2 M >= {need:.1f}")


def row_shifts(x_RN: torch.Tensor, bits: int) -> torch.Tensor:
    """Per-row shifts s = b_x - e_row, e_row the frexp exponent of the row's largest |re|, |im|.

    Args:
        x_RN: complex128 [..., N], finite.
        bits: b_x.

    Returns:
        int64 [...]: s, so that |trunc(x * 2^s)| < 2^bits (all-zero rows get a huge s; their integers are 0).
    """
    amax = torch.maximum(x_RN.real.abs(), x_RN.imag.abs()).amax(dim=-1)
    e = torch.frexp(amax)[1].to(torch.int64)
    return bits - torch.where(amax > 0, e, torch.full_like(e, -(1 << 20)))


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
    from gpufield.fp64.ozaki.residues import scale_trunc

    s = row_shifts(x_RN, bits)
    shape = x_RN.shape
    flat_s = s.reshape(-1)
    out = [scale_trunc(v.reshape(-1, shape[-1]), flat_s).to(torch.int64).reshape(shape)
           for v in (x_RN.real, x_RN.imag)]
    return out[0], out[1], s


def twiddle_ints(idx_GKN: np.ndarray, bits: int, device: torch.device, inverse: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Integer twiddles W' = round(W * 2^bits) for table indices (forward: W = cos - i sin).

    Args:
        idx_GKN: int array of indices into the 1024-entry table.
        bits: b_w.
        device: target device.
        inverse: use W = cos + i sin (conjugate roots).

    Returns:
        int64 ``(wr, wi)`` tensors shaped like ``idx_GKN``.
    """
    c, s = twiddle_table(bits)
    wr = torch.from_numpy(c[idx_GKN]).to(device)
    wi = torch.from_numpy(s[idx_GKN]).to(device)
    return wr, (wi if inverse else -wi)


def _backend(plan: EmulatedFftPlan):
    from gpufield.fp64.ozaki.backends import CpuExactBackend, Fp8Backend, Int8Backend

    if plan.backend == "cpu":
        return CpuExactBackend(plan.moduli_kind)
    return Int8Backend(kernels="torch") if plan.backend == "int8" else Fp8Backend(kernels="torch")


def _residues3(ar: torch.Tensor, ai: torch.Tensor, p_L: torch.Tensor, dtype: torch.dtype) -> list[torch.Tensor]:
    """Symmetric residues [L, ...] of the 3M operands ar, ai and (ar + ai) for every modulus."""
    p_L = p_L.reshape((-1,) + (1,) * ar.ndim)
    rr = sym_mod(ar[None], p_L)
    ri = sym_mod(ai[None], p_L)
    rs = sym_mod(rr + ri, p_L)
    return [t.to(dtype) for t in (rr, ri, rs)]


def dft_stage(x_GRN: torch.Tensor, idx_GKN: np.ndarray, plan: EmulatedFftPlan) -> torch.Tensor:
    """Y[g, b, k] = sum_j W_g[k, j] X[g, b, j] with emulated FP64 (see module docstring).

    Args:
        x_GRN: complex128 [G, R, N] (N <= 32), on CPU or CUDA.
        idx_GKN: int array [G, K, N] of twiddle-table indices (forward roots).
        plan: :class:`EmulatedFftPlan`.

    Returns:
        complex128 [G, R, K] on the input's device.

    Raises:
        NumericsError: non-finite input (the emulation has no Inf/NaN path; policy: refuse loudly).
        InputError: shapes do not match.
    """
    G, R, N = x_GRN.shape
    if idx_GKN.shape[0] != G or idx_GKN.shape[2] != N or N > MAX_STAGE:
        raise InputError(f"stage shapes do not match: x {tuple(x_GRN.shape)}, twiddles {idx_GKN.shape}")
    if not bool(torch.isfinite(torch.view_as_real(x_GRN)).all()):
        raise NumericsError("emulated FFT input has Inf or NaN; the emulation only handles finite values")
    K = idx_GKN.shape[1]
    dev = x_GRN.device
    r = plan.resolved_num_moduli
    table = moduli_table(plan.moduli_kind, r)
    tab = epilogue_tables(plan.moduli_kind, r)
    wr_int, wi_int = twiddle_ints(idx_GKN, plan.twiddle_bits, dev)
    p_L = tab.tensors(str(dev))["p"]
    bk = _backend(plan)
    wres = _residues3(wr_int, wi_int, p_L, bk.residue_dtype)  # 3 x [L, G, K, N]
    y = torch.empty((G, R, K), dtype=torch.complex128, device=dev)
    rows = max(1, plan.chunk_outputs // K)
    if plan.epilogue == "triton":
        from gpufield.fp64.kernels.fft_epilogue import epilogue_triton as run_epi
    else:
        run_epi = epilogue_torch
    for g in range(G):
        for r0 in range(0, R, rows):
            xc = x_GRN[g, r0:r0 + rows]
            Rc = xc.shape[0]
            gsz = plan.int8_group
            if plan.epilogue == "triton":  # fused scaling + residues of re, im, re+im (one pass)
                from gpufield.fp64.kernels.residue import scale_residues_triton

                s = row_shifts(xc, plan.input_bits)
                if gsz > 1:  # written straight in the grouped layout [3, Q, Rc, g*N] (no regrouping copy)
                    xres = scale_residues_triton(xc, s, table, bk.residue_dtype, group=gsz)
                else:
                    xres = scale_residues_triton(xc, s, table, bk.residue_dtype).view(3, r, Rc, N)
            else:
                xr, xi, s = quantize_rows(xc, plan.input_bits)
                xres = _residues3(xr, xi, p_L, bk.residue_dtype)  # 3 x [L, Rc, N]
                del xr, xi
            shift = (s + plan.twiddle_bits)[:, None].expand(Rc, K).reshape(-1)
            if gsz > 1:  # block-diagonal grouped INT8 GEMMs, written into Tg and read in place by the kernel
                Q = -(-r // gsz)
                Tg = torch.empty((3, Q, Rc, gsz * K), dtype=torch.int32, device=dev)
                for comp in range(3):
                    bk.modular_matmul_grouped(xres[comp], wres[comp][:, g], table, gsz, out=Tg[comp])
                del xres
                y[g, r0:r0 + Rc] = run_epi(Tg, shift, tab, plan.variant, grouped=(gsz, Rc, K)).view(Rc, K)
                continue
            T = torch.empty((r, 3, Rc, K), dtype=torch.int32, device=dev)
            for comp in range(3):
                if plan.backend == "int8":  # _int_mm writes each [Rc, K] plane T[l, comp] in place
                    bk.modular_matmul(xres[comp], wres[comp][:, g], table, out=T[:, comp])
                else:
                    T[:, comp] = bk.modular_matmul(xres[comp], wres[comp][:, g], table)
            del xres
            y[g, r0:r0 + Rc] = run_epi(T.view(r, 3, -1), shift, tab, plan.variant).view(Rc, K)
    return y
