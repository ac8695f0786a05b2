"""``gpufield power run``: the long-running controller of a deployment's prefill and decode lanes.

:func:`run_lanes` is the one library function behind the command. In order:

1. **Interlock.** Shadow (the default) never writes: :class:`DryRunActuator` over the allow-listed
   :class:`ReadOnlyNvml` proxy. ``write=True`` needs ``allow`` UUIDs; every GPU of every lane must be
   allowed and every allowed UUID must belong to a lane, else nothing starts
   (:class:`~gpufield.errors.ActuationError` naming the GPUs).
2. **Lock.** :class:`StateDirLock` on ``state_dir`` (flock + PID): one controller per state directory;
   a second one is refused naming the first one's PID; a lock left by a dead PID is taken over.
   (In write mode the :class:`NvmlActuator` takes it, before it restores any orphaned state.)
3. **Start-up check of every lane**, all problems reported together: each GPU present by UUID, one
   SKU per lane, the plan (twin-derived for the SKU, or a calibration profile for this GPU and lane
   role) valid for the GPU's limits; each metric URL reachable and parsed, the lane's SLO histogram
   (decode: ITL, prefill: TTFT) and (decode) a KV gauge present. Any problem: nothing starts.
4. **Loop** every ``period_s``: each lane's :class:`RuntimeLoop` reads back and reconciles its GPUs,
   its :class:`LaneController` (the SLO guard) decides, the actuator logs (shadow) or applies (write).
   Per tick, per lane, one ``tick`` record goes to the decision log (``log_ticks = "changes"``: only
   when the guard state or setting changed, or on an intent, drift or error), then the Prometheus
   gauges; each intent or write is an ``intent`` / ``write`` record. A lane whose SLO histogram goes missing is stale
   telemetry and falls back to defaults (the guard's fail-safe).
4a. **NVML deadlines.** Every NVML call of the run goes through
   :class:`~gpufield.telemetry.nvml_deadline.BoundedNvml` (``[nvml] call_timeout_s``, default 2 s): a
   call that misses its deadline raises :class:`~gpufield.errors.NvmlTimeoutError` in the tick instead
   of stalling it, and NVML counts as wedged from then on (every later call raises at once, none
   reaches the driver). Each lane then fails safe: its read-back fails, the guard falls back to
   defaults, no write is attempted on the driver; a ``fail_safe`` record and one ``intent``
   (``write`` in write mode) record per GPU with ``applied: false`` go to the log, and
   ``gpufield_power_nvml_timeouts_total{lane,call}`` / ``gpufield_power_nvml_wedged`` are exported.
   The loop keeps its period; the settings are not read back at stop (the ``stop`` record says so).
5. **Stop** on SIGTERM/SIGINT (or ``stop`` / ``max_ticks``): the loop ends after the tick under way;
   in write mode the actuator restores every GPU it changed; the GPUs' settings are read back, a
   ``stop`` record with the run's summary closes the log; the lock is released.

See :mod:`gpufield.power.lanes_config` for the file and :mod:`gpufield.power.run_export` for the
metrics, the log and the would-have-saved estimate.
"""

from __future__ import annotations

import os
import signal
import statistics
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from gpufield.errors import ActuationError, TelemetryError
from gpufield.power.actuators.statelock import StateDirLock
from gpufield.power.controller import LaneController, LaneLimits
from gpufield.power.guard import AtCalibrated, Fallback, Raised
from gpufield.power.lanes_config import RunConfig
from gpufield.power.run_export import DecisionLog, LastSignals, Recorder, RunMetrics, would_save_j
from gpufield.power.runtime import RuntimeLoop
from gpufield.power.startup import check_lanes, check_write, open_nvml
from gpufield.power.types import GpuCaps
from gpufield.telemetry.nvml_deadline import BoundedNvml

__all__ = ["RunSummary", "run_lanes"]


@dataclass(frozen=True, kw_only=True, slots=True)
class RunSummary:
    """What a run did (also the decision log's ``stop`` record).

    Attributes:
        mode: ``shadow`` or ``write``. log_path / metrics_port: where its outputs went.
        ticks: ticks run. stop_reason: ``SIGTERM``, ``SIGINT``, ``stop``, ``max_ticks``.
        period_mean_s / period_max_s / period_p50_s: achieved loop period (s).
        tick_p50_ms / tick_max_ms: controller + actuator time per tick (ms).
        intents: intents logged (shadow) or writes applied (write).
        would_save_j / energy_j: shadow estimate and measured GPU energy (J) per lane.
        attest_before / attest_after / unchanged / diffs: the GPUs' settings read back around the run.
    """

    mode: str
    log_path: str
    metrics_port: int
    ticks: int
    stop_reason: str
    period_mean_s: float
    period_p50_s: float
    period_max_s: float
    tick_p50_ms: float
    tick_max_ms: float
    intents: int
    would_save_j: dict[str, float]
    energy_j: dict[str, float]
    attest_before: dict = field(default_factory=dict)
    attest_after: dict = field(default_factory=dict)
    unchanged: bool = True
    diffs: tuple[str, ...] = ()


def _guard_view(ctrl: LaneController) -> tuple[str, int, str]:
    st = ctrl.guard.state if ctrl.guard else AtCalibrated(0.0)
    if isinstance(st, Fallback):
        return "fallback", -1, ctrl.guard.reason
    if isinstance(st, Raised):
        return "raised", st.level, ctrl.guard.reason
    return "at_calibrated", 0, ctrl.guard.reason if ctrl.guard else "static"


def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def run_lanes(cfg: RunConfig, *, write: bool = False, allow: Sequence[str] = (), nvml: Any = None,
              stop: threading.Event | None = None, max_ticks: int | None = None,
              echo: Callable[[str], None] = _stderr) -> RunSummary:
    """Run the controller of ``cfg``'s lanes until SIGTERM/SIGINT, ``stop`` or ``max_ticks`` (module docstring).

    Args:
        cfg: the lanes file. write / allow: write mode and its UUID allow-list (default: shadow).
        nvml: a ``pynvml``-like module (default: ``cfg.nvml_backend``). stop: ends the run when set.
        max_ticks: end after this many ticks. echo: one-line status messages (default stderr).

    Returns:
        The run's :class:`RunSummary` (also the decision log's last record).

    Raises:
        ActuationError: write interlock, the state-directory lock, a GPU missing, a bad plan.
        TelemetryError: a lane's metrics unreachable or without its SLO histogram (nothing started).
        InputError: the decision log exists or cannot be created.
    """
    from gpufield.power.actuators.dryrun import DryRunActuator
    from gpufield.power.shadow import attest

    check_write(cfg, write, allow)
    mode = "write" if write else "shadow"
    log_path = cfg.decision_log.replace("{start}", time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()))
    from gpufield._files import check_output

    inputs = [cfg.path, *(ln.profile for ln in cfg.lanes if ln.profile)]
    check_output(log_path, option="decision_log", inputs=inputs, force_flag=None)  # before the lock and NVML
    stop = stop or threading.Event()
    why = {"reason": "stop"}
    lock = None
    if not write:
        lock = StateDirLock(cfg.state_dir)
        lock.acquire()
        if lock.takeover:
            echo(f"gpufield power run: {lock.takeover}")
    try:
        raw = nvml if nvml is not None else open_nvml(cfg, write)
        # every NVML call of the run (start-up checks, read-back, writes, attestation) has a deadline
        nv = raw if isinstance(raw, BoundedNvml) else BoundedNvml(raw, timeout_s=cfg.nvml_call_timeout_s)
        if write:
            from gpufield.power.actuators.nvml import NvmlActuator
            from gpufield.power.config import WriteConfig

            act_cm: Any = NvmlActuator(WriteConfig(allow_uuids=frozenset(allow), i_own_this_gpu=True,
                                                   state_dir=cfg.state_dir), nvml=nv, install_signal_handlers=False)
        else:
            act_cm = DryRunActuator(nvml=nv)
        import httpx

        http = httpx.Client(timeout=2.0)  # one connection pool for every scrape (httpx.get builds a client a call)

        def get(url: str) -> str:
            r = http.get(url)
            r.raise_for_status()
            return r.text
        from gpufield.power.actuators.wpp import with_profiles

        with http, with_profiles(act_cm) as act:
            info, probs, mprobs = check_lanes(cfg, act, get)
            if probs or mprobs:
                kind = ActuationError if probs else TelemetryError
                raise kind(f"start-up check of {cfg.path} failed, nothing started:\n  " + "\n  ".join(probs + mprobs))
            mine = {u for ln in cfg.lanes for u in ln.gpus}
            before = {u: d for u, d in attest(nv).items() if u in mine}
            lanes = []
            for ln in cfg.lanes:
                i = info[ln.name]
                c: GpuCaps = i["caps"]
                lim = LaneLimits(default_limit_w=c.default_limit_w, max_clock_mhz=max(c.sm_clocks_mhz),
                                 step_w=ln.step_w, clock_step_mhz=ln.clock_step_mhz)
                ctrl = LaneController(ln.role, i["setting"], lim, cfg.guard_config(ln))
                rec, src = Recorder(act, ln.name, write), LastSignals(i["source"])
                loop = RuntimeLoop({ln.role: list(ln.gpus)}, {ln.role: ctrl}, src, rec, period_s=cfg.period_s,
                                   halted=lambda: f"NVML wedged: {nv.wedged}" if nv.wedged is not None else None)
                lanes.append((ln, ctrl, rec, src, loop, i["model"]))
            log = DecisionLog(log_path, inputs=inputs)
            metrics = None
            try:
                try:
                    metrics = RunMetrics(mode, cfg.metrics_addr, cfg.metrics_port)
                except OSError as e:
                    raise TelemetryError(f"cannot serve metrics on {cfg.metrics_addr}:{cfg.metrics_port}: "
                                         f"{e.strerror or e} (controller.metrics_port in {cfg.path})") from None
                log.write({"event": "start", "t": time.time(), "pid": os.getpid(), "mode": mode, "config": cfg.path,
                           "metrics": f"http://{cfg.metrics_addr}:{metrics.port}/metrics", "metrics_port": metrics.port,
                           "state_dir": cfg.state_dir, "period_s": cfg.period_s,
                           "lanes": {ln.name: {"role": ln.role.value, "gpus": list(ln.gpus), "engine": ln.engine,
                                               "metrics": list(ln.metrics), "plan": info[ln.name]["origin"],
                                               "setting": asdict(info[ln.name]["setting"]),
                                               "slo": {"itl_p99_s": ln.itl_p99_slo_s, "ttft_p99_s": ln.ttft_p99_slo_s}}
                                     for ln in cfg.lanes},
                           "lock_takeover": getattr(act, "lock_takeover", None) or (lock.takeover if lock else None),
                           "orphans_restored": list(getattr(act, "orphans_restored", [])),
                           "attest_before": before}, sync=True)
                if cfg.metrics_addr not in ("127.0.0.1", "::1", "localhost"):
                    echo(f"gpufield power run: warning: the exporter listens on {cfg.metrics_addr}, not only on this "
                         "host (controller.metrics_addr)")
                echo(f"gpufield power run: {mode}, {len(lanes)} lane(s), metrics on "
                     f"http://{cfg.metrics_addr}:{metrics.port}/metrics, log {log_path}")
                old = _install_signals(stop, why)
                try:
                    stats = _loop(cfg, lanes, act, log, metrics, stop, why, max_ticks, shadow=not write, nv=nv)
                finally:
                    for s, h in old.items():
                        signal.signal(s, h)
                if write and nv.wedged is None:
                    act.restore_all()  # before the read-back: the GPUs must show what they had before
                if nv.wedged is None:
                    after = {u: d for u, d in attest(nv).items() if u in mine}
                    diffs = _changed(before, after)
                else:  # no call reaches a wedged driver; what the GPUs hold now is unknown
                    after, diffs = {}, [f"settings not read back after the run: {nv.wedged}"]
                ok = not diffs
                summary = RunSummary(mode=mode, log_path=log_path, metrics_port=metrics.port,
                                     stop_reason=why["reason"], attest_before=before, attest_after=after,
                                     unchanged=ok, diffs=tuple(diffs), **stats)
                log.write({"event": "stop", "t": time.time(), **asdict(summary)}, sync=True)
            except BaseException as e:
                log.write({"event": "error", "t": time.time(), "error": f"{type(e).__name__}: {e}"}, sync=True)
                raise
            finally:
                log.close()
                if metrics is not None:
                    metrics.close()
        echo(f"gpufield power run: stopped ({summary.stop_reason}) after {summary.ticks} ticks; "
             f"settings {'unchanged' if summary.unchanged else 'CHANGED: ' + '; '.join(summary.diffs)}")
        return summary
    finally:
        if lock is not None:
            lock.release()


#: the settings a write would change (read back by gpufield.power.shadow.attest)
_SETTINGS = ("enforced_limit_w", "power_limit_w", "default_limit_w", "locked_clocks_bit", "app_sm_clock_mhz")


def _changed(before: dict, after: dict) -> list[str]:
    """Settings of the lanes' GPUs that differ after the run (``"<uuid>: key a -> b"``)."""
    out = []
    for u, b in before.items():
        a = after.get(u)
        if a is None:
            out.append(f"{u}: not readable after the run")
            continue
        out += [f"{u}: {k} {b.get(k)} -> {a.get(k)}" for k in _SETTINGS if b.get(k) != a.get(k)]
    return out


def _install_signals(stop: threading.Event, why: dict) -> dict:
    old = {}
    if threading.current_thread() is not threading.main_thread():
        return old

    def handler(signum: int, frame: Any) -> None:
        why["reason"] = signal.Signals(signum).name
        stop.set()
    for s in (signal.SIGTERM, signal.SIGINT):
        old[s] = signal.signal(s, handler)
    return old


def _fail_safe(ln: Any, nv: BoundedNvml, log: DecisionLog, metrics: RunMetrics, shadow: bool) -> int:
    """A lane's first tick after NVML missed a deadline: log the fail-safe intent (not written) and count it.

    Returns the number of intent records written (one per GPU of the lane).
    """
    err = nv.wedged
    metrics.nvml_timeouts.labels(ln.name, err.call).inc()
    metrics.nvml_wedged.set(1)
    t = time.time()
    log.write({"event": "fail_safe", "t": t, "lane": ln.name, "call": err.call, "timeout_s": err.timeout_s,
               "reason": str(err), "action": "restore defaults", "applied": False}, sync=True)
    for g in ln.gpus:  # what the guard's fail-safe wants; never sent to a wedged driver
        log.write({"event": "intent" if shadow else "write", "t": t, "lane": ln.name, "gpu": g, "action": "restore",
                   "value": None, "applied": False, "reason": f"fail-safe: {err} (not written: NVML is wedged)"})
        metrics.intents.labels(ln.name, "restore").inc()
    return len(ln.gpus)


def _loop(cfg: RunConfig, lanes: list, act: Any, log: DecisionLog, metrics: RunMetrics, stop: threading.Event,
          why: dict, max_ticks: int | None, *, shadow: bool, nv: BoundedNvml) -> dict:
    starts, durs = [], []
    prev: dict[str, Any] = {}
    saved = {ln.name: 0.0 for ln, *_ in lanes}
    energy = {ln.name: 0.0 for ln, *_ in lanes}
    n_int = 0
    every = cfg.log_ticks == "all"
    last_key: dict[str, tuple] = {}
    pend = {ln.name: 0.0 for ln, *_ in lanes}
    failed_safe: set[str] = set()
    nxt = time.monotonic()
    while not stop.is_set():
        t0 = time.monotonic()
        starts.append(t0)
        for ln, ctrl, rec, src, loop, model in lanes:
            wanted_before = ctrl.current
            tr = loop.tick()
            gpus, lane_saved = {}, 0.0
            for g in ln.gpus:
                try:
                    st = act.read(g)
                except Exception as e:  # noqa: BLE001 - the next tick's read-back marks the lane
                    gpus[g] = {"error": f"{type(e).__name__}: {e}"}
                    continue
                a = prev.get(g)
                p_w = (st.energy_j - a.energy_j) / (st.t_s - a.t_s) if a is not None and st.t_s > a.t_s else st.power_w
                if a is not None:
                    energy[ln.name] += max(0.0, st.energy_j - a.energy_j)
                    metrics.energy.labels(ln.name).inc(max(0.0, st.energy_j - a.energy_j))
                    if shadow:
                        s = would_save_j(wanted_before, a, st, model)
                        lane_saved += s
                prev[g] = st
                metrics.gpu(ln.name, st, p_w)
                gpus[g] = {"power_w": p_w, "sm_clock_mhz": st.sm_clock_mhz, "enforced_limit_w": st.enforced_limit_w,
                           "clocks_locked": st.clocks_locked, "reasons": st.reasons}
            saved[ln.name] += lane_saved
            metrics.saved.labels(ln.name).inc(lane_saved)
            state, level, reason = _guard_view(ctrl)
            sig = src.last
            metrics.lane(ln.name, state, level, ctrl.current, sig)
            for ev in rec.events:
                metrics.intents.labels(ln.name, ev["action"]).inc()
                log.write(ev)
            n_ev = len(rec.events)
            n_int += n_ev
            rec.events.clear()
            if tr.drift:
                metrics.drift.labels(ln.name).inc(len(tr.drift))
            if tr.error:
                metrics.errors.labels(ln.name).inc()
            if nv.wedged is not None and ln.name not in failed_safe:
                failed_safe.add(ln.name)
                n_int += _fail_safe(ln, nv, log, metrics, shadow)
            pend[ln.name] += lane_saved
            key = (state, level, ctrl.current)
            if every or key != last_key.get(ln.name) or n_ev or tr.drift or tr.error:
                # would_save_j covers the ticks since this lane's previous tick record
                log.write({"event": "tick", "t": time.time(), "lane": ln.name, "role": ln.role.value, "guard": state,
                           "level": level, "reason": reason, "setting": asdict(ctrl.current),
                           "signals": asdict(sig) if sig is not None else None, "gpus": gpus,
                           "would_save_j": pend[ln.name] if shadow else None, "tick_s": tr.duration_s,
                           "drift": list(tr.drift), "error": tr.error})
                last_key[ln.name], pend[ln.name] = key, 0.0
        dur = time.monotonic() - t0
        durs.append(dur)
        metrics.ticks.inc()
        metrics.tick_s.observe(dur)
        if every:
            log.write({"event": "tick_end", "t": time.time(), "n": len(starts), "duration_s": dur}, sync=True)
        else:
            log.sync()
        if max_ticks is not None and len(starts) >= max_ticks:
            why["reason"] = "max_ticks"
            break
        nxt += cfg.period_s
        stop.wait(max(0.0, nxt - time.monotonic()))
    per = [b - a for a, b in zip(starts, starts[1:], strict=False)] or [float("nan")]
    return {"ticks": len(starts), "period_mean_s": statistics.fmean(per), "period_p50_s": statistics.median(per),
            "period_max_s": max(per), "tick_p50_ms": statistics.median(durs) * 1e3 if durs else float("nan"),
            "tick_max_ms": max(durs) * 1e3 if durs else float("nan"), "intents": n_int,
            "would_save_j": saved, "energy_j": energy}
