"""Kernel choice of the emulated FFT as typed data: :class:`KernelConfig` (carried on the plan) and the one
dispatch table :data:`STAGE_PATHS` from (plan, device) to the stage path (:func:`stage_path`).

Every field of :class:`KernelConfig` gives the same bits (tests/fp64/test_kernel_config.py against digests
taken on the old environment-variable path); they change speed only. No environment variable chooses a
kernel. The measured times behind the defaults are in docs/perf-notes.md and benchmarks/fp64_RESULTS.md.

Former environment variables and their fields: ``GPUFIELD_FUSED_EPI_IMPL`` -> ``implementation``,
``GPUFIELD_FUSED_EPI_FOLD`` -> ``fold``, ``GPUFIELD_FUSED_EPI_LAUNCH`` -> ``launch``,
``GPUFIELD_FUSED_EPI_MAXNREG`` -> ``max_nreg``, ``GPUFIELD_FUSED_EPI_PAIRS`` -> ``residue_pairs``,
``GPUFIELD_EPILOGUE_IMPL`` -> ``epilogue``, ``GPUFIELD_EPILOGUE_ASM`` -> ``epilogue_asm``;
``GPUFIELD_RESIDUE_IMPL`` chose the previous int64-lane residue kernel, which is no longer in the library
(benchmarks/fp64_residue_int64.py, for A/B timing).
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass

from gpufield.errors import InputError

IMPLEMENTATIONS = ("gluon", "triton")
FOLDS = ("int", "f64")
EPILOGUE_IMPLS = ("int32", "int64")


@dataclass(frozen=True, kw_only=True, slots=True)
class KernelConfig:
    """Which kernel variant each stage path runs (every choice gives the same bits).

    Attributes:
        implementation: fused stage kernel (``int8_gemm="fused_epi"``): ``"gluon"`` (default; the Gluon
            kernel of :mod:`gpufield.fp64.fft.gemm_fused_gluon` where it fits: Hopper, aligned 64-row tiles;
            else the Triton kernel) or ``"triton"`` (always the Triton kernel).
        fold: CRT fold of the fused kernel, ``"int"`` or ``"f64"``; None (default): ``"f64"`` where the
            Gluon kernel runs (falling back to ``"int"`` for moduli sets whose FP64 sums are not exact),
            ``"int"`` for the Triton kernel. Asked for explicitly, ``"f64"`` raises where it is not exact.
        launch: fused kernel on CUDA: ``(rows, warps[, outputs[, passes]])`` per program; None (default):
            the launch tables of :mod:`gpufield.fp64.fft.gemm_fused_epi`. Ignored in the interpreter.
        max_nreg: fused kernel on CUDA: register cap per thread (Triton ``maxnreg``); 0 = no cap; None
            (default): the launch table's.
        residue_pairs: fused kernel: modulus pairs sharing one float64 reduction; None (default): the
            table ``RESIDUE_PAIRS`` of the padded stage length, as many as fit.
        epilogue: standalone epilogue kernel: ``"int32"`` (default) or ``"int64"`` (the previous kernel;
            garner always runs it).
        epilogue_asm: PTX ``mad.lo.s32`` limb sums in the epilogues on CUDA (default True; never in the
            interpreter).

    Raises:
        InputError: a field out of range (names the field and the allowed values).
    """

    implementation: str = "gluon"
    fold: str | None = None
    launch: tuple[int, ...] | None = None
    max_nreg: int | None = None
    residue_pairs: int | None = None
    epilogue: str = "int32"
    epilogue_asm: bool = True

    def __post_init__(self) -> None:
        for name, allowed in (("implementation", IMPLEMENTATIONS), ("epilogue", EPILOGUE_IMPLS)):
            if getattr(self, name) not in allowed:
                raise InputError(f"KernelConfig.{name} must be one of {allowed}, got {getattr(self, name)!r}")
        if self.fold not in (None, *FOLDS):
            raise InputError(f"KernelConfig.fold must be None or one of {FOLDS}, got {self.fold!r}")
        if not isinstance(self.epilogue_asm, bool):
            raise InputError(f"KernelConfig.epilogue_asm must be a bool, got {self.epilogue_asm!r}")
        for name in ("max_nreg", "residue_pairs"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 0):
                raise InputError(f"KernelConfig.{name} must be None or a non-negative integer, got {v!r}")
        if self.max_nreg not in (None, 0) and not 24 <= self.max_nreg <= 255:
            raise InputError(f"KernelConfig.max_nreg must be 0 (no cap) or in [24, 255], got {self.max_nreg}")
        if self.launch is not None:
            ln = tuple(self.launch)
            if not 2 <= len(ln) <= 4 or not all(isinstance(v, numbers.Integral) and not isinstance(v, bool)
                                                 and v >= 0 for v in ln):
                raise InputError(f"KernelConfig.launch must be 2 to 4 non-negative integers "
                                 f"(rows, warps[, outputs[, passes]]), got {self.launch!r}")
            if len(ln) > 3 and ln[3] not in (1, 2):
                raise InputError(f"KernelConfig.launch: passes must be 1 or 2, got {ln[3]}")
            object.__setattr__(self, "launch", tuple(int(v) for v in ln))

    @classmethod
    def parse_launch(cls, text: str) -> tuple[int, ...]:
        """``"64,8,32,2"`` -> ``(64, 8, 32, 2)`` (benchmarks' ``--launch`` flag).

        Raises:
            InputError: not 2 to 4 comma-separated non-negative integers.
        """
        fields = [v.strip() for v in text.split(",")]
        if not 2 <= len(fields) <= 4 or not all(v.isdigit() for v in fields):
            raise InputError(f"launch {text!r}: expected 2 to 4 comma-separated non-negative integers")
        return tuple(int(v) for v in fields)


DEFAULT_KERNELS = KernelConfig()
"""The default config: today's default path on every device."""

STAGE_PATHS: tuple[tuple[str, str, str, str], ...] = (
    # (int8_gemm, implementation, device, stage path: the kernels one stage chunk runs)
    ("fused_epi", "gluon", "sm90", "fused_epi_gluon: gemm_fused_gluon._fused_epi_gluon_kernel, one launch "
                                   "(aligned 64-row tiles; other tiles: fused_epi_triton)"),
    ("fused_epi", "gluon", "cuda", "fused_epi_triton: gemm_fused_epi._fused_epi_kernel, one launch"),
    ("fused_epi", "gluon", "cpu", "fused_epi_triton: gemm_fused_epi._fused_epi_kernel (interpreter)"),
    ("fused_epi", "triton", "*", "fused_epi_triton: gemm_fused_epi._fused_epi_kernel, one launch"),
    ("fused", "*", "*", "fused_gemm: gemm_triton.fused_stage_gemm_triton + epilogue_triton"),
    ("triton", "*", "*", "triton_gemm: scale_residues_triton + gemm_triton.stage_gemm_triton + epilogue_triton"),
    ("cublas", "*", "*", "cublas: scale_residues_triton + torch._int_mm per group + epilogue_triton"),
    ("torch", "*", "*", "torch: torch residues + ModularBackend.modular_matmul + epilogue_torch"),
)
"""The dispatch table, first match wins. ``int8_gemm`` ``"torch"`` stands for ``epilogue="torch"`` plans
(any backend); devices: ``"sm90"`` (a Hopper GPU), ``"cuda"`` (another GPU), ``"cpu"``. On CUDA a
``fused_epi`` stage with fewer than 16 rows per twiddle group runs the ``cublas`` path (the fused kernel
would unroll one dot per group in a tile; same bits)."""


def device_key(capability: tuple[int, int] | None) -> str:
    """``"sm90"`` for compute capability 9.x, ``"cuda"`` for another GPU, ``"cpu"`` for None."""
    if capability is None:
        return "cpu"
    return "sm90" if capability[0] == 9 else "cuda"


def stage_gemm(plan, cuda: bool, rows_per_group: int | None) -> str:
    """The plan's ``int8_gemm`` as the stage runs it: ``"cublas"`` for a fused_epi stage on CUDA with
    fewer than 16 rows per twiddle group, else the plan's (``"torch"`` for ``epilogue="torch"``)."""
    if plan.epilogue == "torch":
        return "torch"
    gemm = plan.int8_gemm
    if gemm == "fused_epi" and cuda and rows_per_group is not None and rows_per_group < 16:
        return "cublas"
    return gemm


def stage_path(plan, capability: tuple[int, int] | None, rows_per_group: int | None = None) -> str:
    """The row of :data:`STAGE_PATHS` that a stage of ``plan`` runs on a device of ``capability``.

    Args:
        plan: :class:`gpufield.fp64.fft.plan.EmulatedFftPlan`.
        capability: CUDA compute capability ``(major, minor)``; None for CPU.
        rows_per_group: R, rows per twiddle group of the stage (None: large).

    Returns:
        the stage path's description, with the fused kernel's resolved fold.
    """
    dev = device_key(capability)
    gemm = stage_gemm(plan, capability is not None, rows_per_group)
    impl = plan.kernels.implementation
    for g, i, d, path in STAGE_PATHS:
        if g == gemm and i in ("*", impl) and d in ("*", dev):
            if gemm == "fused_epi":
                gluon = path.startswith("fused_epi_gluon")
                fold = plan.kernels.fold or ("f64" if gluon else "int")
                return f"{path}; fold {fold}"
            return path
    raise AssertionError(f"no dispatch row for {gemm}/{impl}/{dev}")  # pragma: no cover (table is total)


DEVICES = {"cpu": None, "h100": (9, 0), "h200": (9, 0), "gh200": (9, 0), "a100": (8, 0), "b200": (10, 0),
           "b300": (10, 3)}
"""Device names :func:`parse_device` takes besides ``"major.minor"`` (compute capabilities from NVIDIA's CUDA
GPU table; the dispatch only distinguishes 9.x, other GPUs and CPU)."""


def parse_device(text: str) -> tuple[int, int] | None:
    """``"h200"`` / ``"9.0"`` / ``"cpu"`` -> ``(9, 0)`` / ``(9, 0)`` / None.

    Raises:
        InputError: neither a name of :data:`DEVICES` nor ``major.minor``.
    """
    t = text.strip().lower()
    if t in DEVICES:
        return DEVICES[t]
    parts = t.split(".")
    if len(parts) == 2 and all(p.isdigit() for p in parts):
        return int(parts[0]), int(parts[1])
    raise InputError(f"device {text!r}: expected one of {', '.join(DEVICES)} or a compute capability major.minor")


def stage_table(shape: tuple[int, ...], plan, capability: tuple[int, int] | None) -> list[dict]:
    """Every DFT-GEMM stage of a forward transform of ``shape`` and the stage path it runs (the six-step
    passes of :mod:`gpufield.fp64.fft.sixstep`: one stage per axis of length <= 32, two above, stage 2 with one
    twiddle group per k1).

    Returns:
        one dict per stage: axis, N (axis length), stage (1 or 2), length (the stage's DFT length), groups G,
        rows per group R, and path (:func:`stage_path`).
    """
    from gpufield.fp64.fft.sixstep import _split

    total = 1
    for n in shape:
        total *= n
    rows = []
    for axis, n in enumerate(shape):
        if n == 1:
            continue
        b = total // n
        stages = [(1, n, 1, b)] if n <= 32 else [(1, _split(n)[0], 1, _split(n)[1] * b), (2, _split(n)[1],
                                                                                          _split(n)[0], b)]
        for st, length, g, r in stages:
            rows.append({"axis": axis, "N": n, "stage": st, "length": length, "groups": g, "rows_per_group": r,
                         "path": stage_path(plan, capability, r)})
    return rows
