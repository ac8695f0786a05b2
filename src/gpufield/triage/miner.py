"""Lines no parser knows are not lost: a template miner over the error-looking ones.

Ingestion turns known formats into events; everything else used to vanish. :class:`TemplateMiner`
runs on the blocks ingestion has already read (its ``on_block`` hook, no second read): one
case-insensitive RE2 search per block finds the lines holding an error-ish word
(:data:`ERRORISH`: error, failed, fatal, exception, timeout, killed, refused, ...); those that did
not become an event are clustered by Drain (``drain3``, IBM's streaming template miner: a fixed-depth
prefix tree over tokens, https://github.com/logpai/Drain3, MIT). Each template keeps its count, first
and last ``file:line`` and time, and the hosts it was seen on (the line's own prefix, else the host
the file's events name).

Only error-ish lines are mined, by measurement: Drain costs ~3 us per line on this 2-core VM, which
for every line of a 1 GB log (~10 M lines) would be ~30 CPU-s, more than the whole rest of the
analysis; the RE2 prefilter costs a fraction of the keyword pass (benchmarks/triage_RESULTS.md).

After the engine ran, :meth:`TemplateMiner.unexplained` returns the templates that appear only
near the failure (every occurrence within :data:`NEAR_S` of the top incident's time, in a log that
spans more than that) or only on the blamed host (in a job with several hosts):
``TriageResult.unexplained``, the evidence no rule explained.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpufield.triage.events import Event

__all__ = ["ERRORISH", "NEAR_S", "MinedTemplate", "TemplateMiner"]

#: words that make an unparsed line worth mining (case-insensitive, whole words)
ERRORISH = (r"\b(?:error|errors|err|fail|failed|failure|fatal|exception|traceback|timeout|timed out|abort|aborted|"
            r"panic|segfault|killed|denied|refused|unreachable|corrupt|corrupted|invalid|cannot|unable|lost|"
            r"critical|warning|warn)\b")
#: "near the failure": within this many seconds of the top incident's time
NEAR_S = 300.0
#: characters of a line given to Drain
_MAX_CHARS = 2000
#: templates tracked (Drain evicts the least recently used clusters beyond this)
MAX_TEMPLATES = 2000
_MAX_HOSTS = 64


@dataclass(slots=True)
class MinedTemplate:
    """One template of unparsed error-ish lines.

    Attributes:
        template: Drain's template (``<*>`` for the varying tokens).
        count: lines that matched it.
        first_file, first_line, last_file, last_line: where it was first and last seen.
        first_ns, last_ns: earliest and latest timestamp (ns since the epoch, the file's clock), or None.
        hosts: hosts it was seen on (sorted; at most 64).
        reasons: why it is unexplained evidence (``near_failure``, ``failing_host_only``); empty for
            templates that are not.
    """

    template: str
    count: int = 0
    first_file: str = ""
    first_line: int = 0
    last_file: str = ""
    last_line: int = 0
    first_ns: int | None = None
    last_ns: int | None = None
    hosts: list[str] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable form."""
        return {k: getattr(self, k) for k in self.__slots__}  # type: ignore[attr-defined]


@dataclass(slots=True)
class _Stat:
    count: int = 0
    first: tuple[str, int] = ("", 0)
    last: tuple[str, int] = ("", 0)
    t_min: int | None = None
    t_max: int | None = None
    hosts: set[str] = field(default_factory=set)
    files: set[str] = field(default_factory=set)
    host_less_files: set[str] = field(default_factory=set)


class TemplateMiner:
    """Streaming Drain over the error-ish lines that no parser turned into an event.

    Use: ``on_block`` as (part of) ingestion's block hook, ``note_event`` as (part of) its sink,
    then :meth:`finish`, then :meth:`templates` / :meth:`unexplained`.

    Args:
        year: year for year-less timestamps (see :func:`gpufield.triage.parsers._prefix.split_prefix`).
        sim_th: Drain similarity threshold (0..1; drain3's default 0.4).
    """

    def __init__(self, *, year: int = 2026, sim_th: float = 0.4) -> None:
        from gpufield.triage.parsers._regex import ByteScanner

        self._sim_th = sim_th
        self._drain = None  # built on the first mined line (drain3 is imported only then)
        self._scan = ByteScanner(ERRORISH, ignore_case=True)
        self._year = year
        self._pending: list[tuple[str, int, bytes]] = []
        self._event_lines: set[tuple[str, int]] = set()
        self._stats: dict[int, _Stat] = {}
        self._file_hosts: dict[str, set[str]] = {}
        self.lines_mined = 0
        self._t_min: int | None = None
        self._t_max: int | None = None
        self._hosts: set[str] = set()  # hosts named by mined lines (with those of events: the job's hosts)

    def note_event(self, e: Event) -> None:
        """Record an event (its lines are known, not mined; its host names its file's host)."""
        n = e.raw.count("\n") + 1 if e.raw else 1
        for i in range(n):
            self._event_lines.add((e.file, e.line + i))
        if e.host:
            hs = self._file_hosts.setdefault(e.file, set())
            if len(hs) < 4:
                hs.add(e.host)
        if e.ts_ns is not None:
            self._t_min = e.ts_ns if self._t_min is None else min(self._t_min, e.ts_ns)
            self._t_max = e.ts_ns if self._t_max is None else max(self._t_max, e.ts_ns)

    def on_block(self, path: str, block: bytes, starts, n: int, base: int,
                 lines: list[tuple[int, int]] | None = None) -> None:
        """Find the error-ish lines of one block (mined once that block's events are known).

        ``lines``: the ``(start, end)`` byte offsets (end before the newline) of the lines holding
        an :data:`ERRORISH` match, ascending, when the caller found them already (one search shared
        with the phase-banner scan)."""
        self._flush()
        end = int(starts[n])
        find = self._scan.find
        pos = 0
        if lines is not None:
            self._pending = [(path, ls, block[ls:min(le, ls + 4 * _MAX_CHARS)]) for ls, le in lines]
            pos = end
        while pos < end:
            hit = find(block, pos, end)
            if hit < 0:
                break
            ls = block.rfind(b"\n", 0, hit) + 1
            le = block.find(b"\n", hit, end)
            le = end if le < 0 else le
            self._pending.append((path, ls, block[ls:min(le, ls + 4 * _MAX_CHARS)]))
            pos = le + 1
        if self._pending:  # byte offsets -> line numbers, in one pass
            import numpy as np

            offs = np.asarray([p[1] for p in self._pending], dtype=np.int64)
            rows = np.searchsorted(np.asarray(starts[: n + 1], dtype=np.int64), offs, side="right") - 1
            self._pending = [(p[0], base + int(r) + 1, p[2]) for p, r in zip(self._pending, rows.tolist(), strict=True)]

    def _flush(self) -> None:
        if not self._pending:
            self._event_lines.clear()
            return
        from gpufield.triage.parsers._prefix import split_prefix

        if self._drain is None:
            from drain3.drain import Drain

            self._drain = Drain(depth=4, sim_th=self._sim_th, max_children=100, max_clusters=MAX_TEMPLATES)
        drain, known = self._drain, self._event_lines
        for path, line, raw in self._pending:
            if (path, line) in known:
                continue
            text = raw.decode("utf-8", "replace").rstrip("\r")
            pre = split_prefix(text, self._year)
            body = pre.body.strip()[:_MAX_CHARS]
            if not body:
                continue
            cluster, _ = drain.add_log_message(body)
            self.lines_mined += 1
            st = self._stats.get(cluster.cluster_id)
            if st is None:
                if len(self._stats) >= 4 * MAX_TEMPLATES:
                    continue
                st = self._stats[cluster.cluster_id] = _Stat(first=(path, line))
            st.count += 1
            st.last = (path, line)
            if pre.ts_ns is not None:
                self._t_min = pre.ts_ns if self._t_min is None else min(self._t_min, pre.ts_ns)
                self._t_max = pre.ts_ns if self._t_max is None else max(self._t_max, pre.ts_ns)
                st.t_min = pre.ts_ns if st.t_min is None else min(st.t_min, pre.ts_ns)
                st.t_max = pre.ts_ns if st.t_max is None else max(st.t_max, pre.ts_ns)
            if pre.host and len(self._hosts) < 4 * _MAX_HOSTS:
                self._hosts.add(pre.host)
            if pre.host and len(st.hosts) < _MAX_HOSTS:
                st.hosts.add(pre.host)
            elif not pre.host and len(st.host_less_files) < _MAX_HOSTS:
                st.host_less_files.add(path)
        self._pending = []
        self._event_lines.clear()

    def finish(self) -> None:
        """Mine the last block's lines (call once ingestion is done)."""
        self._flush()

    def templates(self) -> list[MinedTemplate]:
        """Every template, most frequent first."""
        if self._drain is None:
            return []
        clusters = {c.cluster_id: c for c in self._drain.clusters}
        out = []
        for cid, st in self._stats.items():
            c = clusters.get(cid)
            if c is None:
                continue
            hosts = set(st.hosts)
            for f in st.host_less_files:
                fh = self._file_hosts.get(f, set())
                if len(fh) == 1:
                    hosts |= fh
            out.append(MinedTemplate(template=c.get_template(), count=st.count, first_file=st.first[0],
                                     first_line=st.first[1], last_file=st.last[0], last_line=st.last[1],
                                     first_ns=st.t_min, last_ns=st.t_max, hosts=sorted(hosts)[:_MAX_HOSTS]))
        out.sort(key=lambda t: (-t.count, t.first_file, t.first_line))
        return out

    def unexplained(self, *, failure_ns: int | None, failing_host: str | None,
                    all_hosts: set[str]) -> list[MinedTemplate]:
        """Templates seen only near the failure or only on the failing host (see module docstring).

        Args:
            failure_ns: time of the top incident (ns), or None.
            failing_host: host the top incident blames, or None.
            all_hosts: every host the job's events name (hosts named by mined lines are added).

        Returns:
            The templates with their ``reasons`` filled in, earliest first.
        """
        near = NEAR_S * 1e9
        all_hosts = set(all_hosts) | self._hosts
        span_ok = (failure_ns is not None and self._t_min is not None and self._t_max is not None
                   and (self._t_max - self._t_min) > 2 * near)
        out = []
        for t in self.templates():
            reasons = []
            if span_ok and t.first_ns is not None and t.last_ns is not None and \
                    failure_ns - near <= t.first_ns and t.last_ns <= failure_ns + near:  # type: ignore[operator]
                reasons.append("near_failure")
            if failing_host and len(all_hosts) > 1 and t.hosts == [failing_host]:
                reasons.append("failing_host_only")
            if reasons:
                t.reasons = reasons
                out.append(t)
        out.sort(key=lambda t: (t.first_ns is None, t.first_ns or 0, t.first_file, t.first_line))
        return out
