"""Streaming ingestion into the DuckDB event store of gpufield.telemetry (no event list in between)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from gpufield.telemetry.store import Store
from gpufield.triage.ingest import IngestOptions, IngestStats, ingest, iter_events

DATA = Path(__file__).parent / "data"


def test_iter_events_streams_into_the_store(tmp_path):
    opts = IngestOptions(year=2026)
    stats = IngestStats()
    with Store(tmp_path / "events.duckdb", mode="x") as store:
        n = store.add_events(iter_events([DATA], options=opts, stats=stats))
        rows = store.query("SELECT kind, count(*) AS n FROM events GROUP BY kind")
        xid = store.query("SELECT code, pci_bdf, host FROM events WHERE kind = 'xid' AND code = '48'")
    expected = Counter(e.kind for e in ingest([DATA], options=opts).events)
    assert n == stats.events == sum(expected.values())
    assert {r["kind"]: r["n"] for r in rows} == dict(expected)
    assert xid == [{"code": "48", "pci_bdf": "0000:07:00.0", "host": "node-a"}]
