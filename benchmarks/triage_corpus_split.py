"""Assign the development / test split of the triage corpus v2 (``tests/triage/corpus``).

Rows whose ``split`` cell is already ``dev``, ``test`` or ``retired-test`` keep it (a split, once
published, never moves: rules were written against the dev rows). Every row without one is assigned, per index
file and per expected class (``clean`` is a class here), to the half that has fewer rows of that
class so far; ties are broken by a seeded coin. The order in which a class's new rows are
assigned is a seeded shuffle of their ids, so the result depends on the seed and the rows only.

Usage::

    .venv/bin/python benchmarks/triage_corpus_split.py [--seed 23] [--check] INDEX.md ...

``--check`` changes nothing and exits 1 when a row has no split (CI-friendly).

The one move this tool makes is the explicit *retirement* of a whole test half, after its blind score
was measured and recorded::

    .venv/bin/python benchmarks/triage_corpus_split.py --retire-test "2026-12-02: blind score at 82a9e8d ..." INDEX.md

rewrites every ``test`` cell of the index to ``retired-test`` (the rows become development data but stay
visibly apart: the scorer reports them as their own bucket) and writes the record line, which must carry
the date (``YYYY-MM-DD``), above the case table. ``dev`` rows are never touched; an index with no ``test``
row is refused; a retired row is stratified as the test row it was (docs/triage-labels.md).
"""

from __future__ import annotations

import argparse
import random
import re
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

_CLASS = re.compile(r"`([A-Z][A-Z0-9_]+)`")


def _cells(line: str) -> list[str]:
    return [c.strip() for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]


def expected(label: str) -> str:
    """The class a row is stratified by: its first backticked class, or ``clean``."""
    m = _CLASS.search(label)
    return m.group(1) if m else ("clean" if "clean" in label.lower() else "?")


def assign(path: Path, seed: int, write: bool = True) -> tuple[int, int, int]:
    """Fill the empty split cells of one index.

    Returns:
        (rows, newly assigned, rows still without a split when ``write`` is False).
    """
    lines = path.read_text(encoding="utf-8").splitlines()
    head: dict[str, int] | None = None
    rows: list[tuple[int, list[str], dict[str, int]]] = []  # each row with its own table's header
    for n, line in enumerate(lines):
        if not line.lstrip().startswith("|"):
            head = None
            continue
        cells = _cells(line)
        low = [c.lower() for c in cells]
        if "case file" in low and "expected class" in low:
            head = {c: i for i, c in enumerate(low)}
            continue
        if head is None or set("".join(cells)) <= set("-: "):
            continue
        rows.append((n, cells, head))
    if not rows:
        raise SystemExit(f"{path}: no case table")
    count: dict[str, dict[str, int]] = defaultdict(lambda: {"dev": 0, "test": 0})
    todo: dict[str, list[tuple[int, list[str], dict[str, int]]]] = defaultdict(list)
    for n, cells, h in rows:
        cls = expected(cells[h["expected class"]])
        if cells[h["split"]] in ("dev", "test", "retired-test"):  # a retired row was a test row
            count[cls][cells[h["split"]].removeprefix("retired-")] += 1
        else:
            todo[cls].append((n, cells, h))
    assigned = 0
    for cls in sorted(todo):
        rng = random.Random(f"{seed}:{path.parent.name}:{cls}")
        group = sorted(todo[cls], key=lambda r: r[1][r[2].get("#", r[2]["case file"])])
        rng.shuffle(group)
        for n, cells, h in group:
            si = h["split"]
            c = count[cls]
            half = ("dev" if rng.random() < 0.5 else "test") if c["dev"] == c["test"] else \
                ("dev" if c["dev"] < c["test"] else "test")
            c[half] += 1
            cells[si] = half
            lines[n] = "| " + " | ".join(cells) + " |"
            assigned += 1
    if write and assigned:
        _write(path, lines)
    return len(rows), assigned, 0 if write else assigned


def _write(path: Path, lines: list[str]) -> None:
    """Write ``lines`` to a unique temp file beside ``path``, then rename it over ``path``."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with open(fd, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    Path(tmp).replace(path)


def retire_test(path: Path, record: str) -> int:
    """Retire the whole test half of one index: every ``test`` split cell becomes ``retired-test``.

    Args:
        path: an INDEX.md with a ``split`` column.
        record: one line saying when and with what blind score the half was retired; must contain a date
            ``YYYY-MM-DD``. Written above the first case table as ``Retired test half: <record>``.

    Returns:
        The number of rows retired.

    Raises:
        SystemExit: the record has no date or spans lines, or the index has no ``test`` row (nothing to retire;
            ``dev`` rows are never moved by this tool).
    """
    if "\n" in record or not re.search(r"\b\d{4}-\d{2}-\d{2}\b", record):
        raise SystemExit(f"{path}: the retirement record must be one line with a YYYY-MM-DD date, got {record!r}")
    lines = path.read_text(encoding="utf-8").splitlines()
    head: dict[str, int] | None = None
    first_head: int | None = None
    retired = 0
    for n, line in enumerate(lines):
        if not line.lstrip().startswith("|"):
            head = None
            continue
        cells = _cells(line)
        low = [c.lower() for c in cells]
        if "case file" in low and "expected class" in low:
            head = {c: i for i, c in enumerate(low)}
            first_head = n if first_head is None else first_head
            if "split" not in head:
                raise SystemExit(f"{path}:{n + 1}: case table without a split column")
            continue
        if head is None or set("".join(cells)) <= set("-: "):
            continue
        if cells[head["split"]] == "test":
            cells[head["split"]] = "retired-test"
            lines[n] = "| " + " | ".join(cells) + " |"
            retired += 1
    if not retired or first_head is None:
        raise SystemExit(f"{path}: no test row to retire")
    lines[first_head:first_head] = [f"Retired test half: {record}", ""]
    _write(path, lines)
    return retired


def main(argv: list[str] | None = None) -> int:
    """Command-line entry (see the module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("index", nargs="+", type=Path)
    ap.add_argument("--seed", type=int, default=23)
    ap.add_argument("--check", action="store_true", help="change nothing; exit 1 if a row has no split")
    ap.add_argument("--retire-test", metavar="RECORD", default=None,
                    help="retire every test row of each index (test -> retired-test) with this dated record line")
    a = ap.parse_args(argv)
    if a.retire_test is not None:
        if a.check:
            ap.error("--retire-test changes the index; it does not go with --check")
        for p in a.index:
            print(f"{p}: {retire_test(p, a.retire_test)} test rows retired")
        return 0
    missing = 0
    for p in a.index:
        n, new, miss = assign(p, a.seed, write=not a.check)
        missing += miss
        print(f"{p}: {n} rows, {new} {'without a split' if a.check else 'newly assigned'}")
    return 1 if a.check and missing else 0


if __name__ == "__main__":
    sys.exit(main())
