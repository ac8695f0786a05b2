"""The ``INDEX.md`` label grammar of a labelled triage corpus (``docs/triage-labels.md``).

A corpus index is markdown; every table whose header has ``Case file`` and ``Expected class`` cells
is a *case table* and every data row of it must parse, else :class:`~gpufield.errors.InputError`
names the index file and line (no row is dropped silently). Optional columns: ``blame``
(``host=node-b rank=3 gpu=0000:3b:00.0 peer=10.0.0.2:5000``), ``action`` (a keyword set, ``!`` negates)
and ``split`` (``dev`` / ``test`` / ``retired-test``); the expected-class cell ``clean`` marks a run that must give no
incident. Matching of blame and action against an incident lives here too, so the grammar and its
meaning are in one module.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from gpufield._files import read_text
from gpufield.errors import InputError
from gpufield.triage.engine.model import TAXONOMY

_CLASS = re.compile(r"`([A-Z][A-Z0-9_]+)`")
_TICKED = re.compile(r"`([^`]+)`")
_CLEAN = re.compile(r"^\s*`?clean`?(?:\s|$|\()", re.IGNORECASE)
BLAME_KEYS = ("host", "rank", "gpu", "peer")
ACTION_KINDS = frozenset({"RETRY", "EXCLUDE_NODE", "RESET_GPU", "FIX_CONFIG", "STOP", "COLLECT"})
#: ``retired-test``: a former test row whose blind score is on record (benchmarks/triage_RESULTS.md) and that
#: has since become development data; it is reported as its own bucket, never merged into ``test`` or ``dev``
SPLITS = ("dev", "test", "retired-test")


@dataclass(frozen=True, slots=True)
class LabelledCase:
    """One row of a case table.

    Attributes:
        number: the case number or id as written (``"01"``), else the row's ordinal.
        file: the first case path (relative to the index's directory).
        classes: backticked classes of the label, in order (empty for a clean row).
        mode: ``"single"``, ``"chain"``, ``"all"`` or ``"clean"``.
        cascade: the label marks the case as a victim's view (root must be UNKNOWN).
        label: the raw label cell.
        line: line of the row in the index (for error messages).
        paths: every case path of the row (a file or a directory; analysed together as one job).
        blame: ``key -> accepted values`` (keys of :data:`BLAME_KEYS`); empty = no blame label.
        action: ``(token, negated)`` pairs; empty = no action label.
        split: ``"dev"``, ``"test"``, ``"retired-test"`` or None.
    """

    number: str
    file: str
    classes: tuple[str, ...]
    mode: str
    cascade: bool
    label: str
    line: int
    paths: tuple[str, ...] = ()
    blame: tuple[tuple[str, tuple[str, ...]], ...] = ()
    action: tuple[tuple[str, bool], ...] = ()
    split: str | None = None

    @property
    def expected(self) -> str:
        """The first backticked class (the "expected class"); ``"NONE"`` for a clean row."""
        return self.classes[0] if self.classes else "NONE"

    @property
    def clean(self) -> bool:
        """True for a clean-run row (no incident expected)."""
        return self.mode == "clean"


def split_cells(row: str) -> list[str]:
    """Cells of a markdown table row; a ``|`` inside a backtick span or escaped as ``\\|`` stays in its cell."""
    body = row.strip()
    if body.startswith("|"):
        body = body[1:]
    if body.endswith("|") and not body.endswith("\\|"):
        body = body[:-1]
    cells, cur, tick, i = [], [], False, 0
    while i < len(body):
        c = body[i]
        if c == "\\" and i + 1 < len(body) and body[i + 1] == "|":
            cur.append("|")
            i += 2
            continue
        if c == "`":
            tick = not tick
        if c == "|" and not tick:
            cells.append("".join(cur).strip())
            cur = []
        else:
            cur.append(c)
        i += 1
    cells.append("".join(cur).strip())
    return cells


def _empty(cell: str) -> bool:
    return cell.strip() in ("", "-", "—")


def parse_blame(cell: str, *, path: str, line: int) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """``host=node-b rank=1,3`` -> ``(("host", ("node-b",)), ("rank", ("1", "3")))``.

    Raises:
        InputError: a token is not ``key=value`` with a key of :data:`BLAME_KEYS`, or a rank is not an integer.
    """
    if _empty(cell):
        return ()
    out = []
    for tok in cell.replace("`", " ").split():
        key, sep, val = tok.partition("=")
        if not sep or key not in BLAME_KEYS or not val:
            raise InputError(f"blame token {tok!r}: expected key=value with key in {BLAME_KEYS}", path=path, line=line)
        vals = tuple(v for v in val.split(",") if v)
        if key == "rank" and not all(v.isdigit() for v in vals):
            raise InputError(f"blame rank {val!r} is not an integer (or a comma list)", path=path, line=line)
        out.append((key, vals))
    return tuple(out)


def parse_action(cell: str) -> tuple[tuple[str, bool], ...]:
    """Keyword set of an ``action`` cell: backticked tokens keep their spaces; ``!`` negates."""
    if _empty(cell):
        return ()
    toks = []
    rest = _TICKED.sub(lambda m: toks.append(m.group(1)) or " ", cell)
    toks += [t for t in re.split(r"[\s,]+", rest) if t]
    out = []
    for t in toks:
        neg = t.startswith("!")
        t = t[1:] if neg else t
        if t:
            out.append((t, neg))
    return tuple(out)


def parse_index(path: str | os.PathLike[str]) -> list[LabelledCase]:
    """Parse every case table of an ``INDEX.md`` (grammar: ``docs/triage-labels.md``).

    Args:
        path: the index file.

    Returns:
        The labelled cases in table order.

    Raises:
        InputError: no case table; or a row of a case table that cannot be read (cell count,
            no backticked case path, no class, a class outside the taxonomy, a bad ``blame`` or
            ``split`` cell), with the index line.
    """
    p = Path(path)
    try:
        lines = read_text(p, what="a Markdown case index").splitlines()
    except OSError as e:
        raise InputError(f"cannot read the index: {e.strerror}", path=str(p)) from e
    cases: list[LabelledCase] = []
    cols: dict[str, int] | None = None
    width = 0
    for n, line in enumerate(lines, start=1):
        if not line.lstrip().startswith("|"):
            cols = None
            continue
        cells = split_cells(line)
        low = [c.lower() for c in cells]
        if cols is None:
            if "case file" in low and "expected class" in low:
                cols, width = {c: i for i, c in enumerate(low)}, len(cells)
            continue
        if set("".join(cells)) <= set("-: "):
            continue
        cases.append(_row(cells, cols, width, str(p), n, len(cases) + 1))
    if not cases:
        raise InputError("no case table found (need a markdown table with 'Case file' and 'Expected class' "
                         "columns)", path=str(p))
    return cases


def _row(cells: list[str], cols: dict[str, int], width: int, path: str, n: int, ordinal: int) -> LabelledCase:
    if len(cells) != width:
        raise InputError(f"row has {len(cells)} cells, the table header has {width} (escape a '|' in a cell as "
                         "'\\|' or put it in backticks)", path=path, line=n)
    paths = tuple(t for t in _TICKED.findall(cells[cols["case file"]]) if t.strip())
    if not paths:
        raise InputError("no backticked case path in the 'Case file' column", path=path, line=n)
    label = cells[cols["expected class"]]
    classes = tuple(_CLASS.findall(label))
    if _CLEAN.match(label) and not classes:
        mode = "clean"
    elif not classes:
        raise InputError("expected at least one `CLASS` (or the word clean) in the 'Expected class' column",
                         path=path, line=n)
    else:
        bad = [c for c in classes if c not in TAXONOMY]
        if bad:
            raise InputError(f"class(es) {bad} are not in the triage.md 5.3 taxonomy", path=path, line=n)
        mode = "chain" if "→" in label or "->" in label else ("all" if len(classes) > 1 else "single")
    split = None
    if "split" in cols:
        raw = cells[cols["split"]].strip().strip("`").lower()
        if raw not in ("", "-") and raw not in SPLITS:
            raise InputError(f"split {raw!r}: expected one of {SPLITS}", path=path, line=n)
        split = raw if raw in SPLITS else None
    blame = parse_blame(cells[cols["blame"]], path=path, line=n) if "blame" in cols else ()
    action = parse_action(cells[cols["action"]]) if "action" in cols else ()
    num = cells[cols["#"]] if "#" in cols and cells[cols["#"]] else str(ordinal)
    return LabelledCase(num, paths[0], classes, mode, "(cascade)" in label, label, n, paths, blame, action, split)


def norm_gpu(v: object) -> str | None:
    """``00000000:3B:00.0`` / ``0000:3b:00`` / ``3b:00.0`` -> ``3b:00.0``; ``GPU 3`` -> ``3``; UUIDs lower-cased."""
    if v is None:
        return None
    s = str(v).strip().lower()
    m = re.fullmatch(r"(?:[0-9a-f]{4,8}:)?([0-9a-f]{2}:[0-9a-f]{2})(?:\.([0-7]))?", s)
    if m:
        return f"{m.group(1)}.{m.group(2) or '0'}"
    m = re.fullmatch(r"(?:gpu\s*|cuda:)?(\d+)", s)
    return m.group(1) if m else s


def _host_eq(want: str, got: object) -> bool:
    if got is None:
        return False
    g = str(got).lower()
    w = want.lower()
    return g == w or g.split(".")[0] == w or w.split(".")[0] == g


def _peer_eq(want: str, got: object) -> bool:
    if got in (None, "", "-"):
        return False
    g = str(got)
    if want in g:
        return True
    return ":" not in want and want == re.sub(r"[:<]\d+>?$", "", g)


def blame_matches(case: LabelledCase, entities: dict[str, object]) -> dict[str, bool]:
    """Per labelled key, whether the incident's entity (``host rank gpu peer``) is one of the accepted values."""
    out = {}
    for key, vals in case.blame:
        got = entities.get(key)
        if key == "host":
            ok = any(_host_eq(v, got) for v in vals)
        elif key == "rank":
            ok = got is not None and str(got) in vals
        elif key == "gpu":
            ok = norm_gpu(got) is not None and norm_gpu(got) in {norm_gpu(v) for v in vals}
        else:
            ok = any(_peer_eq(v, got) for v in vals)
        out[key] = ok
    return out


def action_matches(case: LabelledCase, kind: str, established: bool, text: str) -> bool | None:
    """Whether every action token holds for an incident (None when the row has no action label)."""
    if not case.action:
        return None
    low = text.lower()
    for tok, neg in case.action:
        up = tok.upper()
        if up in ACTION_KINDS:
            hit = (not established) if up == "COLLECT" else kind == up
        else:
            hit = tok.lower() in low
        if hit == neg:
            return False
    return True
