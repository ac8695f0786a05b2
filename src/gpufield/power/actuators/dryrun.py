"""Dry-run actuator: real NVML reads, every intended write logged, no write possible (shadow mode).

The actuator holds NVML only through :class:`ReadOnlyNvml`, a proxy that raises
:class:`~gpufield.errors.ActuationError` on any attribute whose name is an NVML setter
(``nvmlDeviceSet*``, ``nvmlDeviceReset*``, ``nvmlDeviceClear*``, workload-profile set/clear/update,
``nvmlSystemSet*``, ``nvmlDeviceModify*``, ``nvmlGpmSet*``), so no code path of this class can reach a
setter even by mistake. Each intended write becomes an :class:`~gpufield.power.types.Intent` with
time, lane, GPU, value and reason, kept in :attr:`DryRunActuator.intents` and optionally appended to a
JSONL file.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from gpufield.errors import ActuationError
from gpufield.power.actuators.nvml import open_handles, read_caps, read_state
from gpufield.power.types import GpuCaps, GpuState, Intent

__all__ = ["DryRunActuator", "ReadOnlyNvml", "NVML_SETTER_PREFIXES"]

#: NVML function-name prefixes that change device state (nvidia-ml-py 13.615.71)
NVML_SETTER_PREFIXES = (
    "nvmlDeviceSet", "nvmlDeviceReset", "nvmlDeviceClear", "nvmlDeviceWorkloadPowerProfileSet",
    "nvmlDeviceWorkloadPowerProfileClear", "nvmlDeviceWorkloadPowerProfileUpdate", "nvmlSystemSet",
    "nvmlDeviceModify", "nvmlGpmSet",
)


class ReadOnlyNvml:
    """Proxy of a ``pynvml``-like module that refuses every setter attribute.

    Raises:
        ActuationError: on access to any name starting with one of :data:`NVML_SETTER_PREFIXES`.
    """

    def __init__(self, nvml: Any) -> None:
        object.__setattr__(self, "_nvml", nvml)

    def __getattr__(self, name: str) -> Any:
        if name.startswith(NVML_SETTER_PREFIXES):
            raise ActuationError(f"{name} is a setter: refused by the read-only NVML proxy")
        return getattr(object.__getattribute__(self, "_nvml"), name)

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
        caps = self.capabilities(gpu)
        win = (caps.snap_clock_mhz(lo_mhz, up=True), caps.snap_clock_mhz(hi_mhz, up=False))
        self._log(gpu, "clock_window", win, lane, reason)
        return win

    def reset_clocks(self, gpu: str, *, lane: str = "", reason: str = "") -> None:
        """Log the intent."""
        self._log(gpu, "reset_clocks", None, lane, reason)

    def restore_defaults(self, gpu: str) -> None:
        """Log the intent (nothing was changed, so nothing needs restoring)."""
        self._log(gpu, "restore", None, "", "restore defaults")
