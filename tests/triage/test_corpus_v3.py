"""The fourth public set (tests/triage/corpus/public3): every INDEX row parses under the label grammar
(docs/triage-labels.md) with classes of the engine's taxonomy, every file it names exists and is named
once, the split column is complete, valid and class-stratified, each row has one source thread URL,
URLs are unique and shared with no other corpus (shared, public, public2, faults), excluded threads are
listed without case files, and DEV-MISSES.md discusses dev rows only. Nothing here runs the engine or
depends on what it answers."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

from gpufield.triage.engine.model import TAXONOMY

ROOT = Path(__file__).resolve().parents[2]
CORPUS = Path(__file__).resolve().parent / "corpus"
P3 = CORPUS / "public3"
INDEX = P3 / "INDEX.md"
_URL = re.compile(r"https?://[^\s|)`>]+")


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # dataclasses look the module up while the class is built
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


EVAL = _load("triage_eval_corpus")
SPLIT = _load("triage_corpus_split")


def _cells(line: str) -> list[str]:
    return [c.strip() for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]


def _tables(text: str) -> list[tuple[list[str], list[list[str]]]]:
    """Every markdown table of ``text`` as (lower-cased header, body rows)."""
    out: list[tuple[list[str], list[list[str]]]] = []
    head: list[str] | None = None
    for line in text.splitlines():
        if not line.lstrip().startswith("|"):
            head = None
            continue
        cells = _cells(line)
        if head is None:
            head = [c.lower() for c in cells]
            out.append((head, []))
        elif not set("".join(cells)) <= set("-: "):
            out[-1][1].append(cells)
    return out


def _thread(url: str) -> str:
    """One key per thread: GitHub issues/N and pull/N of a repo are the same thread (GitHub redirects)."""
    u = url.lower().rstrip(".,;:/").split("#")[0].split("?")[0]
    u = re.sub(r"^https?://(www\.)?", "", u)
    m = re.match(r"github\.com/([^/]+/[^/]+)/(?:issues|pull|discussions)/(\d+)", u)
    return f"{m.group(1)}#{m.group(2)}" if m else u


@pytest.fixture(scope="module")
def rows():
    return EVAL.read_index(INDEX)


@pytest.fixture(scope="module")
def tables():
    t = _tables(INDEX.read_text(encoding="utf-8"))
    cases = [body for head, body in t if "case file" in head and "expected class" in head]
    excluded = [body for head, body in t if "why excluded" in head]
    assert len(cases) == 1 and len(excluded) == 1, "one case table and one excluded table"
    case_head = next(head for head, _ in t if "case file" in head)
    return case_head, cases[0], excluded[0]


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
    named = [p.resolve() for r in rows for p in r.paths]
    assert len(named) == len(set(named)), "a case path is named twice"
    on_disk = {p.resolve() for p in P3.iterdir() if p.suffix != ".md"}
    assert on_disk == set(named), f"unindexed {sorted(on_disk - set(named))}"
    for r in rows:
        for p in r.paths:
            assert p.name.startswith(f"{r.id}-"), (r.id, p.name)
            body = p.read_text(encoding="utf-8")  # UTF-8 text, as posted
            assert body.strip() and body.endswith("\n"), p.name
            assert len(body) < 64 * 1024, p.name  # excerpts, not whole logs


def test_split_complete_valid_and_stratified(rows):
    n, new, missing = SPLIT.assign(INDEX, 23, write=False)
    assert (n, new, missing) == (len(rows), 0, 0), "rows without a split"
    assert {r.split for r in rows} == {"dev", "test"}
    per: dict[str, list[int]] = {}
    for r in rows:
        per.setdefault("clean" if r.clean else r.classes[0], [0, 0])[r.split == "test"] += 1
    assert all(abs(a - b) <= 1 for a, b in per.values()), per


def test_each_row_has_one_unique_source_url(tables, rows):
    head, body, excluded = tables
    src = head.index("source thread")
    assert len(body) == len(rows)
    keys = []
    for cells in body:
        urls = _URL.findall(cells[src])
        assert len(urls) == 1, cells[0]
        keys.append(_thread(urls[0]))
    for cells in excluded:
        assert re.fullmatch(r"x\d{2}", cells[0]) and not re.search(r"`[^`]+\.log`", " ".join(cells)), cells
        urls = _URL.findall(cells[1])
        assert len(urls) == 1 and cells[2].strip("- "), cells  # a URL and a reason
        keys.append(_thread(urls[0]))
    assert len(keys) == len(set(keys)), sorted(k for k in keys if keys.count(k) > 1)


def _keys_of(path: Path) -> set[str]:
    return {_thread(u) for u in _URL.findall(path.read_text(encoding="utf-8"))}


def _own_keys() -> set[str]:
    return _keys_of(INDEX)


def test_no_url_shared_with_the_other_corpora():
    taken: set[str] = set()
    for sub in ("public", "public2", "faults"):
        taken |= _keys_of(CORPUS / sub / "INDEX.md")
    assert len(taken) > 100  # the other indexes were read
    assert not _own_keys() & taken, sorted(_own_keys() & taken)


def test_no_url_shared_with_the_shared_cases(shared_dir):
    taken = _keys_of(shared_dir / "data" / "triage-cases" / "INDEX.md")
    assert taken
    assert not _own_keys() & taken, sorted(_own_keys() & taken)


def test_dev_misses_discusses_dev_rows_only(rows):
    split = {r.id: r.split for r in rows}
    named = set(re.findall(r"\br\d{3}\b", (P3 / "DEV-MISSES.md").read_text(encoding="utf-8")))
    assert named and named <= set(split), sorted(named - set(split))
    assert all(split[i] == "dev" for i in named), sorted(i for i in named if split[i] != "dev")


def test_thread_key():
    assert _thread("https://github.com/NVIDIA/nccl/issues/473") == _thread("https://github.com/nvidia/nccl/pull/473/")
    assert _thread("https://github.com/a/b/issues/1#issuecomment-2") == "a/b#1"
    assert _thread("https://forums.developer.nvidia.com/t/x/123/") == "forums.developer.nvidia.com/t/x/123"
