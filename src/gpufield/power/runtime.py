"""The runtime loop: every period, each lane's controller reads signals and the actuator applies.

Used for shadow mode (with :class:`~gpufield.power.actuators.dryrun.DryRunActuator`: intents logged,
nothing written) and for real control (with the interlocked NVML actuator). Each tick, per lane:

1. **Read back** every GPU (``actuator.read``). A failed read marks the lane ``nvml_error``; a thermal
   clock-event reason (SW/HW thermal slowdown, 0x20 / 0x40) marks it ``thermal_slowdown``: both reach
   the guard, which falls back to defaults.
2. **Reconcile.** The control fields read (enforced limit, locked-clock bit) are compared with what
   the GPU showed right after this loop's own last apply. A difference means someone else changed
   the GPU (another tool, an out-of-band limiter, a restore by a signal handler): it is logged
   (``logging`` warning on ``gpufield.power`` and :attr:`TickRecord.drift`), the loop's belief is
   updated (the lane's applied setting becomes unknown) and the lane's setting is applied again
   *with that reason in its log line*. After ``yield_after`` such changes on a lane the loop stops
   writing that lane and reports it in every tick's error (it does not fight an external writer).
3. Decide and, when the setting changed (or the belief was reset), apply to each GPU.

Any actuation error marks the lane's next signals with ``nvml_error`` and restores that lane's GPUs.

**Start-up check.** A lane whose GPUs are partly writable and partly not (``actuator.may_write``)
is refused when the loop is built (:class:`~gpufield.errors.ActuationError`): writing the allowed
GPUs and failing on the others would write and restore the lane every tick. Allow all of a lane's
GPUs or none. Each tick records its duration (controller + actuator overhead).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from gpufield.errors import ActuationError, GpufieldError
from gpufield.power.controller import LaneController
from gpufield.power.protocols import Actuator, TelemetrySource
from gpufield.power.types import GpuState, Lane, LaneSetting

_log = logging.getLogger("gpufield.power")
#: clock-event reasons that mean thermal slowdown (nvmlClocksEventReasonSw/HwThermalSlowdown)
THERMAL_REASONS = 0x20 | 0x40

__all__ = ["TickRecord", "RuntimeLoop", "apply_setting", "THERMAL_REASONS"]


def apply_setting(act: Actuator, gpu: str, setting: LaneSetting, *, lane: str, reason: str) -> None:
    """Apply one lane setting to one GPU: power limit (default limit if None), clock window (unlock if None)
    and workload power profile (requested if set; cleared if None, on an actuator that has profiles).

    Raises:
        ActuationError: a write failed, or a profile was asked of an actuator without profiles.
    """
    caps = act.capabilities(gpu)
    act.set_power_limit(gpu, setting.power_limit_w if setting.power_limit_w is not None else caps.default_limit_w,
                        lane=lane, reason=reason)
    if setting.clock_window_mhz is None:
        act.reset_clocks(gpu, lane=lane, reason=reason)
    else:
        act.set_clock_window(gpu, *setting.clock_window_mhz, lane=lane, reason=reason)
    if setting.workload_profile is not None:
        setp = getattr(act, "set_workload_profile", None)
        if setp is None:
            raise ActuationError(f"{gpu}: setting {setting.label!r} needs workload power profiles; this actuator has "
                                 "none (wrap it in gpufield.power.actuators.wpp.WorkloadProfileActuator)")
        setp(gpu, setting.workload_profile, lane=lane, reason=reason)
    elif getattr(act, "clear_workload_profile", None) is not None:
        act.clear_workload_profile(gpu, lane=lane, reason=reason)


@dataclass(frozen=True, kw_only=True, slots=True)
class TickRecord:
    """One tick: start time (monotonic s), duration (s), each lane's setting label, any error, and the
    external changes found by read-back (``"<gpu>: enforced_limit_w 450.0 -> 300.0"``)."""

    t_s: float
    duration_s: float
    settings: dict[str, str]
    error: str = ""
    drift: tuple[str, ...] = field(default_factory=tuple)


def _control(st: GpuState) -> tuple[float, bool]:
    return (round(st.enforced_limit_w, 3), bool(st.clocks_locked))


class RuntimeLoop:
    """Per-lane control loop.

    Args:
        lanes: lane -> GPU UUIDs. controllers: lane -> controller. source: signals. actuator: writes.
        period_s: control period. clock / sleep: injectable for tests.
        yield_after: external changes tolerated per lane before the loop stops writing it.
        halted: optional ``() -> reason or None``; while it gives a reason no lane is written (the
            guard still decides; e.g. NVML wedged: :attr:`BoundedNvml.wedged`, a write would not return).

    Raises:
        ActuationError: a lane mixes GPUs the actuator may write with GPUs it may not.
        ValueError: ``period_s <= 0`` or ``yield_after < 1``.
    """

    def __init__(self, lanes: dict[Lane, list[str]], controllers: dict[Lane, LaneController],
                 source: TelemetrySource, actuator: Actuator, *, period_s: float = 5.0,
                 clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep,
                 yield_after: int = 3, halted: Callable[[], str | None] | None = None) -> None:
        if not period_s > 0:
            raise ValueError(f"period_s must be > 0, got {period_s}")
        if yield_after < 1:
            raise ValueError(f"yield_after must be >= 1, got {yield_after}")
        may = getattr(actuator, "may_write", None)
        if may is not None:
            for lane, gpus in lanes.items():
                ok = [g for g in gpus if may(g)]
                if ok and len(ok) != len(gpus):
                    raise ActuationError(
                        f"lane {Lane(lane).value} mixes writable GPUs {ok} with read-only GPUs "
                        f"{[g for g in gpus if g not in ok]}: allow every GPU of a lane or none")
        self.lanes, self.controllers, self.source, self.act = lanes, controllers, source, actuator
        self.period_s, self.clock, self.sleep = period_s, clock, sleep
        self.applied: dict[Lane, LaneSetting | None] = {lane: None for lane in lanes}
        self._error: dict[Lane, bool] = {lane: False for lane in lanes}
        self.records: list[TickRecord] = []
        self.yield_after = yield_after
        self._seen: dict[str, tuple[float, bool]] = {}  # control fields right after our last apply
        self._drifts: dict[Lane, int] = {lane: 0 for lane in lanes}
        self.yielded: set[Lane] = set()
        self._halted = halted

    def _read_back(self, lane: Lane, gpus: list[str], drift: list[str]) -> tuple[bool, bool, bool]:
        """Read every GPU of ``lane``: ``(read_failed, thermal, changed_externally)``."""
        failed = thermal = changed = False
        for g in gpus:
            try:
                st = self.act.read(g)
            except Exception as e:  # noqa: BLE001 - any read failure is an NVML error for the guard
                _log.warning("%s: read-back of %s failed: %s", lane.value, g, e)
                failed = True
                continue
            thermal |= bool(st.reasons & THERMAL_REASONS)
            now, before = _control(st), self._seen.get(g)
            if before is not None and now != before:
                msg = (f"{g}: enforced_limit_w {before[0]} -> {now[0]}, clocks_locked {before[1]} -> {now[1]}"
                       " (changed outside this controller)")
                _log.warning("%s: %s", lane.value, msg)
                drift.append(msg)
                changed = True
            self._seen[g] = now
        return failed, thermal, changed

    def tick(self) -> TickRecord:
        """Run one control step for every lane (read back, reconcile, decide, apply)."""
        t0 = self.clock()
        errors: list[str] = []
        drift: list[str] = []
        for lane, gpus in self.lanes.items():
            failed, thermal, changed = self._read_back(lane, gpus, drift)
            sig = self.source.signals(lane)
            if self._error[lane] or failed or thermal:
                sig = replace(sig, nvml_error=sig.nvml_error or self._error[lane] or failed,
                              thermal_slowdown=sig.thermal_slowdown or thermal)
            setting = self.controllers[lane].decide(sig)
            self._error[lane] = False
            reason = getattr(self.controllers[lane].guard, "reason", "static")
            if changed:
                self._drifts[lane] += 1
                self.applied[lane] = None  # belief updated: the GPU no longer has what we set
                reason = f"reconcile after an external change ({reason})"
                if self._drifts[lane] >= self.yield_after and lane not in self.yielded:
                    self.yielded.add(lane)
                    _log.error("%s: changed from outside %d times; no longer writing this lane",
                               lane.value, self._drifts[lane])
            if lane in self.yielded:
                errors.append(f"{lane.value}: not written (its GPUs were changed from outside "
                              f"{self._drifts[lane]} times)")
                continue
            halt = self._halted() if self._halted is not None else None
            if halt:
                errors.append(f"{lane.value}: not written ({halt})")
                self.applied[lane] = None
                continue
            if setting == self.applied[lane]:
                continue
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
            for g in gpus:  # what our own write (or restore) left: the reference for the next read-back
                try:
                    self._seen[g] = _control(self.act.read(g))
                except Exception:  # noqa: BLE001 - the next tick's read-back reports it
                    self._seen.pop(g, None)
        rec = TickRecord(t_s=t0, duration_s=self.clock() - t0,
                         settings={lane.value: (s.label if s else "unknown") for lane, s in self.applied.items()},
                         error="; ".join(errors), drift=tuple(drift))
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
