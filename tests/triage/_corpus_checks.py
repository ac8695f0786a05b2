"""Checks shared by the consistency tests of the public corpora (tests/triage/test_corpus_v3.py, _v4.py): reading
an INDEX.md's tables, one key per source thread, and the assertions every corpus must pass. Nothing here runs the
engine or depends on what it answers."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CORPUS = Path(__file__).resolve().parent / "corpus"
URL = re.compile(r"https?://[^\s|)`>]+")


def load_benchmark(name: str):
    """The module ``benchmarks/<name>.py`` (the scorer and the split tool live there, not in the package)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # dataclasses look the module up while the class is built
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


def _cells(line: str) -> list[str]:
    return [c.strip() for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]


def markdown_tables(text: str) -> list[tuple[list[str], list[list[str]]]]:
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


def index_tables(index: Path) -> tuple[list[str], list[list[str]], list[list[str]]]:
    """(case-table header, case rows, excluded-thread rows) of a corpus INDEX.md: exactly one of each table."""
    t = markdown_tables(index.read_text(encoding="utf-8"))
    cases = [body for head, body in t if "case file" in head and "expected class" in head]
    excluded = [body for head, body in t if "why excluded" in head]
    assert len(cases) == 1 and len(excluded) == 1, "one case table and one excluded table"
    return next(head for head, _ in t if "case file" in head), cases[0], excluded[0]


def thread_key(url: str) -> str:
    """One key per thread: GitHub issues/N and pull/N of a repo are the same thread (GitHub redirects)."""
    u = url.lower().rstrip(".,;:/").split("#")[0].split("?")[0]
    u = re.sub(r"^https?://(www\.)?", "", u)
    m = re.match(r"github\.com/([^/]+/[^/]+)/(?:issues|pull|discussions)/(\d+)", u)
    return f"{m.group(1)}#{m.group(2)}" if m else u


def keys_of(path: Path) -> set[str]:
    """The thread keys of every URL in a file."""
    return {thread_key(u) for u in URL.findall(path.read_text(encoding="utf-8"))}


def check_files(rows, folder: Path) -> None:
    """Every file the rows name exists, is named once, starts with its row id and is a UTF-8 excerpt; no
    unindexed file lies in ``folder``."""
    named = [p.resolve() for r in rows for p in r.paths]
    assert len(named) == len(set(named)), "a case path is named twice"
    on_disk = {p.resolve() for p in folder.iterdir() if p.suffix != ".md"}
    assert on_disk == set(named), f"unindexed {sorted(on_disk - set(named))}"
    for r in rows:
        for p in r.paths:
            assert p.name.startswith(f"{r.id}-"), (r.id, p.name)
            body = p.read_text(encoding="utf-8")  # UTF-8 text, as posted
            assert body.strip() and body.endswith("\n"), p.name
            assert len(body) < 64 * 1024, p.name  # excerpts, not whole logs


def check_one_unique_url_per_row(tables, rows) -> None:
    """Each case row and each excluded thread has exactly one source URL; no thread appears twice."""
    head, body, excluded = tables
    src = head.index("source thread")
    assert len(body) == len(rows)
    keys = []
    for cells in body:
        urls = URL.findall(cells[src])
        assert len(urls) == 1, cells[0]
        keys.append(thread_key(urls[0]))
    for cells in excluded:
        assert re.fullmatch(r"x\d{2}", cells[0]) and not re.search(r"`[^`]+\.log`", " ".join(cells)), cells
        urls = URL.findall(cells[1])
        assert len(urls) == 1 and cells[2].strip("- "), cells  # a URL and a reason
        keys.append(thread_key(urls[0]))
    assert len(keys) == len(set(keys)), sorted(k for k in keys if keys.count(k) > 1)


def check_no_shared_thread(index: Path, others: list[Path]) -> None:
    """No thread of ``index`` is a thread of the ``others`` INDEX files (which must name threads at all)."""
    taken: set[str] = set()
    for other in others:
        taken |= keys_of(other)
    assert taken, "the other indexes were read"
    own = keys_of(index)
    assert not own & taken, sorted(own & taken)
