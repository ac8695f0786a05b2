"""GPU telemetry put beside a straggler report: one NVML sample of every local GPU, bounded in time.

A wedged driver can block an NVML call indefinitely (sglang #31229); the read goes through the NVML
reader with its per-call deadline (:class:`gpufield.telemetry.BoundedNvml`): the first call that
misses ``timeout_s`` is abandoned and every later one fails at once, so the supervisor waits at most
about ``timeout_s`` on a wedged driver.
"""

from __future__ import annotations

from typing import Any

#: readings copied into the report (triage.md 5.7: clock-event bits, SM clock, power, temperature, PCIe)
FIELDS = ("power_w", "sm_clock_hz", "temperature_c", "util_gpu", "clock_event_reason_names", "pcie_gen",
          "pcie_width", "pcie_max_gen", "pcie_max_width")


def gpu_context(blamed_gpu: str | None, *, nvml: Any = None, timeout_s: float = 5.0) -> dict[str, Any]:
    """Sample the local GPUs once and mark the blamed one.

    Args:
        blamed_gpu: the blamed rank's GPU as the monitor hook reports it (an index or a UUID), or None.
        nvml: a ``pynvml``-like module (``gpufield.testing.FakeNvml`` in tests); default the real one.
        timeout_s: deadline of each NVML call, s (``NvmlReader(call_timeout_s=...)``).

    Returns:
        ``{"gpus": [{index, uuid, blamed, <FIELDS>}...]}``, or ``{"unavailable": reason}`` when NVML
        cannot be read (no driver, timeout).
    """
    from gpufield.telemetry import NvmlReader

    try:  # every NVML call under the reader's own deadline (a wedged driver fails the first one)
        with NvmlReader(nvml, call_timeout_s=timeout_s) as r:
            samples = r.sample()
    except Exception as e:  # NvmlUnavailableError, NvmlTimeoutError, DependencyError, a driver error
        return {"unavailable": f"{type(e).__name__}: {e}"}
    gpus = []
    for s in samples:
        row = {"index": s.index, "uuid": s.uuid,
               "blamed": blamed_gpu is not None and blamed_gpu in (str(s.index), s.uuid)}
        for f in FIELDS:
            v = getattr(s, f)
            row[f] = list(v) if isinstance(v, tuple) else v
        gpus.append(row)
    return {"gpus": gpus}
