"""The fifth public set (tests/triage/corpus/public4, development rows only): every INDEX row parses under
the label grammar (docs/triage-labels.md) with classes of the engine's taxonomy, every file it names exists
and is named once, every row is a dev row, each row has one source thread URL, URLs are unique and shared
with no other corpus (shared, public, public2, public3, faults), excluded threads are listed without case
files, and MISSES.md names rows of this set only. Nothing here runs the engine or depends on what it
answers."""

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
    thread_key,
)

from gpufield.triage.engine.model import TAXONOMY

P4 = CORPUS / "public4"
INDEX = P4 / "INDEX.md"
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
    assert len({r.classes[0] for r in rows if not r.clean}) >= 10  # many classes, not one
    ids = [r.id for r in rows]
    assert len(ids) == len(set(ids)) and all(re.fullmatch(r"p\d{3}", i) for i in ids), ids
    for r in rows:
        assert all(c in TAXONOMY for c in r.classes), (r.id, r.classes)
        assert r.clean or r.classes, r.id
        assert not (r.clean and (r.blame or r.action)), f"{r.id}: a clean row expects nothing"


def test_every_file_exists_and_is_named_by_exactly_one_row(rows):
    check_files(rows, P4)


def test_every_row_is_a_dev_row(rows):
    assert {r.split for r in rows} == {"dev"}  # a set to write rules against, never a measurement


def test_each_row_has_one_unique_source_url(tables, rows):
    check_one_unique_url_per_row(tables, rows)


def test_no_url_shared_with_the_other_corpora():
    check_no_shared_thread(INDEX, [CORPUS / sub / "INDEX.md" for sub in ("public", "public2", "public3", "faults")])


def test_no_url_shared_with_the_shared_cases(shared_dir):
    check_no_shared_thread(INDEX, [shared_dir / "data" / "triage-cases" / "INDEX.md"])


def test_misses_names_rows_of_this_set_only(rows):
    ids = {r.id for r in rows}
    named = set(re.findall(r"\bp\d{3}\b", (P4 / "MISSES.md").read_text(encoding="utf-8")))
    assert named and named <= ids, sorted(named - ids)


def test_thread_key():
    assert thread_key("https://github.com/NVIDIA/nccl/issues/473") == thread_key("https://github.com/nvidia/nccl/pull/473/")
    assert thread_key("https://github.com/a/b/issues/1#issuecomment-2") == "a/b#1"
    assert thread_key("https://forums.developer.nvidia.com/t/x/123/") == "forums.developer.nvidia.com/t/x/123"
