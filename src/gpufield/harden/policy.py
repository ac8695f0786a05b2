"""Retry policy of ``gpufield run``: retry, exclude a node, or stop (triage.md 5.10).

Rules, in order:

1. **Budget.** One budget of ``max_retries`` restarts for the whole job, counted by the supervisor
   across every launch (``gpufield run`` starts torchrun with ``--max-restarts 0``, so a torchrun
   agent cannot restart on its own: torchrun counts ``--max-restarts`` per agent, pytorch #108158,
   and a quick exit-and-rejoin bypasses it, #147064). With one supervisor per node the count is a
   counter in the job's store (``budget``: atomic ``add``), so all nodes spend one budget. When it
   is spent: STOP.
2. **No progress.** ``no_progress_restarts`` consecutive restarts that each made fewer than
   ``min_progress_steps`` steps: STOP (NVRx defaults: 3 restarts without 200 iterations;
   ``nvrx-watch`` exits 93 for it, and so does ``gpufield run``).
3. **Configuration, code and data** (triage classes in :data:`gpufield.triage.NO_RETRY`, triage
   actions STOP / FIX_CONFIG, an exception raised in user code, a desync): STOP, no blind retry.
   A NaN loss is data/numerics too when it appears within ``nan_early_steps`` of the start; a later
   NaN may be a transient corruption and is retried once from the last checkpoint, but never from
   a checkpoint that already produced a NaN (Megatron #5281 reloaded one 44 times).
4. **Hardware** (triage actions EXCLUDE_NODE / RESET_GPU with a host): EXCLUDE that host and retry.
   A **lost node** (multi-node: its supervisor's heartbeat stopped, failure kind ``lost``) is
   excluded the same way, before rules 3-5 are looked at (nothing can launch there; rules 1-2
   still apply), and its failure does not count as a restart without progress.
5. **Transient or unknown** (hangs, crashes, NCCL timeouts without a root): retry on the same nodes
   ``transient_retries`` times, then EXCLUDE the most implicated host (the blamed host of this and
   earlier failures, most often first).

Back-off before restart ``n`` (1-based): ``min(backoff_s * backoff_factor**(n-1), backoff_max_s)``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gpufield.triage import NO_RETRY

RETRY, EXCLUDE, STOP, CONTINUE = "RETRY", "EXCLUDE", "STOP", "CONTINUE"
#: failure kind of a node whose supervisor is gone (multi-node: its heartbeat stopped)
LOST = "lost"
#: failure kinds the supervisor reports
KINDS = ("hang", "crash", "exit", "nan", "straggler", LOST)
#: exit status of ``gpufield run`` when it stops because restarts make no progress (nvrx-watch's)
EXIT_NO_PROGRESS = 93


@dataclass(frozen=True, kw_only=True, slots=True)
class PolicyConfig:
    """Thresholds of :class:`RetryPolicy`.

    Attributes:
        max_retries: restarts allowed for the whole job (all nodes, all launches).
        backoff_s: wait before the first restart, seconds.
        backoff_factor: growth of the wait per restart.
        backoff_max_s: cap of the wait, seconds.
        no_progress_restarts: consecutive restarts without ``min_progress_steps`` steps that stop the job.
        min_progress_steps: steps an attempt must make to count as progress.
        transient_retries: retries on the same nodes for a transient/unknown failure before the
            most implicated host is excluded.
        nan_early_steps: a NaN within this many steps of an attempt's start is a config/data fault.
        exclude_stragglers: restart without a named straggler's host (default: report it only).
        min_confidence: a triage verdict below this confidence is treated as unknown (triage gives
            ~0.45-0.5 to a class chosen by prior, e.g. SIGKILL read as host OOM without an OOM-killer line).
    """

    max_retries: int = 3
    backoff_s: float = 5.0
    backoff_factor: float = 2.0
    backoff_max_s: float = 300.0
    no_progress_restarts: int = 3
    min_progress_steps: int = 200
    transient_retries: int = 1
    nan_early_steps: int = 100
    exclude_stragglers: bool = False
    min_confidence: float = 0.6

    def __post_init__(self) -> None:
        if self.max_retries < 0 or self.no_progress_restarts < 1 or self.min_progress_steps < 0:
            raise ValueError("max_retries >= 0, no_progress_restarts >= 1 and min_progress_steps >= 0 are required")
        if self.backoff_s < 0 or self.backoff_factor < 1 or self.backoff_max_s < self.backoff_s:
            raise ValueError("backoff_s >= 0, backoff_factor >= 1 and backoff_max_s >= backoff_s are required")
        if self.transient_retries < 0 or self.nan_early_steps < 0:
            raise ValueError("transient_retries >= 0 and nan_early_steps >= 0 are required")
        if not 0.0 <= self.min_confidence <= 1.0:
            raise ValueError(f"min_confidence must be in [0, 1], got {self.min_confidence}")


@dataclass(frozen=True, kw_only=True, slots=True)
class Failure:
    """One detected failure of one attempt, as the policy sees it.

    Attributes:
        kind: ``"hang"``, ``"crash"`` (a rank died), ``"exit"`` (the launcher exited non-zero),
            ``"nan"`` (a NaN/Inf loss on a progress line), ``"straggler"`` or ``"lost"`` (the
            supervisor of node ``host`` is gone: nothing can launch there).
        cls: triage class of the top incident (or the supervisor's own: ``USER_EXCEPTION``,
            ``HANG``), or None.
        action_kind: the triage action kind (``RETRY``, ``EXCLUDE_NODE``, ``RESET_GPU``,
            ``FIX_CONFIG``, ``STOP``), or None without a verdict.
        confidence: the triage verdict's confidence (0..1); 1.0 for the supervisor's own findings.
        host: the blamed host, or None.
        rank: the blamed rank, or None.
        steps: steps this attempt made (last step reached minus first step seen, >= 0).
        nan: a NaN/Inf loss was seen in this attempt.
        checkpoint: the checkpoint this attempt resumed from (as the job names it), or None.
        user_exception: a rank raised a Python exception that is not a communication error.
    """

    kind: str
    cls: str | None = None
    action_kind: str | None = None
    confidence: float = 1.0
    host: str | None = None
    rank: int | None = None
    steps: int = 0
    nan: bool = False
    checkpoint: str | None = None
    user_exception: bool = False

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"failure kind {self.kind!r} is not one of {KINDS}")
        if self.steps < 0:
            raise ValueError(f"steps must be >= 0, got {self.steps}")


@dataclass(frozen=True, kw_only=True, slots=True)
class Decision:
    """What to do after a failure.

    Attributes:
        action: ``RETRY`` (same nodes), ``EXCLUDE`` (retry without ``host``), ``STOP`` or
            ``CONTINUE`` (nothing to restart: a straggler report).
        reason: one sentence naming the rule.
        host: the host to exclude (``EXCLUDE``), else None.
        delay_s: back-off before the restart, seconds (0 unless restarting).
        retries_used: restarts spent including this one.
        no_progress: True when the STOP is the no-progress cap (exit status 93).
    """

    action: str
    reason: str
    host: str | None = None
    delay_s: float = 0.0
    retries_used: int = 0
    no_progress: bool = False


@dataclass(slots=True)
class RetryPolicy:
    """Stateful policy: call :meth:`decide` once per failure, in order.

    Attributes:
        config: thresholds.
        retries_used: restarts granted so far (never above ``config.max_retries``).
        stalled: consecutive restarts without progress so far.
        blamed: how often each host was blamed.
        nan_checkpoints: checkpoints that produced a NaN, with counts.
        budget: a shared restart counter, or None (this object counts): ``budget(delta)`` adds
            ``delta`` atomically and returns the new total (``torch.distributed.Store.add``, so the
            supervisors of several nodes spend one budget; a restart is granted only when the
            total after its increment is within ``max_retries``).
    """

    config: PolicyConfig = field(default_factory=PolicyConfig)
    retries_used: int = 0
    stalled: int = 0
    transient_streak: int = 0
    blamed: Counter = field(default_factory=Counter)
    nan_checkpoints: Counter = field(default_factory=Counter)
    budget: Callable[[int], int] | None = None

    def state(self) -> dict[str, Any]:
        """The decision state as a JSON-able dict (what :meth:`load` restores; the budget is not in it)."""
        return {"retries_used": self.retries_used, "stalled": self.stalled, "transient_streak": self.transient_streak,
                "blamed": dict(self.blamed), "nan_checkpoints": dict(self.nan_checkpoints)}

    def load(self, state: dict[str, Any]) -> None:
        """Restore a :meth:`state` dict (the node that decides next continues where the last one stopped)."""
        self.retries_used = int(state.get("retries_used", 0))
        self.stalled = int(state.get("stalled", 0))
        self.transient_streak = int(state.get("transient_streak", 0))
        self.blamed = Counter(state.get("blamed", {}))
        self.nan_checkpoints = Counter(state.get("nan_checkpoints", {}))

    def _restart(self, action: str, reason: str, host: str | None = None) -> Decision:
        c = self.config
        if self.budget is not None:
            self.retries_used = min(self.budget(0), c.max_retries)
        if self.retries_used >= c.max_retries:
            return Decision(action=STOP, reason=f"restart budget spent ({self.retries_used}/{c.max_retries}); " + reason,
                            retries_used=self.retries_used)
        if self.stalled >= c.no_progress_restarts:
            return Decision(action=STOP, no_progress=True, retries_used=self.retries_used,
                            reason=f"{self.stalled} restarts in a row without {c.min_progress_steps} steps of progress")
        if self.budget is not None:
            total = self.budget(1)  # atomic: of two deciders racing for the last restart, one gets it
            if total > c.max_retries:
                self.retries_used = c.max_retries
                return Decision(action=STOP, retries_used=c.max_retries,
                                reason=f"restart budget spent ({c.max_retries}/{c.max_retries}, taken concurrently); "
                                       + reason)
            self.retries_used = total
        else:
            self.retries_used += 1
        delay = min(c.backoff_s * c.backoff_factor ** (self.retries_used - 1), c.backoff_max_s)
        return Decision(action=action, reason=reason, host=host, delay_s=delay, retries_used=self.retries_used)

    def decide(self, failure: Failure) -> Decision:
        """Decide after one failure.

        Args:
            failure: what was detected and what triage said.

        Returns:
            The :class:`Decision`; restarts are counted against the budget when granted.
        """
        c = self.config
        if failure.kind == "straggler":
            if c.exclude_stragglers and failure.host:
                return self._restart(EXCLUDE, f"straggler on {failure.host}: exclude it (exclude_stragglers)", failure.host)
            return Decision(action=CONTINUE, reason="straggler reported; the job goes on", retries_used=self.retries_used)
        if failure.kind == LOST:  # the node cannot launch again: never a same-node retry; no progress verdict
            if failure.host:
                self.blamed[failure.host] += 1
            self.transient_streak = 0
            return self._restart(EXCLUDE, f"the supervisor of {failure.host or 'a node'} is gone (heartbeat stopped): "
                                          "exclude that node", failure.host)
        if self.retries_used > 0:  # the attempt that just failed was a restart: did it progress?
            self.stalled = self.stalled + 1 if failure.steps < c.min_progress_steps else 0
        if failure.host:
            self.blamed[failure.host] += 1
        if failure.nan:
            return self._nan(failure)
        if failure.user_exception:
            return Decision(action=STOP, reason="a rank raised an exception in user code: fix it, no blind retry",
                            retries_used=self.retries_used)
        sure = failure.confidence >= c.min_confidence
        if sure and (failure.cls in NO_RETRY or failure.action_kind in ("STOP", "FIX_CONFIG")):
            return Decision(action=STOP, retries_used=self.retries_used,
                            reason=f"{failure.cls or failure.action_kind}: configuration/code/data class, no blind retry")
        if sure and failure.action_kind in ("EXCLUDE_NODE", "RESET_GPU") and failure.host:
            self.transient_streak = 0
            return self._restart(EXCLUDE, f"{failure.cls}: hardware class on {failure.host}: exclude it", failure.host)
        self.transient_streak += 1
        what = (failure.cls if sure else None) or failure.kind
        if self.transient_streak <= c.transient_retries:
            return self._restart(RETRY, f"{what}: transient/unknown, retry on the same nodes "
                                        f"({self.transient_streak}/{c.transient_retries})")
        host = self.most_implicated(failure.host)
        if host is None:
            return self._restart(RETRY, f"{what}: recurs but no host is implicated; retry")
        self.transient_streak = 0
        return self._restart(EXCLUDE, f"{what}: recurs after {c.transient_retries} same-node retries; "
                                      f"exclude the most implicated host {host}", host)

    def most_implicated(self, current: str | None = None) -> str | None:
        """The host blamed most often so far (ties: ``current``, then the first blamed), or None."""
        if not self.blamed:
            return current
        top = max(self.blamed.values())
        if current is not None and self.blamed.get(current) == top:
            return current
        return next(h for h, n in self.blamed.items() if n == top)

    def _nan(self, failure: Failure) -> Decision:
        c = self.config
        if failure.steps < c.nan_early_steps:
            return Decision(action=STOP, retries_used=self.retries_used,
                            reason=f"NaN loss within {c.nan_early_steps} steps of the start: numerics/config, no retry")
        ck = failure.checkpoint or "<start>"
        self.nan_checkpoints[ck] += 1
        if self.nan_checkpoints[ck] >= 2:
            return Decision(action=STOP, retries_used=self.retries_used,
                            reason=f"checkpoint {ck} produced a NaN twice: never restart from it again")
        return self._restart(RETRY, f"NaN loss after {failure.steps} steps: retry once from the last checkpoint")
