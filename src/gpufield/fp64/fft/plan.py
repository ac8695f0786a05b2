"""The emulated FFT's plan: backend, CRT variant, moduli, bit widths, kernels and chunking
(:class:`EmulatedFftPlan`, validated on construction), and the moduli count that keeps a stage's CRT unique
(:func:`auto_num_moduli`). Split out of :mod:`gpufield.fp64.fft.stage`, which re-exports both.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass

import numpy as np

from gpufield.errors import InputError
from gpufield.fp64.fft.epilogue import VARIANTS
from gpufield.fp64.ozaki.moduli import RAW_MODULI, moduli_table

BACKENDS = ("cpu", "int8", "fp8")
"""Backend names: the Ozaki-II modular GEMM backends of :mod:`gpufield.fp64.ozaki.backends`
(``cpu`` = ``CpuExactBackend``, exact int64 products; ``int8`` = ``torch._int_mm``; ``fp8`` =
``torch._scaled_mm`` on E4M3 digits, 3 GEMMs per modulus, exact on Hopper for k = 32)."""

MAX_STAGE = 32
"""Largest DFT length of one GEMM stage (the GEMM inner dimension k)."""

EPILOGUES = ("torch", "triton")
INT8_GEMMS = ("cublas", "triton", "fused", "fused_epi")


def _needed_log2_m(input_bits: int, twiddle_bits: int) -> float:
    return input_bits + twiddle_bits + np.log2(MAX_STAGE) + 1 + 2


@dataclass(frozen=True, kw_only=True, slots=True)
class EmulatedFftPlan:
    """How the emulated FFT runs.

    Attributes:
        backend: ``"cpu"`` (exact int64 residue products: the ``"cpu-exact"`` backend of
            :func:`gpufield.fp64.ozaki_matmul`, on any device), ``"int8"`` (torch._int_mm) or
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
        chunk_outputs: cap on the complex outputs per GEMM+epilogue chunk; None = no cap (the chunk
            then comes from the memory budget, :func:`gpufield.fp64.fft.memory.chunk_outputs_for`).
        memory_budget_bytes: bytes the chunk workspace may use (about 15 r + 24 B per output on INT8,
            :mod:`gpufield.fp64.fft.memory`); None = on CUDA half of the memory available at the start of
            the transform after its own full-size arrays, on CPU chunks of 2^20 outputs.
        int8_group: INT8 backend with the Triton epilogue: g moduli per block-diagonal ``_int_mm``
            (``Int8Backend.modular_matmul_grouped``: a k = 32 GEMM is far below peak in cuBLAS, g
            products side by side make it g times wider); 1 = one GEMM per modulus. A power of two <= 16.
            None (default): 8 with ``backend="int8", epilogue="triton"``, else 1 (see below).
        int8_gemm: INT8 with the Triton epilogue: ``"cublas"`` (``torch._int_mm``, 3 ceil(r/g) calls per
            twiddle group and chunk) or ``"triton"`` (:func:`gpufield.fp64.fft.gemm_triton.stage_gemm_triton`:
            every group, component and moduli group of a chunk in one launch; same bits) or ``"fused"``
            (:func:`gpufield.fp64.fft.gemm_triton.fused_stage_gemm_triton`: row shifts, scaling and residues
            computed in that launch too, no residue planes; same bits) or ``"fused_epi"``
            (:func:`gpufield.fp64.fft.gemm_fused_epi.fused_epi_stage_triton`: the epilogue too, on the
            dot accumulators in registers; no int32 product planes; variants crt/kulisch; same bits; on
            CUDA a stage with fewer than 16 rows per twiddle group, as in 1-D and thin 2-D transforms, runs
            ``"cublas"`` instead: the kernel would unroll one dot per group in a tile).
            None (default): ``"fused_epi"`` with ``backend="int8", epilogue="triton"`` and variant crt or
            kulisch, ``"triton"`` with those and variant garner, else ``"cublas"`` (see below).

    Defaults of ``int8_group`` / ``int8_gemm``: ``EmulatedFftPlan(backend="int8", epilogue="triton")`` is
    the fastest configuration measured so far, the fully fused stage kernel ``"fused_epi"`` (H200 run 10,
    fp64 code 7f662f9, ``benchmarks/results/h200-run10/fft/``: int8/crt/g8/fused_epi 17.25 ms at 256^3
    vs 28.44 ms for the run-5 default ``"triton"`` with the 32-bit residue kernel and 26.63 ms for
    ``"fused"``; 512^3 155.96 ms vs 255.03 ms; 1024^3 1.412 s vs run 5's 1.639 s with
    int8/kulisch/g8/triton; same bits, every self-check bit-identical; peak memory above the input
    0.82 GB vs 4.59 GB at 256^3; first call on a cold Triton cache 12-17 s per new shape vs ~11 s).
    Since then only that kernel changed (runs 20-25, ``benchmarks/results/h200-run25/``, fp64 code
    d5ffbb4: 10.23 ms at 256^3, 87.16 ms at 512^3, 0.793 s at 1024^3; runs 29-32, the Gluon kernel on
    Hopper, ``benchmarks/results/h200-run32/``, fp64 code b37e983: 7.43 ms, 58.47 ms, 0.491 s; run 37, the
    FP64 fold, c131ede: 6.40 ms, 52.86 ms, 0.449 s with kulisch; run 42, in-place stages, c7a5ce6: 5.90 ms,
    46.80 ms, 0.400 s with kulisch; run 49, residue pairs, integer quotient and 128-bit loads, 1821565:
    4.79 ms, 39.42 ms, 0.354 s with kulisch; run 55, quotient from the digit sums and N = 32 in two column
    passes, 81ac053: 4.54 ms, 37.29 ms, 0.333 s with kulisch), same bits.
    ``"fused_epi"`` runs only the 32-bit crt/kulisch epilogue, so with ``variant="garner"`` the default
    stays the run-5 choice ``"triton"`` (g = 8, one-launch Triton stage GEMM). g = 8 is the default
    ``int8_group`` for the non-fused GEMM paths; ``"fused_epi"`` does not use it. Both fields hold the
    resolved value after construction (never None), and the bits do not depend on them.

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
    chunk_outputs: int | None = None
    memory_budget_bytes: int | None = None
    int8_group: int | None = None
    int8_gemm: str | None = None

    def __post_init__(self) -> None:
        for name in ("num_moduli", "input_bits", "twiddle_bits", "chunk_outputs", "memory_budget_bytes", "int8_group"):
            v = getattr(self, name)
            if v is not None:
                if isinstance(v, bool) or not isinstance(v, numbers.Integral):
                    raise InputError(f"{name} must be an integer, got {v!r} ({type(v).__name__})")
                object.__setattr__(self, name, int(v))  # numpy integers too, as plain ints (cache keys, shapes)
        fastest = self.backend == "int8" and self.epilogue == "triton"  # H200 run 10: fused_epi (garner: run 5's)
        if self.int8_group is None:
            object.__setattr__(self, "int8_group", 8 if fastest else 1)
        if self.int8_gemm is None:
            gemm = ("triton" if self.variant == "garner" else "fused_epi") if fastest else "cublas"
            object.__setattr__(self, "int8_gemm", gemm)
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
        if self.int8_gemm not in INT8_GEMMS:
            raise InputError(f"int8_gemm must be one of {INT8_GEMMS}, got {self.int8_gemm!r}")
        if self.int8_gemm != "cublas" and (self.backend != "int8" or self.epilogue != "triton"):
            raise InputError(f"int8_gemm={self.int8_gemm!r} needs backend='int8' and epilogue='triton'")
        if self.int8_gemm == "fused_epi" and self.variant == "garner":
            raise InputError("int8_gemm='fused_epi' runs the 32-bit epilogue: variant 'crt' or 'kulisch'")
        if self.chunk_outputs is not None and self.chunk_outputs < 1024:
            raise InputError(f"chunk_outputs must be None or >= 1024, got {self.chunk_outputs}")
        if self.memory_budget_bytes is not None and self.memory_budget_bytes <= 0:
            raise InputError(f"memory_budget_bytes must be None or > 0, got {self.memory_budget_bytes}")
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
        InputError: an unknown ``kind``, or even all moduli of the table are not enough.
    """
    if kind not in RAW_MODULI:
        raise InputError(f"moduli kind must be one of {tuple(RAW_MODULI)}, got {kind!r}")
    need = _needed_log2_m(input_bits, twiddle_bits)
    for r in range(2, len(RAW_MODULI[kind]) + 1):
        if moduli_table(kind, r).log2_M >= need:
            return r
    raise InputError(f"no {kind} moduli count reaches log2 M >= {need:.1f}")
