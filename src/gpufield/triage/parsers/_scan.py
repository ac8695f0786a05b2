"""Block scanner: the streaming core of ingestion (internal).

A file is read in large binary blocks cut at the last newline. For each block:

1. line offsets come from ``numpy.flatnonzero(block == b"\\n")``;
2. the block becomes zero-copy Arrow ``binary`` arrays. First the literal keywords of all parsers
   are searched in chunks of 32 lines (one ``pyarrow.compute.match_substring_regex`` call, RE2
   on a literal alternation: GB/s); then, for the lines of the chunks that hit, the union of the
   parsers' prefilter regexes is matched line by line in one more vectorised call;
3. only candidate lines are decoded (UTF-8, bad bytes replaced) and offered to the parsers;
   a record parser's continuation lines are read directly, and a record still open at the end of
   a block carries over into the next one.

Memory is O(block size + longest record), independent of file size.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import BinaryIO

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from gpufield.triage.events import Event
from gpufield.triage.parsers import _regex as rx
from gpufield.triage.parsers._regex import MAX_LINE_CHARS
from gpufield.triage.protocols import MAX_RECORD_LINES, LineContext, LogParser, RecordParser

#: ``on_block(block, starts, n, base)`` (see :func:`scan`)
BlockHook = Callable[[bytes, np.ndarray, int, int], None]
#: bytes read per block
BLOCK_BYTES = 8 << 20
#: threads for the keyword pass (RE2 runs without the GIL). Default 1: on the shared 2-core
#: development machines a second thread measured slower (contention); set GPUFIELD_INGEST_THREADS=2+
#: on an idle multi-core host.
THREADS = max(1, int(os.environ.get("GPUFIELD_INGEST_THREADS", "1") or 1))
#: lines per chunk of the first (keyword) prefilter pass
CHUNK_LINES = 32
#: a line longer than this is cut while it is read (its middle is dropped, so memory stays bounded)
MAX_LINE_BYTES = 1 << 20
#: the patterns see at most this many bytes of a line (``_regex.MAX_LINE_CHARS``); longer lines are
#: counted in :attr:`ScanCounters.truncated_lines` and the first one per file is named in a warning
MATCH_BYTES = MAX_LINE_CHARS
#: invalid-timestamp warnings given one by one per file (the rest are counted in one summary line)
MAX_TIMESTAMP_WARNINGS = 5


@dataclass(slots=True)
class _ThinState:
    """Per-file state of the thinned parser: chunks seen so far, first line found yet."""

    chunks: int = 0
    first_done: bool = False


@dataclass(slots=True)
class ScanCounters:
    """What one file scan saw (filled in while the generator runs)."""

    bytes: int = 0
    lines: int = 0
    candidates: int = 0
    events: int = 0
    warnings: list[tuple[int | None, str]] = field(default_factory=list)
    bad_timestamps: int = 0  # events whose timestamp prefix was not a valid date/time
    truncated_lines: int = 0  # lines longer than MATCH_BYTES: only their head was matched

    def count(self, ev: Event) -> None:
        """Count one emitted event; warn (``line: message``) when its timestamp was unreadable."""
        self.events += 1
        bad = ev.fields.get("bad_timestamp")
        if bad is None:
            return
        self.bad_timestamps += 1
        if self.bad_timestamps <= MAX_TIMESTAMP_WARNINGS:
            self.warnings.append((ev.line, f"invalid timestamp {bad!r} (not a valid date/time): the {ev.kind} "
                                           "event is kept without a time and is not ordered by it"))

    def finish(self) -> None:
        """Summarise the invalid-timestamp warnings beyond :data:`MAX_TIMESTAMP_WARNINGS`."""
        extra = self.bad_timestamps - MAX_TIMESTAMP_WARNINGS
        if extra > 0:
            self.warnings.append((None, f"{extra} more event(s) with an invalid timestamp (kept without a time)"))


class Table:
    """Parsers plus their compiled prefilters (Python ``re`` per parser, one RE2 union)."""

    def __init__(self, parsers: Sequence[LogParser], thin: tuple[int, int] | None = None) -> None:
        """``thin=(k, n)`` (``n > 1``): parser ``k`` (the loss parser, which wants nearly every
        line) is kept out of the per-line passes; see :func:`_thinned` for which of its lines are
        parsed."""
        self.parsers = tuple(parsers)
        self.thin = thin if thin is not None and thin[1] > 1 else None
        self._ks: dict[int, list[int]] = {}
        main = [p for k, p in enumerate(self.parsers) if self.thin is None or k != self.thin[0]]
        self.union_main = "|".join(f"(?:{p.prefilter})" for p in main)
        self.keyword_union = "|".join(_literal(k) for p in main for k in p.keywords)
        self.is_record = tuple(isinstance(p, RecordParser) for p in self.parsers)
        self.thin_re = rx.compile(self.parsers[self.thin[0]].prefilter) if self.thin else None

    def parsers_of(self, code: int) -> list[int]:
        """Parser indices whose bit is set in ``code`` (cached)."""
        ks = self._ks.get(code)
        if ks is None:
            ks = self._ks[code] = [k for k in range(len(self.parsers)) if code >> k & 1]
        return ks


_SPECIAL = set("\\.^$|?*+()[]{}")


def _literal(text: str) -> str:
    """Escape ``text`` for RE2 and Python ``re`` alike (only metacharacters get a backslash)."""
    return "".join("\\" + c if c in _SPECIAL else c for c in text)


def _line(block: bytes, starts: np.ndarray, i: int) -> str:
    s, e = int(starts[i]), int(starts[i + 1])
    b = block[s:e]
    if len(b) > MATCH_BYTES:
        b = b[:MATCH_BYTES]
    return b.rstrip(b"\r\n").decode("utf-8", "replace")


def scan(stream: BinaryIO, path: str, table: Table, year: int, utc_offset_s: int,
         counters: ScanCounters, block_bytes: int = BLOCK_BYTES,
         on_error: Callable[[Exception, int], None] | None = None,
         not_after_ns: int | None = None, on_block: BlockHook | None = None) -> Iterator[Event]:
    """Yield the events of one (already opened, decompressed) byte stream.

    Args:
        stream: binary file object positioned at the start.
        path: name used in ``Event.file`` and warnings.
        table: parser table.
        year: year for timestamps without one.
        utc_offset_s: UTC offset of zone-less timestamps.
        counters: updated in place (bytes, lines, candidates, events, warnings).
        block_bytes: read size.
        on_error: called with (exception, lines read so far) when reading fails mid-stream
            (truncated gzip); the scan then ends after flushing what was read. None = re-raise.
        not_after_ns: see :attr:`LineContext.not_after_ns`.
        on_block: called as ``on_block(block, starts, n, base)`` for every block of whole lines
            (line ``i`` is ``block[starts[i]:starts[i + 1]]``, file line ``base + i + 1``), so a
            caller can run its own vectorised pass without reading the file again.

    Yields:
        Events in file order.
    """
    carry = b""
    thin = _ThinState()
    base = 0  # lines before the current block
    pending: tuple[int, list[str], int] | None = None  # (parser index, lines, first line number)
    eof = False
    while not eof:
        try:
            chunk = stream.read(block_bytes)
        except (EOFError, OSError, ValueError) as e:  # truncated / corrupt compressed stream
            if on_error is None:
                raise
            on_error(e, base + carry.count(b"\n"))
            chunk = b""
        if not chunk:
            eof = True
        counters.bytes += len(chunk)
        data = carry + chunk if carry else chunk
        if eof:
            block, carry = data, b""
        else:
            cut = data.rfind(b"\n")
            if cut < 0:  # no line end in sight: keep the head of the line, drop its middle
                if len(data) > MAX_LINE_BYTES * 4:
                    if not counters.warnings or counters.warnings[-1][0] != base + 1:
                        counters.warnings.append((base + 1, f"line longer than {4 * MAX_LINE_BYTES} bytes: "
                                                            f"only its first {MAX_LINE_BYTES} bytes are parsed"))
                    data = data[:MAX_LINE_BYTES]
                carry = data
                continue
            block, carry = data[: cut + 1], data[cut + 1:]
        if not block:
            break
        nl = np.flatnonzero(np.frombuffer(block, dtype=np.uint8) == 10)
        ends_nl = block.endswith(b"\n")
        n = len(nl) + (0 if ends_nl else 1)
        starts = np.empty(n + 1, dtype=np.int32)
        starts[0] = 0
        starts[1:len(nl) + 1] = nl + 1
        if not ends_nl:
            starts[n] = len(block)
        if on_block is not None:
            on_block(block, starts, n, base)
        long = np.flatnonzero(np.diff(starts) > MATCH_BYTES + 2)  # + "\r\n"
        if len(long):
            first_long = base + int(long[0]) + 1
            if counters.truncated_lines == 0 and not (counters.warnings and counters.warnings[-1][0] == first_long):
                counters.warnings.append((first_long, f"line longer than {MATCH_BYTES} bytes: only its "
                                          f"first {MATCH_BYTES} bytes are matched (see truncated_lines for the count)"))
            counters.truncated_lines += len(long)
        cand, member = _candidates(block, starts, n, table)
        counters.candidates += len(cand)
        nxt = 0
        if pending is not None:
            pi, lines, first = pending
            p = table.parsers[pi]
            j = 0
            while j < n and len(lines) < MAX_RECORD_LINES and p.continues_record(lines, _line(block, starts, j)):
                lines.append(_line(block, starts, j))
                j += 1
            if j == n and not eof and len(lines) < MAX_RECORD_LINES:
                base += n
                counters.lines = base
                continue
            pending = None
            yield from _emit(p.parse_record(lines, _ctx(path, first, year, utc_offset_s, not_after_ns)), counters)
            nxt = j
        codes = member.astype(np.int64) @ (np.int64(1) << np.arange(member.shape[1], dtype=np.int64))
        if table.thin is not None:
            extra = np.setdiff1d(_thinned(block, starts, n, table, cand, thin), cand)
            if len(extra):
                order = np.argsort(np.concatenate([cand, extra]), kind="stable")
                cand = np.concatenate([cand, extra])[order]
                codes = np.concatenate([codes, np.full(len(extra), 1 << table.thin[0], dtype=np.int64)])[order]
        for i, code in zip(cand.tolist(), codes.tolist(), strict=True):
            if i < nxt:
                continue
            ks = table.parsers_of(code)
            line = _line(block, starts, i)
            lineno = base + i + 1
            for k in ks:
                p = table.parsers[k]
                if table.is_record[k] and p.opens_record(line):  # type: ignore[attr-defined]
                    lines = [line]
                    j = i + 1
                    while j < n and len(lines) < MAX_RECORD_LINES and \
                            p.continues_record(lines, _line(block, starts, j)):  # type: ignore[attr-defined]
                        lines.append(_line(block, starts, j))
                        j += 1
                    if len(lines) >= MAX_RECORD_LINES:
                        counters.warnings.append((lineno, f"{p.name} record cut at {MAX_RECORD_LINES} lines"))
                    if j == n and not eof and len(lines) < MAX_RECORD_LINES:
                        pending = (k, lines, lineno)
                        nxt = n
                        break
                    nxt = j
                    yield from _emit(p.parse_record(lines, _ctx(path, lineno, year, utc_offset_s, not_after_ns)),  # type: ignore[attr-defined]
                                     counters)
                    break
                ev = p.parse_line(line, _ctx(path, lineno, year, utc_offset_s, not_after_ns))
                if ev is not None:
                    counters.count(ev)
                    yield ev
                    break
            if pending is not None:
                break
        base += n
        counters.lines = base
    if pending is not None:
        pi, lines, first = pending
        yield from _emit(table.parsers[pi].parse_record(lines, _ctx(path, first, year, utc_offset_s, not_after_ns)), counters)  # type: ignore[attr-defined]
    counters.finish()


def _candidates(block: bytes, starts: np.ndarray, n: int, table: Table) -> tuple[np.ndarray, np.ndarray]:
    """Indices of the lines of ``block`` that match the union of the parsers' prefilters, and for
    each of them which parsers' prefilters match (bool matrix, one column per parser).

    Vectorised passes: the literal keywords on chunks of :data:`CHUNK_LINES` lines, the exact
    prefilter union on the lines of the chunks that hit, then each parser's prefilter on the lines
    that matched the union (so no Python regex runs to pick parsers).
    """
    buf = pa.py_buffer(block)
    chunk_starts = np.ascontiguousarray(starts[0:n:CHUNK_LINES])
    chunk_offsets = np.append(chunk_starts, starts[n]).astype(np.int32)
    chunks = pa.BinaryArray.from_buffers(pa.binary(), len(chunk_offsets) - 1, [None, pa.py_buffer(chunk_offsets), buf])
    hit = np.flatnonzero(_match(chunks, table.keyword_union))
    if len(hit) == 0:
        return hit, np.zeros((0, len(table.parsers)), dtype=bool)
    lines = (hit[:, None] * CHUNK_LINES + np.arange(CHUNK_LINES)[None, :]).ravel()
    lines = lines[lines < n]
    arr = pa.BinaryArray.from_buffers(pa.binary(), n, [None, pa.py_buffer(starts), buf])
    sub = arr.take(pa.array(lines))
    main = pc.match_substring_regex(sub, table.union_main).to_numpy(zero_copy_only=False)
    rows = lines[main]
    member = np.zeros((len(rows), len(table.parsers)), dtype=bool)
    if len(rows):  # which parsers: one RE2 pass per parser over the (few) candidates
        msub = sub.filter(pa.array(main))
        for k, p in enumerate(table.parsers):
            member[:, k] = pc.match_substring_regex(msub, p.prefilter).to_numpy(zero_copy_only=False)
    return rows, member


def _thinned(block: bytes, starts: np.ndarray, n: int, table: Table, main: np.ndarray, st: _ThinState) -> np.ndarray:
    """Lines of ``block`` the thinned parser ``k`` gets, for ``table.thin = (k, every)``.

    Its prefilter runs on whole :data:`CHUNK_LINES`-line chunks (RE2 stops at the first hit, so
    this costs little even when every line matches); inside a hit chunk Python finds the line.
    Kept: the file's first matching line; the first one of every ``max(1, every // CHUNK_LINES)``-th
    chunk (about one per ``every`` lines); and the last one before every other candidate line and
    before the block's end, so "was there progress between line a and event b" is still answered
    exactly by the thinned series.
    """
    rx = table.thin_re
    assert table.thin is not None and rx is not None
    k, every = table.thin
    buf = pa.py_buffer(block)
    offsets = np.append(np.ascontiguousarray(starts[0:n:CHUNK_LINES]), starts[n]).astype(np.int32)
    chunks = pa.BinaryArray.from_buffers(pa.binary(), len(offsets) - 1, [None, pa.py_buffer(offsets), buf])
    hc = np.flatnonzero(_match(chunks, table.parsers[k].prefilter))
    base, st.chunks = st.chunks, st.chunks + len(offsets) - 1
    if len(hc) == 0:
        return hc

    def first_in(j: int) -> int | None:
        return next((i for i in range(j * CHUNK_LINES, min(n, (j + 1) * CHUNK_LINES))
                     if rx.search(_line(block, starts, i))), None)

    def last_before(c: int) -> int | None:
        pos = int(np.searchsorted(hc, (c - 1) // CHUNK_LINES, side="right"))
        while pos > 0:  # at most two chunks: the one of ``c`` (cut at c) and the hit chunk before it
            j = int(hc[pos - 1])
            for i in range(min(c, (j + 1) * CHUNK_LINES, n) - 1, j * CHUNK_LINES - 1, -1):
                if rx.search(_line(block, starts, i)):
                    return i
            pos -= 1
        return None

    picks: set[int | None] = set()
    if not st.first_done:
        for j in hc.tolist():
            i = first_in(j)
            if i is not None:
                picks.add(i)
                st.first_done = True
                break
    step = max(1, every // CHUNK_LINES)
    picks.update(first_in(j) for j in hc[(base + hc) % step == 0].tolist())
    picks.update(last_before(c) for c in [*main.tolist(), n] if c > 0)
    picks.discard(None)
    return np.array(sorted(picks), dtype=np.int64)  # type: ignore[type-var]


def _match(arr: pa.Array, pattern: str) -> np.ndarray:
    """``match_substring_regex`` as a bool array, split over :data:`THREADS` threads (RE2 releases the GIL)."""
    n = len(arr)
    if THREADS < 2 or n < 2048:
        return pc.match_substring_regex(arr, pattern).to_numpy(zero_copy_only=False)
    step = -(-n // THREADS)
    parts = [arr.slice(i, step) for i in range(0, n, step)]
    done = _pool().map(lambda a: pc.match_substring_regex(a, pattern).to_numpy(zero_copy_only=False), parts)
    return np.concatenate(list(done))


_POOL: ThreadPoolExecutor | None = None


def _pool() -> ThreadPoolExecutor:
    global _POOL
    if _POOL is None:
        _POOL = ThreadPoolExecutor(max_workers=THREADS, thread_name_prefix="gpufield-ingest")
    return _POOL


def _ctx(path: str, line: int, year: int, off: int, not_after_ns: int | None) -> LineContext:
    return LineContext(file=path, line=line, year=year, utc_offset_s=off, not_after_ns=not_after_ns)


def _emit(events: list[Event], counters: ScanCounters) -> Iterator[Event]:
    for ev in events:
        counters.count(ev)
    yield from events
