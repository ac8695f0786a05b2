"""The eighth public set (tests/triage/corpus/public7): a DEVELOPMENT set (every row ``dev``).

Format and provenance only, independent of the engine and the scorer: every INDEX row parses under the label
grammar (docs/triage-labels.md, read by ``gpufield.triage.labels.parse_index``), every row's split is ``dev``,
at least a quarter of the rows are clean, every case file exists and is named once, each row has one source
thread, and no thread is a thread of the other development/retired corpora or of the shared cases."""

from __future__ import annotations

from types import SimpleNamespace

from _corpus_checks import (
    CORPUS,
    check_files,
    check_no_shared_thread,
    check_one_unique_url_per_row,
    index_tables,
)

from gpufield.triage.labels import parse_index

P7 = CORPUS / "public7"
INDEX = P7 / "INDEX.md"


def test_rows_parse_all_dev_and_a_quarter_clean():
    rows = parse_index(INDEX)
    assert len(rows) >= 20
    assert {r.split for r in rows} == {"dev"}
    assert sum(r.clean for r in rows) / len(rows) >= 0.25


def test_files_and_one_unique_source_thread_per_row():
    rows = [SimpleNamespace(id=r.number, paths=tuple(P7 / p for p in r.paths)) for r in parse_index(INDEX)]
    check_files(rows, P7)
    check_one_unique_url_per_row(index_tables(INDEX), rows)


def test_no_thread_shared_with_the_other_corpora(shared_dir):
    subs = ("public", "public2", "public3", "public4", "public5", "faults", "faults2")
    others = [CORPUS / s / "INDEX.md" for s in subs if (CORPUS / s / "INDEX.md").exists()]
    check_no_shared_thread(INDEX, others + [shared_dir / "data" / "triage-cases" / "INDEX.md"])
