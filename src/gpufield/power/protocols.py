"""Extension points of the power wing (one ``Protocol`` each; fakes in :mod:`gpufield.testing`).

* :class:`Actuator`: reads and (where allowed) writes one GPU's power limit and SM-clock window.
  Implementations: :class:`~gpufield.power.actuators.nvml.NvmlActuator` (real, interlocked),
  :class:`~gpufield.power.actuators.dryrun.DryRunActuator` (real reads, logged intents, no write
  possible), :class:`~gpufield.power.actuators.sim.SimActuator` (the twin's firmware).
* :class:`TelemetrySource`: what a lane's controller sees each tick (engine metrics, NVML freshness).
* :class:`Policy`: ``policy(lane, signals) -> LaneSetting`` (static baselines, guarded controllers).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from gpufield.power.types import GpuCaps, GpuState, Lane, LaneSetting, LaneSignals

__all__ = ["Actuator", "TelemetrySource", "Policy"]


@runtime_checkable
class Actuator(Protocol):
    """Device control of GPUs named by UUID, in W and MHz. Usable as a context manager that restores
    every GPU it changed on exit.

    Raises (every write): :class:`gpufield.errors.ActuationError` when refused or not read back.
    """

    def capabilities(self, gpu: str) -> GpuCaps:
        """Limits and supported clocks of ``gpu``."""
        ...

    def read(self, gpu: str) -> GpuState:
        """Current control state and telemetry of ``gpu``."""
        ...

    def set_power_limit(self, gpu: str, power_w: float, *, lane: str, reason: str) -> float:
        """Set the power limit (clamped to the constraints); return the enforced limit in W."""
        ...

    def set_clock_window(self, gpu: str, lo_mhz: int, hi_mhz: int, *, lane: str, reason: str) -> tuple[int, int]:
        """Lock the SM clock into ``[lo, hi]`` (snapped to supported clocks); return the window set."""
        ...

    def reset_clocks(self, gpu: str, *, lane: str, reason: str) -> None:
        """Unlock the SM clock."""
        ...

    def restore_defaults(self, gpu: str) -> None:
        """Put ``gpu`` back to the settings saved before this actuator's first write."""
        ...


@runtime_checkable
class TelemetrySource(Protocol):
    """Signals for one lane at the current time."""

    def signals(self, lane: Lane) -> LaneSignals:
        """Read the lane's latency windows, queue, KV use and telemetry freshness."""
        ...


class Policy(Protocol):
    """Decides a lane's setting from its signals (called once per control period)."""

    def __call__(self, lane: Lane, signals: LaneSignals) -> LaneSetting:
        """The setting ``lane`` should run at now."""
        ...
