"""gpufield.telemetry: the shared core (user guide in progress; see module docstrings)."""

from gpufield.telemetry.nvml import (
    GpuInfo, GpuSample, NvmlReader, clock_event_reason_table, decode_clock_event_reasons, normalize_bdf,
    nvml_status,
)
from gpufield.telemetry.histogram import (
    HistogramSeries, histogram_delta, histogram_quantile, histogram_series, windowed_quantile,
)
from gpufield.telemetry.prometheus import MetricFamily, PromSample, iter_samples, parse_file, parse_text
from gpufield.telemetry.sampler import EnergyCheck, NvmlSampler, energy_cross_check
from gpufield.telemetry.store import EventLike, SampleRow, Store
from gpufield.telemetry.specs import GpuSpec, gpu_spec, gpu_specs

__all__ = [
    "EnergyCheck", "EventLike", "SampleRow", "Store", "HistogramSeries", "MetricFamily", "PromSample", "histogram_delta", "histogram_quantile",
    "histogram_series", "windowed_quantile", "iter_samples", "parse_file", "parse_text", "GpuInfo", "GpuSample", "GpuSpec", "NvmlReader", "NvmlSampler",
    "clock_event_reason_table", "decode_clock_event_reasons", "energy_cross_check", "gpu_spec", "gpu_specs",
    "normalize_bdf", "nvml_status",
]
