"""The fourth public set (tests/triage/corpus/public3): every INDEX row parses under the label grammar
(docs/triage-labels.md) with classes of the engine's taxonomy, every file it names exists and is named
once, the split column is complete, valid and class-stratified, each row has one source thread URL,
URLs are unique and shared with no other corpus (shared, public, public2, faults), excluded threads are
listed without case files, and DEV-MISSES.md discusses dev rows only. Nothing here runs the engine or
depends on what it answers."""

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

P3 = CORPUS / "public3"
INDEX = P3 / "INDEX.md"
EVAL = load_benchmark("triage_eval_corpus")
SPLIT = load_benchmark("triage_corpus_split")


@pytest.fixture(scope="module")
def rows():
    return EVAL.read_index(INDEX)


@pytest.fixture(scope="module")
def tables():
    return index_tables(INDEX)


def test_rows_parse_with_taxonomy_classes(rows):
    assert len(rows) >= 40
    assert sum(r.clean for r in rows) >= 6
    assert sum(not r.clean for r in rows) >= 30
    ids = [r.id for r in rows]
    assert len(ids) == len(set(ids)) and all(re.fullmatch(r"r\d{3}", i) for i in ids), ids
    for r in rows:
        assert all(c in TAXONOMY for c in r.classes), (r.id, r.classes)
        assert r.clean or r.classes, r.id
        assert not (r.clean and (r.blame or r.action)), f"{r.id}: a clean row expects nothing"


def test_every_file_exists_and_is_named_by_exactly_one_row(rows):
    check_files(rows, P3)


def test_split_complete_valid_and_stratified(rows):
    n, new, missing = SPLIT.assign(INDEX, 23, write=False)
    assert (n, new, missing) == (len(rows), 0, 0), "rows without a split"
    assert {r.split for r in rows} == {"dev", "retired-test"}  # the test half was retired on 2026-12-02
    per: dict[str, list[int]] = {}
    for r in rows:
        per.setdefault("clean" if r.clean else r.classes[0], [0, 0])[r.split == "retired-test"] += 1
    assert all(abs(a - b) <= 1 for a, b in per.values()), per


def test_each_row_has_one_unique_source_url(tables, rows):
    check_one_unique_url_per_row(tables, rows)


def test_no_url_shared_with_the_other_corpora():
    check_no_shared_thread(INDEX, [CORPUS / sub / "INDEX.md" for sub in ("public", "public2", "faults")])


def test_no_url_shared_with_the_shared_cases(shared_dir):
    check_no_shared_thread(INDEX, [shared_dir / "data" / "triage-cases" / "INDEX.md"])


def test_dev_misses_discusses_dev_rows_only(rows):
    split = {r.id: r.split for r in rows}
    named = set(re.findall(r"\br\d{3}\b", (P3 / "DEV-MISSES.md").read_text(encoding="utf-8")))
    assert named and named <= set(split), sorted(named - set(split))
    assert all(split[i] == "dev" for i in named), sorted(i for i in named if split[i] != "dev")


def test_thread_key():
    assert thread_key("https://github.com/NVIDIA/nccl/issues/473") == thread_key("https://github.com/nvidia/nccl/pull/473/")
    assert thread_key("https://github.com/a/b/issues/1#issuecomment-2") == "a/b#1"
    assert thread_key("https://forums.developer.nvidia.com/t/x/123/") == "forums.developer.nvidia.com/t/x/123"
