"""The runtime loop: every period, each lane's controller reads signals and the actuator applies.

Used for shadow mode (with :class:`~gpufield.power.actuators.dryrun.DryRunActuator`: intents logged,
nothing written) and for real control (with the interlocked NVML actuator). A lane's setting is
applied to each of its GPUs only when it changes. Any actuation error marks the lane's next signals
with ``nvml_error`` (the guard then falls back) and restores that lane's GPUs. Each tick records its
duration (controller + actuator overhead) and the period actually achieved.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from gpufield.errors import GpufieldError
from gpufield.power.controller import LaneController
from gpufield.power.protocols import Actuator, TelemetrySource
from gpufield.power.types import Lane, LaneSetting

__all__ = ["TickRecord", "RuntimeLoop", "apply_setting"]


def apply_setting(act: Actuator, gpu: str, setting: LaneSetting, *, lane: str, reason: str) -> None:
    """Apply one lane setting to one GPU: power limit (default limit if None) and clock window (unlock if None)."""
    caps = act.capabilities(gpu)
    act.set_power_limit(gpu, setting.power_limit_w if setting.power_limit_w is not None else caps.default_limit_w,
                        lane=lane, reason=reason)
    if setting.clock_window_mhz is None:
        act.reset_clocks(gpu, lane=lane, reason=reason)
    else:
        act.set_clock_window(gpu, *setting.clock_window_mhz, lane=lane, reason=reason)


@dataclass(frozen=True, kw_only=True, slots=True)
class TickRecord:
    """One tick: start time (monotonic s), duration (s), each lane's setting label and any error."""

    t_s: float
    duration_s: float
    settings: dict[str, str]
    error: str = ""


class RuntimeLoop:
    """Per-lane control loop.

    Args:
        lanes: lane -> GPU UUIDs. controllers: lane -> controller. source: signals. actuator: writes.
        period_s: control period. clock / sleep: injectable for tests.
    """

    def __init__(self, lanes: dict[Lane, list[str]], controllers: dict[Lane, LaneController],
                 source: TelemetrySource, actuator: Actuator, *, period_s: float = 5.0,
                 clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> None:
        if period_s <= 0:
            raise ValueError(f"period_s must be > 0, got {period_s}")
        self.lanes, self.controllers, self.source, self.act = lanes, controllers, source, actuator
        self.period_s, self.clock, self.sleep = period_s, clock, sleep
        self.applied: dict[Lane, LaneSetting | None] = {lane: None for lane in lanes}
        self._error: dict[Lane, bool] = {lane: False for lane in lanes}
        self.records: list[TickRecord] = []

    def tick(self) -> TickRecord:
        """Run one control step for every lane."""
        t0 = self.clock()
        errors = []
        for lane, gpus in self.lanes.items():
            sig = self.source.signals(lane)
            if self._error[lane]:
                sig = replace(sig, nvml_error=True)
            setting = self.controllers[lane].decide(sig)
            self._error[lane] = False
            if setting == self.applied[lane]:
                continue
            reason = getattr(self.controllers[lane].guard, "reason", "static")
            try:
                for g in gpus:
                    apply_setting(self.act, g, setting, lane=lane.value, reason=f"{setting.label}: {reason}")
                self.applied[lane] = setting
            except GpufieldError as e:
                errors.append(f"{lane.value}: {e}")
                self._error[lane] = True
                for g in gpus:
                    try:
                        self.act.restore_defaults(g)
                    except GpufieldError as e2:
                        errors.append(f"{lane.value}: restore {g}: {e2}")
                self.applied[lane] = None
        rec = TickRecord(t_s=t0, duration_s=self.clock() - t0,
                         settings={lane.value: (s.label if s else "unknown") for lane, s in self.applied.items()},
                         error="; ".join(errors))
        self.records.append(rec)
        return rec

    def run(self, duration_s: float, *, on_tick: Callable[[TickRecord], None] | None = None) -> list[TickRecord]:
        """Tick every ``period_s`` for ``duration_s`` (sleeping the remainder of each period)."""
        end = self.clock() + duration_s
        nxt = self.clock()
        while self.clock() < end:
            rec = self.tick()
            if on_tick is not None:
                on_tick(rec)
            nxt += self.period_s
            self.sleep(max(0.0, nxt - self.clock()))
        return self.records
