"""The sixth public set (tests/triage/corpus/public5, split dev/test): every INDEX row parses under the label
grammar (docs/triage-labels.md) with classes of the engine's taxonomy, every file it names exists and is named
once, every row has a split and both halves are populated, each row has one source thread URL, URLs are unique
and shared with no other corpus (shared, public, public2, public3, public4, faults), excluded threads are
listed without case files. Nothing here runs the engine or depends on what it answers."""

from __future__ import annotations

import re

import pytest
from _corpus_checks import (
    CORPUS,
    check_files,
    check_no_shared_thread,
    check_one_unique_url_per_row,
    index_tables,
    load_benchmark,
)

from gpufield.triage.engine.model import TAXONOMY

P5 = CORPUS / "public5"
INDEX = P5 / "INDEX.md"
EVAL = load_benchmark("triage_eval_corpus")


@pytest.fixture(scope="module")
def rows():
    return EVAL.read_index(INDEX)


@pytest.fixture(scope="module")
def tables():
    return index_tables(INDEX)


def test_rows_parse_with_taxonomy_classes(rows):
    assert len(rows) >= 30
    assert sum(r.clean for r in rows) >= 5
    assert len({r.classes[0] for r in rows if not r.clean}) >= 10
    ids = [r.id for r in rows]
    assert len(ids) == len(set(ids)) and all(re.fullmatch(r"p\d{3}", i) for i in ids), ids
    for r in rows:
        assert all(c in TAXONOMY for c in r.classes), (r.id, r.classes)
        assert r.clean or r.classes, r.id
        assert not (r.clean and (r.blame or r.action)), f"{r.id}: a clean row expects nothing"


def test_every_file_exists_and_is_named_by_exactly_one_row(rows):
    check_files(rows, P5)


def test_split_is_assigned_and_both_halves_populated(rows):
    halves = [r.split for r in rows]
    assert set(halves) == {"dev", "test"}
    assert min(halves.count("dev"), halves.count("test")) >= 12
    split = load_benchmark("triage_corpus_split")
    assert split.assign(INDEX, 23, write=False)[2] == 0  # no row waits for a split


def test_each_row_has_one_unique_source_url(tables, rows):
    check_one_unique_url_per_row(tables, rows)


def test_no_url_shared_with_the_other_corpora():
    check_no_shared_thread(INDEX, [CORPUS / s / "INDEX.md" for s in ("public", "public2", "public3", "public4", "faults")])


def test_no_url_shared_with_the_shared_cases(shared_dir):
    check_no_shared_thread(INDEX, [shared_dir / "data" / "triage-cases" / "INDEX.md"])


def test_misses_names_dev_rows_of_this_set_only(rows):
    dev = {r.id for r in rows if r.split == "dev"}
    named = set(re.findall(r"\bp\d{3}\b", (P5 / "MISSES.md").read_text(encoding="utf-8")))
    assert named and named <= dev, sorted(named - dev)  # test-half rows are reported as aggregates only
