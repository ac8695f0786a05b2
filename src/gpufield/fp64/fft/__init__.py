"""Emulated full-FP64 FFT on INT8/FP8 tensor cores (Ozaki-II residues + Bailey six-step).

Internal package of :mod:`gpufield.fp64`; the public names are re-exported there.

* :mod:`.twiddles`: exact integer twiddles from exact angle indices, verified at import;
* modular GEMMs: the Ozaki-II backends of :mod:`gpufield.fp64.ozaki.backends` (exact CPU, INT8, FP8);
* :mod:`.epilogue`: mod reduction + Karatsuba combine + CRT (Garner / fixed-point CRT / tensor-core
  bulk + Kulisch remainder) + one rounding, in torch ops (the reference for the Triton kernel in
  :mod:`gpufield.fp64.kernels.fft_epilogue`);
* :mod:`.stage`: one DFT-GEMM stage and :class:`EmulatedFftPlan`;
* :mod:`.kernel_config`: :class:`KernelConfig` (the plan's kernel variants) and the dispatch table
  ``STAGE_PATHS`` from (plan, device) to the stage path (:func:`stage_path`);
* :mod:`.sixstep`: Bailey six-step per axis, n-D driver and inverse;
* :mod:`.graphed`: :class:`GraphedFftn`, one shape captured as a CUDA graph for repeated transforms;
* :mod:`.reference`: independent oracles (exact Python-int stage, mpmath DFT).
"""

from gpufield.fp64.fft.graphed import GraphedFftn
from gpufield.fp64.fft.kernel_config import KernelConfig, stage_path
from gpufield.fp64.fft.sixstep import fftn_fp64_emulated, ifftn_fp64_emulated
from gpufield.fp64.fft.stage import EmulatedFftPlan, auto_num_moduli

__all__ = ["EmulatedFftPlan", "GraphedFftn", "KernelConfig", "auto_num_moduli", "fftn_fp64_emulated",
           "ifftn_fp64_emulated", "stage_path"]
