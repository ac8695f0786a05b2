"""gpufield: triage, verification, power control and FP64 emulation for NVIDIA datacenter GPUs.

Wings (each a subpackage with its own public API in ``__all__``):

- :mod:`gpufield.triage`: logs and telemetry of a failed multi-node fine-tune -> root incident.
- :mod:`gpufield.verify`: bound-propagation verification of ONNX networks against VNN-LIB specs.
- :mod:`gpufield.power`: phase-decoupled power control for disaggregated LLM serving.
- :mod:`gpufield.fp64`: FP64 emulated on low-precision tensor cores (Ozaki-II, FFT).
- :mod:`gpufield.telemetry`: the shared core (NVML, Prometheus text, DuckDB store, GPU specs).
"""

__version__ = "0.1.0"
__all__ = ["__version__"]
