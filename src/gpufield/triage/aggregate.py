"""Streaming reduction of the event stream: bounded memory on multi-GB, event-dense logs.

Ingestion hands every event to :class:`EventReducer` (``ingest(..., sink=reducer.add)``). Events
the engine reads one by one are kept, but repeats of the same *template* are not: per key
``(kind, file, host, rank, template)`` (the template is the dedupe signature of
:func:`gpufield.triage.engine.correlate.signature`: the text with numbers, ranks and prefixes
masked; watchdog timeouts keep their SeqNum) the first :data:`KEEP_PER_TEMPLATE` occurrences and
the last one are kept, and every occurrence is counted (:class:`TemplateStats`: count, first and
last ``file:line`` and time, hosts, ranks). So a retry loop that prints one NCCL warning 100,000
times costs ``KEEP_PER_TEMPLATE + 1`` events, while distinct errors (other ranks, hosts, codes,
SeqNums) are all kept.

NCCL setup lines are topology context, not evidence: ``nccl_init`` is kept once per ``(host, rank,
bus id, nranks, state)`` (the GPU -> rank map), ``nccl_bootstrap`` once per ``(host, transport, addresses)``
(the IP -> host map), whatever the number of communicators that printed them.

Loss lines (already thinned by ingestion) are progress markers: each file's first one is kept, and
after it only the last one before each kept event of the same file (the engine asks "was there
progress before this event" and "between this banner and this event"), and the file's last one.

Memory is therefore O(distinct templates x KEEP_PER_TEMPLATE + ranks x GPUs), not O(lines).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpufield.triage.events import Event

__all__ = ["KEEP_PER_TEMPLATE", "MAX_TEMPLATES", "SETUP_KINDS", "TemplateStats", "EventReducer", "setup_key"]

#: occurrences of one template (per file, host and rank) kept as events, besides the last one
KEEP_PER_TEMPLATE = 32
#: templates tracked with their own counters; beyond this every event is kept (never lost) but new
#: templates are no longer counted separately (``EventReducer.untracked`` counts them)
MAX_TEMPLATES = 200_000
#: hosts / ranks remembered per template
_MAX_IDS = 64
#: templates remembered by ``(kind, raw, host)`` (a log repeats lines verbatim: a retry loop, every rank's
#: copy of one traceback); cleared when full, so memory stays bounded
_SIGNATURE_MEMO = 1 << 16
#: only events whose raw text is at most this long are memoised (<= ~64 MB of keys in all)
_MEMO_RAW_CHARS = 1024
#: event kinds kept once per :func:`setup_key` (NCCL set-up lines: topology context)
SETUP_KINDS = ("nccl_init", "nccl_bootstrap")


def _signature(e: Event) -> str:
    from gpufield.triage.engine.correlate import signature

    return signature(e)[1]


def setup_key(e: Event) -> tuple:
    """The key an NCCL set-up event (kind in :data:`SETUP_KINDS`) is kept once per:
    ``(kind, host, rank, bus id, nranks, state)`` for ``nccl_init`` (the GPU -> rank map),
    ``(kind, host, transport, addresses)`` for ``nccl_bootstrap`` (the IP -> host map)."""
    f = e.fields
    if e.kind == "nccl_init":
        return (e.kind, e.host, f.get("rank"), f.get("bus_id"), f.get("nranks"), f.get("state"))
    return (e.kind, e.host, f.get("transport"), tuple(f.get("addresses") or ()))


@dataclass(slots=True)
class TemplateStats:
    """Counters of one event template (aggregated while streaming).

    Attributes:
        kind: the event kind.
        template: the masked text (see module docstring).
        file, host, rank: where it was seen (part of the key).
        count: occurrences.
        kept: occurrences kept as events (<= ``KEEP_PER_TEMPLATE + 1``).
        first_line, last_line: 1-based line numbers of the first and last occurrence.
        first_ns, last_ns: their times (ns since the epoch, raw clock of the file), None if untimed.
    """

    kind: str
    template: str
    file: str
    host: str | None
    rank: int | None
    count: int = 0
    kept: int = 0
    first_line: int = 0
    last_line: int = 0
    first_ns: int | None = None
    last_ns: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable form."""
        return {k: getattr(self, k) for k in self.__slots__}  # type: ignore[attr-defined]


@dataclass(slots=True)
class EventReducer:
    """Keeps what the engine needs from an event stream; counts the rest (see module docstring).

    Attributes:
        keep_per_template: first occurrences kept per template (>= 1).
        templates: key -> :class:`TemplateStats`.
        seen: events offered; ``dropped``: events counted but not kept.
    """

    keep_per_template: int = KEEP_PER_TEMPLATE
    templates: dict[tuple, TemplateStats] = field(default_factory=dict)
    seen: int = 0
    dropped: int = 0
    untracked: int = 0
    _kept: list[tuple[int, Event]] = field(default_factory=list)
    _last: dict[tuple, tuple[int, Event]] = field(default_factory=dict)
    _setup: set[tuple] = field(default_factory=set)
    _loss_first: set[str] = field(default_factory=set)
    _loss_pending: dict[str, tuple[int, Event]] = field(default_factory=dict)
    _memo: dict[tuple, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.keep_per_template < 1:
            raise ValueError(f"keep_per_template must be >= 1, got {self.keep_per_template}")

    def add(self, e: Event) -> None:
        """Offer one event (in ingestion order)."""
        seq = self.seen
        self.seen += 1
        kind = e.kind
        if kind == "loss":
            if e.file not in self._loss_first:
                self._loss_first.add(e.file)
                self._kept.append((seq, e))
            else:
                if e.file in self._loss_pending:
                    self.dropped += 1
                self._loss_pending[e.file] = (seq, e)
            return
        if kind in SETUP_KINDS:
            key = setup_key(e)
            if key in self._setup:
                self.dropped += 1
                return
            self._setup.add(key)
            self._keep(seq, e)
            return
        if kind in ("watchdog_timeout", "desync") or len(e.raw) > _MEMO_RAW_CHARS:  # fields, not text / long
            template = _signature(e)
        else:  # signature() reads only the kind, the first raw line and the host
            mk = (kind, e.raw, e.host)
            template = self._memo.get(mk)  # type: ignore[assignment]
            if template is None:
                if len(self._memo) >= _SIGNATURE_MEMO:
                    self._memo.clear()
                template = self._memo[mk] = _signature(e)
        key = (kind, e.file, e.host, e.rank, template)
        st = self.templates.get(key)
        if st is None:
            if len(self.templates) >= MAX_TEMPLATES:
                self.untracked += 1
                self._keep(seq, e)
                return
            st = self.templates[key] = TemplateStats(kind=kind, template=template, file=e.file, host=e.host,
                                                     rank=e.rank, first_line=e.line, first_ns=e.ts_ns)
        st.count += 1
        st.last_line, st.last_ns = e.line, e.ts_ns
        if st.kept < self.keep_per_template:
            st.kept += 1
            self._keep(seq, e)
            return
        if key in self._last:
            self.dropped += 1
        else:
            st.kept += 1
        self._last[key] = (seq, e)

    def _keep(self, seq: int, e: Event) -> None:
        pending = self._loss_pending.pop(e.file, None)
        if pending is not None:
            self._kept.append(pending)
        self._kept.append((seq, e))

    def events(self) -> list[Event]:
        """The kept events, in ingestion order (the last occurrence of each capped template included)."""
        out = self._kept + list(self._last.values()) + list(self._loss_pending.values())
        out.sort(key=lambda x: x[0])
        return [e for _, e in out]

    def summary(self, limit: int = 200) -> list[dict[str, Any]]:
        """The ``limit`` most frequent templates that were capped (count > kept), most frequent first."""
        capped = [t for t in self.templates.values() if t.count > t.kept]
        capped.sort(key=lambda t: -t.count)
        return [t.to_dict() for t in capped[:limit]]
