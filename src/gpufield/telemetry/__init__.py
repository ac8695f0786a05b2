"""gpufield.telemetry: the shared core (user guide in progress; see module docstrings)."""

from gpufield.telemetry.nvml import (
    GpuInfo, GpuSample, NvmlReader, clock_event_reason_table, decode_clock_event_reasons, normalize_bdf,
    nvml_status,
)
from gpufield.telemetry.sampler import EnergyCheck, NvmlSampler, energy_cross_check
from gpufield.telemetry.specs import GpuSpec, gpu_spec, gpu_specs

__all__ = [
    "EnergyCheck", "GpuInfo", "GpuSample", "GpuSpec", "NvmlReader", "NvmlSampler",
    "clock_event_reason_table", "decode_clock_event_reasons", "energy_cross_check", "gpu_spec", "gpu_specs",
    "normalize_bdf", "nvml_status",
]
