"""Health calls of :class:`gpufield.testing.fake_nvml.FakeNvml` (internal; split for size).

Same names, arguments, return types and error codes as ``pynvml`` (nvidia-ml-py 13.615.71):
retired pages, NVLink state, ECC mode, compute processes.
"""

from __future__ import annotations

from typing import Any

import pynvml as _p

from gpufield.testing._fake_nvml_device import _err


class HealthCalls:
    """Mixin with health ``nvmlDevice*`` calls; relies on ``FakeNvml._enter``."""

    def nvmlDeviceGetRetiredPages(self, device: Any, sourceFilter: int) -> list[int]:
        """Addresses of pages retired for ``sourceFilter`` (``NVML_PAGE_RETIREMENT_CAUSE_*``)."""
        g = self._enter("nvmlDeviceGetRetiredPages", (device, sourceFilter))
        if sourceFilter not in (_p.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS,
                                _p.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR):
            raise _err(_p.NVML_ERROR_INVALID_ARGUMENT)
        return list(g.retired_pages.get(sourceFilter, []))

    def nvmlDeviceGetRetiredPagesPendingStatus(self, device: Any) -> int:
        """``NVML_FEATURE_ENABLED`` when a page retirement waits for the next driver reload."""
        return self._enter("nvmlDeviceGetRetiredPagesPendingStatus", (device,)).retired_pages_pending

    def nvmlDeviceGetNvLinkState(self, device: Any, link: int) -> int:
        """Link state; no NVLink -> NotSupported, link beyond the GPU's last -> InvalidArgument."""
        g = self._enter("nvmlDeviceGetNvLinkState", (device, link))
        if not g.nvlink_states:
            raise _err(_p.NVML_ERROR_NOT_SUPPORTED)
        if not 0 <= link < len(g.nvlink_states):
            raise _err(_p.NVML_ERROR_INVALID_ARGUMENT)
        return g.nvlink_states[link]

    def nvmlDeviceGetEccMode(self, handle: Any) -> list[int]:
        """``[current, pending]`` ECC mode."""
        return list(self._enter("nvmlDeviceGetEccMode", (handle,)).ecc_mode)

    def nvmlDeviceGetComputeRunningProcesses(self, handle: Any) -> list[Any]:
        """Objects with ``pid``, ``usedGpuMemory`` (None where unknown), like pynvml's friendly objects."""
        g = self._enter("nvmlDeviceGetComputeRunningProcesses", (handle,))
        return [_p.nvmlFriendlyObject({"pid": pid, "usedGpuMemory": used, "gpuInstanceId": 0xFFFFFFFF,
                                       "computeInstanceId": 0xFFFFFFFF}) for pid, used in g.processes]
