"""The triage store: one DuckDB file holding every analysis run (``gpufield triage --db FILE``).

Schema ``gpufield.triage.store`` version 2 (documented with example queries in
``docs/triage-store.md``): ``runs`` (one row per analysis, key ``run_id``) and, keyed by ``run_id``,
``events``, ``templates`` (aggregated line templates), ``incidents``, ``evidence`` (the lines each
incident cites, with file:line), ``clock_offsets`` (per host) and ``samples`` (telemetry).

**What a run is.** ``run_id`` is ``--run-id`` when given, else
:func:`gpufield.triage.analyze.input_id`: a hash of the absolute paths, sizes and modification
times of the files read. Analysing the same files again is the same run: refused unless
``force=True``, which *replaces* that run's rows in every table (one transaction). Other inputs add
a new run to an existing store. Standard input has no identity: each piped analysis is a new run
unless ``--run-id`` names it.

**What is refused** (one-line :class:`~gpufield.errors.InputError` naming the file, exit 2, the file
left untouched): a path that is a directory, device, FIFO, symlink or one of the inputs; a missing
or read-only directory; a file that is not a DuckDB database (or is empty or truncated); a DuckDB
database gpufield did not make (no ``gpufield_meta`` with kind ``gpufield.triage.store``), or an
older store layout; a database another process holds open (DuckDB's file lock). A new store is
built in a temporary file beside the target and renamed into place, so an interrupted first run
leaves no half-made file.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpufield.errors import DependencyError, InputError

if TYPE_CHECKING:
    from gpufield.triage.analyze import TriageResult

__all__ = ["KIND", "SCHEMA_VERSION", "TABLES", "check_store", "store_result"]

KIND = "gpufield.triage.store"
SCHEMA_VERSION = 2
_EVENT = ("ts_ns BIGINT, host VARCHAR, rank INTEGER, gpu_uuid VARCHAR, pci_bdf VARCHAR, gpu_index INTEGER, "
          "source VARCHAR, kind VARCHAR, code VARCHAR, severity VARCHAR, file VARCHAR, line INTEGER, "
          "fields_json VARCHAR, raw VARCHAR, mono_s DOUBLE, pid INTEGER")
#: table -> column definitions (every table but ``gpufield_meta`` starts with ``run_id``)
TABLES: dict[str, str] = {
    "runs": "run_id VARCHAR PRIMARY KEY, created_at TIMESTAMPTZ, gpufield_version VARCHAR, inputs_json VARCHAR, "
            "files_json VARCHAR, example BOOLEAN, n_events BIGINT, n_incidents INTEGER, verdict_class VARCHAR, "
            "verdict_root_cause VARCHAR, verdict_confidence DOUBLE, skew_tolerance_s DOUBLE, stats_json VARCHAR",
    "events": "run_id VARCHAR, event_no BIGINT, " + _EVENT + ", ts_corrected_ns BIGINT",
    "templates": "run_id VARCHAR, template_id VARCHAR, template VARCHAR, count BIGINT, first_ts_ns BIGINT, "
                 "last_ts_ns BIGINT, first_file VARCHAR, first_line INTEGER, last_file VARCHAR, last_line INTEGER, "
                 "hosts_json VARCHAR, ranks_json VARCHAR, unexplained BOOLEAN, extra_json VARCHAR",
    "incidents": "run_id VARCHAR, incident_no INTEGER, class VARCHAR, root_cause VARCHAR, established BOOLEAN, "
                 "confidence DOUBLE, action_kind VARCHAR, action VARCHAR, host VARCHAR, gpu VARCHAR, rank INTEGER, "
                 "rule VARCHAR, note VARCHAR, ts_corrected_ns BIGINT, cascade_count INTEGER, "
                 "cascade_classes_json VARCHAR, next_evidence_json VARCHAR",
    "evidence": "run_id VARCHAR, incident_no INTEGER, evidence_no INTEGER, role VARCHAR, file VARCHAR, "
                "line INTEGER, host VARCHAR, rank INTEGER, gpu_bdf VARCHAR, kind VARCHAR, code VARCHAR, "
                "ts_ns BIGINT, ts_corrected_ns BIGINT, count INTEGER, ranks_json VARCHAR, hosts_json VARCHAR, "
                "raw VARCHAR",
    "clock_offsets": "run_id VARCHAR, host VARCHAR, offset_s DOUBLE",
    "samples": "run_id VARCHAR, ts_ns BIGINT, host VARCHAR, gpu_index INTEGER, gpu_uuid VARCHAR, pci_bdf VARCHAR, "
               "metric VARCHAR, value DOUBLE, source_file VARCHAR, source_line INTEGER",
}
_BATCH = 100_000


def _duckdb() -> Any:
    try:
        import duckdb
        import pyarrow  # noqa: F401 - batches go in as Arrow tables
    except ImportError as e:
        raise DependencyError("the triage store needs duckdb and pyarrow: pip install duckdb==2.0.1 "
                              "pyarrow==26.0.1") from e
    return duckdb


def _cols(table: str) -> list[str]:
    return [c.strip().split(" ")[0] for c in TABLES[table].split(",")]


def _connect(path: str, *, read_only: bool) -> Any:
    duckdb = _duckdb()
    try:
        return duckdb.connect(path, read_only=read_only)
    except duckdb.Error as e:
        msg = str(e).splitlines()[0]
        low = msg.lower()
        if "lock" in low:
            why = "is in use by another process (DuckDB file lock); close it there or use another --db"
        elif "not a valid duckdb" in low or "corrupt" in low or "truncat" in low or "invalid" in low \
                or "unable to read" in low or "header" in low:
            why = f"is not a readable DuckDB database (truncated or corrupt?): {msg}"
        else:
            why = f"cannot be opened as a DuckDB database: {msg}"
        raise InputError(why, path=path) from None


def check_store(path: str | os.PathLike[str], *, inputs: Iterable[str | os.PathLike[str]] = ()) -> bool:
    """Check ``--db`` before the analysis runs; nothing is written.

    Returns:
        True when ``path`` is an existing store of ours, False when it will be created.

    Raises:
        InputError: see the module docstring (what is refused).
    """
    from gpufield._files import check_output

    p = os.fspath(path)
    check_output(p, force=True, inputs=inputs, option="--db")  # special files, links, inputs, directory
    if not os.path.exists(p):
        return False
    if not os.access(p, os.W_OK):
        raise InputError("--db file is not writable", path=p)
    with open(p, "rb") as f:
        head = f.read(12)
    if len(head) < 12 or head[8:12] != b"DUCK":
        raise InputError("--db is not a DuckDB database (no 'DUCK' magic at byte 8); refusing to write over a file "
                         "gpufield did not make", path=p)
    con = _connect(p, read_only=True)
    try:
        _check_ours(con, p)
    finally:
        con.close()
    return True


def _check_ours(con: Any, path: str) -> None:
    duckdb = _duckdb()
    try:
        _check_ours_unguarded(con, path)
    except duckdb.Error as e:
        raise InputError(f"--db is not a readable DuckDB database (truncated or corrupt?): {str(e).splitlines()[0]}",
                         path=path) from None


def _check_ours_unguarded(con: Any, path: str) -> None:
    tables = {r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
    meta: dict[str, str] = {}
    if "gpufield_meta" in tables:
        meta = dict(con.execute("SELECT key, value FROM gpufield_meta").fetchall())
    if meta.get("kind") != KIND:
        if meta.get("schema_version") == "1" and "events" in tables:
            raise InputError("--db is an older gpufield event store (schema 1, no run ids); refusing to change it: "
                             "use a new file", path=path)
        raise InputError(f"--db is a DuckDB database that gpufield did not make (no gpufield_meta kind {KIND!r}); "
                         "refusing to change it", path=path)
    if meta.get("schema_version") != str(SCHEMA_VERSION):
        raise InputError(f"--db has triage store schema {meta.get('schema_version')}, this gpufield writes "
                         f"{SCHEMA_VERSION}; use a new file", path=path)
    for t in TABLES:
        have = [r[0] for r in con.execute("SELECT column_name FROM information_schema.columns WHERE table_name = ? "
                                          "ORDER BY ordinal_position", [t]).fetchall()]
        if have != _cols(t):
            raise InputError(f"--db table {t} has columns {have}, expected {_cols(t)}", path=path)


def _create(con: Any) -> None:
    con.execute("CREATE TABLE gpufield_meta (key VARCHAR PRIMARY KEY, value VARCHAR)")
    con.execute("INSERT INTO gpufield_meta VALUES ('kind', ?), ('schema_version', ?)", [KIND, str(SCHEMA_VERSION)])
    for t, body in TABLES.items():
        con.execute(f"CREATE TABLE {t} ({body})")


def _j(v: Any) -> str:
    return json.dumps(v, sort_keys=True, default=str, ensure_ascii=False)


def _insert(con: Any, table: str, rows: Iterable[tuple]) -> int:
    import pyarrow as pa

    cols = _cols(table)
    n = 0
    batch: list[tuple] = []

    def flush() -> None:
        if not batch:
            return
        arrays = [pa.array(list(c)) if any(v is not None for v in c) else pa.nulls(len(batch))
                  for c in zip(*batch, strict=True)]
        con.register("_gpufield_batch", pa.Table.from_arrays(arrays, names=cols))
        try:
            con.execute(f"INSERT INTO {table} SELECT * FROM _gpufield_batch")
        finally:
            con.unregister("_gpufield_batch")
        batch.clear()

    for r in rows:
        batch.append(r)
        n += 1
        if len(batch) >= _BATCH:
            flush()
    flush()
    return n


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("gpufield")
    except PackageNotFoundError:
        return "unknown"


def _template_rows(run_id: str, templates: Any) -> Iterable[tuple]:
    """Rows of the ``templates`` table from ``TriageResult.templates`` (when the analysis has it):
    objects or dicts with ``template`` and ``count`` and optional first/last occurrence, hosts,
    ranks and ``unexplained``; any other attribute goes to ``extra_json``."""
    known = ("template_id", "template", "count", "first_ts_ns", "last_ts_ns", "first_file", "first_line",
             "last_file", "last_line", "hosts", "ranks", "unexplained")
    for i, t in enumerate(templates or ()):
        d = dict(t) if isinstance(t, dict) else {k: getattr(t, k) for k in dir(t)
                                                  if not k.startswith("_") and not callable(getattr(t, k))}
        extra = {k: v for k, v in d.items() if k not in known}
        yield (run_id, str(d.get("template_id", i)), d.get("template"), d.get("count"), d.get("first_ts_ns"),
               d.get("last_ts_ns"), d.get("first_file"), d.get("first_line"), d.get("last_file"), d.get("last_line"),
               _j(sorted(d.get("hosts") or [], key=str)), _j(sorted(d.get("ranks") or [], key=str)),
               d.get("unexplained"), _j(extra) if extra else None)


def _write(con: Any, result: TriageResult, run_id: str, telemetry: Sequence[Any], skew_tolerance_s: float | None) -> None:
    tl = result.engine.timeline if result.engine else None
    v = result.verdict
    con.execute("INSERT INTO runs VALUES (?, to_timestamp(?), ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", [
        run_id, time.time(), _version(), _j(result.inputs), _j(result.files), result.example, len(result.events),
        len(result.incidents), v.cls if v else None, v.root_cause if v else None, v.confidence if v else None,
        skew_tolerance_s, _j(result.stats)])

    def corrected(e: Any) -> int | None:
        return tl.t(e) if tl is not None and e.ts_ns is not None else e.ts_ns

    _insert(con, "events", ((run_id, i, e.ts_ns, e.host, e.rank, e.gpu_uuid, e.gpu_bdf, e.gpu_index, e.source, e.kind,
                             e.code, e.severity, e.file, e.line, _j(e.fields) if e.fields else "{}", e.raw, e.mono_s,
                             e.pid, corrected(e)) for i, e in enumerate(result.events)))
    _insert(con, "templates", _template_rows(run_id, getattr(result, "templates", None)))
    _insert(con, "incidents", ((run_id, k, inc.cls, inc.root_cause, inc.established, inc.confidence, inc.action_kind,
                                inc.action, inc.host, inc.gpu, inc.rank, inc.rule, inc.note, inc.t_ns,
                                inc.cascade_count, _j(list(inc.cascade_classes)), _j(list(inc.next_evidence)))
                               for k, inc in enumerate(result.incidents, start=1)))
    _insert(con, "evidence", ((run_id, k, j, x.role, x.event.file, x.event.line, x.event.host, x.event.rank,
                               x.event.gpu_bdf, x.event.kind, x.event.code, x.event.ts_ns, corrected(x.event), x.count,
                               _j(list(x.ranks)), _j(list(x.hosts)), x.event.raw)
                              for k, inc in enumerate(result.incidents, start=1)
                              for j, x in enumerate(inc.evidence, start=1)))
    _insert(con, "clock_offsets", ((run_id, h, float(o)) for h, o in sorted(result.clock_offsets_s.items())))
    _insert(con, "samples", _sample_rows(run_id, result, telemetry))


def _sample_rows(run_id: str, result: TriageResult, telemetry: Sequence[Any]) -> Iterable[tuple]:
    """Telemetry samples: the ``--telemetry`` files' samples, then the DCGM / Prometheus samples found
    among the logs (``metric_sample`` events that have a time)."""
    for s in telemetry:
        yield (run_id, s.ts_ns, s.host, s.gpu_index, s.gpu_uuid, s.pci_bdf, s.metric, s.value, s.file, s.line)
    for e in result.events:
        if e.kind == "metric_sample" and e.ts_ns is not None and isinstance(e.fields.get("value"), int | float):
            yield (run_id, e.ts_ns, e.host, e.gpu_index, e.gpu_uuid, e.gpu_bdf, e.fields.get("metric"),
                   float(e.fields["value"]), e.file, e.line)


def store_result(result: TriageResult, path: str | os.PathLike[str], *, force: bool = False,
                 run_id: str | None = None, telemetry: Sequence[Any] = (),
                 skew_tolerance_s: float | None = None) -> str:
    """Store one analysis run (see the module docstring).

    Args:
        result: an :func:`~gpufield.triage.analyze` result.
        path: the ``.duckdb`` file (created when missing).
        force: replace the rows of a run with the same id instead of refusing.
        run_id: the run's id (default ``result.input_id``).
        telemetry: :class:`~gpufield.triage.telemetry_input.Sample` rows to store with the run.
        skew_tolerance_s: recorded in ``runs`` (None: not recorded).

    Returns:
        The run id.

    Raises:
        InputError: refused path or file (module docstring), or the run exists and ``force`` is False.
        DependencyError: duckdb/pyarrow missing.
    """
    rid = run_id or result.input_id
    if not rid:
        raise InputError("empty run id")
    p = os.fspath(path)
    if not check_store(p, inputs=result.files):
        from gpufield._files import atomic_path

        with atomic_path(p, force=False, inputs=result.files, option="--db") as tmp:
            os.unlink(tmp)  # DuckDB creates the file itself
            con = _connect(str(tmp), read_only=False)
            try:
                _create(con)
                _write(con, result, rid, telemetry, skew_tolerance_s)
            finally:
                con.close()
        return rid
    con = _connect(p, read_only=False)
    try:
        _check_ours(con, p)
        _replace_run(con, result, rid, p, force=force, telemetry=telemetry, skew_tolerance_s=skew_tolerance_s)
    finally:
        con.close()
    return rid


def _replace_run(con: Any, result: TriageResult, rid: str, p: str, *, force: bool, telemetry: Sequence[Any],
                 skew_tolerance_s: float | None) -> None:
    duckdb = _duckdb()
    try:
        con.execute("BEGIN TRANSACTION")
        try:
            exists = con.execute("SELECT count(*) FROM runs WHERE run_id = ?", [rid]).fetchone()[0]
            if exists and not force:
                raise InputError(f"run {rid} is already stored; refusing to overwrite it (pass --force to replace "
                                 "its rows, or --run-id NAME to store another run)", path=p)
            for t in TABLES:
                con.execute(f"DELETE FROM {t} WHERE run_id = ?", [rid])
            _write(con, result, rid, telemetry, skew_tolerance_s)
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise
    except duckdb.Error as e:
        raise InputError(f"--db could not be updated (nothing of this run was kept): {str(e).splitlines()[0]}",
                         path=p) from None


def open_store(path: str | os.PathLike[str]) -> Any:
    """A read-only DuckDB connection to a triage store (checked to be ours).

    Raises:
        InputError: not a triage store, missing, locked or corrupt.
    """
    p = os.fspath(path)
    if not Path(p).is_file():
        raise InputError("no such store", path=p)
    con = _connect(p, read_only=True)
    try:
        _check_ours(con, p)
    except BaseException:
        con.close()
        raise
    return con
