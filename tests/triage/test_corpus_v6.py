"""The seventh public set (tests/triage/corpus/public6): a BLIND test set, scored once by the lead.

Format and provenance only, and on purpose independent of the scorer and the engine: nothing here imports
``benchmarks/triage_eval_corpus.py`` or runs any triage code on a public6 file (the set must stay unseen).
Checked: every INDEX row parses under the label grammar (docs/triage-labels.md) with classes of the engine's
taxonomy (the constant list only), every case file exists and is named once, every row's split is ``test``,
the set has enough rows, clean rows and classes, each row has one source thread URL, URLs are unique and
shared with no other corpus (shared, public .. public5, faults, faults2), excluded threads are listed without
case files."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest
from _corpus_checks import CORPUS, check_files, check_no_shared_thread, check_one_unique_url_per_row, index_tables

from gpufield.triage.engine.model import TAXONOMY

P6 = CORPUS / "public6"
INDEX = P6 / "INDEX.md"
_CLASS = re.compile(r"`([A-Z][A-Z0-9_]+)`")
_PATH = re.compile(r"`([^`]+)`")
_BLAME = re.compile(r"(host=[^\s=]+|rank=\d+(,\d+)*|gpu=[^\s=]+|peer=[^\s=]+)")


@dataclass(frozen=True)
class _Row:
    id: str
    paths: tuple[Path, ...]
    classes: tuple[str, ...]
    clean: bool
    blame: str
    action: str
    split: str


@pytest.fixture(scope="module")
def tables():
    return index_tables(INDEX)


@pytest.fixture(scope="module")
def rows(tables):
    head, body, _ = tables
    col = {name: head.index(name) for name in ("#", "case file", "expected class", "blame", "action", "split")}
    out = []
    for cells in body:
        assert len(cells) == len(head), cells[0]
        label = cells[col["expected class"]]
        classes = tuple(_CLASS.findall(label))
        clean = not classes and re.fullmatch(r"`?clean`?(\s.*)?", label) is not None
        assert classes or clean, (cells[0], label)
        paths = tuple(P6 / p for p in _PATH.findall(cells[col["case file"]]))
        out.append(_Row(cells[col["#"]], paths, classes, clean, cells[col["blame"]], cells[col["action"]],
                        cells[col["split"]]))
    return out


def test_rows_follow_the_label_grammar(rows):
    assert len(rows) >= 30
    ids = [r.id for r in rows]
    assert len(ids) == len(set(ids)) and all(re.fullmatch(r"s\d{3}", i) for i in ids), ids
    assert sum(r.clean for r in rows) / len(rows) >= 0.25
    assert len({r.classes[0] for r in rows if not r.clean}) >= 12
    for r in rows:
        assert r.paths, r.id
        assert all(c in TAXONOMY for c in r.classes), (r.id, r.classes)
        assert r.blame == "-" or all(_BLAME.fullmatch(t) for t in r.blame.split()), (r.id, r.blame)
        assert not (r.clean and (r.blame != "-" or r.action != "-")), f"{r.id}: a clean row expects nothing"


def test_the_whole_set_is_blind(rows):
    assert {r.split for r in rows} == {"test"}
    assert not (P6 / "MISSES.md").exists()  # no per-row write-up of a blind set


def test_every_file_exists_and_is_named_by_exactly_one_row(rows):
    check_files(rows, P6)


def test_each_row_has_one_unique_source_url(tables, rows):
    check_one_unique_url_per_row(tables, rows)


def test_no_url_shared_with_the_other_corpora():
    subs = ("public", "public2", "public3", "public4", "public5", "faults", "faults2")
    check_no_shared_thread(INDEX, [CORPUS / s / "INDEX.md" for s in subs if (CORPUS / s / "INDEX.md").exists()])


def test_no_url_shared_with_the_shared_cases(shared_dir):
    check_no_shared_thread(INDEX, [shared_dir / "data" / "triage-cases" / "INDEX.md"])
