"""Per-rank step timing aggregated while streaming (the loss-line thinning keeps ~1 step line in
``LOSS_EVERY``, so step times are summed here, before it, over every line).

:class:`StepTimes` runs as an ingestion ``on_block`` hook: one RE2 pass per block finds the step
lines, and per ``(file, host, rank)`` it keeps count, sum, sum of squares and max of the per-step
duration (seconds). The duration is the one the line states (``0.312 s/step``, ``312 ms/step``,
``time: 312ms``, ``iter time (s): 36.2``, ``train time: 1405.01ms``, Megatron ``elapsed time per
iteration (ms): 312.5``, HF ``'train_steps_per_second': 3.2``), else the interval between two
consecutive timestamped step lines of that rank (``step N`` / ``iter N`` lines with a time prefix).
Memory is O(files x ranks). Cost is bounded too: the first :data:`FULL_LINES` step lines of a
file are all parsed; past them the sampling stride starts at :data:`STRIDE` and doubles each time
the count of step lines doubles, so a file costs O(FULL_LINES x log n) prefix parses (~70 us each;
without a cap a 100 MB dense log spent 11 of its 13 CPU-s here). Past the cap the step lines are no
longer found one Python iteration at a time: the rest of each block goes through one vectorised RE2
pass per line (pyarrow, imported only then), 1.44 -> 0.59 CPU-s on a 100 MB dense log, same numbers. Sampled lines count only when they
state their duration (interval timing needs consecutive steps). Later steps are sampled more
sparsely than early ones, alike for every rank of a file, so the comparison between ranks, which
is what the rule uses, is not skewed.

:meth:`StepTimes.events` turns each key with at least :attr:`StepTimeConfig.min_steps` steps into one
``step_time`` summary event (at the key's last step line), which the straggler rule compares with
the rank's peers (:func:`slow_ranks`). In DDP/FSDP the collective inside the step equalises the
wall time of every rank when the duration is measured around the whole step (faultloop,
``tests/triage/corpus/faults`` ``sleep-*``): equal step times then do *not* clear any rank.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

from gpufield.triage.events import Event
from gpufield.triage.parsers import _regex as rx
from gpufield.triage.parsers._prefix import split_prefix

__all__ = ["StepTimeConfig", "StepStat", "StepTimes", "slow_ranks"]

# 0.312 s/step | 312 ms/step | 312ms/it | time: 312ms | step_time=0.31s | iter time (s): 36.217 |
# train time: 1405.01ms | elapsed time per iteration (ms): 312.5 | 'train_steps_per_second': 3.2
_STATED = (
    r"(?P<a>\d+(?:\.\d+)?) ?(?P<au>ms|s|sec)/(?:step|it(?:er)?)\b"
    r"|\b(?:step_?time|iter(?:ation)?_?time|batch_?time|train time|time)\b\s*[:=]\s*(?P<b>\d+(?:\.\d+)?) ?(?P<bu>ms|s)\b"
    r"|\biter time \((?P<cu>ms|s)\): (?P<c>\d+(?:\.\d+)?)"
    r"|elapsed time per iteration \((?P<du>ms|s)\): (?P<d>\d+(?:\.\d+)?)"
    r"|'train_steps_per_second': (?P<e>\d+(?:\.\d+)?)")
STATED_RE = rx.compile(_STATED)
# a compute-only duration printed beside the step's wall time (``compute 304.8 ms``, ``fwd_bwd: 0.30s``,
# ``compute_time=12ms``): measured before the step's collective waits, so unlike the wall time it is not
# equalised by the barrier the collective forms (traceml #252) and can name the rank that is slow
COMPUTE_RE = rx.compile(r"\b(?:compute|fwd_?bwd|forward[-_]backward)(?:_?time)?\b\s*[:=]?\s*(?P<v>\d+(?:\.\d+)?) ?(?P<u>ms|s)\b")
# a step line without a stated duration: "step 12", "iter 12", "iteration 12/1000", "global_step=12"
STEP_LINE_RE = rx.compile(r"\b(?:global_step|step|iter(?:ation)?)\b\s*[:=]?\s*\d+")
# [rank1] step 2 ... / [Rank 1] ... / rank 1: ... (a rank tag the prefix parser does not take)
RANK_TAG_RE = rx.compile(r"^\s*\[?[Rr]ank ?(?P<rank>\d+)\]?:? ")
#: per-step durations kept per key (in order) for :func:`slowdown`; the moments cover every step
SERIES_MAX = 512
#: :func:`slowdown`: every later step at least this many times every earlier one (step 0, warm-up, left out)
SLOWDOWN_RATIO = 2.5
#: :func:`slowdown`: steps after the change at least, and an added time per step at least (seconds)
SLOWDOWN_MIN_AFTER = 5
SLOWDOWN_MIN_ADDED_S = 0.05
#: step lines per file parsed one by one before sampling starts
FULL_LINES = 4096
#: past :data:`FULL_LINES`, one step line in this many is parsed
STRIDE = 16
_BLOCK_PATTERN = _STATED + r"|\b(?:global_step|step|iter|iteration)\b\s*[:=]?\s*\d"


@dataclass(frozen=True, kw_only=True, slots=True)
class StepTimeConfig:
    """Thresholds of the step-time straggler rule (``../shared/reference/triage.md`` §5.7).

    Attributes:
        min_steps: steps a rank must have logged to be compared (>= 2).
        min_ratio: rank mean step time / median of its peers' means that names a straggler (> 1).
        severity_bands: excess over the peers (0.05 = 5 %) graded low / medium / high, ascending.
        min_ranks: ranks with timing needed for a comparison (>= 2).
    """

    min_steps: int = 8
    min_ratio: float = 1.2
    severity_bands: tuple[float, float, float] = (0.05, 0.10, 0.20)
    min_ranks: int = 2

    def __post_init__(self) -> None:
        if self.min_steps < 2:
            raise ValueError(f"min_steps must be >= 2, got {self.min_steps}")
        if not (self.min_ratio > 1.0 and math.isfinite(self.min_ratio)):
            raise ValueError(f"min_ratio must be a finite number > 1, got {self.min_ratio}")
        b = self.severity_bands
        if len(b) != 3 or not all(0 < x < 10 for x in b) or list(b) != sorted(b):
            raise ValueError(f"severity_bands must be 3 ascending fractions in (0, 10), got {b}")
        if self.min_ranks < 2:
            raise ValueError(f"min_ranks must be >= 2, got {self.min_ranks}")

    def severity(self, excess: float) -> str | None:
        """``excess`` (ratio - 1) graded: None below the first band, else ``low``/``medium``/``high``."""
        lo, mid, hi = self.severity_bands
        return "high" if excess >= hi else "medium" if excess >= mid else "low" if excess >= lo else None


@dataclass(slots=True)
class StepStat:
    """Step-time moments of one ``(file, host, rank)`` (seconds).

    Attributes:
        count, total_s, sumsq_s2, max_s: moments of the per-step durations.
        stated: count of durations the lines stated (the rest are timestamp intervals).
        first_line, last_line, last_raw: where the step lines were.
    """

    count: int = 0
    total_s: float = 0.0
    sumsq_s2: float = 0.0
    max_s: float = 0.0
    stated: int = 0
    first_line: int = 0
    last_line: int = 0
    last_raw: str = ""
    _last_ts: int | None = None
    series: list[float] = field(default_factory=list)

    def add(self, dur_s: float) -> None:
        if len(self.series) < SERIES_MAX:
            self.series.append(dur_s)
        self.count += 1
        self.total_s += dur_s
        self.sumsq_s2 += dur_s * dur_s
        self.max_s = max(self.max_s, dur_s)

    @property
    def mean_s(self) -> float:
        return self.total_s / self.count if self.count else 0.0

    @property
    def std_s(self) -> float:
        if self.count < 2:
            return 0.0
        return math.sqrt(max(0.0, (self.sumsq_s2 - self.total_s ** 2 / self.count) / (self.count - 1)))


def _seconds(m) -> float | None:
    for g, u in (("a", "au"), ("b", "bu"), ("c", "cu"), ("d", "du")):
        v = m[g]
        if v is not None:
            return float(v) / 1000.0 if m[u] == "ms" else float(v)
    v = m["e"]
    return 1.0 / float(v) if v is not None and float(v) > 0 else None


@dataclass(slots=True)
class StepTimes:
    """The streaming aggregate (see module docstring). Call :meth:`on_block` from ingestion.

    Attributes:
        year: year of year-less timestamps (interval timing only).
        stats: ``(file, host, rank)`` -> :class:`StepStat`.
        compute: the same keys -> the compute-only durations of their step lines (:data:`COMPUTE_RE`).
    """

    year: int = 1970
    stats: dict[tuple, StepStat] = field(default_factory=dict)
    compute: dict[tuple, StepStat] = field(default_factory=dict)
    _scan: rx.ByteScanner | None = None
    _hits: dict[str, int] = field(default_factory=dict)

    def on_block(self, path: str, block: bytes, starts, n: int, base: int) -> None:
        """Aggregate the step lines of one block (the ``on_block`` hook's arguments).

        Step lines are numbered per file in order (``hits``). While ``hits <= FULL_LINES`` each one
        is found by one RE2 search over the block and parsed; past that only every ``stride``-th is
        parsed, and the lines of the rest of the block that hold a step match are found all at once
        (:func:`_hit_rows`: one RE2 pass per line in C) instead of one Python iteration per line.
        """
        if n == 0:
            return
        if self._scan is None:
            self._scan = rx.ByteScanner(_BLOCK_PATTERN)
        import numpy as np

        end = int(starts[n])
        pos = 0
        hits = self._hits.get(path, 0)
        touched: dict[tuple, int] = {}  # key -> offset of its last counted line in this block
        first: dict[tuple, int] = {}  # key first seen in this block -> offset of its first line

        def count(ls: int, le: int, sampled: bool) -> None:
            line = block[ls:le].decode("utf-8", "replace").rstrip("\r\n")
            key = self._line(path, line, sampled)
            if key is not None:
                touched[key] = ls
                if self.stats[key].first_line == 0:
                    first.setdefault(key, ls)

        while pos < end and hits < FULL_LINES:  # every step line is parsed
            hit = self._scan.find(block, pos, end)
            if hit < 0:
                pos = end
                break
            ls = block.rfind(b"\n", 0, hit) + 1
            le = block.find(b"\n", hit, end)
            le = end if le < 0 else le + 1
            pos = le
            hits += 1
            count(ls, le, False)
        if pos < end:  # sampled: number the remaining step lines of the block at once, parse the picked ones
            lo = int(np.searchsorted(starts[: n + 1], pos, side="left"))  # pos is a line start
            rows = _hit_rows(block, starts, lo, n, self._scan)
            if len(rows):
                h = hits + 1 + np.arange(len(rows), dtype=np.int64)
                shift = np.maximum(0, np.frexp(h // FULL_LINES)[1].astype(np.int64) - 1)  # bit_length - 1
                picked = rows[h % (STRIDE << shift) == 0]
                hits += len(rows)
                for r in picked.tolist():
                    count(int(starts[r]), int(starts[r + 1]), True)
        self._hits[path] = hits
        if touched:  # line numbers once per key and block (the block's line starts, binary search)
            keys = list(touched) + list(first)
            offs = np.fromiter([*touched.values(), *first.values()], dtype=np.int64, count=len(keys))
            nums = (base + np.searchsorted(starts[: n + 1], offs, side="right")).tolist()
            for i, key in enumerate(keys):
                if i < len(touched):
                    self.stats[key].last_line = nums[i]
                else:
                    self.stats[key].first_line = nums[i]

    def _line(self, path: str, line: str, sampled: bool) -> tuple | None:
        """Count one step line; the key it counted for, or None."""
        stated = STATED_RE.search(line)
        if stated is None and sampled:
            return None
        if stated is None and STEP_LINE_RE.search(line) is None:
            return None
        pre = split_prefix(line, self.year)
        rank = pre.rank
        if rank is None:
            t = RANK_TAG_RE.search(pre.body)
            rank = int(t["rank"]) if t else pre.local_rank
        key = (path, pre.host, rank)
        st = self.stats.get(key)
        if st is None:
            st = self.stats[key] = StepStat(first_line=0)
        dur = _seconds(stated) if stated is not None else None
        if dur is not None:
            st.add(dur)
            st.stated += 1
        elif pre.ts_ns is not None and st.stated == 0:
            if st._last_ts is not None and pre.ts_ns > st._last_ts:
                st.add((pre.ts_ns - st._last_ts) / 1e9)
            st._last_ts = pre.ts_ns
        else:
            return None
        c = COMPUTE_RE.search(line)
        if c is not None:
            self.compute.setdefault(key, StepStat()).add(float(c["v"]) / (1000.0 if c["u"] == "ms" else 1.0))
        st.last_raw = line
        return key

    def events(self, config: StepTimeConfig | None = None) -> list[Event]:
        """One ``step_time`` event per key with >= ``min_steps`` durations (fields in seconds)."""
        cfg = config or StepTimeConfig()
        out = []
        for (path, host, rank), st in self.stats.items():
            if st.count < cfg.min_steps:
                continue
            jump = slowdown(st.series)
            out.append(Event(source="train", kind="step_time", file=path, line=st.last_line, raw=st.last_raw,
                             host=host, rank=rank, severity="debug",
                             fields={"count": st.count, "mean_s": st.mean_s, "std_s": st.std_s, "max_s": st.max_s,
                                     "stated": st.stated, "first_line": st.first_line,
                                     **({"slowdown": jump} if jump else {})}))
            c = self.compute.get((path, host, rank))
            if c is not None and c.count >= cfg.min_steps:  # the compute-only part of the same step lines
                out.append(Event(source="train", kind="step_time", file=path, line=st.last_line, raw=st.last_raw,
                                 host=host, rank=rank, severity="debug",
                                 fields={"count": c.count, "mean_s": c.mean_s, "std_s": c.std_s, "max_s": c.max_s,
                                         "stated": c.count, "first_line": st.first_line, "what": "compute"}))
        return out


#: a line whose step match may run on into the next line: it ends in a keyword of the ``\\s*``
#: alternatives of :data:`_BLOCK_PATTERN`, then blanks and an optional ``:``/``=`` (``\\s`` also
#: matches the newline); such lines are checked against the whole block, as the RE2 search does
_RUNS_ON = r"(?:time|step|iter|iteration)[\t\f\r ]*[:=]?[\t\f\r ]*\n"
_RUNS_ON_SCAN: rx.ByteScanner | None = None
#: the byte before a :data:`_RUNS_ON` line's newline is one of these (the last letter of time / step /
#: iter / iteration, a blank of ``[\t\f\r ]`` or ``:`` / ``=``): only such lines are searched
_RUNS_ON_LAST = b"eprn\t\f\r :="
#: above this share of lines ending in one of those bytes (CRLF files: every line), the block is
#: searched once instead of line by line
_RUNS_ON_LINE_SHARE = 1 / 16


def _hit_rows(block: bytes, starts, lo: int, n: int, scan: rx.ByteScanner):
    """Rows ``lo <= i < n`` of ``block`` (line ``i`` = ``block[starts[i]:starts[i + 1]]``, newline
    included) where a match of :data:`_BLOCK_PATTERN` starts: the lines the block search of
    :meth:`StepTimes.on_block` stops at, found in C (pyarrow's RE2 kernel, one pass per line; the
    block is not copied). A match that starts on a line and runs on into the next one through
    ``\\s`` is missed by a per-line pass, so lines ending as in :data:`_RUNS_ON` are decided by
    ``scan`` over the block itself. Those lines are found among the ones whose byte before the newline
    is in :data:`_RUNS_ON_LAST` (numpy over the line ends), each searched alone; where that is more
    than :data:`_RUNS_ON_LINE_SHARE` of the lines, by one RE2 search of the block (the same lines:
    a :data:`_RUNS_ON` match never spans a newline but its last byte).

    Returns:
        int64 array of row indices, ascending.
    """
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    offsets = np.ascontiguousarray(starts[lo: n + 1], dtype=np.int32)
    lines = pa.Array.from_buffers(pa.binary(), n - lo, [None, pa.py_buffer(offsets), pa.py_buffer(block)])
    hit = pc.match_substring_regex(lines, pattern=_BLOCK_PATTERN).to_numpy(zero_copy_only=False)
    global _RUNS_ON_SCAN
    if _RUNS_ON_SCAN is None:
        _RUNS_ON_SCAN = rx.ByteScanner(_RUNS_ON)
    ls0, end = int(offsets[0]), int(starts[n])
    if end <= ls0:
        return np.flatnonzero(hit).astype(np.int64) + lo
    buf = np.frombuffer(block, dtype=np.uint8)
    nl = offsets[1:].astype(np.int64) - 1  # each line's last byte: its newline (but an unterminated last line)
    before = buf[np.maximum(nl - 1, 0)]
    maybe = (buf[nl] == 10) & (nl > offsets[:-1]) & np.isin(before, np.frombuffer(_RUNS_ON_LAST, dtype=np.uint8)) & ~hit
    rows = np.flatnonzero(maybe)
    if len(rows) <= _RUNS_ON_LINE_SHARE * len(hit):
        find, ol = _RUNS_ON_SCAN.find, offsets.tolist()
        for i in rows.tolist():  # the (rare) lines that may run on
            if find(block, ol[i], ol[i + 1]) >= 0:
                found = scan.find(block, ol[i], end)
                hit[i] = 0 <= found < ol[i + 1]
        return np.flatnonzero(hit).astype(np.int64) + lo
    pos = ls0
    while pos < end:  # many candidate lines: one RE2 search over the block per run-on line
        at = _RUNS_ON_SCAN.find(block, pos, end)
        if at < 0:
            break
        le = block.find(b"\n", at) + 1  # the match ends with that newline
        i = int(np.searchsorted(offsets, at, side="right")) - 1
        if not hit[i]:
            found = scan.find(block, int(offsets[i]), end)
            hit[i] = 0 <= found < int(offsets[i + 1])
        pos = le
    return np.flatnonzero(hit).astype(np.int64) + lo


def slowdown(series: list[float]) -> tuple[int, float, float] | None:
    """A sustained step-time jump: the first step index ``k >= 2`` such that every duration from ``k`` on
    is >= :data:`SLOWDOWN_RATIO` x every duration of steps ``1..k-1`` (step 0 is warm-up), with at least
    :data:`SLOWDOWN_MIN_AFTER` steps after it and at least :data:`SLOWDOWN_MIN_ADDED_S` added per step.

    Returns:
        ``(k, median before, median after)`` in seconds, or None.
    """
    s = series[1:]
    for k in range(1, len(s) - SLOWDOWN_MIN_AFTER + 1):
        before, after = s[:k], s[k:]
        lo, hi = max(before), min(after)
        if hi >= SLOWDOWN_RATIO * lo and hi - lo >= SLOWDOWN_MIN_ADDED_S:
            return k + 1, statistics.median(before), statistics.median(after)
    return None


def slow_ranks(events: list[Event], config: StepTimeConfig | None = None,
               what: str = "step") -> list[tuple[Event, float, float]]:
    """Ranks whose mean step time is >= ``min_ratio`` x the median of their peers' means.

    Args:
        events: ``step_time`` events (one per rank; those without a rank are ignored).
        config: thresholds.
        what: ``"step"`` compares the wall time of the step lines, ``"compute"`` their compute-only part
            (events with ``fields["what"] == "compute"``).

    Returns:
        ``(event, ratio, peers_median_s)`` per slow rank, slowest first. Empty when fewer than
        ``min_ranks`` ranks have timing.
    """
    cfg = config or StepTimeConfig()
    by_rank: dict[int, Event] = {}
    for e in events:
        if e.rank is not None and e.fields.get("what", "step") == what and e.fields.get("count", 0) >= cfg.min_steps:
            prev = by_rank.get(e.rank)
            if prev is None or e.fields["count"] > prev.fields["count"]:
                by_rank[e.rank] = e
    if len(by_rank) < cfg.min_ranks:
        return []
    out = []
    for r, e in by_rank.items():
        peers = [p.fields["mean_s"] for q, p in by_rank.items() if q != r]
        med = statistics.median(peers)
        # "consistently" slower: the excess must also stand above the rank's own step-to-step spread
        # (a one-off warm-up step inflates the mean and the std alike), 2 standard errors
        se = e.fields["std_s"] / math.sqrt(e.fields["count"])
        if med > 0 and e.fields["mean_s"] / med >= cfg.min_ratio and e.fields["mean_s"] - med > 2 * se:
            out.append((e, e.fields["mean_s"] / med, med))
    out.sort(key=lambda x: -x[1])
    return out
