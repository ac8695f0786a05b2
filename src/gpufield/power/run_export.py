"""What ``gpufield power run`` exports: Prometheus metrics on localhost, a JSON-lines decision log,
and the would-have-saved estimate of shadow mode.

**Metrics** (``prometheus-client``, own registry, ``127.0.0.1`` by default; prefix ``gpufield_power_``):
``info{mode}``, ``ticks_total``, ``tick_duration_seconds`` (histogram), per lane ``lane_guard_state
{lane,state}`` (1 for the current state), ``lane_guard_level``, ``lane_power_limit_watts`` and
``lane_clock_window_{low,high}_mhz`` (the setting the controller wants; NaN = vendor default / unlocked),
``lane_itl_p99_seconds{window}``, ``lane_ttft_p99_seconds{window}``, ``lane_queue_depth``,
``lane_kv_usage``, ``lane_telemetry_age_seconds``, ``intents_total{action}``, ``drift_total``,
``nvml_timeouts_total{lane,call}`` and ``nvml_wedged`` (an NVML call missed its deadline),
``errors_total``, ``energy_joules_total`` and ``would_have_saved_joules_total``; per GPU
``gpu_power_watts``, ``gpu_enforced_limit_watts``, ``gpu_sm_clock_mhz``, ``gpu_clocks_locked``.

**Decision log.** The file is created with ``O_CREAT | O_EXCL`` (an existing file, whoever made it,
is never replaced or appended to) and written one complete JSON line per ``os.write`` on an
``O_APPEND`` descriptor, ``fsync``'ed after every tick: a reader never sees half a record, and a
run killed at any point leaves every record written so far (the last one is then not ``stop``).

**Would have saved** (shadow only; an estimate from power readings, not a measurement). Between two
ticks each GPU's energy counter gives its mean power ``P`` over ``dt``. With the intended setting in
force over that interval:

* a power cap ``C`` binds when ``P > C``: saved ``(P - C) dt`` (the cap holds the ~1 s average at ``C``);
* a clock window topping out at ``hi`` below the mean SM clock ``f`` read at both ends: the dynamic
  part ``P - P_idle(f)`` scales by the twin's ``g(hi) / g(f)`` (``f V(f)^2``, :meth:`GpuModel.voltage_scale`);
* both: the larger of the two.

Both ignore the longer run time a slower GPU may need for the same work (an upper bound on the
saving at equal work when the cap binds hard); the twin's A/B reports the equal-work figure.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Sequence
from typing import Any

from gpufield.power.types import GpuState, Lane, LaneSetting, LaneSignals

__all__ = ["DecisionLog", "LastSignals", "Recorder", "RunMetrics", "would_save_j"]


def _clean(o: Any) -> Any:
    if isinstance(o, float) and not math.isfinite(o):
        return None
    if isinstance(o, dict):
        return {str(k): _clean(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_clean(v) for v in o]
    return o


class DecisionLog:
    """Append-only JSON-lines file that is never an existing file (see the module docstring).

    Args:
        path: the log file; must not exist.
        inputs: the run's own input files (the lanes file, profiles); named as such when ``path`` is one.

    Raises:
        InputError: ``path`` exists or its directory is missing/not writable.
    """

    def __init__(self, path: str, *, inputs: Sequence[str] = ()) -> None:
        from gpufield._files import check_output

        check_output(path, option="decision_log", inputs=inputs, force_flag=None)
        self.path = path
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o644)
        self.records = 0

    def write(self, rec: dict[str, Any], *, sync: bool = False) -> None:
        """Append one record (NaN/inf become null) as one line."""
        if self._fd is None:
            return
        line = (json.dumps(_clean(rec), separators=(",", ":"), default=str) + "\n").encode()
        os.write(self._fd, line)
        self.records += 1
        if sync:
            os.fsync(self._fd)

    def sync(self) -> None:
        """fsync what was written (no-op once closed)."""
        if self._fd is not None:
            os.fsync(self._fd)

    def close(self) -> None:
        """fsync and close (idempotent)."""
        if self._fd is not None:
            try:
                os.fsync(self._fd)
            finally:
                os.close(self._fd)
                self._fd = None


def would_save_j(setting: LaneSetting, a: GpuState, b: GpuState, model: Any | None) -> float:
    """Energy (J) the intended ``setting`` would have saved between reads ``a`` and ``b`` (module docstring).

    Args:
        setting: the setting the controller wanted over the interval.
        a / b: two reads of one GPU (``t_s`` monotonic s, ``energy_j`` J, ``sm_clock_mhz`` MHz).
        model: the twin's :class:`~gpufield.power.twin.gpu.GpuModel` of the SKU (for clock windows);
            None -> clock windows are not estimated (0).

    Returns:
        Joules >= 0; 0 for the vendor default or a non-positive interval.
    """
    dt = b.t_s - a.t_s
    if dt <= 0 or setting.is_default:
        return 0.0
    p = (b.energy_j - a.energy_j) / dt
    saved = 0.0
    if setting.power_limit_w is not None and p > setting.power_limit_w:
        saved = (p - setting.power_limit_w) * dt
    if setting.clock_window_mhz is not None and model is not None:
        f = 0.5 * (a.sm_clock_mhz + b.sm_clock_mhz)
        hi = setting.clock_window_mhz[1]
        if f > hi:
            dyn = max(0.0, p - float(model.idle_power_w(f)))
            frac = 1.0 - float(model.voltage_scale(hi)) / float(model.voltage_scale(f))
            saved = max(saved, dyn * frac * dt)
    return saved


class Recorder:
    """Actuator wrapper that records every call of the loop as an ``intent`` (shadow) or ``write`` event.

    Args:
        act: the actuator. lane: the lane's name (events and the actuator's own log get it).
        write: whether the actuator writes (event kind ``write``) or only logs (``intent``).
    """

    def __init__(self, act: Any, lane: str, write: bool) -> None:
        self._act, self._lane, self._kind = act, lane, "write" if write else "intent"
        self.events: list[dict] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._act, name)

    def _ev(self, gpu: str, action: str, value: Any, reason: str) -> None:
        self.events.append({"event": self._kind, "t": time.time(), "lane": self._lane, "gpu": gpu, "action": action,
                            "value": value, "reason": reason})

    def set_power_limit(self, gpu: str, power_w: float, *, lane: str, reason: str) -> float:
        """Forward and record (W)."""
        v = self._act.set_power_limit(gpu, power_w, lane=self._lane, reason=reason)
        self._ev(gpu, "power_limit", v, reason)
        return v

    def set_clock_window(self, gpu: str, lo_mhz: int, hi_mhz: int, *, lane: str, reason: str) -> tuple[int, int]:
        """Forward and record (MHz)."""
        v = self._act.set_clock_window(gpu, lo_mhz, hi_mhz, lane=self._lane, reason=reason)
        self._ev(gpu, "clock_window", list(v), reason)
        return v

    def reset_clocks(self, gpu: str, *, lane: str, reason: str) -> None:
        """Forward and record."""
        self._act.reset_clocks(gpu, lane=self._lane, reason=reason)
        self._ev(gpu, "reset_clocks", None, reason)

    def set_workload_profile(self, gpu: str, profile: str, *, lane: str, reason: str) -> Any:
        """Forward and record (a workload power profile name)."""
        setp = getattr(self._act, "set_workload_profile", None)
        if setp is None:
            from gpufield.errors import ActuationError

            raise ActuationError(f"{gpu}: workload power profile {profile!r} asked of an actuator without profiles")
        v = setp(gpu, profile, lane=self._lane, reason=reason)
        self._ev(gpu, "workload_profile", profile, reason)
        return v

    @property
    def clear_workload_profile(self) -> Any:
        """Forward and record, when the actuator has profiles (else None: :func:`apply_setting` skips it)."""
        inner = getattr(self._act, "clear_workload_profile", None)
        if inner is None:
            return None

        def clear(gpu: str, *, lane: str, reason: str) -> None:
            if inner(gpu, lane=self._lane, reason=reason):
                self._ev(gpu, "workload_profile", None, reason)
        return clear

    def restore_defaults(self, gpu: str) -> None:
        """Forward and record."""
        self._act.restore_defaults(gpu)
        self._ev(gpu, "restore", None, "restore after an actuation error")


class LastSignals:
    """TelemetrySource wrapper that keeps the last signals it returned (for the lane's gauges and log)."""

    def __init__(self, src: Any) -> None:
        self.src, self.last = src, None

    def signals(self, lane: Lane) -> LaneSignals:
        """Forward and keep the result."""
        self.last = self.src.signals(lane)
        return self.last


_STATES = ("at_calibrated", "raised", "fallback")


class RunMetrics:
    """The Prometheus registry of one run and its HTTP server.

    Args:
        mode: ``"shadow"`` or ``"write"``. addr / port: where to serve (port 0 = any free port).
    """

    def __init__(self, mode: str, addr: str, port: int) -> None:
        from prometheus_client import (
            CollectorRegistry,
            Counter,
            Gauge,
            Histogram,
            start_http_server,
        )

        r = self.registry = CollectorRegistry()
        p = "gpufield_power_"
        L, G = ["lane"], ["lane", "gpu"]
        self.info = Gauge(p + "info", "Controller running (1) in this mode", ["mode"], registry=r)
        self.info.labels(mode).set(1)
        self.ticks = Counter(p + "ticks", "Control ticks run", registry=r)
        self.tick_s = Histogram(p + "tick_duration_seconds", "Duration of one tick over all lanes (s)", registry=r,
                                buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5))
        self.state = Gauge(p + "lane_guard_state", "1 for the lane's current guard state", L + ["state"], registry=r)
        self.level = Gauge(p + "lane_guard_level", "Notches above the calibrated point (-1 = fallback)", L, registry=r)
        self.cap = Gauge(p + "lane_power_limit_watts", "Wanted power limit (NaN = vendor default)", L, registry=r)
        self.win_lo = Gauge(p + "lane_clock_window_low_mhz", "Wanted SM-clock floor (NaN = unlocked)", L, registry=r)
        self.win_hi = Gauge(p + "lane_clock_window_high_mhz", "Wanted SM-clock top (NaN = unlocked)", L, registry=r)
        self.itl = Gauge(p + "lane_itl_p99_seconds", "ITL p99 over the window", L + ["window"], registry=r)
        self.ttft = Gauge(p + "lane_ttft_p99_seconds", "TTFT p99 over the window", L + ["window"], registry=r)
        self.queue = Gauge(p + "lane_queue_depth", "Requests waiting (engine gauge)", L, registry=r)
        self.kv = Gauge(p + "lane_kv_usage", "Highest per-engine KV-cache use (0..1)", L, registry=r)
        self.age = Gauge(p + "lane_telemetry_age_seconds", "Age of the lane's SLO histogram", L, registry=r)
        self.intents = Counter(p + "intents", "Intended (shadow) or applied (write) actions", L + ["action"], registry=r)
        self.drift = Counter(p + "drift", "External changes found by read-back", L, registry=r)
        self.nvml_timeouts = Counter(p + "nvml_timeouts", "NVML calls that missed their deadline (the lane then "
                                     "fails safe)", L + ["call"], registry=r)
        self.nvml_wedged = Gauge(p + "nvml_wedged", "1 once an NVML call missed its deadline (no NVML call is made "
                                 "after that)", registry=r)
        self.nvml_wedged.set(0)
        self.errors = Counter(p + "errors", "Ticks with a lane error", L, registry=r)
        self.energy = Counter(p + "energy_joules", "GPU energy measured (counter deltas)", L, registry=r)
        self.saved = Counter(p + "would_have_saved_joules", "Shadow estimate of energy the intents would save",
                             L, registry=r)
        self.gpu_power = Gauge(p + "gpu_power_watts", "Mean power since the last tick (energy counter)", G, registry=r)
        self.gpu_limit = Gauge(p + "gpu_enforced_limit_watts", "Enforced power limit read back", G, registry=r)
        self.gpu_clock = Gauge(p + "gpu_sm_clock_mhz", "SM clock read back", G, registry=r)
        self.gpu_locked = Gauge(p + "gpu_clocks_locked", "Locked-clock reason bit 0x2 set", G, registry=r)
        self.server, self._thread = start_http_server(port, addr=addr, registry=r)
        self.port = int(self.server.server_port)

    def lane(self, name: str, state: str, level: int, setting: LaneSetting, sig: Any) -> None:
        """Update one lane's gauges from its guard state, wanted setting and signals."""
        for s in _STATES:
            self.state.labels(name, s).set(1.0 if s == state else 0.0)
        self.level.labels(name).set(level)
        nan = math.nan
        self.cap.labels(name).set(setting.power_limit_w if setting.power_limit_w is not None else nan)
        lo, hi = setting.clock_window_mhz or (nan, nan)
        self.win_lo.labels(name).set(lo)
        self.win_hi.labels(name).set(hi)
        self.itl.labels(name, "fast").set(sig.itl_p99_fast_s)
        self.itl.labels(name, "slow").set(sig.itl_p99_slow_s)
        self.ttft.labels(name, "fast").set(sig.ttft_p99_fast_s)
        self.ttft.labels(name, "slow").set(sig.ttft_p99_slow_s)
        self.queue.labels(name).set(sig.queue_depth)
        self.kv.labels(name).set(sig.kv_usage)
        self.age.labels(name).set(sig.telemetry_age_s if math.isfinite(sig.telemetry_age_s) else 1e300)

    def gpu(self, lane: str, st: GpuState, power_w: float) -> None:
        """Update one GPU's gauges."""
        self.gpu_power.labels(lane, st.uuid).set(power_w)
        self.gpu_limit.labels(lane, st.uuid).set(st.enforced_limit_w)
        self.gpu_clock.labels(lane, st.uuid).set(st.sm_clock_mhz)
        self.gpu_locked.labels(lane, st.uuid).set(1.0 if st.clocks_locked else 0.0)

    def close(self) -> None:
        """Stop serving (idempotent)."""
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None
