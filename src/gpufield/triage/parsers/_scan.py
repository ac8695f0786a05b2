"""Block scanner: the streaming core of ingestion (internal).

A file is read in large binary blocks cut at the last newline. For each block:

1. line offsets come from ``numpy.flatnonzero(block == b"\\n")``;
2. one RE2 program (google-re2, linear time) holding the literal keywords of all parsers runs over
   the block from the current offset (the block is not copied); each line it hits goes through one
   RE2 set of every parser's prefilter, which says which parsers the line is for, and the search
   continues after that line (no pyarrow: a plain ``gpufield triage`` does not import it);
3. only candidate lines are decoded (UTF-8, bad bytes replaced) and offered to the parsers;
   a record parser's continuation lines are read directly, and a record still open at the end of
   a block carries over into the next one.

Memory is O(block size + longest record), independent of file size.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import BinaryIO

import numpy as np

from gpufield.triage.events import Event
from gpufield.triage.parsers._regex import _BOTH, MAX_LINE_CHARS, ByteScanner, ByteSet
from gpufield.triage.protocols import MAX_RECORD_LINES, LineContext, LogParser, RecordParser

#: ``on_block(block, starts, n, base)`` (see :func:`scan`)
BlockHook = Callable[[bytes, np.ndarray, int, int], None]
#: bytes read per block
BLOCK_BYTES = 8 << 20
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
class ScanState:
    """Where a scan of one stream stands between two reads (see ``scan(state=..., stop_after_reads=...)``).

    Attributes:
        carry: bytes read after the last newline of the last block (the head of the next block).
        base: lines of the stream before the next block.
        reads: ``stream.read`` calls made so far.
        thin: the thinned parser's per-file state.
        pending: an open record ``(parser index, lines, first line number)`` waiting for the next block.
        stopped: True when the scan returned at ``stop_after_reads`` (not at the end of the stream).
        setup_seen: :class:`SetupRepeats` keys of the NCCL set-up lines parsed so far in this stream.
    """

    carry: bytes = b""
    base: int = 0
    reads: int = 0
    thin: _ThinState = field(default_factory=_ThinState)
    pending: tuple[int, list[str], int] | None = None
    stopped: bool = False
    setup_seen: set[tuple] = field(default_factory=set)


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
    setup_repeats: int = 0  # NCCL set-up lines recognised as repeats and not parsed (``SetupRepeats``)
    helper_blocks: int = 0  # blocks whose events a helper process parsed (``gpufield.triage._split``)
    helper_stop: str | None = None  # why the helper's last refused stretch was refused (or why it stopped)
    helper_redone: int = 0  # helper stretches refused and parsed here again

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


class SetupRepeats:
    """NCCL set-up lines that repeat one already parsed in the same stream, found without parsing.

    A job with ``NCCL_DEBUG=INFO`` prints, for every communicator, the same ``Bootstrap : Using``,
    ``NET/IB : Using`` and ``comm 0x.. rank R nranks N ... busId B ... Init START/COMPLETE`` lines per
    rank: ~200-400 parsed events per MB of a dense log, of which the reducer keeps one per
    :func:`gpufield.triage.aggregate.setup_key` (host, rank, bus id, nranks, state / host,
    transport, addresses). Here the canonical form of those lines (the NCCL prefix
    ``host:pid:tid [dev] `` at the line start, nothing else in front or behind) is matched by one
    anchored RE2 program on the line's bytes, and its *line key* is made of exactly the parts the
    parser derives that key, the event kind and the line's other consumers from: the host token
    (``split_prefix`` takes the host of such a line from it, and finds no time, rank or level in
    it), the rank / nranks / busId / Init-state digits (``nccl_init``) or the transport and the
    whole address list text (``nccl_bootstrap``); what varies between communicators and processes
    (pid, tid, cudaDev, comm and commId pointers) is left out. The first line of each key is parsed
    as always; it is remembered only when the parse gave the set-up event whose ``setup_key`` the
    line key predicts, with no time and no timestamp warning, and the line holds no word of
    ``keep_if`` (the template miner's error-ish words: a line it would look at must be known as an
    event line). A later line with a remembered key (same parser-bit code, so the same parsers are
    tried) would give an event the reducer drops: it is counted
    (:attr:`ScanCounters.setup_repeats`), not parsed.

    Args:
        parser: index of the NCCL parser in the table (the only parser whose prefilter may match).
        keep_if: RE2 pattern (case-insensitive) of lines never skipped.
        max_keys: keys remembered per stream (beyond, new keys are parsed every time).
    """

    INIT = (rb"([A-Za-z][\w.-]*):\d+:\d+ \[\d+\] NCCL INFO comm 0x[0-9a-fA-F]+ rank (\d+) nranks (\d+) "
            rb"cudaDev \d+(?: nvmlDev \d+)? busId ([0-9a-fA-F]+)(?: commId 0x[0-9a-fA-F]+)?(?: - Init (START|COMPLETE))?")
    USING = rb"([A-Za-z][\w.-]*):\d+:\d+ \[\d+\] NCCL INFO (Bootstrap|NET/IB|NET/Socket) ?: Using ([^\r]*)"

    def __init__(self, parser: int, keep_if: str, max_keys: int = 100_000) -> None:
        import re2
        from re2 import _re2

        opts = re2.Options()
        opts.log_errors = False
        self.code = 1 << parser
        self._init = _re2.RE2(self.INIT, opts)
        self._using = _re2.RE2(self.USING, opts)
        assert self._init.ok() and self._using.ok()
        self._keep_if = ByteScanner(keep_if, ignore_case=True)
        self.max_keys = max_keys

    def key(self, block: bytes, s: int, e: int) -> tuple | None:
        """The line key of ``block[s:e]`` (one line, its newline included), or None when the line is
        not in canonical form."""
        while e > s and block[e - 1] in (10, 13):
            e -= 1
        if e - s > MATCH_BYTES:
            return None
        g = self._init.Match(_BOTH, block, s, e)
        if g[0][0] >= 0:
            st = g[5]
            return (b"i", block[g[1][0]:g[1][1]], block[g[2][0]:g[2][1]], block[g[3][0]:g[3][1]],
                    block[g[4][0]:g[4][1]], block[st[0]:st[1]] if st[0] >= 0 else None)
        g = self._using.Match(_BOTH, block, s, e)
        if g[0][0] >= 0:
            return (b"u", block[g[1][0]:g[1][1]], block[g[2][0]:g[2][1]], block[g[3][0]:g[3][1]])
        return None

    def predicts(self, key: tuple, ev: Event, block: bytes, s: int, e: int) -> bool:
        """True when the parsed event ``ev`` of the line ``block[s:e]`` with line key ``key`` is the
        set-up event the key stands for (see the class docstring), so its repeats may be skipped."""
        from gpufield.triage.aggregate import setup_key
        from gpufield.triage.parsers.nccl import ADDR_RE

        if ev.ts_ns is not None or ev.mono_s is not None or "bad_timestamp" in ev.fields or \
                self._keep_if.find(block, s, e) >= 0:
            return False
        host = key[1].decode()
        if key[0] == b"i":
            want = ("nccl_init", host, int(key[2]), key[4].decode(), int(key[3]),
                    None if key[5] is None else key[5].decode())
        else:
            tail = key[3].decode()
            want = ("nccl_bootstrap", host, key[2].decode(),
                    tuple(f"{a['ifname']}:{a['ip']}" for a in ADDR_RE.finditer(tail)))
        return ev.kind == want[0] and setup_key(ev) == want


class Table:
    """Parsers plus their compiled prefilters: an RE2 keyword scanner over whole blocks and one RE2
    set of every parser's prefilter (which parsers a candidate line is for)."""

    def __init__(self, parsers: Sequence[LogParser], thin: tuple[int, int] | None = None,
                 setup_once: str | None = None) -> None:
        """``thin=(k, n)`` (``n > 1``): parser ``k`` (the loss parser, which wants nearly every
        line) is kept out of the per-line passes; see :func:`_thinned` for which of its lines are
        parsed. ``setup_once``: an RE2 pattern of words that keep a line parsed (the template
        miner's error-ish words); given, repeated NCCL set-up lines are counted, not parsed
        (:class:`SetupRepeats`)."""
        self.parsers = tuple(parsers)
        self.thin = thin if thin is not None and thin[1] > 1 else None
        self._ks: dict[int, list[int]] = {}
        main = [p for k, p in enumerate(self.parsers) if self.thin is None or k != self.thin[0]]
        self.union_main = "|".join(f"(?:{p.prefilter})" for p in main)
        self.keyword_union = "|".join(_literal(k) for p in main for k in p.keywords)
        self.is_record = tuple(isinstance(p, RecordParser) for p in self.parsers)
        self.keywords = ByteScanner(self.keyword_union)
        self.prefilters = ByteSet([p.prefilter for p in self.parsers])
        self.main_mask = sum(1 << k for k in range(len(self.parsers)) if self.thin is None or k != self.thin[0])
        self.thin_scan = ByteScanner(self.parsers[self.thin[0]].prefilter) if self.thin else None
        nccl = next((k for k, p in enumerate(self.parsers) if p.name == "nccl"), None)
        self.repeats = SetupRepeats(nccl, setup_once) if setup_once is not None and nccl is not None else None

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
         not_after_ns: int | None = None, on_block: BlockHook | None = None, *,
         state: ScanState | None = None, stop_after_reads: int | None = None,
         parse: bool = True) -> Iterator[Event]:
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
        state: resume from this state (``stream`` positioned where it was left); updated in place.
        stop_after_reads: return once this many reads were made in all (``state.stopped`` set; no
            end-of-stream handling: the open record and the carried bytes stay in ``state``).
        parse: False: only cut blocks and call ``on_block``; no event is parsed, and ``None`` is
            yielded after each block instead (``gpufield.triage._split`` interleaves the events a
            helper process parsed from the same blocks).

    Yields:
        Events in file order.
    """
    st = state if state is not None else ScanState()
    carry, thin, base, pending = st.carry, st.thin, st.base, st.pending
    rep, seen = table.repeats, st.setup_seen
    rep_code = rep.code if rep is not None else -1
    eof = False
    while not eof:
        if stop_after_reads is not None and st.reads >= stop_after_reads:
            st.carry, st.base, st.pending, st.stopped = carry, base, pending, True
            counters.lines = base
            return
        st.reads += 1
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
        if not parse:
            base += n
            counters.lines = base
            yield None  # type: ignore[misc]  (a block boundary: the caller interleaves events parsed elsewhere)
            continue
        cand, codes = _candidates(block, starts, n, table)
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
        if table.thin is not None:
            extra = np.setdiff1d(_thinned(block, starts, n, table, cand, thin), cand)
            if len(extra):
                order = np.argsort(np.concatenate([cand, extra]), kind="stable")
                cand = np.concatenate([cand, extra])[order]
                codes = np.concatenate([codes, np.full(len(extra), 1 << table.thin[0], dtype=np.int64)])[order]
        for i, code in zip(cand.tolist(), codes.tolist(), strict=True):
            if i < nxt:
                continue
            rkey = None
            if code == rep_code:
                ls, le = int(starts[i]), int(starts[i + 1])
                rkey = rep.key(block, ls, le)  # type: ignore[union-attr]
                if rkey is not None and rkey in seen:
                    counters.setup_repeats += 1
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
                    if rkey is not None and len(seen) < rep.max_keys and \
                            rep.predicts(rkey, ev, block, ls, le):  # type: ignore[union-attr]
                        seen.add(rkey)
                    yield ev
                    break
            if pending is not None:
                break
        base += n
        counters.lines = base
    st.carry, st.base, st.pending, st.stopped = b"", base, None, False
    if pending is not None:
        pi, lines, first = pending
        yield from _emit(table.parsers[pi].parse_record(lines, _ctx(path, first, year, utc_offset_s, not_after_ns)), counters)  # type: ignore[attr-defined]
    counters.finish()


def _candidates(block: bytes, starts: np.ndarray, n: int, table: Table) -> tuple[np.ndarray, np.ndarray]:
    """Indices of the lines of ``block`` that match the union of the parsers' prefilters, and for
    each of them the bit set of the parsers whose prefilter matches (int64, bit ``k`` = parser ``k``).

    One RE2 pass over the whole block finds the next line holding a literal keyword (the block is
    never copied: RE2 runs from the current offset, at ~600 MB/s on ordinary lines); that line alone
    then goes through one RE2 set of every parser's prefilter, and the search goes on after it.
    Python sees only keyword lines.
    """
    end = int(starts[n])
    find, which, main = table.keywords.find, table.prefilters.match, table.main_mask
    firsts: list[int] = []
    codes: list[int] = []
    pos = 0
    while pos < end:
        hit = find(block, pos, end)
        if hit < 0:
            break
        ls = block.rfind(b"\n", 0, hit) + 1
        le = block.find(b"\n", hit, end)
        le = end if le < 0 else le + 1
        code = 0
        for k in which(block[ls:le]):
            code |= 1 << k
        if code & main:
            firsts.append(ls)
            codes.append(code)
        pos = le
    if not firsts:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    rows = np.searchsorted(starts[: n + 1], np.asarray(firsts, dtype=np.int64), side="right") - 1
    return rows.astype(np.int64), np.asarray(codes, dtype=np.int64)


def _thinned(block: bytes, starts: np.ndarray, n: int, table: Table, main: np.ndarray, st: _ThinState) -> np.ndarray:
    """Lines of ``block`` the thinned parser ``k`` gets, for ``table.thin = (k, every)``.

    Its prefilter is searched chunk by chunk (:data:`CHUNK_LINES` lines): one RE2 search finds the
    first matching line of the next chunk that has one, then the search jumps to the chunk after it.
    Kept: the file's first matching line; the first one of every ``max(1, every // CHUNK_LINES)``-th
    chunk (about one per ``every`` lines); and the last one before every other candidate line and
    before the block's end, so "was there progress between line a and event b" is still answered
    exactly by the thinned series.
    """
    scan = table.thin_scan
    assert table.thin is not None and scan is not None
    k, every = table.thin
    sl: list[int] = starts[: n + 1].tolist()  # Python ints: bisect and indexing without numpy scalars
    end = sl[n]
    nchunks = -(-n // CHUNK_LINES)
    base, st.chunks = st.chunks, st.chunks + nchunks
    find = scan.find
    first: dict[int, int] = {}  # hit chunk -> its first matching line
    pos = 0
    while pos < end:
        hit = find(block, pos, end)
        if hit < 0:
            break
        i = bisect_right(sl, hit) - 1
        j = i // CHUNK_LINES
        first[j] = i
        pos = sl[min(n, (j + 1) * CHUNK_LINES)]
    if not first:
        return np.zeros(0, dtype=np.int64)
    hc = sorted(first)

    whole: dict[int, int] = {}  # hit chunk -> its last matching line (asked again by every later candidate)

    def last_before(c: int) -> int | None:
        pos = bisect_right(hc, (c - 1) // CHUNK_LINES)
        while pos > 0:  # at most two chunks: the one of ``c`` (cut at c) and the hit chunk before it
            j = hc[pos - 1]
            lo, hi = first[j], min(c, (j + 1) * CHUNK_LINES, n)
            full = hi == min((j + 1) * CHUNK_LINES, n)
            if full and j in whole:
                return whole[j]
            if lo < hi:
                if find(block, sl[hi - 1], sl[hi]) >= 0:
                    if full:
                        whole[j] = hi - 1
                    return hi - 1
                last, at, stop = lo, sl[lo + 1], sl[hi]
                while at < stop:  # forward over the matching lines in [lo, hi)
                    h = find(block, at, stop)
                    if h < 0:
                        break
                    last = bisect_right(sl, h) - 1
                    at = sl[last + 1]
                if full:
                    whole[j] = last
                return last
            pos -= 1
        return None

    picks: set[int | None] = set()
    if not st.first_done:
        picks.add(first[hc[0]])
        st.first_done = True
    step = max(1, every // CHUNK_LINES)
    picks.update(first[j] for j in hc if (base + j) % step == 0)
    picks.update(last_before(c) for c in [*main.tolist(), n] if c > 0)
    picks.discard(None)
    return np.array(sorted(picks), dtype=np.int64)  # type: ignore[type-var]


def _ctx(path: str, line: int, year: int, off: int, not_after_ns: int | None) -> LineContext:
    return LineContext(file=path, line=line, year=year, utc_offset_s=off, not_after_ns=not_after_ns)


def _emit(events: list[Event], counters: ScanCounters) -> Iterator[Event]:
    for ev in events:
        counters.count(ev)
    yield from events
