"""Ingestion: any mix of log files and directories (plain, gzip, bzip2, xz) -> :class:`Event` stream.

>>> from gpufield.triage.ingest import ingest
>>> result = ingest(["/var/log/kern.log", "job-logs/"])        # doctest: +SKIP
>>> result.stats.files_read, len(result.events)                  # doctest: +SKIP
>>> result.raise_if_nothing_read()                               # CLI: exit non-zero only then

Streaming: :func:`iter_events` is a generator with memory bounded by one read block (8 MiB) plus
the longest multi-line record; :func:`ingest` with ``sink=`` hands every event to a callback (for
example a DuckDB store) without keeping a list. See ``gpufield.triage.parsers._scan`` for how
ordinary lines are rejected before any parser runs.

What is skipped, with a per-file warning naming ``file:line``: in a directory walk, hidden files and
documentation / code / image / checkpoint files (:data:`SKIP_SUFFIXES`) and anything that is not a
regular file (a named pipe given explicitly, e.g. ``<(zcat x.gz)``, is read); missing paths, unreadable files,
binary files (a NUL byte in the first 8 KiB after decompression), empty files, unsupported
compression (zstd), a truncated compressed stream (events before the cut are kept), directories
without files. A file named ``.gz`` / ``.bz2`` / ``.xz`` whose content is not that compression
("not gzip data") is read by its content (compression is detected by magic bytes), with a warning. Timestamps without a year (syslog, glog) take ``IngestOptions.year``, else the year of
the file's modification time (UTC), or the year before when that would put the line more than a day
after the mtime (a log spanning New Year); zone-less timestamps are read as UTC unless
``utc_offset_s`` is given. ``dmesg -T`` times are dmesg's own boot-time estimate, kept as printed.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

import numpy as np

from gpufield.errors import InputError, LogFormatError
from gpufield.triage._decompress import UTF16_BOMS, Decoded, Utf16Text
from gpufield.triage.events import Event
from gpufield.triage.inputs import open_input
from gpufield.triage.parsers import FILE_PARSERS, LOSS_PARSER, PARSERS
from gpufield.triage.parsers._scan import BLOCK_BYTES, BlockHook, ScanCounters, Table, scan

__all__ = ["IngestOptions", "IngestWarning", "FileStats", "IngestStats", "IngestResult", "iter_events", "ingest"]

_MAGIC = {b"\x1f\x8b": "gzip", b"BZh": "bzip2", b"\xfd7zXZ\x00": "xz", b"\x28\xb5\x2f\xfd": "zstd"}
#: streaming decoders that keep every byte decoded before a truncation point (see ``_decompress``)
_WRAPPERS = {k: (lambda f, _k=k: Decoded(f, _k)) for k in ("gzip", "bzip2", "xz")}
_SNIFF_BYTES = 8192
#: compression a file name promises; a file whose magic bytes disagree is read by its content, with a warning
_SUFFIX_KIND = {".gz": "gzip", ".bz2": "bzip2", ".xz": "xz", ".zst": "zstd"}
#: file name suffixes a directory walk skips (documentation, code, images); a file named
#: explicitly is always read
SKIP_SUFFIXES = (".md", ".rst", ".html", ".htm", ".py", ".ipynb", ".png", ".jpg", ".jpeg", ".gif",
                 ".svg", ".pdf", ".pkl", ".pt", ".pth", ".safetensors", ".whl", ".so")


@dataclass(frozen=True, kw_only=True, slots=True)
class IngestOptions:
    """How to read the inputs.

    Attributes:
        year: year assumed for timestamps without one; None = each file's mtime year (UTC).
        utc_offset_s: offset east of UTC of the clocks that wrote zone-less timestamps.
        with_loss: also emit a ``loss`` event for every finite training-loss line (off by
            default: on a long run that is one event per step, and every line becomes a
            candidate, so ingestion is several times slower).
        loss_every: with ``with_loss``, thin the loss series to about one event per
            ``loss_every`` lines (the first loss line of every ``loss_every // 32``-th 32-line
            chunk), always keeping each file's first loss line and the last one before every
            other record, so progress-before-an-event questions stay exact; lines that are not
            kept are never parsed. 1 = every loss line. Non-finite losses are ``nan_loss`` events
            and always kept.
        block_bytes: read size in bytes (>= 4096).
        workers: processes that parse one large plain file (>= 1). With 2, a file of at least
            :data:`gpufield.triage._split.MIN_BYTES` is parsed by this process and one helper
            process in alternating stretches (:mod:`gpufield.triage._split`): the events are the
            same, in the same order, as with 1.
        setup_once: an NCCL set-up line (``nccl_init`` / ``nccl_bootstrap``) in canonical form
            whose key (host, rank, nranks, bus id, state / host, transport, addresses) was already
            parsed earlier in the same file is counted in :attr:`FileStats.setup_repeats` and not
            parsed or emitted (see ``parsers._scan.SetupRepeats``). The events dropped are exactly
            those :class:`gpufield.triage.aggregate.EventReducer` would drop, so a reducer's output
            is unchanged; :func:`gpufield.triage.analyze.analyze` sets it. Lines holding an
            error-ish word of :data:`gpufield.triage.miner.ERRORISH` are always parsed.
    """

    year: int | None = None
    utc_offset_s: int = 0
    with_loss: bool = False
    loss_every: int = 1
    block_bytes: int = BLOCK_BYTES
    workers: int = 1
    setup_once: bool = False

    def __post_init__(self) -> None:
        if not 1 <= self.workers <= 64:
            raise ValueError(f"workers must be 1..64, got {self.workers}")
        if self.loss_every < 1:
            raise ValueError(f"loss_every must be >= 1, got {self.loss_every}")
        if self.block_bytes < 4096:
            raise ValueError(f"block_bytes must be >= 4096, got {self.block_bytes}")
        if not -14 * 3600 <= self.utc_offset_s <= 14 * 3600:
            raise ValueError(f"utc_offset_s must be within +-14 h, got {self.utc_offset_s}")


@dataclass(frozen=True, slots=True)
class IngestWarning:
    """A problem with one input, located as precisely as known (``str()`` gives ``file:line: msg``).

    Attributes:
        path: the input file or directory.
        line: 1-based line number, or None for a whole-file problem.
        message: what is wrong and what was done about it.
    """

    path: str
    line: int | None
    message: str

    def __str__(self) -> str:
        where = self.path if self.line is None else f"{self.path}:{self.line}"
        return f"{where}: {self.message}"


@dataclass(slots=True)
class FileStats:
    """Per-file counters.

    Attributes:
        path: the file.
        compression: ``gzip``, ``bzip2``, ``xz`` or None.
        bytes_on_disk: size as stored; ``bytes``: after decompression.
        lines: lines read; ``candidates``: lines that passed the prefilter; ``events``: emitted.
        seconds: wall time spent on this file.
        truncated_lines: lines longer than ``parsers._regex.MAX_LINE_CHARS`` bytes, matched on
            their head only.
        helper_blocks: read blocks parsed by a helper process (``IngestOptions.workers``);
            ``helper_stop``: why a helper stretch was last refused (or the helper stopped);
            ``helper_redone``: helper stretches refused and parsed by this process again.
        setup_repeats: repeated NCCL set-up lines counted, not parsed (``IngestOptions.setup_once``;
            not in ``events``).
    """

    path: str
    compression: str | None = None
    bytes_on_disk: int = 0
    bytes: int = 0
    lines: int = 0
    candidates: int = 0
    events: int = 0
    seconds: float = 0.0
    truncated_lines: int = 0
    helper_blocks: int = 0
    helper_stop: str | None = None
    helper_redone: int = 0
    setup_repeats: int = 0


@dataclass(slots=True)
class IngestStats:
    """How much was read. ``nothing_read`` is the CLI's "exit non-zero" condition.

    Attributes:
        files_seen: files found (named or under a directory), skipped ones included.
        files_read: files scanned to the end (or to a truncation point).
        files_skipped: binary, empty, unsupported or unreadable files.
        bytes, bytes_on_disk, lines, candidates, events: totals of :class:`FileStats`.
        seconds: wall time of the whole ingestion.
        files: per-file :class:`FileStats`, in reading order.
        warnings: every :class:`IngestWarning`.
        unreadable: paths that could not be opened at all (missing, permission, zstd).
        truncated_lines: total of :attr:`FileStats.truncated_lines`.
        setup_repeats: total of :attr:`FileStats.setup_repeats`.
    """

    files_seen: int = 0
    files_read: int = 0
    files_skipped: int = 0
    bytes: int = 0
    bytes_on_disk: int = 0
    lines: int = 0
    candidates: int = 0
    events: int = 0
    seconds: float = 0.0
    files: list[FileStats] = field(default_factory=list)
    warnings: list[IngestWarning] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)
    truncated_lines: int = 0
    setup_repeats: int = 0

    @property
    def nothing_read(self) -> bool:
        """True when not a single line of any input could be read."""
        return self.lines == 0

    @property
    def mb_per_s(self) -> float:
        """Decompressed MB (1e6 bytes) per second of wall time."""
        return self.bytes / 1e6 / self.seconds if self.seconds > 0 else 0.0


@dataclass(slots=True)
class IngestResult:
    """Events (unless a sink took them) and the statistics of one :func:`ingest` call.

    Attributes:
        events: the events in file order (empty when ``ingest`` was given a ``sink``).
        stats: :class:`IngestStats`.
    """

    events: list[Event]
    stats: IngestStats

    def raise_if_nothing_read(self) -> None:
        """Raise :class:`~gpufield.errors.LogFormatError` when no input yielded a single line.

        The message lists every per-file warning (``file:line: problem``).
        """
        if self.stats.nothing_read:
            detail = "; ".join(str(w) for w in self.stats.warnings) or "no input paths given"
            raise LogFormatError(f"nothing could be read from the given logs: {detail}")


def _walk(paths: Iterable[str | os.PathLike[str]], stats: IngestStats) -> Iterator[str]:
    """Files under ``paths`` in order, each physical file once: the same path twice, a directory and
    a file inside it, or a link to a file already listed are read once, with a warning."""
    seen: dict[tuple[int, int], str] = {}
    for full in _walk_all(paths, stats):
        try:
            st = os.stat(full)
            key = (st.st_dev, st.st_ino)
        except OSError:
            yield full  # _open reports it
            continue
        if key in seen and st.st_ino:
            stats.warnings.append(IngestWarning(full, None, f"same file as {seen[key]} (given twice, or a link to "
                                                            "it): read once"))
            continue
        seen[key] = full
        yield full


def _walk_all(paths: Iterable[str | os.PathLike[str]], stats: IngestStats) -> Iterator[str]:
    for p in paths:
        path = os.fspath(p)
        if os.path.isdir(path):
            found = False
            for root, dirs, files in os.walk(path):
                dirs.sort()
                for name in sorted(files):
                    found = True
                    full = os.path.join(root, name)
                    if name.lower().endswith(SKIP_SUFFIXES) or name.startswith("."):
                        stats.warnings.append(IngestWarning(full, None, "skipped in directory walk (not a log file type)"))
                        continue
                    if not os.path.isfile(full):  # FIFO, socket, device, dangling link: never block on them
                        stats.warnings.append(IngestWarning(full, None, "skipped in directory walk (not a regular file)"))
                        continue
                    yield full
            if not found:
                stats.warnings.append(IngestWarning(path, None, "directory contains no files"))
        elif os.path.exists(path):
            yield path
        else:
            stats.warnings.append(IngestWarning(path, None, "no such file or directory"))
            stats.unreadable.append(path)


def _open(path: str, stats: IngestStats) -> tuple[object, str | None, object] | None:
    """Open ``path`` once (a pipe cannot be reopened), detect compression by peeking at the magic."""
    try:
        f = open_input(path)  # closed by iter_events; stdin, /dev/fd/N and FIFOs never block forever
        head = f.peek(8)[:8]
    except OSError as e:
        stats.warnings.append(IngestWarning(path, None, f"cannot read: {e.strerror or e}"))
        stats.unreadable.append(path)
        return None
    kind = next((k for m, k in _MAGIC.items() if head.startswith(m)), None)
    if kind == "zstd":
        f.close()
        stats.warnings.append(IngestWarning(path, None, "zstd-compressed: not supported, decompress it first "
                                                        "(zstd -d)"))
        stats.unreadable.append(path)
        return None
    named = next((k for suffix, k in _SUFFIX_KIND.items() if path.lower().endswith(suffix)), None)
    if named is not None and kind != named:
        what = f"{kind} data" if kind else "plain text"
        stats.warnings.append(IngestWarning(path, None, f"named {path[path.rfind('.'):]} but not {named} data "
                                                        f"(no {named} magic bytes): read as {what}"))
    wrap = _WRAPPERS.get(kind)
    return (wrap(f) if wrap else f), kind, f


class _Sniffed:
    """A binary stream whose first bytes were read to test for binary content, then replayed."""

    def __init__(self, stream, head: bytes) -> None:
        self._s, self._head = stream, head

    def read(self, n: int) -> bytes:
        if self._head:
            out, self._head = self._head, b""
            if len(out) < n:
                out += self._s.read(n - len(out))
            return out
        return self._s.read(n)


def iter_events(paths: str | os.PathLike[str] | Iterable[str | os.PathLike[str]], *,
                options: IngestOptions | None = None, stats: IngestStats | None = None,
                on_block: Callable[[str, bytes, np.ndarray, int, int], None] | None = None) -> Iterator[Event]:
    """Stream the events of every file under ``paths``, file by file in sorted walk order.

    Args:
        paths: a file, a directory, or an iterable of them (plain, ``.gz``, ``.bz2``, ``.xz``;
            compression is detected by magic bytes, not by name).
        options: reading options (:class:`IngestOptions`).
        stats: if given, filled in as the generator runs (read it after exhausting the
            generator); warnings about skipped inputs land in ``stats.warnings``.
        on_block: if given, called as ``on_block(path, block, starts, n, base)`` for every block
            of whole lines read (decompressed; line ``i`` is ``block[starts[i]:starts[i + 1]]``,
            line number ``base + i + 1`` of ``path``): a second scan of the same bytes without a
            second read (the engine's phase-banner scan uses it).

    Yields:
        :class:`~gpufield.triage.events.Event` objects in file order.

    Raises:
        Nothing for bad inputs: each problem becomes an :class:`IngestWarning`.
    """
    opts = options or IngestOptions()
    st = stats if stats is not None else IngestStats()
    table = make_table(opts.with_loss, opts.loss_every, opts.setup_once)
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    t0 = time.perf_counter()
    for path in _walk(paths, st):
        st.files_seen += 1
        opened = _open(path, st)
        if opened is None:
            st.files_skipped += 1
            continue
        stream, kind, raw = opened
        fs = FileStats(path=path, compression=kind, bytes_on_disk=os.path.getsize(path))
        t1 = time.perf_counter()
        try:
            hook = None if on_block is None else (lambda b, s, n, base, _p=path: on_block(_p, b, s, n, base))
            yield from _scan_file(stream, path, kind, fs, table, opts, st, hook)
        finally:
            stream.close()  # type: ignore[attr-defined]
            raw.close()  # type: ignore[attr-defined]  (a decompressor does not close the file it wraps)
            fs.seconds = time.perf_counter() - t1
            st.files.append(fs)
            st.bytes += fs.bytes
            st.bytes_on_disk += fs.bytes_on_disk
            st.lines += fs.lines
            st.candidates += fs.candidates
            st.events += fs.events
            st.truncated_lines += fs.truncated_lines
            st.setup_repeats += fs.setup_repeats
            st.seconds = time.perf_counter() - t0
    st.seconds = time.perf_counter() - t0


def make_table(with_loss: bool, loss_every: int, setup_once: bool = False) -> Table:
    """The parser table of one ingestion (the loss parser appended and thinned with ``with_loss``;
    repeated NCCL set-up lines counted, not parsed, with ``setup_once``: see :class:`IngestOptions`)."""
    from gpufield.triage.miner import ERRORISH

    return Table(PARSERS + ((LOSS_PARSER,) if with_loss else ()),
                 thin=(len(PARSERS), loss_every) if with_loss else None,
                 setup_once=ERRORISH if setup_once else None)


def _scan_file(stream, path: str, kind: str | None, fs: FileStats, table: Table, opts: IngestOptions,
               st: IngestStats, on_block: BlockHook | None = None) -> Iterator[Event]:
    try:
        head = stream.read(_SNIFF_BYTES)
    except (EOFError, OSError) as e:
        st.warnings.append(IngestWarning(path, None, f"corrupt {kind or 'file'}: {e}"))
        st.unreadable.append(path)
        st.files_skipped += 1
        return
    if not head:
        st.warnings.append(IngestWarning(path, None, "empty file"))
        st.files_skipped += 1
        return
    transcoded = head[:2] in UTF16_BOMS
    if transcoded:  # UTF-16 text (a Windows export): read as UTF-8, not skipped as binary
        stream = Utf16Text(stream, head)
        head = stream.read(_SNIFF_BYTES)
    whole = next((fp for fp in FILE_PARSERS if fp.sniff(head)), None)
    if whole is not None:  # a structured dump (Flight Recorder pickle/JSON): parsed whole, not by lines
        yield from _whole_file(whole, stream, head, path, fs, st)
        return
    nul = head.find(b"\x00")
    if nul >= 0:
        st.warnings.append(IngestWarning(path, None, f"binary file (NUL byte at offset {nul}), skipped"))
        st.files_skipped += 1
        return
    mtime = os.path.getmtime(path)
    year = opts.year or time.gmtime(mtime).tm_year
    not_after = None if opts.year else int(mtime * 1e9)
    counters = ScanCounters()

    def on_error(e: Exception, lines: int) -> None:
        st.warnings.append(IngestWarning(path, lines or None, f"{kind or 'file'} stream truncated or corrupt after "
                                                              f"line {lines} ({type(e).__name__}: {e}); kept what was read"))

    from gpufield.triage import _split

    try:
        if opts.workers > 1 and kind is None and not transcoded and _split.eligible(path, opts.block_bytes):
            yield from _split.scan_split(_Sniffed(stream, head), path, table, year, opts, counters, not_after, on_block)
        else:
            yield from scan(_Sniffed(stream, head), path, table, year, opts.utc_offset_s, counters,  # type: ignore[arg-type]
                            opts.block_bytes, on_error, not_after, on_block)
    finally:
        fs.bytes, fs.lines, fs.candidates, fs.events = counters.bytes, counters.lines, counters.candidates, counters.events
        fs.truncated_lines, fs.setup_repeats = counters.truncated_lines, counters.setup_repeats
        fs.helper_blocks, fs.helper_stop, fs.helper_redone = counters.helper_blocks, counters.helper_stop, counters.helper_redone
        st.warnings.extend(IngestWarning(path, ln, msg) for ln, msg in counters.warnings)
    st.files_read += 1
    if counters.events == 0:
        st.warnings.append(IngestWarning(path, None, f"no recognised log records in {counters.lines} lines "
                                                     f"(known: {', '.join(p.name for p in table.parsers)})"))


def _whole_file(parser, stream, head: bytes, path: str, fs: FileStats, st: IngestStats) -> Iterator[Event]:
    try:
        data = head + stream.read()
        events = parser.parse_file(data, path)
    except (InputError, OSError, EOFError) as e:
        st.warnings.append(IngestWarning(path, None, f"{parser.name}: {e}"))
        st.files_skipped += 1
        return
    fs.bytes, fs.events = len(data), len(events)
    st.files_read += 1
    yield from events


def ingest(paths: str | os.PathLike[str] | Iterable[str | os.PathLike[str]], *,
           options: IngestOptions | None = None, sink: Callable[[Event], None] | None = None,
           on_block: Callable[[str, bytes, np.ndarray, int, int], None] | None = None) -> IngestResult:
    """Read every input and collect its events (or pass them to ``sink``).

    Args:
        paths: files and/or directories (see :func:`iter_events`).
        options: reading options.
        sink: if given, called once per event and ``IngestResult.events`` stays empty, so memory
            stays flat on multi-GB inputs.
        on_block: see :func:`iter_events`.

    Returns:
        :class:`IngestResult` with the events and :class:`IngestStats` (files read/skipped, bytes,
        lines, events, per-file warnings with ``file:line``). Call
        :meth:`IngestResult.raise_if_nothing_read` to turn "nothing readable" into an error.
    """
    stats = IngestStats()
    events: list[Event] = []
    put = sink if sink is not None else events.append
    for e in iter_events(paths, options=options, stats=stats, on_block=on_block):
        put(e)
    return IngestResult(events=events, stats=stats)


