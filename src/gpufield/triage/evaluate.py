"""Corpus evaluation: run triage over a labelled directory and score it against its ``INDEX.md``.

The index grammar (case tables, optional ``blame`` / ``action`` / ``split`` columns, ``clean``
rows) is ``docs/triage-labels.md``, parsed by :mod:`gpufield.triage.labels`. Scoring rule:

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
- ``clean`` - no incident may be reported; anything reported counts as an incident on a clean run.
- ``blame`` / ``action`` cells are scored on the top incident (:func:`gpufield.triage.labels.blame_matches`,
  :func:`~gpufield.triage.labels.action_matches`) over the rows that carry them.

Only the label columns are read: nothing of a case's file name or content is used by the engine.
"""

from __future__ import annotations

import os
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpufield.errors import GpufieldError, InputError
from gpufield.triage.labels import SPLITS, LabelledCase, action_matches, blame_matches, parse_index

__all__ = ["CaseResult", "EvalReport", "LabelledCase", "evaluate", "parse_index", "score"]


@dataclass(frozen=True, slots=True)
class CaseResult:
    """Outcome of one case.

    Attributes:
        case: the labelled case.
        predicted: top incident class (``"NONE"`` when no incident, ``"ERROR"`` when it failed).
        reported: every reported incident class, in order.
        correct: scored by the module rule (chain accepted; clean: nothing reported).
        strict: top class equals the first expected class (for ``all`` labels: same as correct).
        root_ok: for ``(cascade)`` labels, whether the root was reported UNKNOWN; else None.
        confidence: confidence of the top incident (0 when none).
        root_cause: the top incident's root cause (class or UNKNOWN).
        error: the error message when the case could not be analysed.
        found: expected classes reported as established incidents (for ``all`` labels; the top
            class for the others when correct).
        blame: per labelled blame key, whether the top incident blames an accepted value (empty
            when the row has no blame label).
        action_ok: whether the top incident's action satisfies the row's keyword set (None: no label).
        blamed: what the top incident blames (``host rank gpu peer``), for the report.
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
    blame: dict[str, bool] = field(default_factory=dict)
    action_ok: bool | None = None
    blamed: dict[str, Any] = field(default_factory=dict)

    @property
    def blame_ok(self) -> bool | None:
        """All labelled blame keys right (None when the row has no blame label)."""
        return None if not self.case.blame else bool(self.blame) and all(self.blame.values())


def _ratio(num: int, den: int) -> float | None:
    return None if den == 0 else round(num / den, 4)


@dataclass(slots=True)
class EvalReport:
    """All case results plus the aggregate scores.

    Attributes:
        directory: the evaluated directory.
        results: one per case, index order.
    """

    directory: str
    results: list[CaseResult] = field(default_factory=list)

    def _labelled(self) -> list[CaseResult]:
        return [r for r in self.results if not r.case.clean]

    @property
    def accuracy(self) -> float:
        """Fraction correct under the chain-accepting rule (clean rows: correct when nothing was reported)."""
        return sum(r.correct for r in self.results) / max(len(self.results), 1)

    @property
    def strict_accuracy(self) -> float:
        """Fraction whose top class is exactly the first expected class."""
        return sum(r.strict for r in self.results) / max(len(self.results), 1)

    def per_class(self) -> dict[str, tuple[int, int]]:
        """``expected class -> (correct, total)``: every case counted once, under its first expected
        class, credited when the case is correct (so the totals add up to the number of cases; an
        ``A and B`` case is correct only when both were found, see :func:`score`; clean rows under ``NONE``)."""
        acc: dict[str, list[int]] = defaultdict(lambda: [0, 0])
        for r in self.results:
            acc[r.case.expected][0] += r.correct
            acc[r.case.expected][1] += 1
        return {k: (v[0], v[1]) for k, v in sorted(acc.items())}

    def precision_recall(self) -> dict[str, dict[str, float | int | None]]:
        """Per class: ``tp``, ``predicted`` (rows whose top class it is), ``expected`` (rows whose first
        expected class it is), ``precision`` = tp / predicted and ``recall`` = tp / expected (None on 0/0).

        A row is a true positive for its top class when it is correct (a chain's other class counts as
        right, as in :attr:`accuracy`); a wrong row counts against its predicted class's precision and
        its expected class's recall. Clean rows that got an incident count against the predicted class.
        """
        tp: Counter[str] = Counter()
        pred: Counter[str] = Counter()
        exp: Counter[str] = Counter()
        for r in self.results:
            if not r.case.clean:
                exp[r.case.expected] += 1
            if r.predicted not in ("NONE", "ERROR"):
                pred[r.predicted] += 1
            if r.correct and not r.case.clean:
                tp[r.predicted] += 1
                if r.predicted != r.case.expected:
                    exp[r.case.expected] -= 1  # recall is about the row, credited under its predicted class
                    exp[r.predicted] += 1
        return {c: {"tp": tp[c], "predicted": pred[c], "expected": exp[c], "precision": _ratio(tp[c], pred[c]),
                    "recall": _ratio(tp[c], exp[c])} for c in sorted(set(pred) | set(exp)) if exp[c] or pred[c]}

    def blame_accuracy(self) -> dict[str, Any]:
        """Over rows with a blame label: rows right (every key) and per key ``(right, labelled)``."""
        rows = [r for r in self.results if r.case.blame]
        keys: dict[str, list[int]] = defaultdict(lambda: [0, 0])
        for r in rows:
            for k, ok in r.blame.items():
                keys[k][0] += ok
                keys[k][1] += 1
        right = sum(bool(r.blame_ok) for r in rows)
        return {"labelled": len(rows), "right": right, "accuracy": _ratio(right, len(rows)),
                "per_key": {k: {"right": a, "labelled": b} for k, (a, b) in sorted(keys.items())}}

    def action_accuracy(self) -> dict[str, Any]:
        """Over rows with an action label: how many top incidents satisfy the keyword set."""
        rows = [r for r in self.results if r.action_ok is not None]
        right = sum(bool(r.action_ok) for r in rows)
        return {"labelled": len(rows), "right": right, "accuracy": _ratio(right, len(rows))}

    def clean_incidents(self) -> list[tuple[str, tuple[str, ...]]]:
        """``(case number, reported classes)`` of the clean rows that got any incident."""
        return [(r.case.number, r.reported) for r in self.results if r.case.clean and r.reported]

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

    def split(self, name: str | None) -> EvalReport:
        """The sub-report of one split (``"dev"``, ``"test"``, ``"retired-test"``, or None = the rows without a
        split)."""
        return EvalReport(self.directory, [r for r in self.results if r.case.split == name])

    def summary(self) -> dict[str, Any]:
        """The aggregate numbers (no per-case rows)."""
        return {
            "cases": len(self.results), "accuracy": round(self.accuracy, 4),
            "strict_accuracy": round(self.strict_accuracy, 4),
            "root_check": {"checked": sum(r.root_ok is not None for r in self.results),
                           "ok": sum(bool(r.root_ok) for r in self.results)},
            "clean": {"rows": sum(r.case.clean for r in self.results),
                      "with_incident": [{"case": n, "reported": list(c)} for n, c in self.clean_incidents()]},
            "blame": self.blame_accuracy(), "action": self.action_accuracy(),
            "per_class": {k: {"correct": c, "total": t} for k, (c, t) in self.per_class().items()},
            "precision_recall": self.precision_recall(),
            "confusion": [{"expected": e, "predicted": p, "count": n} for (e, p), n in self.confusion().items()],
            "calibration": [{"bin": b, "cases": n, "mean_confidence": round(c, 3), "accuracy": round(a, 3)}
                            for b, n, c, a in self.calibration()],
        }

    def to_dict(self) -> dict:
        """JSON-serialisable summary, per-split summaries and per-case rows."""
        splits = sorted({r.case.split for r in self.results if r.case.split})
        return {
            "directory": self.directory, **self.summary(),
            "splits": {s: self.split(s).summary() for s in splits},
            "results": [{"case": r.case.number, "file": r.case.file, "paths": list(r.case.paths),
                         "expected": list(r.case.classes), "mode": r.case.mode, "split": r.case.split,
                         "predicted": r.predicted, "reported": list(r.reported),
                         "correct": r.correct, "strict": r.strict, "root_cause": r.root_cause,
                         "root_ok": r.root_ok, "confidence": r.confidence, "error": r.error,
                         "found": list(r.found), "blame": r.blame, "blame_ok": r.blame_ok,
                         "blamed": {k: v for k, v in r.blamed.items() if v is not None},
                         "action_ok": r.action_ok}
                        for r in self.results],
        }


def score(case: LabelledCase, reported: Sequence[tuple[str, bool, float]], top: Any = None) -> CaseResult:
    """Score one case from its reported incidents ``[(class, established, confidence), ...]``.

    Args:
        case: the labelled row.
        reported: the incidents, most likely root first.
        top: the top :class:`~gpufield.triage.engine.model.Incident` (or any object with ``host rank
            gpu peer action_kind action next_evidence established``) for the blame and action checks;
            None = not checked (an empty check).
    """
    first = reported[0][0] if reported else "NONE"
    classes = tuple(c for c, _, _ in reported)
    if case.clean:
        correct = strict = not reported
        found: tuple[str, ...] = ()
    elif case.mode == "all":
        found = tuple(c for c in dict.fromkeys(case.classes) if any(rc == c and est for rc, est, _ in reported))
        correct = first in case.classes and len(found) == len(set(case.classes))
        strict = correct
    else:
        correct = first in case.classes
        strict = first == case.expected
        found = (first,) if correct else ()
    root_ok = None if not case.cascade else bool(reported) and not reported[0][1]
    blamed: dict[str, Any] = {}
    action_ok = None
    if top is not None:
        blamed = {"host": top.host, "rank": top.rank, "gpu": top.gpu, "peer": getattr(top, "peer", None)}
        text = " ".join([top.action, *top.next_evidence])
        action_ok = action_matches(case, top.action_kind, top.established, text)
    elif case.action:
        action_ok = False  # no incident: no action to check
    blame = blame_matches(case, blamed) if case.blame else {}
    return CaseResult(case, first, classes, correct, strict, root_ok, reported[0][2] if reported else 0.0,
                      (first if reported[0][1] else "UNKNOWN") if reported else "NONE", found=found,
                      blame=blame, action_ok=action_ok, blamed=blamed)


def evaluate(directory: str | os.PathLike[str], *, index: str | os.PathLike[str] | None = None,
             split: str | None = None) -> EvalReport:
    """Triage every case of a labelled corpus directory and score it (see module docstring).

    Args:
        directory: the corpus directory.
        index: the index file (default ``directory/INDEX.md``).
        split: ``"dev"``, ``"test"`` or ``"retired-test"``: score only that split's rows (and rows without a
            split); None = every row (the report breaks the numbers down per split).

    Returns:
        An :class:`EvalReport`. A case that cannot be analysed counts as wrong, with its error.

    Raises:
        InputError: the directory or its index is missing or malformed, a row cannot be read or
            names a case path that does not exist (with the index line), or ``split`` is unknown.
    """
    from gpufield.triage.analyze import analyze

    if split not in (None, *SPLITS):
        raise InputError(f"split {split!r}: expected one of {SPLITS}")
    d = Path(directory)
    if not d.is_dir():
        raise InputError("not a directory (expected a labelled corpus with INDEX.md)", path=str(d))
    idx = Path(index) if index is not None else d / "INDEX.md"
    if not idx.is_file():
        raise InputError("no INDEX.md in the corpus directory", path=str(idx))
    cases = [c for c in parse_index(idx) if split is None or c.split in (None, split)]
    for c in cases:
        for rel in c.paths:
            if not (idx.parent / rel).exists():
                raise InputError(f"case path {rel!r} does not exist", path=str(idx), line=c.line)
    report = EvalReport(str(d))
    for case in cases:
        try:
            res = analyze([str(idx.parent / rel) for rel in case.paths])
        except (GpufieldError, OSError) as e:
            report.results.append(CaseResult(case, "ERROR", (), False, False,
                                             None if not case.cascade else False, 0.0, "ERROR", str(e)))
            continue
        report.results.append(score(case, [(i.cls, i.established, i.confidence) for i in res.incidents],
                                    res.incidents[0] if res.incidents else None))
    return report
