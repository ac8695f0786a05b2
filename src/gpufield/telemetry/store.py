"""One embedded DuckDB file per analysis: the ``events`` and ``samples`` tables.

Schema after ``../shared/reference/triage.md`` section 5.3 (long-form samples; every parsed line an
event). Rows go in through pyarrow tables in batches, so a million events take seconds, not minutes.
The file is a plain DuckDB database: ``duckdb incident.duckdb -c "select kind, count(*) from events group by 1"``.

Nothing a user gave is lost: opening an existing store appends to it (``mode="a"``, the default),
``mode="x"`` refuses an existing path, ``mode="r"`` opens read-only, and a file that is not a DuckDB
database is refused rather than overwritten.

Telemetry does not import triage: :meth:`Store.add_events` takes any object with the attributes of
:class:`EventLike` (``gpufield.triage.events.Event`` has them).

Example::

    from gpufield.telemetry import Store
    with Store("incident.duckdb") as st:
        st.add_events(events)                       # triage Event objects
        st.add_gpu_samples(reader.sample(), host="node-a")
        st.query("select kind, count(*) as n from events group by kind order by n desc")
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from itertools import islice
from operator import attrgetter
from typing import Any, Protocol, runtime_checkable

from gpufield.errors import DependencyError, TelemetryError
from gpufield.telemetry._ids import normalize_bdf

__all__ = ["Store", "EventLike", "SampleRow"]

SCHEMA_VERSION = 1
EVENT_COLUMNS = (
    ("ts_ns", "BIGINT"), ("host", "VARCHAR"), ("rank", "INTEGER"), ("gpu_uuid", "VARCHAR"),
    ("pci_bdf", "VARCHAR"), ("gpu_index", "INTEGER"), ("source", "VARCHAR"), ("kind", "VARCHAR"),
    ("code", "VARCHAR"), ("severity", "VARCHAR"), ("file", "VARCHAR"), ("line", "INTEGER"),
    ("fields_json", "VARCHAR"), ("raw", "VARCHAR"), ("mono_s", "DOUBLE"), ("pid", "INTEGER"),
)
SAMPLE_COLUMNS = (
    ("ts_ns", "BIGINT"), ("host", "VARCHAR"), ("gpu_index", "INTEGER"), ("gpu_uuid", "VARCHAR"),
    ("pci_bdf", "VARCHAR"), ("metric", "VARCHAR"), ("value", "DOUBLE"), ("labels_json", "VARCHAR"),
)
_BATCH = 200_000
_MAGIC = b"DUCK"  # DuckDB main header: 8-byte checksum, then the magic bytes


@runtime_checkable
class EventLike(Protocol):
    """What :meth:`Store.add_events` reads from an event (``gpufield.triage.events.Event`` fits).

    ``gpu_bdf`` (or ``pci_bdf``) fills the ``pci_bdf`` column; ``fields`` is stored as JSON.
    """

    source: str
    kind: str
    file: str
    line: int
    raw: str
    ts_ns: int | None
    host: str | None
    rank: int | None
    gpu_uuid: str | None
    gpu_index: int | None
    code: str | None
    severity: str
    fields: Mapping[str, Any]


@dataclass(frozen=True, kw_only=True, slots=True)
class SampleRow:
    """One long-form sample row.

    Attributes:
        ts_ns: ns since the epoch (UTC).
        metric: metric name with unit suffix (e.g. ``power_w``) or the exporter's name.
        value: the value (float; NaN allowed).
        host / gpu_index / gpu_uuid / pci_bdf: where it was measured, where known.
        labels: extra labels, stored as JSON.
    """

    ts_ns: int
    metric: str
    value: float
    host: str | None = None
    gpu_index: int | None = None
    gpu_uuid: str | None = None
    pci_bdf: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)


def _libs() -> tuple[Any, Any]:
    try:
        import duckdb
        import pyarrow as pa
    except ImportError as e:
        raise DependencyError("the telemetry store needs duckdb and pyarrow: "
                              "pip install duckdb==2.0.1 pyarrow==26.0.1") from e
    return duckdb, pa


# the C encoder built once (json.dumps(sort_keys=True) rebuilds it per call: 3x slower on 1e6 events)
_C_ENCODER = None if json.encoder.c_make_encoder is None else json.encoder.c_make_encoder(
    None, str, json.encoder.c_encode_basestring_ascii, None, ": ", ", ", True, False, True)


def _json(d: Mapping[str, Any] | None) -> str:
    """``json.dumps(d, sort_keys=True, default=str)``, fast."""
    if not d:
        return "{}"
    if _C_ENCODER is not None and type(d) is dict:
        return "".join(_C_ENCODER(d, 0))
    return json.dumps(d, sort_keys=True, default=str)


def _event_getter(example: Any) -> Callable[[Any], tuple[Any, ...]]:
    """attrgetter for the event columns (C speed), adapted to the attributes this type has."""
    bdf = "gpu_bdf" if hasattr(example, "gpu_bdf") else "pci_bdf"
    names = ["ts_ns", "host", "rank", "gpu_uuid", bdf, "gpu_index", "source", "kind", "code", "severity",
             "file", "line", "fields", "raw"]
    if hasattr(example, "mono_s") and hasattr(example, "pid"):
        return attrgetter(*names, "mono_s", "pid")
    base = attrgetter(*names)
    return lambda e: (*base(e), getattr(e, "mono_s", None), getattr(e, "pid", None))


class Store:
    """An analysis store in one DuckDB file.

    Args:
        path: the ``.duckdb`` file (``":memory:"`` for a throw-away store).
        mode: ``"a"`` open or create and append (default); ``"x"`` create, refusing an existing path;
            ``"r"`` open an existing store read-only.

    Raises:
        TelemetryError: the path exists but is not a DuckDB database (or is empty), exists with
            ``mode="x"``, is missing with ``mode="r"``, or holds an ``events``/``samples`` table
            whose columns differ from this schema.
        DependencyError: duckdb or pyarrow is not installed.
    """

    def __init__(self, path: str | os.PathLike[str], *, mode: str = "a") -> None:
        if mode not in ("a", "x", "r"):
            raise ValueError(f"mode must be 'a', 'x' or 'r', got {mode!r}")
        duckdb, self._pa = _libs()
        self.path = str(path)
        memory = self.path == ":memory:"
        exists = not memory and os.path.exists(self.path)
        if exists:
            self._check_is_duckdb()
            if mode == "x":
                raise TelemetryError(f"{self.path}: already exists; mode='x' never overwrites (use mode='a' to append)")
        elif mode == "r" and not memory:
            raise TelemetryError(f"{self.path}: no such store")
        self._con = duckdb.connect(self.path, read_only=(mode == "r"))
        self.read_only = mode == "r"
        if not self.read_only:
            self._create()
        self._check_schema()

    def _check_is_duckdb(self) -> None:
        if os.path.isdir(self.path):
            raise TelemetryError(f"{self.path}: is a directory, expected a DuckDB file")
        with open(self.path, "rb") as f:
            head = f.read(12)
        if len(head) == 0:
            raise TelemetryError(f"{self.path}: is empty, not a DuckDB database; refusing to write over it "
                                 "(delete it or choose another path)")
        if head[8:12] != _MAGIC:
            raise TelemetryError(f"{self.path}: not a DuckDB database (no 'DUCK' magic at byte 8); "
                                 "refusing to write over a file gpufield did not make")

    def _create(self) -> None:
        for name, cols in (("events", EVENT_COLUMNS), ("samples", SAMPLE_COLUMNS)):
            body = ", ".join(f'"{c}" {t}' for c, t in cols)
            self._con.execute(f"CREATE TABLE IF NOT EXISTS {name} ({body})")
        self._con.execute("CREATE TABLE IF NOT EXISTS gpufield_meta (key VARCHAR PRIMARY KEY, value VARCHAR)")
        self._con.execute("INSERT OR IGNORE INTO gpufield_meta VALUES ('schema_version', ?)", [str(SCHEMA_VERSION)])

    def _check_schema(self) -> None:
        for name, cols in (("events", EVENT_COLUMNS), ("samples", SAMPLE_COLUMNS)):
            have = [r[0] for r in self._con.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_name = ? ORDER BY ordinal_position",
                [name]).fetchall()]
            if have and have != [c for c, _t in cols]:
                raise TelemetryError(f"{self.path}: table {name} has columns {have}, expected {[c for c, _ in cols]}")

    # --- context manager ---------------------------------------------------------------------
    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection (idempotent); everything inserted is already durable."""
        if self._con is not None:
            self._con.close()
            self._con = None

    # --- writes --------------------------------------------------------------------------------
    def _insert(self, table: str, cols: tuple[tuple[str, str], ...], rows: Iterator[tuple[Any, ...]],
                transforms: Mapping[int, Callable[[Any], Any]] | None = None) -> int:
        if self.read_only:
            raise TelemetryError(f"{self.path}: opened read-only (mode='r')")
        pa = self._pa
        types = {"BIGINT": pa.int64(), "INTEGER": pa.int32(), "VARCHAR": pa.string(), "DOUBLE": pa.float64()}
        schema = pa.schema([(c, types[t]) for c, t in cols])
        total = 0
        while batch := list(islice(rows, _BATCH)):
            columns = list(zip(*batch, strict=True))
            for i, fn in (transforms or {}).items():
                columns[i] = list(map(fn, columns[i]))
            tbl = pa.Table.from_arrays([pa.array(col, type=f.type) for col, f in zip(columns, schema, strict=True)],
                                       schema=schema)
            self._con.register("_gpufield_batch", tbl)
            try:
                self._con.execute(f"INSERT INTO {table} SELECT * FROM _gpufield_batch")
            finally:
                self._con.unregister("_gpufield_batch")
            total += len(batch)
        return total

    def add_events(self, events: Iterable[EventLike]) -> int:
        """Append events.

        Args:
            events: objects with the :class:`EventLike` attributes (e.g. triage ``Event``); also
                ``mono_s`` and ``pid`` when present.

        Returns:
            Number of rows inserted.

        Raises:
            TelemetryError: the store is read-only.
            AttributeError: an event lacks a required attribute.
        """
        def rows() -> Iterator[tuple[Any, ...]]:
            getters: dict[type, Callable[[Any], tuple[Any, ...]]] = {}
            for e in events:
                get = getters.get(type(e))
                if get is None:
                    get = getters[type(e)] = _event_getter(e)
                yield get(e)
        return self._insert("events", EVENT_COLUMNS, rows(), {12: _json})

    def add_samples(self, samples: Iterable[SampleRow]) -> int:
        """Append long-form samples.

        Args:
            samples: :class:`SampleRow` objects (or anything with those attributes).

        Returns:
            Number of rows inserted.
        """
        get = attrgetter("ts_ns", "host", "gpu_index", "gpu_uuid", "pci_bdf", "metric", "value", "labels")
        return self._insert("samples", SAMPLE_COLUMNS, map(get, samples), {6: float, 7: _json})

    def add_gpu_samples(self, samples: Iterable[Any], *, host: str | None = None) -> int:
        """Append NVML :class:`~gpufield.telemetry.GpuSample` readings, one row per metric.

        Args:
            samples: ``GpuSample`` objects.
            host: host name for every row.

        Returns:
            Number of rows inserted.
        """
        def rows() -> Iterator[SampleRow]:
            for s in samples:
                for metric, value in s.metrics().items():
                    yield SampleRow(ts_ns=s.ts_ns, metric=metric, value=value, host=host, gpu_index=s.index,
                                    gpu_uuid=s.uuid, pci_bdf=s.pci_bdf)
        return self.add_samples(rows())

    def add_prom_samples(self, samples: Iterable[Any], *, ts_ns: int | None = None, host: str | None = None) -> int:
        """Append Prometheus samples (e.g. a dcgm-exporter scrape), one row each.

        dcgm-exporter labels fill the location columns: ``gpu`` -> ``gpu_index``, ``UUID`` -> ``gpu_uuid``,
        ``pci_bus_id`` -> ``pci_bdf`` (normalised), ``hostname``/``Hostname`` -> ``host``; every label
        is also kept in ``labels_json``.

        Args:
            samples: :class:`~gpufield.telemetry.PromSample` objects.
            ts_ns: scrape time for samples without their own timestamp (ns since the epoch).
            host: host for samples without a hostname label.

        Returns:
            Number of rows inserted.

        Raises:
            TelemetryError: a sample has no timestamp and ``ts_ns`` is not given.
        """
        def rows() -> Iterator[SampleRow]:
            for p in samples:
                lab = p.labels
                ts = p.timestamp_ms * 1_000_000 if p.timestamp_ms is not None else ts_ns
                if ts is None:
                    raise TelemetryError(f"line {p.line}: sample {p.name} has no timestamp; pass ts_ns=")
                bdf = lab.get("pci_bus_id")
                gpu = lab.get("gpu")
                yield SampleRow(ts_ns=ts, metric=p.name, value=p.value, host=lab.get("hostname") or lab.get("Hostname") or host,
                                gpu_index=int(gpu) if gpu is not None and gpu.isdigit() else None,
                                gpu_uuid=lab.get("UUID"), pci_bdf=normalize_bdf(bdf) if bdf else None, labels=lab)
        return self.add_samples(rows())

    # --- reads ---------------------------------------------------------------------------------
    def query(self, sql: str, params: list[Any] | None = None) -> list[dict[str, Any]]:
        """Run SQL and return rows as dicts.

        Args:
            sql: any DuckDB SQL (``?`` placeholders bound from ``params``).
            params: positional parameters.

        Returns:
            One dict per row, column name -> value.
        """
        cur = self._con.execute(sql, params or [])
        names = [d[0] for d in cur.description] if cur.description else []
        return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]

    def query_arrow(self, sql: str, params: list[Any] | None = None) -> Any:
        """Run SQL and return a ``pyarrow.Table``."""
        return self._con.sql(sql, params=params or None).to_arrow_table()
