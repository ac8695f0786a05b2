"""Live per-rank progress and the two timing detectors: hang and straggler (triage.md 5.7, 5.8).

Pure bookkeeping on numbers the caller passes in (``now`` in seconds of any monotonic clock,
monitor timestamps in ns), so the unit tests drive it with a fake clock.

**Hang.** Timeout ``H = max(hang_factor * p99(step interval), hang_floor_s)`` over the recent step
intervals of all ranks (``startup_timeout_s`` before the first step). A rank that announced a long
phase (checkpoint, eval) moves the whole job to ``phase_timeout_s`` while it is inside it: its peers
wait for it in the next collective and must not be blamed either, so every rank's silence is counted
from the latest phase start or end, not from its last step. The alarm fires when a rank that
has reported progress before has been silent longer than the timeout. Ranks that never report
(loops that print on rank 0 only) are not timed, only the ones that do.

**Straggler.** Per collective (monitor hook) or per step (log lines when there is no hook), the
lateness of rank r is ``t_r - min_r t_r``. Over the last ``straggler_window`` complete rounds a
rank is named when it arrived last in at least ``straggler_last_frac`` of them and its median
lateness L, against the round interval T, gives ``L / (T - L) >= straggler_slowdown`` (the slow
rank needs ``T`` where its peers need ``T - L``) and ``L >= straggler_min_s``. Log-line times of a
synchronous DDP loop are equalised by its collectives (traceml #252): without the hook a compute
straggler stays invisible there; only loops whose step lines precede the step's collective show it.

**Straggler from printed step times** (source ``step_time``). When the step lines carry each
rank's own step time (``compute_time 0.31 s``, ``0.31 s/step``, ``it/s``: :mod:`...supervise.parse`),
per step the rank's time d_r is compared with the median of its peers' times m: over the last
``straggler_window`` steps every rank reported, a rank is named when it had the longest time in
at least ``straggler_last_frac`` of them and its median d over the median m gives
``d / m - 1 >= straggler_slowdown`` with ``d - m >= straggler_min_s``. Times that include the
step's collective are equal across ranks and name no one; times taken before it (compute) show
the slow rank. Looked at after the hook's collectives and before the step-line arrival skew.
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass, field


@dataclass(frozen=True, kw_only=True, slots=True)
class Thresholds:
    """Detector thresholds; ``gpufield run`` re-reads them from its control file while it runs.

    Attributes:
        hang_floor_s: lower bound of the hang timeout, seconds (triage.md 5.8: 60).
        hang_factor: multiple of the p99 step interval in the hang timeout.
        startup_timeout_s: time allowed before the first step, seconds.
        phase_timeout_s: timeout while a rank is inside an announced long phase, seconds.
        straggler_slowdown: relative slowdown that names a straggler (0.2: 20 % slower).
        straggler_window: rounds (collectives or steps) looked at.
        straggler_last_frac: share of those rounds the straggler must arrive last in.
        straggler_min_s: lateness below this never counts, seconds.
    """

    hang_floor_s: float = 60.0
    hang_factor: float = 3.0
    startup_timeout_s: float = 900.0
    phase_timeout_s: float = 1800.0
    straggler_slowdown: float = 0.2
    straggler_window: int = 10
    straggler_last_frac: float = 0.8
    straggler_min_s: float = 0.005

    def __post_init__(self) -> None:
        for name in ("hang_floor_s", "hang_factor", "startup_timeout_s", "phase_timeout_s",
                     "straggler_slowdown", "straggler_min_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)!r}")
        if self.straggler_window < 2 or not 0.5 <= self.straggler_last_frac <= 1.0:
            raise ValueError("straggler_window >= 2 and 0.5 <= straggler_last_frac <= 1 are required")


@dataclass(slots=True)
class RankView:
    """What is known about one rank.

    Attributes:
        rank: global rank.
        step: last step reported (None before the first).
        first_step: first step reported in this attempt.
        progress_t: time of the last progress (caller's clock, s), None before the first.
        phase: the long phase it announced and has not left, or None.
        arrived_seq / done_seq: last collective the monitor saw it enter / leave (0: none).
        pid, host, local_rank, gpu: from the monitor's ``I`` record or ``/proc``.
        stacks: the rank registered faulthandler on SIGUSR1.
    """

    rank: int
    step: int | None = None
    first_step: int | None = None
    progress_t: float | None = None
    phase: str | None = None
    phase_t: float | None = None
    arrived_seq: int = 0
    done_seq: int = 0
    pid: int | None = None
    host: str | None = None
    local_rank: int | None = None
    gpu: str | None = None
    stacks: bool = False


@dataclass(frozen=True, kw_only=True, slots=True)
class Stall:
    """A hang alarm.

    Attributes:
        timeout_s: the timeout that expired.
        silent_s: seconds since the stalest timed rank progressed.
        stale: ranks silent longer than the timeout.
        steps: last step per rank.
        behind: ranks whose last step is below the highest step any rank reached.
        not_arrived: ranks that never entered the collective the others entered (monitor hook).
        phase: a long phase in progress, or None.
        in_phase: ranks still inside an announced long phase (it outlived ``phase_timeout_s``).
    """

    timeout_s: float
    silent_s: float
    stale: tuple[int, ...]
    steps: dict[int, int | None]
    behind: tuple[int, ...]
    not_arrived: tuple[int, ...]
    phase: str | None
    in_phase: tuple[int, ...] = ()


@dataclass(frozen=True, kw_only=True, slots=True)
class Straggler:
    """A straggler alarm.

    Attributes:
        rank: the slow rank.
        slowdown: ``L / (T - L)`` (0.3: 30 % slower than its peers).
        lateness_s: its median lateness, seconds.
        interval_s: median round interval, seconds.
        last_frac: share of the window it arrived last in.
        source: ``"collective"`` (monitor hook), ``"step_time"`` (the step times the lines print:
            ``lateness_s`` is then its median time minus its peers', ``interval_s`` its median time)
            or ``"step_line"`` (the lines' arrival skew).
        round: the last round key looked at (collective seq or step).
    """

    rank: int
    slowdown: float
    lateness_s: float
    interval_s: float
    last_frac: float
    source: str
    round: int


@dataclass(slots=True)
class Progress:
    """Per-rank live view of one attempt.

    Args:
        world: number of ranks (from the launch command; ranks seen later are added).
        start_t: start time of the attempt (caller's clock, s).
    """

    world: int
    start_t: float
    ranks: dict[int, RankView] = field(default_factory=dict)
    intervals: deque = field(default_factory=lambda: deque(maxlen=512))
    n_intervals: int = 0  # intervals appended so far (the deque keeps the last 512)
    p99_cache: tuple[int, float] | None = None  # (n_intervals, p99) of the last computation
    rounds: dict[str, dict[int, dict[int, float]]] = field(
        default_factory=lambda: {"collective": {}, "step_line": {}, "step_time": {}})
    named: set = field(default_factory=set)
    nan_seen: bool = False
    phase_mark_t: float = float("-inf")

    def __post_init__(self) -> None:
        for r in range(self.world):
            self.ranks.setdefault(r, RankView(rank=r))

    def view(self, rank: int) -> RankView:
        """The :class:`RankView` of ``rank`` (created on first use)."""
        v = self.ranks.get(rank)
        if v is None:
            v = self.ranks[rank] = RankView(rank=rank)
            self.world = max(self.world, rank + 1)
        return v

    def on_step(self, rank: int, step: int, now: float, *, source: str = "step_line",
                step_time_s: float | None = None) -> None:
        """A rank reported ``step`` at ``now`` (s). ``step == -1``: a progress line without a number.

        Args:
            rank: global rank.
            step: step number, or -1 (counted as the next step).
            now: caller's clock, seconds.
            source: ``"step_line"`` (a log line) or ``"monitor"`` (the hook).
            step_time_s: the rank's own time of that step as its line reports it, seconds, or None.
        """
        v = self.view(rank)
        if step < 0:
            step = (v.step or 0) + 1
        if v.step is not None and step <= v.step and source == "monitor":
            return
        if v.progress_t is not None and (v.step is None or step > v.step):
            self.intervals.append(now - v.progress_t)
            self.n_intervals += 1
        if v.first_step is None:
            v.first_step = step
        if v.step is None or step > v.step:
            v.step, v.progress_t = step, now
            if source == "step_line":
                self.rounds["step_line"].setdefault(step, {})[rank] = now
                if step_time_s is not None and step_time_s > 0:
                    self.rounds["step_time"].setdefault(step, {})[rank] = step_time_s
        v.phase = v.phase_t = None

    def on_phase(self, rank: int, phase: str | None, now: float) -> None:
        """A rank entered (``phase``) or left (None) a long phase."""
        v = self.view(rank)
        if phase is not None and v.phase == phase and v.phase_t is not None:
            return  # the same phase announced twice (log line and hook): keep its start
        v.phase, v.phase_t = phase, (now if phase else None)
        self.phase_mark_t = now  # peers waiting on a phase are not silent: their clocks restart here
        if phase is None:
            v.progress_t = now  # leaving a phase is progress

    def on_arrive(self, rank: int, seq: int, t_s: float) -> None:
        """The monitor saw ``rank`` enter collective ``seq`` at wall time ``t_s`` (s)."""
        v = self.view(rank)
        v.arrived_seq = max(v.arrived_seq, seq)
        self.rounds["collective"].setdefault(seq, {})[rank] = t_s

    def on_depart(self, rank: int, seq: int) -> None:
        """The monitor saw ``rank`` leave collective ``seq``."""
        v = self.view(rank)
        v.done_seq = max(v.done_seq, seq)

    def steps_made(self) -> int:
        """Steps made in this attempt: the highest step reached minus the lowest first step (>= 0)."""
        firsts = [v.first_step for v in self.ranks.values() if v.first_step is not None]
        lasts = [v.step for v in self.ranks.values() if v.step is not None]
        return max(0, max(lasts) - min(firsts) + 1) if lasts else 0

    def hang_timeout(self, th: Thresholds, now: float) -> tuple[float, str | None]:
        """The timeout in force at ``now`` and the long phase causing it (None)."""
        for v in self.ranks.values():
            if v.phase is not None and v.phase_t is not None:
                return th.phase_timeout_s, v.phase
        if not any(v.progress_t is not None for v in self.ranks.values()):
            return th.startup_timeout_s, "startup"
        if len(self.intervals) >= 3:
            if self.p99_cache is None or self.p99_cache[0] != self.n_intervals:  # per new step, not per tick
                self.p99_cache = (self.n_intervals, statistics.quantiles(self.intervals, n=100, method="inclusive")[98])
            p99 = self.p99_cache[1]
            return max(th.hang_factor * p99, th.hang_floor_s), None
        return th.hang_floor_s, None

    def check_hang(self, th: Thresholds, now: float) -> Stall | None:
        """A :class:`Stall` when a timed rank has been silent longer than the timeout in force, else None."""
        timeout, phase = self.hang_timeout(th, now)
        timed = [v for v in self.ranks.values() if v.progress_t is not None]
        if not timed:
            silent = now - self.start_t
            stale = tuple(sorted(self.ranks)) if silent > timeout else ()
        else:
            ages = {v.rank: now - max(v.progress_t, self.phase_mark_t) for v in timed}
            silent = max(ages.values())
            stale = tuple(sorted(r for r, a in ages.items() if a > timeout))
        if not stale:
            return None
        steps = {r: v.step for r, v in sorted(self.ranks.items())}
        top = max((s for s in steps.values() if s is not None), default=None)
        behind = tuple(r for r, s in steps.items() if top is not None and (s is None or s < top))
        top_seq = max((v.arrived_seq for v in self.ranks.values()), default=0)
        not_arrived = tuple(r for r, v in sorted(self.ranks.items()) if top_seq and v.arrived_seq < top_seq)
        in_phase = tuple(r for r, v in sorted(self.ranks.items()) if v.phase is not None)
        return Stall(timeout_s=timeout, silent_s=silent, stale=stale, steps=steps, behind=behind,
                     not_arrived=not_arrived, phase=phase, in_phase=in_phase)

    def check_straggler(self, th: Thresholds) -> Straggler | None:
        """A newly named :class:`Straggler` (each rank is named once per attempt), else None.

        Sources in order: the hook's collective arrivals (when there are any), the step times the
        lines print (when they print them), the step lines' arrival skew.
        """
        if self.rounds["collective"]:
            return self._skew(th, "collective")
        if self.rounds["step_time"]:
            st = self._step_time(th)
            if st is not None:
                return st
        return self._skew(th, "step_line")

    def _full(self, th: Thresholds, source: str) -> list[int] | None:
        rounds = self.rounds[source]
        ranks = set(self.ranks)
        full = sorted(k for k, d in rounds.items() if set(d) >= ranks)
        if len(ranks) < 2 or len(full) < th.straggler_window + 1:
            return None
        keys = full[-(th.straggler_window + 1):]
        for k in [k for k in rounds if k < keys[0]]:
            del rounds[k]  # keep memory bounded
        return keys

    def _step_time(self, th: Thresholds) -> Straggler | None:
        keys = self._full(th, "step_time")
        if keys is None:
            return None
        rounds = self.rounds["step_time"]
        window = keys[1:]
        for r in sorted(self.ranks):
            own = statistics.median(rounds[k][r] for k in window)
            peers = statistics.median(statistics.median(t for q, t in rounds[k].items() if q != r) for k in window)
            last = sum(1 for k in window if max(rounds[k], key=rounds[k].get) == r) / len(window)
            if peers <= 0 or own - peers < th.straggler_min_s or last < th.straggler_last_frac:
                continue
            slow = own / peers - 1.0
            if slow >= th.straggler_slowdown and r not in self.named:
                self.named.add(r)
                return Straggler(rank=r, slowdown=slow, lateness_s=own - peers, interval_s=own, last_frac=last,
                                 source="step_time", round=window[-1])
        return None

    def _skew(self, th: Thresholds, source: str) -> Straggler | None:
        keys = self._full(th, source)
        if keys is None:
            return None
        rounds = self.rounds[source]
        ranks = set(self.ranks)
        starts = [min(rounds[k].values()) for k in keys]
        interval = statistics.median(b - a for a, b in zip(starts, starts[1:], strict=False))
        window = keys[1:]
        for r in sorted(ranks):
            late = [rounds[k][r] - min(rounds[k].values()) for k in window]
            last = sum(1 for k in window if max(rounds[k], key=rounds[k].get) == r) / len(window)
            med = statistics.median(late)
            if interval <= med or med < th.straggler_min_s or last < th.straggler_last_frac:
                continue
            slow = med / (interval - med)
            if slow >= th.straggler_slowdown and r not in self.named:
                self.named.add(r)
                return Straggler(rank=r, slowdown=slow, lateness_s=med, interval_s=interval, last_frac=last,
                                 source=source, round=window[-1])
        return None
