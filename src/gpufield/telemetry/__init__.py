"""gpufield.telemetry: the shared core (user guide in progress; see module docstrings)."""

from gpufield.telemetry.specs import GpuSpec, gpu_spec, gpu_specs

__all__ = ["GpuSpec", "gpu_spec", "gpu_specs"]
