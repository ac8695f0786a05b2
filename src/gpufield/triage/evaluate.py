"""Corpus evaluation: run triage over a labelled directory and score it against its ``INDEX.md``.

The index is the markdown table of ``../shared/data/triage-cases/INDEX.md``: one row per case with a
backticked ``.log`` file name in the "Case file" column and the label in the "Expected class"
column. Label grammar and scoring rule:

- ``A`` - one class. Correct when the top incident's class is ``A``.
- ``A`` → ``B`` (or → free text) - a *chain*: the logs show ``A`` and the thread established
  ``B`` as its deeper cause (or consequence), i.e. both name the same incident at different depths.
  **Correct** when the top class is any class of the chain; **strict** only when it is ``A`` (the
  first backticked class, the "expected class").
- ``A`` ... and ``B`` - two incidents in one log, in no particular order. Correct (and strict) when
  the top class is one of them and *every* named class is reported as an established incident (the
  tool claims it and names what it blames); an unestablished hint of that class ("a compute
  straggler may be masked; wall time cannot name it") does not count. ``per_class`` counts such a
  case once, under ``A``, like every other case.
- ``(cascade)`` in the label: the case is a victim's view; the root must be reported as UNKNOWN
  (``established`` false). This is scored separately as the *root check*.

Only the label columns are read: nothing of a case's file name or content is used by the engine.
"""

from __future__ import annotations

import os
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from gpufield._files import read_text
from gpufield.errors import GpufieldError, InputError
from gpufield.triage.engine.model import TAXONOMY

_CLASS = re.compile(r"`([A-Z][A-Z0-9_]+)`")
_FILE = re.compile(r"`([^`]+\.log)`")


@dataclass(frozen=True, slots=True)
class LabelledCase:
    """One row of the index.

    Attributes:
        number: the case number as written (``"01"``).
        file: the case file name.
        classes: backticked classes of the label, in order.
        mode: ``"single"``, ``"chain"`` or ``"all"``.
        cascade: the label marks the case as a victim's view (root must be UNKNOWN).
        label: the raw label cell.
        line: line of the row in the index (for error messages).
    """

    number: str
    file: str
    classes: tuple[str, ...]
    mode: str
    cascade: bool
    label: str
    line: int

    @property
    def expected(self) -> str:
        """The first backticked class (the "expected class")."""
        return self.classes[0]


def _cells(row: str) -> list[str]:
    return [c.strip() for c in row.strip().strip("|").split("|")]


def parse_index(path: str | os.PathLike[str]) -> list[LabelledCase]:
    """Parse the case table of an ``INDEX.md``.

    Args:
        path: the index file.

    Returns:
        The labelled cases in table order.

    Raises:
        InputError: no case table, a label without a backticked class, or a class outside the
            triage.md 5.3 taxonomy (with the index line).
    """
    p = Path(path)
    try:
        lines = read_text(p, what="a Markdown case index").splitlines()
    except OSError as e:
        raise InputError(f"cannot read the index: {e.strerror}", path=str(p)) from e
    cases: list[LabelledCase] = []
    cols: dict[str, int] | None = None
    for n, line in enumerate(lines, start=1):
        if not line.lstrip().startswith("|"):
            cols = None if not cases else cols
            continue
        cells = _cells(line)
        if cols is None or any(c.lower() == "case file" for c in cells):
            if any(c.lower() == "case file" for c in cells):
                cols = {c.lower(): i for i, c in enumerate(cells)}
            continue
        if set("".join(cells)) <= set("-: "):
            continue
        fi, li = cols.get("case file"), cols.get("expected class")
        if fi is None or li is None or max(fi, li) >= len(cells):
            continue
        fm = _FILE.search(cells[fi])
        if not fm:
            continue
        label = cells[li]
        classes = tuple(_CLASS.findall(label))
        if not classes:
            raise InputError("expected at least one `CLASS` in the 'Expected class' column", path=str(p), line=n)
        bad = [c for c in classes if c not in TAXONOMY]
        if bad:
            raise InputError(f"class(es) {bad} are not in the triage.md 5.3 taxonomy", path=str(p), line=n)
        mode = "chain" if "→" in label or "->" in label else ("all" if len(classes) > 1 else "single")
        num = cells[cols.get("#", 0)] if cols.get("#") is not None else str(len(cases) + 1)
        cases.append(LabelledCase(num, fm.group(1), classes, mode, "(cascade)" in label, label, n))
    if not cases:
        raise InputError("no case table found (need a markdown table with 'Case file' and 'Expected class' "
                         "columns)", path=str(p))
    return cases


@dataclass(frozen=True, slots=True)
class CaseResult:
    """Outcome of one case.

    Attributes:
        case: the labelled case.
        predicted: top incident class (``"NONE"`` when no incident, ``"ERROR"`` when it failed).
        reported: every reported incident class, in order.
        correct: scored by the module rule (chain accepted).
        strict: top class equals the first expected class (for ``all`` labels: same as correct).
        root_ok: for ``(cascade)`` labels, whether the root was reported UNKNOWN; else None.
        confidence: confidence of the top incident (0 when none).
        root_cause: the top incident's root cause (class or UNKNOWN).
        error: the error message when the case could not be analysed.
        found: expected classes reported as established incidents (for ``all`` labels; the top
            class for the others when correct).
    """

    case: LabelledCase
    predicted: str
    reported: tuple[str, ...]
    correct: bool
    strict: bool
    root_ok: bool | None
    confidence: float
    root_cause: str
    error: str | None = None
    found: tuple[str, ...] = ()


@dataclass(slots=True)
class EvalReport:
    """All case results plus the aggregate scores.

    Attributes:
        directory: the evaluated directory.
        results: one per case, index order.
    """

    directory: str
    results: list[CaseResult] = field(default_factory=list)

    @property
    def accuracy(self) -> float:
        """Fraction correct under the chain-accepting rule."""
        return sum(r.correct for r in self.results) / max(len(self.results), 1)

    @property
    def strict_accuracy(self) -> float:
        """Fraction whose top class is exactly the first expected class."""
        return sum(r.strict for r in self.results) / max(len(self.results), 1)

    def per_class(self) -> dict[str, tuple[int, int]]:
        """``expected class -> (correct, total)``: every case counted once, under its first expected
        class, credited when the case is correct (so the totals add up to the number of cases; an
        ``A and B`` case is correct only when both were found, see :func:`score`)."""
        acc: dict[str, list[int]] = defaultdict(lambda: [0, 0])
        for r in self.results:
            acc[r.case.expected][0] += r.correct
            acc[r.case.expected][1] += 1
        return {k: (v[0], v[1]) for k, v in sorted(acc.items())}

    def confusion(self) -> Counter[tuple[str, str]]:
        """``(expected, predicted) -> count`` over the incorrect cases."""
        return Counter((r.case.expected, r.predicted) for r in self.results if not r.correct)

    def calibration(self) -> list[tuple[str, int, float, float]]:
        """Reliability bins: (bin label, cases, mean confidence, accuracy)."""
        bins = [(0.0, 0.5), (0.5, 0.75), (0.75, 1.01)]
        out = []
        for lo, hi in bins:
            rs = [r for r in self.results if lo <= r.confidence < hi]
            if rs:
                out.append((f"[{lo:.2f},{min(hi, 1):.2f})", len(rs), sum(r.confidence for r in rs) / len(rs),
                            sum(r.correct for r in rs) / len(rs)))
        return out

    def to_dict(self) -> dict:
        """JSON-serialisable summary and per-case rows."""
        return {
            "directory": self.directory, "cases": len(self.results), "accuracy": round(self.accuracy, 4),
            "strict_accuracy": round(self.strict_accuracy, 4),
            "root_check": {"checked": sum(r.root_ok is not None for r in self.results),
                           "ok": sum(bool(r.root_ok) for r in self.results)},
            "per_class": {k: {"correct": c, "total": t} for k, (c, t) in self.per_class().items()},
            "confusion": [{"expected": e, "predicted": p, "count": n} for (e, p), n in self.confusion().items()],
            "calibration": [{"bin": b, "cases": n, "mean_confidence": round(c, 3), "accuracy": round(a, 3)}
                            for b, n, c, a in self.calibration()],
            "results": [{"case": r.case.number, "file": r.case.file, "expected": list(r.case.classes),
                         "mode": r.case.mode, "predicted": r.predicted, "reported": list(r.reported),
                         "correct": r.correct, "strict": r.strict, "root_cause": r.root_cause,
                         "root_ok": r.root_ok, "confidence": r.confidence, "error": r.error,
                         "found": list(r.found)}
                        for r in self.results],
        }


def score(case: LabelledCase, reported: list[tuple[str, bool, float]]) -> CaseResult:
    """Score one case from its reported incidents ``[(class, established, confidence), ...]``."""
    top = reported[0][0] if reported else "NONE"
    classes = tuple(c for c, _, _ in reported)
    if case.mode == "all":
        found = tuple(c for c in dict.fromkeys(case.classes) if any(rc == c and est for rc, est, _ in reported))
        correct = top in case.classes and len(found) == len(set(case.classes))
        strict = correct
    else:
        correct = top in case.classes
        strict = top == case.expected
        found = (top,) if correct else ()
    root_ok = None if not case.cascade else bool(reported) and not reported[0][1]
    return CaseResult(case, top, classes, correct, strict, root_ok, reported[0][2] if reported else 0.0,
                      (top if reported[0][1] else "UNKNOWN") if reported else "NONE", found=found)


def evaluate(directory: str | os.PathLike[str], *, index: str | os.PathLike[str] | None = None) -> EvalReport:
    """Triage every case of a labelled corpus directory and score it (see module docstring).

    Args:
        directory: the corpus directory.
        index: the index file (default ``directory/INDEX.md``).

    Returns:
        An :class:`EvalReport`. A case that cannot be analysed counts as wrong, with its error.

    Raises:
        InputError: the directory or its index is missing or malformed.
    """
    from gpufield.triage.analyze import analyze

    d = Path(directory)
    if not d.is_dir():
        raise InputError("not a directory (expected a labelled corpus with INDEX.md)", path=str(d))
    idx = Path(index) if index is not None else d / "INDEX.md"
    if not idx.is_file():
        raise InputError("no INDEX.md in the corpus directory", path=str(idx))
    report = EvalReport(str(d))
    for case in parse_index(idx):
        try:
            res = analyze([str(d / case.file)])
        except (GpufieldError, OSError) as e:
            report.results.append(CaseResult(case, "ERROR", (), False, False,
                                             None if not case.cascade else False, 0.0, "ERROR", str(e)))
            continue
        report.results.append(score(case, [(i.cls, i.established, i.confidence) for i in res.incidents]))
    return report
