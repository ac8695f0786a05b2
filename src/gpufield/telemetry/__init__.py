"""gpufield.telemetry: the shared core every wing reads GPUs, exporters and stores through.

Units are SI everywhere outside this package's NVML boundary: W, J, Hz, s, bytes, fractions 0..1.

**GPU specs** (:func:`gpu_spec`, :func:`gpu_specs`, :class:`GpuSpec`): peak rates, HBM, clocks and
power numbers of H100 SXM, H200 SXM, B200, B300 and a projected Rubin, from ``data/gpu_specs.json``
(each entry names its sources; derived and projected fields are marked)::

    gpu_spec("NVIDIA H200").hbm_bandwidth_bytes_per_s      # 4.8e12
    gpu_spec("B300").int32_ops_per_s                       # 160 SM x 128 x 2.03 GHz

**NVML** (:class:`NvmlReader`, :class:`GpuSample`, :func:`nvml_status`): read-only sampling over
nvidia-ml-py. Unsupported fields read as None; no driver raises :class:`~gpufield.errors.NvmlUnavailableError`.
Pass ``nvml=gpufield.testing.FakeNvml(...)`` to run without a GPU::

    with NvmlReader() as r:
        for s in r.sample():
            print(s.index, s.pci_bdf, s.power_w, s.sm_clock_hz, s.clock_event_reason_names)

``NvmlReader(call_timeout_s=5)`` bounds every NVML call (:class:`BoundedNvml`: a wedged driver raises
:class:`~gpufield.errors.NvmlTimeoutError` naming the call); :meth:`NvmlReader.health` adds retired
pages, recovery action, NVLink states, ECC mode and processes (:class:`GpuHealth`).
:class:`NvmlSampler` samples in a background thread (ring buffer and/or callback);
:func:`energy_cross_check` compares the energy counter with integrated power (3 % tolerance).
:func:`normalize_bdf` turns any PCI bus id form into ``dddd:bb:dd.f``;
:func:`decode_clock_event_reasons` names the bits of an NVML/DCGM clock-event bitmask.

**Prometheus** (:func:`parse_text`, :func:`parse_file`, :func:`iter_samples`): text format 0.0.4 from
dcgm-exporter, node-exporter, vLLM, SGLang; errors name ``file:line:column`` and what was expected.
:func:`histogram_series`, :func:`histogram_delta`, :func:`histogram_quantile` (PromQL semantics) and
:func:`windowed_quantile` turn two scrapes into a window's p99::

    a = histogram_series(parse_text(scrape1), "vllm:inter_token_latency_seconds")
    b = histogram_series(parse_text(scrape2), "vllm:inter_token_latency_seconds")
    itl_p99_s = {k: windowed_quantile(0.99, a[k], b[k]) for k in b}

**Store** (:class:`Store`): one DuckDB file per analysis with ``events`` and ``samples`` tables
(triage.md section 5.3); appends, never overwrites, refuses foreign files::

    with Store("incident.duckdb") as st:
        st.add_events(events)                    # anything shaped like gpufield.triage.events.Event
        st.add_gpu_samples(samples, host="node-a")
        st.query("SELECT kind, count(*) AS n FROM events GROUP BY kind")
"""

from gpufield.telemetry.histogram import (
    HistogramSeries,
    histogram_delta,
    histogram_quantile,
    histogram_series,
    windowed_quantile,
)
from gpufield.telemetry.nvml import (
    GpuInfo,
    GpuSample,
    NvmlReader,
    clock_event_reason_table,
    decode_clock_event_reasons,
    normalize_bdf,
    nvml_status,
)
from gpufield.telemetry.nvml_deadline import BoundedNvml
from gpufield.telemetry.nvml_health import GpuHealth, GpuProcess
from gpufield.telemetry.prometheus import (
    MetricFamily,
    PromSample,
    iter_samples,
    parse_file,
    parse_text,
)
from gpufield.telemetry.sampler import EnergyCheck, NvmlSampler, energy_cross_check
from gpufield.telemetry.specs import GpuSpec, gpu_spec, gpu_specs
from gpufield.telemetry.store import EventLike, SampleRow, Store

__all__ = [
    "BoundedNvml", "EnergyCheck", "EventLike", "GpuHealth", "GpuInfo", "GpuProcess", "GpuSample", "GpuSpec", "HistogramSeries", "MetricFamily",
    "NvmlReader", "NvmlSampler", "PromSample", "SampleRow", "Store",
    "clock_event_reason_table", "decode_clock_event_reasons", "energy_cross_check", "gpu_spec", "gpu_specs",
    "histogram_delta", "histogram_quantile", "histogram_series", "iter_samples", "normalize_bdf",
    "nvml_status", "parse_file", "parse_text", "windowed_quantile",
]
