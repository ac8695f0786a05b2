"""Fakes shipped with gpufield for tests and CPU-only machines (httpx ``MockTransport`` style).

* :mod:`gpufield.testing.fake_nvml`: :class:`FakeNvml`, a drop-in fake of the ``pynvml`` module with
  per-GPU state (:class:`FakeGpu`; presets :func:`h200`, :func:`h100`, :func:`b200`), driver-like
  setters, a call record and a read-only spy mode that fails a test on any setter call.

Example::

    from gpufield.testing import FakeNvml, h200
    nvml = FakeNvml([h200(0), h200(1)], read_only=True)
    nvml.nvmlInit()
    h = nvml.nvmlDeviceGetHandleByIndex(0)
    nvml.nvmlDeviceGetPowerUsage(h)          # 80400 (mW, idle)
"""

from gpufield.testing.fake_nvml import (
    SETTER_PREFIXES,
    FakeGpu,
    FakeHandle,
    FakeNvml,
    b200,
    h100,
    h200,
)

__all__ = ["FakeGpu", "FakeHandle", "FakeNvml", "SETTER_PREFIXES", "b200", "h100", "h200"]
