"""gpufield.fp64: FP64 products emulated on INT8/FP8 tensor cores (Ozaki scheme II), see README.

Public API:

* :func:`ozaki_matmul`: float64/complex128 (batched) matrix product through the CRT (backends ``int8``,
  ``fp8``, ``cpu-exact``; modes ``fast``, ``accurate``).
* :func:`ozaki_error_bound`: the a-priori entrywise error bound of that product.
* :class:`ModularBackend`: the backend Protocol (see :mod:`gpufield.fp64.protocols`).
* :func:`moduli_table` / :class:`ModuliTable`: the INT8/FP8 moduli and CRT constants.
* :func:`enable_cpu_interpreter`: Triton's interpreter on, for the Triton kernels on CPU tensors (importing
  this package leaves the process environment alone; the CPU call sites of the kernels call it themselves).
* :func:`fftn_fp64_emulated` / :func:`ifftn_fp64_emulated` / :class:`EmulatedFftPlan` /
  :func:`auto_num_moduli`: full-FP64 1-3-D FFT by Bailey six-step on modular DFT-GEMMs (INT8/FP8/
  exact CPU), exact CRT (Garner, fixed-point CRT, tensor-core bulk + Kulisch) and one rounding per stage;
  :class:`GraphedFftn`: one shape captured as a CUDA graph for repeated transforms; :class:`KernelConfig`: the
  plan's kernel variants (same bits; which stage kernel runs: ``gpufield fp64 kernels``).
* :func:`fft_floor_model` / :func:`model_table` / :class:`FftFloorModel` / :func:`model_params`: the
  Part 3 floor model of the emulated 3-D FFT (roof, native FP64, epilogue floor, emulated time);
  :func:`conversion_counts` / :func:`measured_check` / :func:`projection_rows` / :class:`StageCounts`: its
  input-conversion term from the kernels' committed SASS counts, checked against the measured H200 times.
* :func:`emulate` / :class:`EmulateConfig` / :class:`EmulateMode` / :class:`PathRecord` /
  :func:`load_crossover_table`: float64 ``torch.matmul`` and ``torch.fft.fftn`` in user code routed per call
  (native, Ozaki-II, cuBLAS emulation, emulated FFT) from a measured crossover table per GPU and a policy.
"""

# FFT (issue 7): emulated FP64 FFT and its floor model
from gpufield.fp64.crossover import load_table as load_crossover_table
from gpufield.fp64.emulation import EmulateConfig, EmulateMode, PathRecord, emulate
from gpufield.fp64.fft import (
    EmulatedFftPlan,
    GraphedFftn,
    KernelConfig,
    auto_num_moduli,
    fftn_fp64_emulated,
    ifftn_fp64_emulated,
)
from gpufield.fp64.kernels import enable_cpu_interpreter
from gpufield.fp64.model import FftFloorModel, fft_floor_model, model_params, model_table
from gpufield.fp64.model_counts import (
    StageCounts,
    conversion_counts,
    measured_check,
    projection_rows,
)
from gpufield.fp64.ozaki.gemm import ozaki_error_bound, ozaki_matmul
from gpufield.fp64.ozaki.moduli import ModuliTable, moduli_table
from gpufield.fp64.protocols import ModularBackend

__all__: list[str] = [
    "ModularBackend",
    "ModuliTable",
    "enable_cpu_interpreter",
    "moduli_table",
    "ozaki_error_bound",
    "ozaki_matmul",
    # --- FFT (issue 7) exports go below this line ---
    "EmulatedFftPlan",
    "FftFloorModel",
    "GraphedFftn",
    "KernelConfig",
    "auto_num_moduli",
    "fft_floor_model",
    "fftn_fp64_emulated",
    "ifftn_fp64_emulated",
    "model_params",
    "model_table",
    # --- floor model's conversion term (issue 30) ---
    "StageCounts",
    "conversion_counts",
    "measured_check",
    "projection_rows",
    # --- emulate() (issue 30) ---
    "EmulateConfig",
    "EmulateMode",
    "PathRecord",
    "emulate",
    "load_crossover_table",
]
