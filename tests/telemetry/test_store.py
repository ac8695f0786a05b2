"""DuckDB store: round trip of triage Events and samples, append/no-overwrite, refusal of foreign files."""

from __future__ import annotations

import json
import math

import duckdb
import pytest

from gpufield.errors import TelemetryError
from gpufield.telemetry import NvmlReader, SampleRow, Store
from gpufield.telemetry import store as store_mod
from gpufield.testing import FakeNvml, h200
from gpufield.triage.events import Event


def _events(n: int, start: int = 0) -> list[Event]:
    return [Event(source="kernel", kind="xid", file="node-a/dmesg.log", line=i + 1,
                  raw=f"NVRM: Xid (PCI:0000:1b:00): 79, pid={i}, GPU has fallen off the bus.",
                  ts_ns=1_795_000_000_000_000_000 + i, mono_s=269.516977 + i, host="node-a", pid=i,
                  gpu_bdf="0000:1b:00.0", code="79", severity="fatal",
                  fields={"xid": 79, "pid": i, "message": "GPU has fallen off the bus.", "ünï": [1, 2]})
            for i in range(start, start + n)]


def test_event_round_trip(tmp_path):
    path = tmp_path / "incident.duckdb"
    ev = [*_events(2), Event(source="nccl", kind="nccl_warn", file="rank3.log", line=7, raw="NCCL WARN x",
                             rank=3, gpu_index=3, severity="warning")]
    with Store(path) as st:
        assert st.add_events(ev) == 3
        rows = st.query("SELECT * FROM events ORDER BY file, line")
    r = rows[0]
    assert (r["ts_ns"], r["host"], r["pci_bdf"], r["code"], r["severity"], r["line"], r["pid"]) == (
        1_795_000_000_000_000_000, "node-a", "0000:1b:00.0", "79", "fatal", 1, 0)
    assert r["mono_s"] == 269.516977 and r["raw"] == ev[0].raw and r["rank"] is None
    assert json.loads(r["fields_json"]) == ev[0].fields
    last = rows[2]
    assert (last["source"], last["rank"], last["gpu_index"], last["ts_ns"], last["fields_json"]) == (
        "nccl", 3, 3, None, "{}")
    # a user's own duckdb sees the same rows (the file is plain DuckDB)
    con = duckdb.connect(str(path), read_only=True)
    assert con.execute("SELECT count(*), sum(line) FROM events").fetchone() == (3, 1 + 2 + 7)
    con.close()


def test_batches_and_append_never_overwrite(tmp_path, monkeypatch):
    monkeypatch.setattr(store_mod, "_BATCH", 1000)
    path = tmp_path / "a.duckdb"
    with Store(path) as st:
        assert st.add_events(_events(2500)) == 2500
    with Store(path) as st:  # reopening appends
        st.add_events(_events(500, start=2500))
        assert st.query("SELECT count(*) AS n, count(DISTINCT line) AS d FROM events") == [{"n": 3000, "d": 3000}]
    with pytest.raises(TelemetryError, match="already exists; mode='x'"):
        Store(path, mode="x")
    with Store(path, mode="r") as st:
        assert st.query("SELECT max(line) AS m FROM events") == [{"m": 3000}]
        with pytest.raises(TelemetryError, match="read-only"):
            st.add_events(_events(1))
    with pytest.raises(TelemetryError, match="no such store"):
        Store(tmp_path / "missing.duckdb", mode="r")


@pytest.mark.parametrize("content", [b"# my notes\nimportant\n", b"SQLite format 3\x00" + b"\x00" * 100, b""])
def test_refuses_foreign_files_and_leaves_them_alone(tmp_path, content):
    path = tmp_path / "notes.duckdb"
    path.write_bytes(content)
    with pytest.raises(TelemetryError, match="not a DuckDB database"):
        Store(path)
    assert path.read_bytes() == content
    with pytest.raises(TelemetryError, match="is a directory"):
        Store(tmp_path)


def test_refuses_a_duckdb_file_with_another_schema(tmp_path):
    path = tmp_path / "other.duckdb"
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE events (id INTEGER, what VARCHAR)")
    con.close()
    with pytest.raises(TelemetryError, match="table events has columns"):
        Store(path)


def test_samples_and_gpu_samples(tmp_path):
    n = FakeNvml([h200(0, load=1.0), h200(1)])
    with NvmlReader(n, clock_ns=lambda: 1_000) as r, Store(tmp_path / "s.duckdb") as st:
        batch = r.sample()
        added = st.add_gpu_samples(batch, host="node-a")
        assert added == sum(len(s.metrics()) for s in batch)
        st.add_samples([SampleRow(ts_ns=5, metric="DCGM_FI_DEV_POWER_USAGE", value=691.93, host="node-a",
                                  gpu_index=0, labels={"modelName": "NVIDIA H200"}),
                        SampleRow(ts_ns=6, metric="x", value=math.nan)])
        power = st.query("SELECT gpu_index, pci_bdf, value FROM samples WHERE metric = 'power_w' ORDER BY gpu_index")
        assert power == [{"gpu_index": 0, "pci_bdf": "0000:18:00.0", "value": 700.0},
                         {"gpu_index": 1, "pci_bdf": "0000:28:00.0", "value": 80.4}]
        (dcgm,) = st.query("SELECT labels_json FROM samples WHERE metric = ?", ["DCGM_FI_DEV_POWER_USAGE"])
        assert json.loads(dcgm["labels_json"]) == {"modelName": "NVIDIA H200"}
        tbl = st.query_arrow("SELECT value FROM samples WHERE metric = 'x'")
        assert tbl.num_rows == 1 and math.isnan(tbl.column("value")[0].as_py())


def test_bad_mode():
    with pytest.raises(ValueError, match="mode"):
        Store(":memory:", mode="w")


def test_dcgm_scrape_into_samples(tmp_path):
    from pathlib import Path

    from gpufield.telemetry import iter_samples, parse_text

    text = (Path(__file__).parent / "data" / "dcgm_exporter.prom").read_text()
    n_lines = sum(1 for line in text.split("\n") if line and not line.startswith("#"))
    with Store(tmp_path / "d.duckdb") as st:
        assert st.add_prom_samples(iter_samples(text.split("\n")), ts_ns=123) == n_lines
        rows = st.query("SELECT host, gpu_index, pci_bdf, gpu_uuid, value, labels_json FROM samples "
                        "WHERE metric = 'DCGM_FI_DEV_XID_ERRORS' ORDER BY gpu_index")
        assert [(r["host"], r["gpu_index"], r["pci_bdf"], r["value"]) for r in rows] == [
            ("node-a", 0, "0000:18:00.0", 0.0), ("node-a", 1, "0000:28:00.0", 79.0)]
        assert json.loads(rows[1]["labels_json"])["err_msg"] == "GPU has fallen off the bus"
        with pytest.raises(TelemetryError, match="no timestamp"):
            st.add_prom_samples(parse_text("a 1\n")["a"].samples)
