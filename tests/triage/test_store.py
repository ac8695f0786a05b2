"""The triage DuckDB store: run ids, every table filled from the result, --force replaces a run's rows,
and every refused file (foreign, truncated, locked, not DuckDB, read-only) left untouched with one line."""

from __future__ import annotations

import csv
import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpufield.cli import main
from gpufield.errors import InputError
from gpufield.triage import analyze
from gpufield.triage.report.json_export import to_dict

duckdb = pytest.importorskip("duckdb")
from gpufield.triage.store import TABLES, check_store, open_store, store_result  # noqa: E402

SMI_CSV = Path(__file__).parent / "telemetry_data" / "node-b" / "smi-query.csv"


@pytest.fixture(scope="module")
def example():
    return analyze()


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def _counts(db: Path) -> dict[str, int]:
    con = open_store(db)
    try:
        return {t: con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in TABLES}
    finally:
        con.close()


def test_every_table_holds_the_run(example, tmp_path):
    db = tmp_path / "t.duckdb"
    rid = store_result(example, db)
    assert rid == example.input_id and len(rid) == 16
    assert [p.name for p in tmp_path.iterdir()] == ["t.duckdb"]  # built beside it and renamed: no temp, no WAL
    con = open_store(db)
    try:
        assert con.execute("SELECT run_id, verdict_class, n_events FROM runs").fetchall() == [
            (rid, "GPU_FELL_OFF_BUS", len(example.events))]
        assert con.execute("SELECT count(*) FROM events WHERE run_id = ?", [rid]).fetchone()[0] == len(example.events)
        inc = con.execute("SELECT class, host, gpu, rank FROM incidents WHERE incident_no = 1").fetchone()
        assert inc == ("GPU_FELL_OFF_BUS", "node-b", "0000:ab:00.0", 13)
        # evidence rows are the JSON export's evidence, file:line for file:line
        ev = con.execute("SELECT file, line, role, count FROM evidence WHERE incident_no = 1 ORDER BY evidence_no").fetchall()
        js = to_dict(example)["incidents"][0]["evidence"]
        assert ev == [(x["file"], x["line"], x["role"], x["count"]) for x in js]
        off = dict(con.execute("SELECT host, offset_s FROM clock_offsets").fetchall())
        assert off == pytest.approx(example.clock_offsets_s) and off["node-b"] == pytest.approx(40.0, abs=0.5)
        # corrected time of node-b events = raw time minus its offset
        raw, cor = con.execute("SELECT ts_ns, ts_corrected_ns FROM events WHERE kind = 'xid'").fetchone()
        assert (raw - cor) / 1e9 == pytest.approx(off["node-b"], abs=1e-3)
    finally:
        con.close()


def test_same_run_refused_then_replaced_with_force_other_run_added(example, tmp_path):
    db = tmp_path / "t.duckdb"
    store_result(example, db)
    once = _counts(db)
    with pytest.raises(InputError, match="already stored; refusing to overwrite"):
        store_result(example, db)
    assert _counts(db) == once
    store_result(example, db, force=True)
    assert _counts(db) == once  # replaced, not appended
    store_result(example, db, run_id="second")
    twice = _counts(db)
    assert all(twice[t] == 2 * once[t] for t in TABLES)


def test_cli_db_with_telemetry_and_run_id(capsys, tmp_path):
    db = tmp_path / "cli.duckdb"
    rc = main(["triage", "--quiet", "--db", str(db), "--run-id", "job-42", "--telemetry", str(SMI_CSV)])
    assert rc == 0, capsys.readouterr().err
    con = open_store(db)
    try:
        assert con.execute("SELECT run_id FROM runs").fetchall() == [("job-42",)]
        rows = con.execute("SELECT metric, count(*), max(value) FROM samples GROUP BY 1 ORDER BY 1").fetchall()
    finally:
        con.close()
    # expected from the CSV itself, read with the csv module: "687.12 W" cells, "[N/A]" skipped
    with open(SMI_CSV, newline="") as fh:
        table = list(csv.DictReader(fh, skipinitialspace=True))
    power = [float(r["power.draw [W]"].split()[0]) for r in table if r["power.draw [W]"].endswith(" W")]
    sm = [float(r["clocks.sm [MHz]"].split()[0]) * 1e6 for r in table if r["clocks.sm [MHz]"].endswith(" MHz")]
    got = {m: (n, v) for m, n, v in rows}
    assert got["power_w"] == (len(power), pytest.approx(max(power)))
    assert got["sm_clock_hz"] == (len(sm), pytest.approx(max(sm)))
    assert len(power) == 10  # 12 rows, two of them [N/A]


def test_foreign_duckdb_is_refused_and_left_untouched(example, tmp_path):
    db = tmp_path / "theirs.duckdb"
    con = duckdb.connect(str(db))
    con.execute("CREATE TABLE events (x INTEGER)")
    con.execute("INSERT INTO events VALUES (1)")
    con.close()
    before = _sha(db)
    with pytest.raises(InputError, match="did not make") as ei:
        store_result(example, db)
    assert str(db) in str(ei.value) and _sha(db) == before


@pytest.mark.parametrize("content", [b"", b"not a database at all\n" * 10])
def test_a_file_that_is_not_duckdb_is_refused(example, tmp_path, content):
    db = tmp_path / "x.duckdb"
    db.write_bytes(content)
    with pytest.raises(InputError, match="not a DuckDB database"):
        store_result(example, db)
    assert db.read_bytes() == content


def test_truncated_store_is_one_line_exit_2(capsys, example, tmp_path):
    db = tmp_path / "t.duckdb"
    store_result(example, db)
    data = db.read_bytes()
    db.write_bytes(data[: len(data) // 3])
    cut = _sha(db)
    rc = main(["triage", "--quiet", "--db", str(db), "--run-id", "other"])
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1 and str(db) in err
    assert _sha(db) == cut


def test_store_locked_by_another_process(capsys, example, tmp_path):
    db = tmp_path / "t.duckdb"
    store_result(example, db)
    holder = subprocess.Popen([sys.executable, "-c", "import duckdb, sys; c = duckdb.connect(sys.argv[1]); "
                               "print('open', flush=True); sys.stdin.read()", str(db)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "open"
        rc = main(["triage", "--quiet", "--db", str(db), "--run-id", "other"])
        err = capsys.readouterr().err
    finally:
        holder.communicate("", timeout=30)
    assert rc == 2 and "another process" in err and str(db) in err and "Traceback" not in err


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
def test_db_in_a_read_only_directory(capsys, tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        rc = main(["triage", "--quiet", "--db", str(ro / "s.duckdb")])
    finally:
        ro.chmod(0o700)
    err = capsys.readouterr().err
    assert rc == 2 and "not writable" in err and str(ro) in err


def test_read_only_directory_check_names_it(tmp_path, monkeypatch):
    # as root the real check above cannot fail; the decision itself is os.access on the directory
    monkeypatch.setattr(os, "access", lambda p, mode: Path(p) != tmp_path)
    with pytest.raises(InputError, match="directory is not writable") as ei:
        check_store(tmp_path / "s.duckdb")
    assert str(tmp_path) in str(ei.value)


def test_bad_telemetry_file_is_one_line_naming_it(capsys, tmp_path):
    bad = tmp_path / "smi.csv"
    bad.write_text("timestamp, index, power.draw [W]\n2026/13/45 99:00:00.000, 0, 300 W\n")
    rc = main(["triage", "--quiet", "--telemetry", str(bad)])
    err = capsys.readouterr().err
    assert rc == 2 and f"{bad}:2" in err and "YYYY/MM/DD" in err and "Traceback" not in err
