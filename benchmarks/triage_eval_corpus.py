"""Score ``gpufield triage`` on the labelled corpus v2 (``tests/triage/corpus``), per split.

Reads the case tables of ``public/INDEX.md`` and ``faults/INDEX.md`` under the label grammar of
``docs/triage-labels.md`` (branch triage-engine): ``Case file`` (backticked paths, a folder is one
job), ``Expected class`` (one class, ``A → B`` chain, ``... (cascade)``, or ``clean``), ``blame``
(``host= rank= gpu= peer=``, comma alternatives), ``action`` (kinds / substrings / ``!negated``),
``split`` (dev|test|retired-test). A row that does not parse stops the run with file and line (nothing is
dropped silently). It runs :func:`gpufield.triage.analyze.analyze` on each case and reports, for the
dev half and the test half separately: class right (chain-accepting) and strict, blame right over
rows with a blame label, action right over rows with an action label, the root check of
``(cascade)`` rows, incidents on clean rows, per-class right/total and the confusion pairs.

This reader is independent of ``gpufield.triage.evaluate`` on purpose: it measures the engine of
any branch against the same labels (the engine's own eval may differ in details; see RESULTS).

Usage::

    PYTHONPATH=src .venv/bin/python benchmarks/triage_eval_corpus.py [--corpus DIR] [--sub NAME ...] [--json OUT] [--half dev|test|retired|both] [--with-retired]

``--sub`` picks the sub-corpora (folders of ``--corpus`` with an INDEX.md) to score; default
``public`` and ``faults`` (``--sub public2`` scores the third public set alone, ``--sub public3``
the fourth). ``--half dev``
scores the development rows only (use it while writing rules; the test half is measured once).
``--sub public6`` scores the seventh public set, a blind set whose every row is ``test``: score it
once, at the end (``--sub public6 --half test``); it has no dev half to write rules against.
``--sub public7`` scores the eighth public set, a development set whose every row is ``dev``
(``--sub public7 --half dev``).

Retired test rows (split ``retired-test``: a former blind test half whose blind score is on record in
``benchmarks/triage_RESULTS.md`` and that is development data since) are always their own bucket
``retired-test/<sub>``, never counted as ``dev`` or ``test``. ``--half retired`` scores them alone;
``--half dev --with-retired`` scores the dev rows and the retired rows (each bucket reported apart);
``--half both`` (the default) scores every row.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_CLASS = re.compile(r"`([A-Z][A-Z0-9_]+)`")
_PATH = re.compile(r"`([^`]+)`")
SPLITS = ("dev", "test", "retired-test")  # docs/triage-labels.md, section split
_KINDS = ("RETRY", "EXCLUDE_NODE", "RESET_GPU", "FIX_CONFIG", "STOP", "COLLECT")


class RowError(ValueError):
    """A case-table row that does not follow the label grammar (message names file and line)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Row:
    """One labelled case.

    Attributes:
        index: the INDEX.md it came from.
        line: 1-based line in that file.
        id: the ``#`` cell.
        paths: case files/folders, absolute.
        classes: expected classes in order (empty for a clean row).
        chain: the label is an ``A → B`` chain.
        cascade: the label carries ``(cascade)``.
        clean: the row is a clean run (no incident expected).
        blame: ``key -> alternatives`` (empty: no blame label).
        action: action tokens (empty: no action label).
        split: ``dev``, ``test`` or ``retired-test``.
    """

    index: Path
    line: int
    id: str
    paths: tuple[Path, ...]
    classes: tuple[str, ...]
    chain: bool
    cascade: bool
    clean: bool
    blame: dict[str, tuple[str, ...]] = field(default_factory=dict)
    action: tuple[str, ...] = ()
    split: str = "dev"


def _cells(line: str) -> list[str]:
    return [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]


def read_index(path: Path) -> list[Row]:
    """Parse every case table of one index; raises RowError on the first unreadable row."""
    rows: list[Row] = []
    head: dict[str, int] | None = None
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
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

        def bad(msg: str, n: int = n) -> RowError:
            return RowError(f"{path}:{n}: {msg}")

        if len(cells) != len(head):
            raise bad(f"{len(cells)} cells, the header has {len(head)}")
        label = cells[head["expected class"]]
        classes = tuple(_CLASS.findall(label))
        clean = not classes and re.fullmatch(r"`?clean`?(\s.*)?", label, re.I) is not None
        if not classes and not clean:
            raise bad(f"expected class {label!r}: no `CLASS` and not `clean`")
        paths = tuple(path.parent / p for p in _PATH.findall(cells[head["case file"]]))
        if not paths:
            raise bad("no backticked case path")
        for p in paths:
            if not p.exists():
                raise bad(f"case path {p} does not exist")
        blame: dict[str, tuple[str, ...]] = {}
        bcell = cells[head["blame"]] if "blame" in head else "-"
        for tok in ([] if bcell in ("", "-") else bcell.split()):
            k, eq, v = tok.partition("=")
            if not eq or k not in ("host", "rank", "gpu", "peer") or not v:
                raise bad(f"blame token {tok!r} (want host=, rank=, gpu=, peer=)")
            alts = tuple(v.split(","))
            if k == "rank" and not all(x.isdigit() for x in alts):
                raise bad(f"blame token {tok!r}: rank must be integers")
            blame[k] = alts
        acell = cells[head["action"]] if "action" in head else "-"
        action = () if acell in ("", "-") else tuple(re.findall(r"`[^`]+`|\S+", acell.replace(",", " ")))
        split = cells[head["split"]] if "split" in head else "dev"
        if split not in SPLITS:
            raise bad(f"split {split!r} (want dev, test or retired-test)")
        rid = cells[head["#"]] if "#" in head else str(len(rows) + 1)
        rows.append(Row(index=path, line=n, id=rid, paths=paths, classes=classes,
                        chain="→" in label or "->" in label, cascade="(cascade)" in label, clean=clean,
                        blame=blame, action=tuple(a.strip("`") for a in action), split=split))
    return rows


def _norm_gpu(v: str) -> str:
    v = v.lower().strip().removeprefix("pci:")
    o = re.fullmatch(r"(?:gpu\s*|cuda:)?(\d+)", v)  # an ordinal: "GPU 5" = "cuda:5" = "5" (grammar)
    if o:
        return o.group(1)
    m = re.fullmatch(r"(?:[0-9a-f]{4,8}:)?([0-9a-f]{2}:[0-9a-f]{2})(?:\.[0-7])?", v)
    return m.group(1) if m else v


def blame_right(row: Row, inc) -> dict[str, bool]:
    """Per labelled blame key, whether the top incident matches it."""
    out: dict[str, bool] = {}
    for k, alts in row.blame.items():
        if k == "host":
            h = (inc.host or "").lower()
            out[k] = bool(h) and any(a.lower() in (h, h.split(".")[0]) for a in alts)
        elif k == "rank":
            out[k] = inc.rank is not None and str(inc.rank) in alts
        elif k == "gpu":
            out[k] = inc.gpu is not None and _norm_gpu(str(inc.gpu)) in {_norm_gpu(a) for a in alts}
        else:  # peer: the incident names it as a fact (root event fields, action or note), not
            # merely quotes a log line that contains it
            text = " ".join([str(getattr(inc, "peer", None) or ""), str(getattr(inc.root, "fields", "")),
                             inc.note, inc.action])
            out[k] = any((a.split(":")[0] if a.count(":") == 1 else a) in text for a in alts)
    return out


def action_right(row: Row, inc) -> bool:
    """Every action token found (kinds against action_kind / COLLECT = unestablished)."""
    text = (inc.action + " " + " ".join(inc.next_evidence)).lower()
    for tok in row.action:
        neg, t = tok.startswith("!"), tok.lstrip("!")
        if t in _KINDS:
            hit = (not inc.established) if t == "COLLECT" else inc.action_kind == t
        else:
            hit = t.lower() in text
        if hit == neg:
            return False
    return True


def score(row: Row) -> dict:
    """Analyze one case and score it; an analysis error counts as wrong, with its message."""
    from gpufield.triage.analyze import analyze

    t0 = time.perf_counter()
    try:
        incs = analyze([str(p) for p in row.paths]).incidents
        err = None
    except Exception as e:  # noqa: BLE001 - any failure of the engine on a real log is a wrong answer
        incs, err = [], f"{type(e).__name__}: {e}"
    top = incs[0] if incs else None
    pred = top.cls if top else ("ERROR" if err else "NONE")
    if row.clean:
        ok = strict = not incs and err is None
    else:
        ok = top is not None and (top.cls in row.classes if row.chain or len(row.classes) == 1
                                  else top.cls in row.classes)
        strict = top is not None and top.cls == row.classes[0]
    res = {"id": row.id, "split": row.split, "expected": "clean" if row.clean else row.classes[0],
           "predicted": pred, "reported": [i.cls for i in incs], "correct": ok, "strict": strict,
           "error": err, "wall_s": round(time.perf_counter() - t0, 2)}
    if row.cascade:
        res["root_ok"] = top is not None and not top.established
    if row.blame:
        per = blame_right(row, top) if top else dict.fromkeys(row.blame, False)
        res["blame"] = per
        res["blame_ok"] = all(per.values())
        res["got"] = {"host": top.host, "rank": top.rank, "gpu": top.gpu} if top else None
    if row.action:
        res["action_ok"] = bool(top) and action_right(row, top)
    if row.clean:
        res["clean_incidents"] = len(incs)
    return res


def summary(results: list[dict]) -> dict:
    """Aggregate scores of one split."""
    def pct(a: int, b: int) -> float | None:
        return round(100.0 * a / b, 1) if b else None

    n = len(results)
    bl = [r for r in results if "blame_ok" in r]
    ac = [r for r in results if "action_ok" in r]
    cas = [r for r in results if "root_ok" in r]
    clean = [r for r in results if "clean_incidents" in r]
    per: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for r in results:
        per[r["expected"]][0] += r["correct"]
        per[r["expected"]][1] += 1
    conf = Counter((r["expected"], r["predicted"]) for r in results if not r["correct"])
    return {"cases": n, "class_right_pct": pct(sum(r["correct"] for r in results), n),
            "class_right": sum(r["correct"] for r in results),
            "strict_pct": pct(sum(r["strict"] for r in results), n),
            "blame_labelled": len(bl), "blame_right": sum(r["blame_ok"] for r in bl),
            "blame_right_pct": pct(sum(r["blame_ok"] for r in bl), len(bl)),
            "action_labelled": len(ac), "action_right": sum(r["action_ok"] for r in ac),
            "action_right_pct": pct(sum(r["action_ok"] for r in ac), len(ac)),
            "cascade_rows": len(cas), "cascade_root_ok": sum(r["root_ok"] for r in cas),
            "clean_rows": len(clean), "clean_rows_with_incident": sum(r["clean_incidents"] > 0 for r in clean),
            "clean_incidents": sum(r["clean_incidents"] for r in clean),
            "per_class": {k: f"{a}/{b}" for k, (a, b) in sorted(per.items())},
            "confusion": [f"{e} -> {p}: {c}" for (e, p), c in conf.most_common()],
            "errors": [f"{r['id']}: {r['error']}" for r in results if r["error"]]}


def main(argv: list[str] | None = None) -> int:
    """Command-line entry (see the module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", type=Path, default=ROOT / "tests/triage/corpus")
    ap.add_argument("--sub", action="append", default=None, help="sub-corpus folder (repeatable)")
    ap.add_argument("--json", type=Path, default=None, help="write per-case results and summaries here")
    ap.add_argument("--half", choices=("dev", "test", "retired", "both"), default="both",
                    help="score only this split (rules are written on dev rows; test is measured once; "
                    "retired = the retired-test rows; both = every row)")
    ap.add_argument("--with-retired", action="store_true",
                    help="with --half dev: score the retired-test rows too (reported as their own bucket)")
    a = ap.parse_args(argv)
    subs = tuple(a.sub or ("public", "faults"))
    try:
        rows = [r for sub in subs for r in read_index(a.corpus / sub / "INDEX.md")]
    except RowError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if a.with_retired and a.half != "dev":
        print("error: --with-retired goes with --half dev", file=sys.stderr)
        return 2
    halves = {"both": SPLITS, "retired": ("retired-test",),
              "dev": ("dev", "retired-test") if a.with_retired else ("dev",)}.get(a.half, (a.half,))
    rows = [r for r in rows if r.split in halves]
    results = [score(r) for r in rows]
    out = {"summary": {}, "results": results}
    for split in (s for s in halves if any(r.split == s for r in rows) or s != "retired-test"):
        for part in (*subs, "all"):
            rs = [r for r, row in zip(results, rows, strict=True) if row.split == split
                  and (part == "all" or row.index.parent.name == part)]
            out["summary"][f"{split}/{part}"] = summary(rs)
    for key, s in out["summary"].items():
        print(f"{key:20s} n={s['cases']:3d} class {s['class_right']}/{s['cases']} ({s['class_right_pct']}%) "
              f"strict {s['strict_pct']}% | blame {s['blame_right']}/{s['blame_labelled']} "
              f"({s['blame_right_pct']}%) | action {s['action_right']}/{s['action_labelled']} "
              f"({s['action_right_pct']}%) | cascade root {s['cascade_root_ok']}/{s['cascade_rows']} | "
              f"clean rows with incident {s['clean_rows_with_incident']}/{s['clean_rows']}")
    if a.json:
        a.json.write_text(json.dumps(out, indent=1, default=str) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
