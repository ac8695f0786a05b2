"""Health fields of one GPU that the sampler does not read: retired pages, NVLink state, processes.

Read by :meth:`gpufield.telemetry.NvmlReader.health` (read-only, like the rest of the reader).
NVML calls (nvidia-ml-py 13.615.71; ``../shared/reference/triage.md`` sections 2.4, 2.5):

* ``nvmlDeviceGetRetiredPages(h, NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS=0 |
  NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR=1)`` and ``nvmlDeviceGetRetiredPagesPendingStatus``
  (pre-Ampere page retirement; Ampere and later answer not-supported and use row remapping);
* field ``NVML_FI_DEV_GET_GPU_RECOVERY_ACTION`` (230): 0 none, 1 GPU reset, 2 node reboot,
  3 drain P2P, 4 drain and reset (NVML >= 570 drivers);
* ``nvmlDeviceGetNvLinkState(h, link)`` for ``link < NVML_NVLINK_MAX_LINKS``: 1 enabled, 0 disabled;
  ``NVML_ERROR_INVALID_ARGUMENT`` ends the links the GPU has, not-supported means no NVLink;
* ``nvmlDeviceGetComputeRunningProcesses``: pid and ``usedGpuMemory`` bytes (None where unknown);
* ``nvmlDeviceGetEccMode``: ``[current, pending]``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["GpuHealth", "GpuProcess", "read_health"]

#: NVML_FI_DEV_GET_GPU_RECOVERY_ACTION values (nvml.h ``nvmlDeviceGpuRecoveryAction_t``)
RECOVERY_ACTIONS = {0: "none", 1: "gpu_reset", 2: "node_reboot", 3: "drain_p2p", 4: "drain_and_reset"}


@dataclass(frozen=True, kw_only=True, slots=True)
class GpuProcess:
    """A compute process holding memory on a GPU.

    Attributes:
        pid: process id as the driver sees it (the host pid namespace).
        used_bytes: framebuffer memory it holds, or None where NVML cannot tell.
    """

    pid: int
    used_bytes: int | None


@dataclass(frozen=True, kw_only=True, slots=True)
class GpuHealth:
    """Health readings of one GPU; None (or empty) where the GPU/driver does not support the field.

    Attributes:
        index, uuid, name, pci_bdf: identity (see :class:`gpufield.telemetry.GpuInfo`).
        retired_pages_sbe / retired_pages_dbe: pages retired for multiple single-bit / a double-bit error.
        retired_pages_pending: a retirement waits for the next driver reload.
        recovery_action: NVML recovery action code (see ``RECOVERY_ACTIONS``), 0 = none.
        nvlink_up / nvlink_down: link numbers NVML reports enabled / disabled (both empty: no NVLink).
        ecc_enabled: current ECC mode.
        processes: compute processes on the GPU.
        errors: field -> NVML error name for failures other than not-supported.
    """

    index: int
    uuid: str
    name: str
    pci_bdf: str
    retired_pages_sbe: int | None = None
    retired_pages_dbe: int | None = None
    retired_pages_pending: bool | None = None
    recovery_action: int | None = None
    nvlink_up: tuple[int, ...] = ()
    nvlink_down: tuple[int, ...] = ()
    ecc_enabled: bool | None = None
    processes: tuple[GpuProcess, ...] = ()
    errors: dict[str, str] = field(default_factory=dict, hash=False)


def read_health(nv: Any, info: Any, h: Any, try_call: Callable[..., tuple[Any, str | None]]) -> GpuHealth:
    """Read :class:`GpuHealth` of one opened GPU.

    Args:
        nv: the ``pynvml``-like module (possibly a :class:`~gpufield.telemetry.nvml_deadline.BoundedNvml`).
        info: the GPU's :class:`~gpufield.telemetry.GpuInfo`.
        h: its NVML handle.
        try_call: ``NvmlReader._try``: ``(value, None)`` or ``(None, error name or None)``.

    Returns:
        The readings; failing fields are None and named in ``errors``.

    Raises:
        NvmlTimeoutError: a call missed its deadline (through ``BoundedNvml``).
    """
    errors: dict[str, str] = {}

    def get(key: str, fn_name: str, *args: Any) -> Any:
        fn = getattr(nv, fn_name, None)
        if fn is None:
            return None
        value, err = try_call(fn, h, *args)
        if err is not None:
            errors[key] = err
        return value

    sbe = get("retired_pages_sbe", "nvmlDeviceGetRetiredPages", nv.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS)
    dbe = get("retired_pages_dbe", "nvmlDeviceGetRetiredPages", nv.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR)
    pending = get("retired_pages_pending", "nvmlDeviceGetRetiredPagesPendingStatus")
    recovery = None
    fv, _err = try_call(nv.nvmlDeviceGetFieldValues, h, [nv.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION])
    if fv is not None and len(fv) and fv[0].nvmlReturn == nv.NVML_SUCCESS:
        recovery = int(fv[0].value.uiVal)
    up, down = [], []
    for link in range(int(getattr(nv, "NVML_NVLINK_MAX_LINKS", 18))):
        try:
            state = nv.nvmlDeviceGetNvLinkState(h, link)
        except nv.NVMLError as e:
            if isinstance(e, nv.NVMLError_InvalidArgument):
                break  # past the GPU's last link
            if not isinstance(e, (nv.NVMLError_NotSupported, nv.NVMLError_FunctionNotFound)):
                errors["nvlink"] = type(e).__name__
            continue
        (up if state == nv.NVML_FEATURE_ENABLED else down).append(link)
    ecc = get("ecc_enabled", "nvmlDeviceGetEccMode")
    procs = get("processes", "nvmlDeviceGetComputeRunningProcesses") or []
    return GpuHealth(
        index=info.index, uuid=info.uuid, name=info.name, pci_bdf=info.pci_bdf,
        retired_pages_sbe=None if sbe is None else len(sbe), retired_pages_dbe=None if dbe is None else len(dbe),
        retired_pages_pending=None if pending is None else bool(pending), recovery_action=recovery,
        nvlink_up=tuple(up), nvlink_down=tuple(down),
        ecc_enabled=None if ecc is None else bool(ecc[0]),
        processes=tuple(GpuProcess(pid=int(p.pid), used_bytes=None if p.usedGpuMemory is None else int(p.usedGpuMemory))
                        for p in procs),
        errors=errors,
    )
