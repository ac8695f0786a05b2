"""One attempt of a supervised job: launch, read the output live, detect, gather evidence, end it."""

from __future__ import annotations

import os
import selectors
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpufield.errors import InputError
from gpufield.harden.supervise import procs
from gpufield.harden.supervise.evidence import LineFacts, MonitorTail, blame_hang, stack_sizes
from gpufield.harden.supervise.export import Control, EventLog, Metrics
from gpufield.harden.supervise.gputel import gpu_context
from gpufield.harden.supervise.launch import PREFIX_TEMPLATE
from gpufield.harden.supervise.parse import LineParser
from gpufield.harden.supervise.progress import Progress

#: period of the full /proc scan once the ranks are known, seconds
FULL_SCAN_S = 10.0
#: defaults set in the job's environment when absent (triage.md 5.10 runtime defaults)
TORCH_ENV_DEFAULTS = {"TORCH_NCCL_TRACE_BUFFER_SIZE": "2000", "TORCH_NCCL_DUMP_ON_TIMEOUT": "1"}


@dataclass(slots=True)
class Detection:
    """What ended (or flagged) an attempt.

    Attributes:
        kind: ``hang``, ``crash``, ``exit``, ``nan``, ``straggler``, ``peer`` (another node's incident
            ended it) or ``ok`` (clean exit 0).
        t: wall time of the detection (unix s).
        ranks: blamed ranks.
        why: one sentence.
        rc: the launcher's exit status, once known.
        details: kind-specific values (steps per rank, timeout, slowdown, stack dump files, ...).
    """

    kind: str
    t: float
    ranks: tuple[int, ...] = ()
    why: str = ""
    rc: int | None = None
    details: dict[str, Any] = field(default_factory=dict)


class Attempt:
    """Run one launch to its end (or to a detection that ends it).

    Args:
        argv: the prepared command.
        folder: this attempt's folder (``console.log``, ``monitor/``, ``torchrun/``).
        sup: the supervisor (config, event log, metrics, control).
    """

    def __init__(self, argv: list[str], folder: Path, cfg, log: EventLog, metrics: Metrics, control: Control,
                 world: int, *, peer: Callable[[], str | bool | None] | None = None, node: str | None = None) -> None:
        self.argv, self.folder, self.cfg, self.log, self.metrics, self.control = argv, folder, cfg, log, metrics, control
        self.monitor_dir = folder / "monitor"
        self.monitor_dir.mkdir(parents=True, exist_ok=True)
        self.parser = LineParser(cfg.step_pattern, cfg.metric_pattern)
        self.facts = LineFacts()
        self.tail = MonitorTail(self.monitor_dir)
        # with one supervisor per node the local ranks are a slice of the global ones: no ranks 0..n-1 up front
        multi = getattr(cfg, "cluster", None) is not None
        self.progress = Progress(world=0 if multi else world, start_t=time.monotonic())
        self.seen_pids: dict[int, int] = {}
        self.stragglers: list[Detection] = []
        self.host = socket.gethostname()
        self.states: dict[int, str | None] = {}
        self.nan_rank: int | None = None
        self.gone: tuple[float, float, tuple[int, ...]] | None = None  # (wall, monotonic, ranks) of the first exit
        self.world = world
        self.full_scan_t = 0.0
        self.peer = peer  # why this launch must end for another node (its incident, its supervisor gone), or None
        self.node = node  # this node's name in a multi-node job (its ranks' host), else None
        self.peer_s = cfg.cluster.poll_s if getattr(cfg, "cluster", None) is not None else cfg.scan_s

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(self.cfg.env)
        for k, v in TORCH_ENV_DEFAULTS.items():
            env.setdefault(k, v)
        env["TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"] = PREFIX_TEMPLATE
        env["GPUFIELD_MONITOR_DIR"] = str(self.monitor_dir)
        env.setdefault("PYTHONUNBUFFERED", "1")
        return env

    def run(self) -> Detection:
        """Launch and supervise until the launcher exits or a detection ends the attempt.

        Raises:
            InputError: the command cannot be started (no such program, not executable).
        """
        console = open(self.folder / "console.log", "wb")  # noqa: SIM115
        try:
            proc = subprocess.Popen(self.argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    env=self._env(), start_new_session=True)
        except OSError as e:
            console.close()
            raise InputError(f"cannot start the job command: {e.strerror or e}", path=self.argv[0]) from None
        self.pid, self.proc = proc.pid, proc
        os.set_blocking(proc.stdout.fileno(), False)
        sel = selectors.DefaultSelector()
        sel.register(proc.stdout, selectors.EVENT_READ)
        buf = b""
        det: Detection | None = None
        last_scan = last_peer = 0.0
        try:
            while det is None:
                for _key, _ in sel.select(timeout=self.cfg.tick_s):
                    buf, eof = self._read(proc, buf, console)
                    if eof:
                        sel.unregister(proc.stdout)
                now = time.monotonic()
                self.tail.poll(self.progress, now)
                if now - last_scan >= self.cfg.scan_s:
                    last_scan = now
                    self._scan_workers(proc)
                if proc.poll() is not None:
                    self._drain(proc, buf, console)
                    buf = b""
                    det = self._exited(proc.returncode)
                    break
                if self.gone is not None and now - self.gone[1] > self.cfg.crash_grace_s:
                    det = self._crash()
                    break
                if det is None and self.gone is None:  # once a rank exited, the crash path owns the attempt
                    det = self._check(now)
                if det is None and self.peer is not None and now - last_peer >= self.peer_s:
                    last_peer = now
                    why = self.peer()
                    if why:
                        det = self._peer(why if isinstance(why, str) else "another node recorded an incident of this launch")
            if det.kind in ("hang", "nan", "peer") or (det.kind == "crash" and proc.poll() is None):
                self._end(proc, det, buf, console)
        finally:
            sel.close()
            if proc.poll() is None:
                procs.kill_tree(proc.pid, grace_s=self.cfg.kill_grace_s)
                proc.wait()
            self._drain(proc, b"", console)
            console.close()
        det.rc = proc.returncode if det.rc is None else det.rc
        return det

    def _read(self, proc, buf: bytes, console) -> tuple[bytes, bool]:
        try:
            data = os.read(proc.stdout.fileno(), 1 << 16)
        except BlockingIOError:
            return buf, False
        if not data:
            if buf:
                self._line(buf, console)
            return b"", True
        buf += data
        *lines, buf = buf.split(b"\n")
        for raw in lines:
            self._line(raw, console)
        return buf, False

    def _drain(self, proc, buf: bytes, console) -> None:
        while True:
            try:
                data = os.read(proc.stdout.fileno(), 1 << 16)
            except (BlockingIOError, ValueError, OSError):
                data = b""
            if not data:
                break
            buf += data
            *lines, buf = buf.split(b"\n")
            for raw in lines:
                self._line(raw, console)
        if buf:
            self._line(buf, console)

    def _line(self, raw: bytes, console) -> None:
        console.write(raw + b"\n")
        console.flush()
        if self.cfg.echo:
            sys.stdout.buffer.write(raw + b"\n")
            sys.stdout.buffer.flush()
        p = self.parser.parse(raw.decode(errors="replace").rstrip("\r"))
        now = time.monotonic()
        if p.rank is not None:
            if p.step is not None:
                self.progress.on_step(p.rank, p.step, now, step_time_s=p.step_time_s)
                if p.nan:
                    self.progress.nan_seen = True
                    self.nan_rank = p.rank
            elif p.phase is not None:
                self.progress.on_phase(p.rank, p.phase, now)
        self.facts.feed(p.rank, p.text)

    def _scan_workers(self, proc) -> None:
        """Refresh the rank processes and their states; remember the first rank(s) to exit.

        A full ``/proc`` scan (every process's stat) runs until the expected ranks are found, then
        every ``FULL_SCAN_S``; in between only the known ranks' ``/proc/<pid>/stat`` are read.
        """
        now = time.monotonic()
        expected = self.world or 1
        if len(self.seen_pids) < expected or now - self.full_scan_t >= FULL_SCAN_S:
            self.full_scan_t = now
            for r, w in procs.workers(proc.pid).items():
                self.progress.view(r)
                self.seen_pids.setdefault(r, w.pid)
        self.states = {r: procs.state(pid) for r, pid in self.seen_pids.items()}
        gone = tuple(sorted(r for r, s in self.states.items() if s in (None, "Z")))
        if gone and self.gone is None and proc.poll() is None:
            self.gone = (time.time(), time.monotonic(), gone)

    def _crash(self) -> Detection:
        wall, _, ranks = self.gone
        if len(ranks) > 1:  # exits seen in one scan: victims print a communication error, the root does not
            user = self.facts.user_exception()
            quiet = tuple(r for r in ranks if r not in self.facts.exceptions)
            if user is not None and user[0] in ranks:
                ranks = (user[0],)
            elif quiet and len(quiet) < len(ranks):
                ranks = quiet
        return Detection(kind="crash", t=wall, ranks=ranks, why="rank process(es) "
                         f"{list(ranks)} exited first (pid {[self.seen_pids[r] for r in ranks]})",
                         details={"steps": self._steps(), "silent_s": self._silent(self.gone[1])})

    def _peer(self, why: str) -> Detection:
        """Another node recorded an incident, or its supervisor is gone (``why``): this launch ends too;
        ranks stopped here are named."""
        self._scan_workers(self.proc)
        stopped = tuple(r for r, s in sorted(self.states.items()) if s in ("T", "t", "D"))
        if stopped:
            why += f"; rank(s) {list(stopped)} here are stopped (/proc state T/D)"
        return Detection(kind="peer", t=time.time(), ranks=stopped, why=why,
                         details={"steps": self._steps(), "states": {r: s or "gone" for r, s in self.states.items()}})

    def _exited(self, rc: int) -> Detection:
        """The launcher ended: clean, a rank crash it reported, or its own failure."""
        if rc == 0:
            return Detection(kind="ok", t=time.time(), rc=0, why="launcher exited with status 0")
        if self.gone is not None:
            d = self._crash()
            d.rc = rc
            return d
        return Detection(kind="exit", t=time.time(), rc=rc, why=f"launcher exited with status {rc}",
                         details={"steps": self._steps()})

    def _check(self, now: float) -> Detection | None:
        th, changed, err = self.control.poll()
        if err:
            self.log.emit("control_rejected", error=err)
        elif changed:
            self.log.emit("control", changed=changed)
        if self.progress.nan_seen:
            r = self.nan_rank
            return Detection(kind="nan", t=time.time(), ranks=(r,) if r is not None else (),
                             why="NaN/Inf loss on a progress line", details={"steps": self._steps()})
        st = self.progress.check_straggler(th)
        if st is not None:
            v = self.progress.view(st.rank)
            d = Detection(kind="straggler", t=time.time(), ranks=(st.rank,),
                          why=f"rank {st.rank} {100 * st.slowdown:.0f}% slower than its peers "
                              f"({'the step times its lines print' if st.source == 'step_time' else st.source + ' arrival skew'})",
                          details={"slowdown": round(st.slowdown, 3), "lateness_s": round(st.lateness_s, 4),
                                   "interval_s": round(st.interval_s, 4), "last_frac": st.last_frac,
                                   "source": st.source, "round": st.round, "host": v.host or self.host,
                                   "gpu": v.gpu if v.gpu is not None else v.local_rank,
                                   "step": v.step})
            if self.cfg.gpu_telemetry:
                d.details["telemetry"] = gpu_context(None if v.gpu is None else str(v.gpu),
                                                     nvml=self.cfg.nvml, timeout_s=self.cfg.nvml_timeout_s)
            self.metrics.slowdown.labels(rank=str(st.rank)).set(st.slowdown)
            self.stragglers.append(d)
            self.log.emit("detect", **_public(d))
            self.metrics.detections.labels(kind="straggler").inc()
        for r, v in self.progress.ranks.items():
            if v.step is not None:
                self.metrics.step.labels(rank=str(r)).set(v.step)
            if v.progress_t is not None:
                self.metrics.silent.labels(rank=str(r)).set(now - v.progress_t)
        timeout, _ = self.progress.hang_timeout(th, now)
        self.metrics.timeout.set(timeout)
        stall = self.progress.check_hang(th, now)
        if stall is None:
            return None
        self._scan_workers(self.proc)  # fresh process states: a rank that has exited makes this a crash
        if self.gone is not None:
            return None
        return Detection(kind="hang", t=time.time(), why=f"no progress for {stall.silent_s:.1f} s "
                         f"(timeout {stall.timeout_s:.1f} s{', phase ' + stall.phase if stall.phase else ''})",
                         details={"steps": stall.steps, "silent_s": self._silent(now), "stale": stall.stale,
                                  "behind": stall.behind,
                                  "not_arrived": stall.not_arrived, "in_phase": stall.in_phase,
                                  "timeout_s": stall.timeout_s})

    def _steps(self) -> dict[int, int | None]:
        return {r: v.step for r, v in sorted(self.progress.ranks.items())}

    def _silent(self, ref: float) -> dict[int, float | None]:
        """Seconds each rank had been silent at monotonic time ``ref`` (None: it never progressed)."""
        return {r: (None if v.progress_t is None else round(ref - v.progress_t, 3))
                for r, v in sorted(self.progress.ranks.items())}

    def _end(self, proc, det: Detection, buf: bytes, console) -> None:
        """Gather the evidence that needs live processes, then end the attempt."""
        if det.kind == "hang":
            self._scan_workers(proc)
            asked = {r: v for r, v in self.progress.ranks.items() if v.stacks and v.pid}
            before = stack_sizes(self.monitor_dir)
            for v in asked.values():
                if self.states.get(v.rank) not in (None, "Z"):
                    try:
                        os.kill(v.pid, signal.SIGUSR1)
                    except ProcessLookupError:
                        pass
            if asked:
                time.sleep(self.cfg.stack_wait_s)
            after = stack_sizes(self.monitor_dir)
            dumped = {r: after.get(r, 0) > before.get(r, 0) for r in asked}
            states = dict(self.states)
            ranks, why = blame_hang(states, dumped, det.details["not_arrived"], det.details["behind"],
                                    det.details["stale"], tuple(sorted(self.progress.ranks)),
                                    det.details["in_phase"])
            det.ranks, det.why = ranks, f"{det.why}; rank(s) {list(ranks)}: {why}" if ranks else f"{det.why}; {why}"
            det.details.update(states={r: s or "gone" for r, s in states.items()}, dumped=dumped,
                               stack_files=sorted(str(p) for p in self.monitor_dir.glob("stack-rank*.txt")),
                               fr_dumps=_fr_dumps(self.cfg.env))
        if proc.poll() is None:
            procs.kill_tree(proc.pid, grace_s=self.cfg.kill_grace_s)
            proc.wait()

    def blamed_host(self, ranks: tuple[int, ...]) -> str | None:
        """Host of the first blamed rank: this node's name in a multi-node job (its ranks are local),
        else the monitor's ``I`` record, else this host."""
        for r in ranks:
            v = self.progress.ranks.get(r)
            if v is not None:
                return self.node or v.host or self.host
        return None


def _fr_dumps(env: dict[str, str]) -> list[str]:
    prefix = env.get("TORCH_NCCL_DEBUG_INFO_TEMP_FILE") or os.environ.get("TORCH_NCCL_DEBUG_INFO_TEMP_FILE")
    if not prefix:
        return []
    d, base = os.path.split(prefix)
    try:
        return sorted(os.path.join(d or ".", n) for n in os.listdir(d or ".") if n.startswith(base))
    except OSError:
        return []


def _public(d: Detection) -> dict[str, Any]:
    return {"kind": d.kind, "ranks": list(d.ranks), "why": d.why, "rc": d.rc, **d.details}
