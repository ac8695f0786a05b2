"""The context every rule reads, and :class:`FnRule`, the usual way to write a rule.

The :class:`~gpufield.triage.protocols.Rule` protocol itself lives in :mod:`gpufield.triage.protocols`
(one module for every extension point) and is imported back here. A rule is a small callable
object: it names the classes it can emit and its causal tier, reads the :class:`RuleContext`
(events in corrected time order, indexed by kind) and returns findings that cite their evidence. Rules never read files or clocks.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpufield.triage.engine.correlate import Timeline
from gpufield.triage.engine.hypotheses import Rejected
from gpufield.triage.engine.model import (
    CONF_DETERMINISTIC,
    CONF_DETERMINISTIC_ENTITY,
    Finding,
    Tier,
)
from gpufield.triage.engine.phases import PhaseMark
from gpufield.triage.events import Event
from gpufield.triage.protocols import (
    Rule as Rule,  # re-exported: the protocol lives in protocols.py
)

_BULK = frozenset({"loss", "metric_sample", "nccl_init", "nccl_bootstrap"})  # progress / topology: never error text


@dataclass(frozen=True, slots=True)
class FnRule:
    """A :class:`Rule` backed by a plain function ``fn(ctx) -> list[Finding]``."""

    name: str
    classes: tuple[str, ...]
    tier: Tier
    fn: Callable[[RuleContext], list[Finding]]

    def __call__(self, ctx: RuleContext) -> list[Finding]:
        """Run the rule."""
        out = self.fn(ctx)
        for f in out:
            if f.cls not in self.classes:
                raise ValueError(f"rule {self.name} emitted {f.cls}, declared {self.classes}")
        return out


@dataclass(slots=True)
class RuleContext:
    """Everything a rule may read.

    Attributes:
        timeline: events in corrected time order plus times, offsets and the GPU map.
        phases: phase markers (setup, checkpoint save, ...) found in the input files.
        by_kind: events per ``kind``, in timeline order.
        cited: ids of events already cited by earlier rules of the table.
        warnings: ``(message, evidence events)`` a rule reports that are not failures (a NaN grad-norm
            with a finite loss): shown beside the incidents, never an incident themselves.
    """

    timeline: Timeline
    phases: Sequence[PhaseMark] = ()
    by_kind: dict[str, list[Event]] = field(default_factory=dict)
    cited: set[int] = field(default_factory=set)
    warnings: list[tuple[str, list[Event]]] = field(default_factory=list)
    rejected: list[Rejected] = field(default_factory=list)
    _pos: dict[int, int] = field(default_factory=dict, repr=False)
    _first_loss: tuple[dict[str, int], int | None] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        idx: dict[str, list[Event]] = defaultdict(list)
        for e in self.timeline.events:
            idx[e.kind].append(e)
        self.by_kind = dict(idx)
        self._pos = {id(e): i for i, e in enumerate(self.timeline.events)}

    def cite(self, findings: Iterable[Finding]) -> None:
        """Mark the evidence of ``findings`` as explained (fallback rules skip cited events)."""
        for f in findings:
            self.cited.update(id(e) for e in f.evidence)

    def warn(self, message: str, evidence: Sequence[Event]) -> None:
        """Record a warning (not a failure); its events count as cited."""
        self.warnings.append((message, list(evidence)))
        self.cited.update(id(e) for e in evidence)

    def reject(self, cls: str, why: str, evidence: Sequence[Event]) -> None:
        """Record that hypothesis ``cls`` was considered and refused because of ``evidence`` against it."""
        self.rejected.append(Rejected(cls, why, tuple(e.where for e in evidence[:5])))

    def is_cited(self, e: Event) -> bool:
        """True when an earlier rule already cited ``e`` as evidence."""
        return id(e) in self.cited

    @property
    def events(self) -> list[Event]:
        """All events in corrected time order."""
        return self.timeline.events

    def kinds(self, *kinds: str) -> list[Event]:
        """Events of any of ``kinds``, in timeline order."""
        if len(kinds) == 1:
            return list(self.by_kind.get(kinds[0], ()))
        found = [e for k in dict.fromkeys(kinds) for e in self.by_kind.get(k, ())]
        return sorted(found, key=lambda e: self._pos[id(e)])

    def matching(self, pattern: re.Pattern[str], kinds: Iterable[str] | None = None) -> list[Event]:
        """Events (optionally of ``kinds``) whose message or raw text matches ``pattern``.

        Without ``kinds``, per-step progress events (``loss``, ``metric_sample``) are not searched.
        """
        if kinds is not None:
            return [e for e in self.kinds(*kinds) if pattern.search(text(e))]
        return [e for e in self.timeline.events if e.kind not in _BULK and pattern.search(text(e))]

    def t(self, e: Event) -> int | None:
        """Corrected time of ``e`` (ns) or None."""
        return self.timeline.t(e)

    def progress_before(self, e: Event) -> bool:
        """True when a training-progress line (loss) precedes ``e`` (the job was running).

        Earlier in the same file, or timed clearly (beyond the skew tolerance) before ``e``.
        """
        if self._first_loss is None:
            first_line: dict[str, int] = {}
            first_t = None
            for ev in self.by_kind.get("loss", ()):
                first_line[ev.file] = min(first_line.get(ev.file, ev.line), ev.line)
                t = self.t(ev)
                if t is not None and (first_t is None or t < first_t):
                    first_t = t
            self._first_loss = (first_line, first_t)
        first_line, first_t = self._first_loss
        if first_line.get(e.file, e.line) < e.line:
            return True
        t = self.t(e)
        return t is not None and first_t is not None and first_t < t - self.timeline.skew_tolerance_ns


def text(e: Event) -> str:
    """The event's searchable text: message field and raw record."""
    msg = e.fields.get("message")
    return f"{msg}\n{e.raw}" if isinstance(msg, str) and msg not in e.raw else e.raw


def gpu_of(e: Event) -> str | None:
    """The most specific GPU id of an event: PCI bus id, else UUID, else ordinal."""
    if e.gpu_bdf:
        return e.gpu_bdf
    if e.gpu_uuid:
        return e.gpu_uuid
    return None if e.gpu_index is None else f"GPU {e.gpu_index}"


def entity_conf(host: str | None, gpu: str | None) -> float:
    """Deterministic-rule confidence: higher when the blamed host or GPU is identified."""
    return CONF_DETERMINISTIC_ENTITY if (host or gpu) else CONF_DETERMINISTIC


def group_by(events: Iterable[Event], key: Callable[[Event], object]) -> dict[object, list[Event]]:
    """Group events by ``key``, keeping first-seen order of keys and events."""
    out: dict[object, list[Event]] = {}
    for e in events:
        out.setdefault(key(e), []).append(e)
    return out


def finding(ctx: RuleContext, cls: str, rule: str, tier: Tier, conf: float, evidence: Sequence[Event],
            *, established: bool = True, note: str = "", host: Any = ...,
            gpu: Any = ..., rank: Any = ..., facts: dict[str, str] | None = None) -> Finding:
    """Build a :class:`Finding` whose root is the first of ``evidence``.

    Blamed host/GPU/rank default (``...``) to the root event's own entities; pass None to blame none.
    """
    ev = list(evidence)
    root = ev[0]
    return Finding(
        cls=cls, rule=rule, tier=tier, confidence=conf, established=established, root=root,
        evidence=ev,
        host=root.host if host is ... else host,
        gpu=gpu_of(root) if gpu is ... else gpu,
        rank=root.rank if rank is ... else rank,
        note=note, facts=dict(facts or {}), t_ns=ctx.t(root),
        fixed=frozenset(k for k, v in (("host", host), ("gpu", gpu), ("rank", rank)) if v is not ...),
    )


def as_int(v: object) -> int | None:
    """``int(v)`` or None for missing, non-numeric or non-finite values.

    ``inf``/``nan`` (floats, or text a parser kept, as in ``{'skipped': inf}``) give None instead of
    raising ``OverflowError``/``ValueError``: a rule treats them as "no count".
    """
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, float):
        return int(v) if math.isfinite(v) else None
    try:
        return int(v)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        try:
            f = float(v)  # type: ignore[arg-type]
        except (TypeError, ValueError, OverflowError):
            return None
        return int(f) if math.isfinite(f) and f == int(f) else None


def as_float(v: object) -> float | None:
    """``float(v)`` or None for missing / non-numeric values (``inf``/``nan`` are kept: callers that
    need a finite value check :func:`math.isfinite`)."""
    try:
        return float(v)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        return None


def traceback_of(ctx: RuleContext, e: Event) -> Event | None:
    """The ``traceback`` record printed right above exception line ``e`` (same file, ending on the line
    before it, or at most two lines earlier for a chained-exception banner), or None."""
    best = None
    for tb in ctx.by_kind.get("traceback", ()):
        if tb.file == e.file and tb.line < e.line <= tb.line + tb.raw.count("\n") + 3:
            best = tb
    return best


def survived(ctx: RuleContext, e: Event) -> bool:
    """True when training went on after ``e``: the job's progress lines continue later in the same file
    from the same rank (or, when ``e`` names no rank, from every rank that printed progress before it).

    An error a program caught, logged and retried (a failed checkpoint save that succeeded on retry)
    is then noise of a healthy run, not the failure that ended it. Never true when the launcher reports
    a failed worker, a signal death or a group restart later in that file (the progress after it is a
    restarted attempt's).
    """
    died = ("child_failed", "elastic_restart", "signal_death")
    if any(ev.file == e.file and ev.line > e.line for k in died for ev in ctx.by_kind.get(k, ())):
        return False  # the launcher saw a worker fail or restarted the group after it: progress is a new attempt
    after: set[int | None] = set()
    before: set[int | None] = set()
    for ev in ctx.by_kind.get("loss", ()):
        if ev.file == e.file:
            (after if ev.line > e.line else before).add(ev.rank)
    if e.rank is not None:
        return e.rank in after
    return bool(before) and before <= after
