"""Dry-run actuator: real NVML reads, every intended write logged, no write possible (shadow mode).

The actuator holds NVML only through :class:`ReadOnlyNvml`, a proxy built on an **allow-list**: an
attribute passes only if it is

* a function named in :data:`NVML_READ_CALLS` (getters, ``nvmlInit``/``nvmlShutdown`` and a few
  named safe calls), or
* a plain constant (``int``/``float``/``str``/``bytes``: ``NVML_CLOCK_SM``, reason bits), an exception
  class (``NVMLError*``), or a ctypes data type (the ``c_nvml*`` structures NVML calls fill in).

Everything else is refused with :class:`~gpufield.errors.ActuationError`: every other NVML function
whatever its name (``nvmlDevicePowerSmoothingSetState``, ``nvmlDeviceCreateGpuInstance``,
``nvmlDeviceClearFieldValues``, ...), private helpers (``_nvmlGetFunctionPointer`` would hand out any
C entry point), the loaded library object ``nvmlLib`` and ctypes loaders (``CDLL``, ``cdll``). A new
pynvml release therefore adds nothing callable until a name is added here. Each intended write
becomes an :class:`~gpufield.power.types.Intent` with time, lane, GPU, value and reason, kept in
:attr:`DryRunActuator.intents` and optionally appended to a JSONL file.
"""

from __future__ import annotations

import ctypes
import json
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from gpufield.errors import ActuationError
from gpufield.power.actuators.nvml import open_handles, read_caps, read_state
from gpufield.power.types import GpuCaps, GpuState, Intent

__all__ = ["DryRunActuator", "ReadOnlyNvml", "NVML_READ_CALLS", "NVML_SETTER_PREFIXES"]

#: the NVML functions a read-only proxy lets through (nvidia-ml-py 13.615.71 names; power.md 4.1)
NVML_READ_CALLS = frozenset({
    "nvmlInit", "nvmlInitWithFlags", "nvmlShutdown", "nvmlErrorString",
    "nvmlSystemGetDriverVersion", "nvmlSystemGetNVMLVersion", "nvmlSystemGetCudaDriverVersion",
    "nvmlSystemGetCudaDriverVersion_v2",
    "nvmlDeviceGetCount", "nvmlDeviceGetHandleByIndex", "nvmlDeviceGetHandleByUUID",
    "nvmlDeviceGetHandleByPciBusId", "nvmlDeviceGetName", "nvmlDeviceGetUUID", "nvmlDeviceGetIndex",
    "nvmlDeviceGetSerial", "nvmlDeviceGetPciInfo", "nvmlDeviceGetPciInfo_v3", "nvmlDeviceGetMigMode",
    "nvmlDeviceGetPowerUsage", "nvmlDeviceGetTotalEnergyConsumption", "nvmlDeviceGetEnforcedPowerLimit",
    "nvmlDeviceGetPowerManagementLimit", "nvmlDeviceGetPowerManagementLimitConstraints",
    "nvmlDeviceGetPowerManagementDefaultLimit", "nvmlDeviceGetPowerState", "nvmlDeviceGetFieldValues",
    "nvmlDeviceGetClockInfo", "nvmlDeviceGetMaxClockInfo", "nvmlDeviceGetClock",
    "nvmlDeviceGetApplicationsClock", "nvmlDeviceGetDefaultApplicationsClock",
    "nvmlDeviceGetSupportedMemoryClocks", "nvmlDeviceGetSupportedGraphicsClocks",
    "nvmlDeviceGetMinMaxClockOfPState", "nvmlDeviceGetCurrentClocksEventReasons",
    "nvmlDeviceGetCurrentClocksThrottleReasons", "nvmlDeviceGetSupportedClocksEventReasons",
    "nvmlDeviceGetTemperature", "nvmlDeviceGetTemperatureV", "nvmlDeviceGetPerformanceState",
    "nvmlDeviceGetUtilizationRates", "nvmlDeviceGetMemoryInfo", "nvmlDeviceGetSamples",
    "nvmlDeviceGetViolationStatus", "nvmlDeviceGetPersistenceMode",
    "nvmlDeviceWorkloadPowerProfileGetProfilesInfo", "nvmlDeviceWorkloadPowerProfileGetCurrentProfiles",
})

#: kept for callers of the old deny-list; the proxy no longer uses it (it allows, it does not deny)
NVML_SETTER_PREFIXES = (
    "nvmlDeviceSet", "nvmlDeviceReset", "nvmlDeviceClear", "nvmlDeviceWorkloadPowerProfileSet",
    "nvmlDeviceWorkloadPowerProfileClear", "nvmlDeviceWorkloadPowerProfileUpdate", "nvmlSystemSet",
    "nvmlDeviceModify", "nvmlGpmSet",
)

_CTYPES_DATA = (ctypes.Structure, ctypes.Union, ctypes.Array, ctypes._Pointer, ctypes._SimpleCData)


def _passes(name: str, value: Any) -> bool:
    if isinstance(value, type):
        return issubclass(value, BaseException) or issubclass(value, _CTYPES_DATA)
    if callable(value):
        return name in NVML_READ_CALLS
    return isinstance(value, (int, float, str, bytes)) and not name.startswith("_")


class ReadOnlyNvml:
    """Proxy of a ``pynvml``-like module that lets through only allow-listed reads (module docstring).

    Raises:
        ActuationError: on access to any attribute the allow-list does not cover.
    """

    def __init__(self, nvml: Any) -> None:
        object.__setattr__(self, "_nvml", nvml)

    def __getattr__(self, name: str) -> Any:
        value = getattr(object.__getattribute__(self, "_nvml"), name)
        if not _passes(name, value):
            raise ActuationError(f"{name} is not on the read-only NVML allow-list: refused by the proxy")
        return value

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("ReadOnlyNvml is immutable")


class DryRunActuator:
    """Actuator for shadow mode (see the module docstring).

    Args:
        nvml: a ``pynvml``-like module (default the real one); wrapped in :class:`ReadOnlyNvml`.
        log_path: optional JSONL file receiving one intent per line.
    """

    def __init__(self, *, nvml: Any = None, log_path: str | Path | None = None) -> None:
        self._raw = nvml
        self._nvml: Any = None
        self._handles: dict[str, Any] = {}
        self.intents: list[Intent] = []
        self.log_path = Path(log_path) if log_path else None

    def __enter__(self) -> DryRunActuator:
        if self._raw is None:
            import pynvml

            self._raw = pynvml
        self._nvml = ReadOnlyNvml(self._raw)
        self._handles.update(open_handles(self._nvml))
        return self

    def __exit__(self, *exc: object) -> None:
        if self._handles:
            self._handles.clear()
            self._nvml.nvmlShutdown()

    @property
    def gpus(self) -> list[str]:
        """UUIDs of the GPUs NVML enumerates."""
        return list(self._handles)

    def _h(self, gpu: str) -> Any:
        if gpu not in self._handles:
            raise ActuationError(f"GPU {gpu} not found; use the actuator in 'with'")
        return self._handles[gpu]

    def capabilities(self, gpu: str) -> GpuCaps:
        """Limits and supported clocks (real reads)."""
        return read_caps(self._nvml, self._h(gpu))

    def read(self, gpu: str) -> GpuState:
        """Current state (real reads)."""
        return read_state(self._nvml, self._h(gpu), gpu)

    def _log(self, gpu: str, action: str, value: Any, lane: str, reason: str) -> None:
        self._h(gpu)
        it = Intent(t_s=time.time(), lane=lane, gpu=gpu, action=action, value=value, reason=reason)
        self.intents.append(it)
        if self.log_path is not None:
            with self.log_path.open("a") as f:
                f.write(json.dumps(asdict(it)) + "\n")

    def set_power_limit(self, gpu: str, power_w: float, *, lane: str = "", reason: str = "") -> float:
        """Log the intent; return the limit that would be requested after clamping (W)."""
        caps = self.capabilities(gpu)
        w = caps.clamp_limit_w(power_w)
        self._log(gpu, "power_limit", w, lane, reason)
        return w

    def set_clock_window(self, gpu: str, lo_mhz: int, hi_mhz: int, *, lane: str = "", reason: str = "") -> tuple[int, int]:
        """Log the intent; return the window that would be set after snapping (MHz)."""
        try:
            win = self.capabilities(gpu).check_window(lo_mhz, hi_mhz)
        except ValueError as e:  # refused exactly as the real actuator would refuse it
            raise ActuationError(f"{gpu}: {e}") from e
        self._log(gpu, "clock_window", win, lane, reason)
        return win

    def reset_clocks(self, gpu: str, *, lane: str = "", reason: str = "") -> None:
        """Log the intent."""
        self._log(gpu, "reset_clocks", None, lane, reason)

    def may_write(self, gpu: str) -> bool:
        """Never: a dry run only logs (every GPU of a lane is treated alike)."""
        return False

    def restore_defaults(self, gpu: str) -> None:
        """Log the intent (nothing was changed, so nothing needs restoring)."""
        self._log(gpu, "restore", None, "", "restore defaults")
