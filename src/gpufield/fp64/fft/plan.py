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
from gpufield.fp64.fft.kernel_config import DEFAULT_KERNELS, KernelConfig
from gpufield.fp64.ozaki.moduli import RAW_MODULI, moduli_table
from gpufield.fp64.protocols import ModularBackend

BACKENDS = ("cpu-exact", "int8", "fp8")
"""Backend names, the same as :func:`gpufield.fp64.ozaki_matmul`'s: the Ozaki-II modular GEMM backends of
:mod:`gpufield.fp64.ozaki.backends` (``cpu-exact`` = ``CpuExactBackend``, exact int64 products; ``int8`` =
``torch._int_mm``; ``fp8`` = ``torch._scaled_mm`` on E4M3 digits, 3 GEMMs per modulus, exact on Hopper for
k = 32). The FFT's former name ``"cpu"`` is refused with a message naming ``"cpu-exact"``."""

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
        backend: a :class:`~gpufield.fp64.protocols.ModularBackend` object or its name (:data:`BACKENDS`,
            the names of :func:`gpufield.fp64.ozaki_matmul`): ``"cpu-exact"`` (exact int64 residue products,
            on any device), ``"int8"`` (torch._int_mm) or ``"fp8"`` (torch._scaled_mm on E4M3 digits).
            :attr:`backend_name` is the name either way; :meth:`modular_backend` the object the stages call.
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

        kernels: :class:`~gpufield.fp64.fft.kernel_config.KernelConfig`, the kernel variant of each stage
            path (same bits); the path itself comes from the one dispatch table
            :data:`~gpufield.fp64.fft.kernel_config.STAGE_PATHS` (:meth:`stage_path`).

    Defaults of ``int8_group`` / ``int8_gemm``: ``EmulatedFftPlan(backend="int8", epilogue="triton")`` runs
    the fastest path measured, ``"fused_epi"`` (crt/kulisch; with ``variant="garner"`` ``"triton"``), g = 8
    for the non-fused GEMM paths. Both fields hold the resolved value after construction (never None), and
    the bits do not depend on them. The measurement history behind these defaults is in docs/perf-notes.md.

    Raises:
        InputError: any field out of range, or ``num_moduli`` too small for CRT uniqueness.
    """

    backend: str | ModularBackend = "cpu-exact"
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
    kernels: KernelConfig = DEFAULT_KERNELS

    def __post_init__(self) -> None:
        if not isinstance(self.kernels, KernelConfig):
            raise InputError(f"kernels must be a KernelConfig, got {type(self.kernels).__name__}")
        if self.backend == "cpu":
            raise InputError("backend 'cpu' is now 'cpu-exact' (one set of backend names, ozaki_matmul's)")
        if not isinstance(self.backend, str):
            if not isinstance(self.backend, ModularBackend) or getattr(self.backend, "name", None) not in BACKENDS:
                raise InputError(f"backend must be one of {BACKENDS} or a ModularBackend object named so, "
                                 f"got {self.backend!r}")
        for name in ("num_moduli", "input_bits", "twiddle_bits", "chunk_outputs", "memory_budget_bytes", "int8_group"):
            v = getattr(self, name)
            if v is not None:
                if isinstance(v, bool) or not isinstance(v, numbers.Integral):
                    raise InputError(f"{name} must be an integer, got {v!r} ({type(v).__name__})")
                object.__setattr__(self, name, int(v))  # numpy integers too, as plain ints (cache keys, shapes)
        fastest = self.backend_name == "int8" and self.epilogue == "triton"  # defaults: docs/perf-notes.md
        if self.int8_group is None:
            object.__setattr__(self, "int8_group", 8 if fastest else 1)
        if self.int8_gemm is None:
            gemm = ("triton" if self.variant == "garner" else "fused_epi") if fastest else "cublas"
            object.__setattr__(self, "int8_gemm", gemm)
        if self.backend_name not in BACKENDS:
            raise InputError(f"backend must be one of {BACKENDS}, got {self.backend!r}")
        if self.variant not in VARIANTS:
            raise InputError(f"variant must be one of {VARIANTS}, got {self.variant!r}")
        if self.epilogue not in EPILOGUES:
            raise InputError(f"epilogue must be one of {EPILOGUES}, got {self.epilogue!r}")
        if self.moduli not in (None, "int8", "fp8"):
            raise InputError(f"moduli must be 'int8' or 'fp8', got {self.moduli!r}")
        if self.backend_name != "cpu-exact" and self.moduli not in (None, self.backend_name):
            raise InputError(f"backend {self.backend_name!r} runs only on {self.backend_name} moduli")
        for name in ("input_bits", "twiddle_bits"):
            if not 8 <= getattr(self, name) <= 60:
                raise InputError(f"{name} must be in [8, 60], got {getattr(self, name)}")
        if self.int8_group not in (1, 2, 4, 8, 16):
            raise InputError(f"int8_group must be 1, 2, 4, 8 or 16, got {self.int8_group}")
        if self.int8_group > 1 and (self.backend_name != "int8" or self.epilogue != "triton"):
            raise InputError("int8_group > 1 needs backend='int8' and epilogue='triton'")
        if self.int8_gemm not in INT8_GEMMS:
            raise InputError(f"int8_gemm must be one of {INT8_GEMMS}, got {self.int8_gemm!r}")
        if self.int8_gemm != "cublas" and (self.backend_name != "int8" or self.epilogue != "triton"):
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
    def backend_name(self) -> str:
        """The backend's name (:data:`BACKENDS`), whether ``backend`` is a name or an object."""
        return self.backend if isinstance(self.backend, str) else self.backend.name

    def modular_backend(self) -> ModularBackend:
        """The :class:`~gpufield.fp64.protocols.ModularBackend` the stages call: ``backend`` itself when it is
        an object, else the registry's class (:data:`gpufield.fp64.ozaki.backends.BACKENDS`) built for the
        FFT (its own torch residues: ``kernels="torch"``; the exact backend on this plan's moduli)."""
        if not isinstance(self.backend, str):
            return self.backend
        from gpufield.fp64.ozaki.backends import BACKENDS as REGISTRY

        cls = REGISTRY[self.backend]
        return cls(self.moduli_kind) if self.backend == "cpu-exact" else cls(kernels="torch")

    def stage_path(self, capability: tuple[int, int] | None, rows_per_group: int | None = None) -> str:
        """Which stage kernels run on a device of ``capability`` (None: CPU): the row of the dispatch table
        :data:`~gpufield.fp64.fft.kernel_config.STAGE_PATHS` (:func:`~gpufield.fp64.fft.kernel_config.stage_path`)."""
        from gpufield.fp64.fft.kernel_config import stage_path

        return stage_path(self, capability, rows_per_group)

    @property
    def moduli_kind(self) -> str:
        """The moduli table used (``"int8"`` or ``"fp8"``)."""
        if self.moduli is not None:
            return self.moduli
        return "fp8" if self.backend_name == "fp8" else "int8"

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
