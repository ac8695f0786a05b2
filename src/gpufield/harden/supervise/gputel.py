"""GPU telemetry put beside a straggler report: one NVML sample of every local GPU, bounded in time.

A wedged driver can block an NVML call indefinitely (sglang #31229); the read runs in a daemon
thread and is abandoned after ``timeout_s``, so the supervisor never waits on it longer.
"""

from __future__ import annotations

import threading
from typing import Any

#: readings copied into the report (triage.md 5.7: clock-event bits, SM clock, power, temperature, PCIe)
FIELDS = ("power_w", "sm_clock_hz", "temperature_c", "util_gpu", "clock_event_reason_names", "pcie_gen",
          "pcie_width", "pcie_max_gen", "pcie_max_width")


def gpu_context(blamed_gpu: str | None, *, nvml: Any = None, timeout_s: float = 5.0) -> dict[str, Any]:
    """Sample the local GPUs once and mark the blamed one.

    Args:
        blamed_gpu: the blamed rank's GPU as the monitor hook reports it (an index or a UUID), or None.
        nvml: a ``pynvml``-like module (``gpufield.testing.FakeNvml`` in tests); default the real one.
        timeout_s: give up on NVML after this many seconds.

    Returns:
        ``{"gpus": [{index, uuid, blamed, <FIELDS>}...]}``, or ``{"unavailable": reason}`` when NVML
        cannot be read (no driver, timeout).
    """
    box: dict[str, Any] = {}

    def read() -> None:
        try:
            from gpufield.telemetry import NvmlReader

            with NvmlReader(nvml) as r:
                box["samples"] = r.sample()
        except Exception as e:  # NvmlUnavailableError, DependencyError, a driver error
            box["error"] = f"{type(e).__name__}: {e}"

    t = threading.Thread(target=read, name="gpufield-nvml", daemon=True)
    t.start()
    t.join(timeout_s)
    if t.is_alive():
        return {"unavailable": f"NVML did not answer within {timeout_s:g} s"}
    if "error" in box:
        return {"unavailable": box["error"]}
    gpus = []
    for s in box.get("samples", []):
        row = {"index": s.index, "uuid": s.uuid,
               "blamed": blamed_gpu is not None and blamed_gpu in (str(s.index), s.uuid)}
        for f in FIELDS:
            v = getattr(s, f)
            row[f] = list(v) if isinstance(v, tuple) else v
        gpus.append(row)
    return {"gpus": gpus}
