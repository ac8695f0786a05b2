"""The one library entry point: ``analyze(paths) -> TriageResult``.

Reads the given log files/directories (or, with no paths, the bundled example incident), runs the
engine and returns incidents ordered most likely root first. Rendering (rich summary, JSON, HTML)
lives in :mod:`gpufield.triage.report`; the CLI only calls these.
"""

from __future__ import annotations

import math
import os
import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any

from gpufield.errors import LogFormatError
from gpufield.triage.engine import EngineResult, run_engine
from gpufield.triage.engine.model import Incident
from gpufield.triage.engine.phases import PhaseMark, marks_in_block
from gpufield.triage.events import Event
from gpufield.triage.miner import MinedTemplate, TemplateMiner

EXAMPLE_NAME = "xid79-two-hosts"
EXAMPLE_YEAR = 2026  # the example's year-less stamps (syslog, glog) belong to this year
#: ``IngestOptions.loss_every`` of :func:`analyze`. The engine uses finite-loss events only as
#: progress markers (was the job training before an event? any step logged between a checkpoint
#: banner and a timeout?); thinned ingestion always keeps each file's first loss line and the last
#: one before every other record, which answers those exactly at any thinning. The density only
#: sets how coarse the loss series in ``TriageResult.events`` is, and costs ~50 us per kept line
#: (benchmarks/triage_RESULTS.md: 100 -> ~120, 1000 -> ~225 MB per CPU-s; no loss lines ~265).
LOSS_EVERY = 1000


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


#: processes :func:`analyze` parses one large plain file with (``IngestOptions.workers``): 2 where
#: at least 2 CPUs are usable, else 1 (same events either way, see ``gpufield.triage._split``)
WORKERS = 2 if _cpus() >= 2 else 1
#: largest ``skew_tolerance_s`` accepted (about 31.7 years; times are int64 nanoseconds, 2**63 ns = 292 years)
MAX_SKEW_TOLERANCE_S = 1e9


def check_skew_tolerance_s(value: object) -> float:
    """``value`` if it is a number of seconds in ``[0, MAX_SKEW_TOLERANCE_S]``.

    Raises:
        ValueError: not a number, negative, NaN, infinite or above :data:`MAX_SKEW_TOLERANCE_S`
            (``1e308`` would overflow the nanosecond timeline).
    """
    if not (isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
            and 0 <= value <= MAX_SKEW_TOLERANCE_S):
        shown = f"{value:g}" if isinstance(value, float) else repr(value)
        raise ValueError(f"skew_tolerance_s: expected a finite number of seconds in [0, {MAX_SKEW_TOLERANCE_S:g}], "
                         f"got {shown}")
    return float(value)


@dataclass(slots=True)
class TriageResult:
    """What :func:`analyze` found.

    Attributes:
        incidents: most likely root first (empty when no rule fired).
        events: every parsed event, in timeline order.
        inputs: the paths analysed, as given (the example directory when none were given).
        stats: ingestion statistics (files, lines, bytes, events; keys as ingestion reports them).
        clock_offsets_s: estimated clock offset per host (seconds, host minus reference).
        example: True when the bundled example incident was analysed.
        engine: the raw engine output (findings, timeline) for reports and debugging.
        unexplained: templates of unparsed error-ish lines seen only near the top incident's time
            or only on its host (:meth:`gpufield.triage.miner.TemplateMiner.unexplained`): evidence
            no rule explained, earliest first.
        unparsed_templates: the most frequent templates of unparsed error-ish lines (at most 200).
        files: the files read, as ingestion named them (standard input as ``/dev/fd/N``).
        input_id: :func:`input_id` of ``files`` (the store's default run id).
    """

    incidents: list[Incident]
    events: list[Event]
    inputs: list[str]
    stats: dict[str, Any] = field(default_factory=dict)
    clock_offsets_s: dict[str, float] = field(default_factory=dict)
    example: bool = False
    engine: EngineResult | None = None
    unexplained: list[MinedTemplate] = field(default_factory=list)
    unparsed_templates: list[MinedTemplate] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    input_id: str = ""

    @property
    def verdict(self) -> Incident | None:
        """The top incident (most likely root), or None."""
        return self.incidents[0] if self.incidents else None


def example_dir() -> Path:
    """Directory of the bundled example incident (two hosts x 8 ranks, Xid 79 on host B)."""
    return Path(str(resources.files("gpufield.triage.examples") / EXAMPLE_NAME))


def _files_under(paths: Iterable[str]) -> list[str]:
    out: list[str] = []
    for p in paths:
        if os.path.isdir(p):
            for root, dirs, names in os.walk(p):
                dirs.sort()
                out.extend(os.path.join(root, n) for n in sorted(names) if not n.startswith("."))
        else:
            out.append(p)
    return out


def _ingest(paths: Sequence[str], *, year: int | None, miner: TemplateMiner | None = None,
            progress: Callable[[str, int], None] | None = None,
            labels: dict[str, str] | None = None,
            workers: int = 1) -> tuple[list[Event], list[PhaseMark], dict[str, Any], list[str]]:
    """Events, phase marks, stats and the files read of one read of the inputs
    (:func:`gpufield.triage.ingest.ingest` with loss lines thinned, see :data:`LOSS_EVERY`; phase
    banners found by its ``on_block`` hook; ``progress(path, n_bytes)`` called once per block read).

    Events stream through :class:`~gpufield.triage.aggregate.EventReducer` (repeats of a template
    beyond its first occurrences are counted, not kept) and phase marks through the same kind of
    cap, so memory does not grow with the log's length (``stats["templates"]`` lists the capped
    templates with their counts)."""
    from gpufield.triage.aggregate import EventReducer
    from gpufield.triage.ingest import IngestOptions, ingest
    from gpufield.triage.steptime import StepTimes

    marks = _MarkReducer()
    reducer = EventReducer()
    steps = StepTimes(year=year or time.gmtime().tm_year)

    shared = _SharedScan() if miner is not None else None

    def on_block(path: str, block: bytes, starts, n: int, base: int) -> None:
        if shared is not None:  # one search for the banner keywords and the miner's words together
            banner_lines, errorish_lines = shared.lines(block, int(starts[n]))
            marks.extend(marks_in_block(block, starts, n, path, base + 1, firsts=banner_lines))
            miner.on_block(path, block, starts, n, base, lines=errorish_lines)  # type: ignore[union-attr]
        else:
            marks.extend(marks_in_block(block, starts, n, path, base + 1))
        steps.on_block(path, block, starts, n, base)
        if progress is not None:
            progress(path, len(block))

    def sink(e: Event) -> None:
        reducer.add(e)
        if miner is not None:
            miner.note_event(e)

    res = ingest(list(paths), options=IngestOptions(year=year, with_loss=True, loss_every=LOSS_EVERY, workers=workers,
                                                    setup_once=True),
                 on_block=on_block, sink=sink)
    st = res.stats
    labels = labels or {}
    warnings = [str(replace(w, path=labels.get(w.path, w.path))) for w in st.warnings]
    if st.nothing_read:
        if labels and set(labels) >= {f.path for f in st.files} and st.bytes == 0 and st.files:
            raise LogFormatError("no input: standard input is empty (nothing was piped or redirected into it); name "
                                 "log files or directories, or pipe a log in (journalctl -k | gpufield triage)")
        raise LogFormatError(f"nothing could be read from the given logs: {'; '.join(warnings) or 'no input paths given'}")
    if miner is not None:
        miner.finish()
    events = reducer.events() + steps.events()
    n_events = st.events + st.setup_repeats  # repeated set-up lines are events the reducer would have dropped
    stats = {"files_seen": st.files_seen, "files_read": st.files_read, "files_skipped": st.files_skipped,
             "bytes": st.bytes, "lines": st.lines, "events": n_events, "seconds": round(st.seconds, 3),
             "truncated_lines": st.truncated_lines, "events_kept": len(events),
             "events_aggregated": n_events - len(events), "phase_marks_aggregated": marks.dropped,
             "templates": reducer.summary(), "mined_lines": miner.lines_mined if miner is not None else 0,
             "warnings": warnings, "unreadable": [labels.get(u, u) for u in st.unreadable]}
    return events, marks.marks(), stats, [f.path for f in st.files]


class _SharedScan:
    """The lines of a block that hold a phase-banner keyword and those that hold an error-ish word
    (:func:`gpufield.triage.engine.phases.keyword_pattern`, :data:`gpufield.triage.miner.ERRORISH`,
    both case-insensitive), found by one RE2 search of the block for either (then each hit line is
    asked which of the two it holds) instead of one search of the whole block for each. Neither
    pattern can match across a newline, so a line holds a match of the block search exactly when it
    holds one of its own: the same lines as the two separate scans."""

    def __init__(self) -> None:
        from gpufield.triage.engine.phases import keyword_pattern
        from gpufield.triage.miner import ERRORISH
        from gpufield.triage.parsers._regex import ByteScanner

        kw = keyword_pattern()
        self._both = ByteScanner(f"(?:{kw})|(?:{ERRORISH})", ignore_case=True)
        self._kw = ByteScanner(kw, ignore_case=True)
        self._err = ByteScanner(ERRORISH, ignore_case=True)

    def lines(self, block: bytes, end: int) -> tuple[list[int], list[tuple[int, int]]]:
        """``(banner line starts, [(start, end before the newline)] of error-ish lines)`` of ``block[:end]``."""
        find, kw, err = self._both.find, self._kw.find, self._err.find
        banner: list[int] = []
        errorish: list[tuple[int, int]] = []
        pos = 0
        while pos < end:
            hit = find(block, pos, end)
            if hit < 0:
                break
            ls = block.rfind(b"\n", 0, hit) + 1
            le = block.find(b"\n", hit, end)
            le = end if le < 0 else le
            if kw(block, ls, le) >= 0:
                banner.append(ls)
            if err(block, ls, le) >= 0:
                errorish.append((ls, le))
            pos = le + 1
        return banner, errorish


def input_id(files: Sequence[str]) -> str:
    """Identity of an input set: sha256 (hex, 16 digits) of the sorted absolute paths of the files read
    with their sizes and modification times. The same files re-analysed give the same id (the
    store's default run id); a file that grew gives another. Standard input has no identity: a set
    with it gets a random id."""
    import hashlib
    import uuid

    h = hashlib.sha256()
    for f in sorted(os.path.abspath(x) for x in files):
        if f.startswith(("/dev/fd/", "/proc/self/fd/")):
            return uuid.uuid4().hex[:16]
        try:
            st = os.stat(f)
            h.update(f"{f}\0{st.st_size}\0{st.st_mtime_ns}\n".encode("utf-8", "surrogateescape"))
        except OSError:
            h.update(f"{f}\0?\n".encode("utf-8", "surrogateescape"))
    return h.hexdigest()[:16]


class _MarkReducer:
    """Phase marks with the same cap as events: per (file, phase, text with digits masked) the first
    :data:`~gpufield.triage.aggregate.KEEP_PER_TEMPLATE` marks and the last one (a progress bar
    redrawn 100,000 times is one phase start, not 100,000)."""

    def __init__(self) -> None:
        from gpufield.triage.aggregate import KEEP_PER_TEMPLATE

        self._cap = KEEP_PER_TEMPLATE
        self._kept: list[tuple[int, PhaseMark]] = []
        self._count: dict[tuple, int] = {}
        self._last: dict[tuple, tuple[int, PhaseMark]] = {}
        self._seq = 0
        self.dropped = 0

    def extend(self, marks: Iterable[PhaseMark]) -> None:
        for m in marks:
            self._seq += 1
            key = (m.file, m.phase, _DIGITS.sub("#", m.text))
            c = self._count[key] = self._count.get(key, 0) + 1
            if c <= self._cap:
                self._kept.append((self._seq, m))
            else:
                self.dropped += key in self._last
                self._last[key] = (self._seq, m)

    def marks(self) -> list[PhaseMark]:
        return [m for _, m in sorted(self._kept + list(self._last.values()), key=lambda x: x[0])]


_DIGITS = re.compile(r"\d+")


#: folder names that organise logs but never name a host (a host-like folder is used as the host of
#: the host-less files under it, see :func:`folder_hosts`)
GENERIC_FOLDERS = frozenset({
    "log", "logs", "kernel", "dmesg", "syslog", "journal", "var", "tmp", "data", "output", "outputs", "out",
    "run", "runs", "job", "jobs", "slurm", "nccl", "torch", "train", "training", "rank", "ranks", "node",
    "nodes", "host", "hosts", "gpu", "gpus", "debug", "results", "artifacts", "archive", "collected", "triage",
    "stdout", "stderr", "workers", "worker", "launcher", "dumps", "fr", "flight_recorder", "traces"})
_HOSTLIKE = re.compile(r"^(?=.*[A-Za-z])[A-Za-z0-9](?:[A-Za-z0-9.-]{0,62}[A-Za-z0-9])?$")
_NOT_HOST = re.compile(r"^(?:job|run|attempt|rank|step|epoch|case|try|restart)[-_.]?\d+$|^\d{4}-\d\d", re.IGNORECASE)


def folder_host(path: str, roots: Sequence[str]) -> str | None:
    """The host a folder name gives ``path``: its nearest ancestor folder *below* the input
    directory it was found in whose name looks like a hostname (RFC 1123 label characters, at least
    one letter, not a generic name of :data:`GENERIC_FOLDERS` nor ``job-12`` / ``rank3`` / a date).
    Collected logs are laid out as ``<job>/<host>/dmesg.txt``; the input directory itself (and a file
    named directly) gives no host.
    """
    p = os.path.abspath(path)
    for root in roots:
        r = os.path.abspath(root)
        if not os.path.isdir(r) or not p.startswith(r.rstrip(os.sep) + os.sep):
            continue
        for part in reversed(os.path.relpath(p, r).split(os.sep)[:-1]):
            if part.lower() not in GENERIC_FOLDERS and _HOSTLIKE.match(part) and not _NOT_HOST.match(part):
                return part
    return None


def folder_hosts(events: Sequence[Event], roots: Sequence[str]) -> list[Event]:
    """Give the events of files that name no host at all (``dmesg -T``, raw ``dmesg``, a training log
    without NCCL prefixes) the host of their folder (:func:`folder_host`). Files where any event
    names a host are left to the engine's own inference (:func:`~gpufield.triage.engine.correlate.infer_hosts`).
    """
    named = {e.file for e in events if e.host}
    hint: dict[str, str | None] = {}
    out = []
    for e in events:
        if e.host or e.file in named:
            out.append(e)
            continue
        if e.file not in hint:
            hint[e.file] = folder_host(e.file, roots)
        out.append(replace(e, host=hint[e.file]) if hint[e.file] else e)
    return out


def _check_paths(paths: Sequence[str]) -> None:
    """Fail when nothing at all is readable (missing paths were refused or warned about before)."""
    if not _files_under(paths):
        raise LogFormatError("no files to read (empty directory)", path=paths[0])


def analyze(paths: Sequence[str | os.PathLike[str]] | os.PathLike[str] | None = None, *,
            skew_tolerance_s: float = 30.0, allow_missing: bool = False,
            progress: Callable[[str, int], None] | None = None, workers: int | None = None) -> TriageResult:
    """Triage the logs at ``paths`` and return incidents, most likely root first.

    Args:
        paths: a list of log files and/or directories (walked recursively) from one failed job:
            kernel logs (dmesg/journal/syslog, ``journalctl -o json``), NCCL, PyTorch, torchrun,
            training output, nvidia-smi dumps, DCGM/Prometheus text; plain, gzip, bzip2 or xz.
            ``"-"`` is standard input. A single ``os.PathLike`` counts as one path; a ``str`` is
            refused (``analyze(["kern.log"])``, see :mod:`gpufield.triage.inputs`). None or empty:
            the bundled example incident.
        skew_tolerance_s: clock uncertainty between hosts after the automatic skew correction
            (finite, >= 0); events on different hosts closer than this are ordered by causal prior only.
        allow_missing: a missing path among existing ones is a warning instead of an error.
        progress: called as ``progress(path, n_bytes)`` after each block (8 MiB) of decompressed
            input is read (the CLI draws a progress bar with it).
        workers: processes that parse one large plain file (``IngestOptions.workers``; None:
            :data:`WORKERS`). The result is the same with any number.

    Returns:
        A :class:`TriageResult`. A run whose logs match no rule has no incidents (exit 0 in the CLI:
        "no failure signature found" is a verdict).

    Raises:
        TypeError: ``paths`` is a ``str`` or ``bytes``.
        InputError: a path is missing (any, without ``allow_missing``; all, with it); a named pipe
            has no writer.
        LogFormatError: nothing at all could be read (empty directory, only binary files).
        ValueError: ``skew_tolerance_s`` is negative, NaN, infinite or above :data:`MAX_SKEW_TOLERANCE_S`;
            ``workers`` is below 1.
    """
    check_skew_tolerance_s(skew_tolerance_s)
    from gpufield.triage.inputs import relabel, resolve_inputs

    inp = None if paths is None else resolve_inputs(paths, allow_missing=allow_missing)
    example = inp is None or not inp.given
    given = [str(example_dir())] if example else inp.paths  # type: ignore[union-attr]
    _check_paths(given)
    labels = {} if inp is None else inp.labels
    miner = TemplateMiner(year=EXAMPLE_YEAR if example else time.gmtime().tm_year)
    events, marks, stats, files = _ingest(given, year=EXAMPLE_YEAR if example else None, miner=miner,
                                          progress=progress, labels=labels,
                                          workers=WORKERS if workers is None else workers)
    if inp is not None and inp.missing:
        stats["warnings"] = [f"{m}: no such file or directory (skipped: --allow-missing)" for m in inp.missing] \
            + stats["warnings"]
    if labels:
        events = relabel(events, labels)
        marks = [replace(m, file=labels.get(m.file, m.file)) for m in marks]
    events = folder_hosts(events, given)
    result = run_engine(events, phases=marks, skew_tolerance_s=skew_tolerance_s)
    top = result.incidents[0] if result.incidents else None
    mined = miner.templates()
    unexplained = miner.unexplained(failure_ns=top.t_ns if top else None, failing_host=top.host if top else None,
                                    all_hosts={e.host for e in events if e.host})
    return TriageResult(
        incidents=result.incidents, events=result.timeline.events,
        inputs=given if example else list(inp.given), stats=stats,  # type: ignore[union-attr]
        clock_offsets_s={h: o / 1e9 for h, o in result.timeline.offsets_ns.items()},
        example=example, engine=result, unexplained=unexplained, unparsed_templates=mined[:200],
        files=files, input_id=input_id(files),
    )


def check_writable(path: str | os.PathLike[str], *, force: bool = False, append_ok: bool = False,
                   inputs: Iterable[str | os.PathLike[str]] = (), option: str | None = None) -> None:
    """Refuse an output path before any work is done (:func:`gpufield._files.check_output`).

    Args:
        path: an output file the user named (``--html``, ``--db``).
        force: the user asked to replace (HTML) or add to (DuckDB) an existing file.
        append_ok: the output is added to rather than replaced (changes the message only).
        inputs: the analysis inputs; the output may not be one of them.
        option: the option name for the message.

    Raises:
        InputError: the file exists and ``force`` is False; it is a device, FIFO, socket, directory,
            symbolic link or one of ``inputs`` (also with ``force``); its directory is missing or
            not writable.
    """
    from gpufield._files import check_output

    check_output(path, force=force, inputs=inputs, option=option, append=append_ok)


def store_events(result: TriageResult, path: str | os.PathLike[str], *, force: bool = False) -> int:
    """Write the result's events to an events-only ``gpufield.telemetry.Store`` (table ``events``).

    The older, events-only layout (no run id; ``force`` appends). ``gpufield triage --db`` uses
    :func:`gpufield.triage.store.store_result` instead: runs, incidents, evidence, offsets, samples,
    and ``force`` replaces the run's rows (``docs/triage-store.md``).

    Args:
        result: an :func:`analyze` result.
        path: the ``.duckdb`` file.
        force: append to an existing store; without it an existing path is refused.

    Returns:
        Number of events written.

    Raises:
        InputError: the path exists and ``force`` is False.
        TelemetryError: the existing file is not a gpufield DuckDB store.
        DependencyError: duckdb/pyarrow missing.
    """
    check_writable(path, force=force, append_ok=True)
    from gpufield.telemetry.store import Store

    with Store(path, mode="a" if force else "x") as st:
        return st.add_events(result.events)
