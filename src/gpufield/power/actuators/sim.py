"""Simulated actuator: applies settings to the twin's firmware models (one per GPU UUID)."""

from __future__ import annotations

import time

from gpufield.errors import ActuationError
from gpufield.power.twin.gpu import Firmware, GpuModel
from gpufield.power.types import GpuCaps, GpuState

__all__ = ["SimActuator"]


class SimActuator:
    """Drives :class:`~gpufield.power.twin.gpu.Firmware` objects as if they were GPUs.

    Args:
        firmwares: UUID -> firmware of that simulated GPU.
    """

    def __init__(self, firmwares: dict[str, Firmware]) -> None:
        self.firmwares = firmwares
        self.writes: list[tuple[str, str, object]] = []

    def __enter__(self) -> SimActuator:
        return self

    def __exit__(self, *exc: object) -> None:
        for g in self.firmwares:
            self.restore_defaults(g)

    def _fw(self, gpu: str) -> Firmware:
        if gpu not in self.firmwares:
            raise ActuationError(f"simulated GPU {gpu} not found")
        return self.firmwares[gpu]

    def capabilities(self, gpu: str) -> GpuCaps:
        """Limits and clocks of the simulated SKU."""
        m: GpuModel = self._fw(gpu).model
        return GpuCaps(uuid=gpu, name=m.nvml_name, min_limit_w=m.min_limit_w, max_limit_w=m.max_limit_w,
                       default_limit_w=m.tdp_w, sm_clocks_mhz=tuple(int(c) for c in m.sm_clocks_mhz),
                       mem_clocks_mhz=tuple(m.mem_clocks_mhz))

    def read(self, gpu: str) -> GpuState:
        """Firmware state (power is the running 1 s average; energy is not tracked here)."""
        fw = self._fw(gpu)
        m = fw.model
        locked = fw.window_mhz != (int(m.sm_clocks_mhz[-1]), int(m.sm_clocks_mhz[0]))
        return GpuState(uuid=gpu, t_s=time.monotonic(), power_w=fw.ema_w, energy_j=float("nan"),
                        sm_clock_mhz=int(m.sm_clocks_mhz[fw.last_clock_index]), mem_clock_mhz=m.mem_clocks_mhz[0],
                        enforced_limit_w=fw.cap_w, default_limit_w=m.tdp_w, clocks_locked=locked,
                        reasons=0x2 if locked else 0)

    def set_power_limit(self, gpu: str, power_w: float, *, lane: str = "", reason: str = "") -> float:
        """Set the firmware cap (clamped); return it (W)."""
        fw = self._fw(gpu)
        fw.configure(power_w, fw.window_mhz)
        self.writes.append((gpu, "power_limit", fw.cap_w))
        return fw.cap_w

    def set_clock_window(self, gpu: str, lo_mhz: int, hi_mhz: int, *, lane: str = "", reason: str = "") -> tuple[int, int]:
        """Set the firmware clock window (snapped); return it (MHz)."""
        fw = self._fw(gpu)
        m = fw.model
        win = (m.snap_clock_mhz(lo_mhz, up=True), m.snap_clock_mhz(hi_mhz, up=False))
        fw.configure(fw.cap_w, win)
        self.writes.append((gpu, "clock_window", win))
        return win

    def reset_clocks(self, gpu: str, *, lane: str = "", reason: str = "") -> None:
        """Unlock the firmware clocks."""
        fw = self._fw(gpu)
        fw.configure(fw.cap_w, None)
        self.writes.append((gpu, "reset_clocks", None))

    def restore_defaults(self, gpu: str) -> None:
        """Default cap, no clock lock."""
        self._fw(gpu).configure(None, None)
