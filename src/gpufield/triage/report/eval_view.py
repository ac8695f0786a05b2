"""Rich rendering of a corpus evaluation: per-class accuracy, confusion summary, calibration."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from gpufield.triage.evaluate import EvalReport


def _fold(table: Table) -> Table:
    """Fold long cells onto the next line instead of cutting them with an ellipsis (class names are one
    long word: ``NCCL_COLLECTIVE_TIMEOUT`` must stay readable on an 80-column terminal)."""
    for col in table.columns:
        col.overflow = "fold"
    return table


def render_eval(report: EvalReport, console: Console | None = None, *, cases: bool = True) -> None:
    """Print per-case results (optional), per-class accuracy, confusion, calibration, precision/recall,
    blame/action accuracy, clean-run incidents and per-split accuracy."""
    console = console or Console()
    if cases:
        t = Table(title=f"cases of {report.directory}", title_justify="left")
        for col in ("#", "expected", "predicted", "ok", "strict", "root", "conf"):
            t.add_column(col)
        for r in report.results:
            exp = (" → " if r.case.mode == "chain" else " + ").join(r.case.classes)
            root = "" if r.root_ok is None else ("UNKNOWN ok" if r.root_ok else "root wrong")
            t.add_row(r.case.number, exp, r.predicted if not r.error else f"ERROR: {r.error[:40]}",
                      "[green]yes[/]" if r.correct else "[red]no[/]", "yes" if r.strict else "no", root,
                      f"{r.confidence:.2f}")
        console.print(_fold(t))
    pc = Table(title="per-class accuracy (by first expected class)", title_justify="left")
    pc.add_column("class")
    pc.add_column("correct", justify="right")
    pc.add_column("total", justify="right")
    for cls, (c, n) in report.per_class().items():
        pc.add_row(cls, str(c), str(n), style=None if c == n else "red")
    console.print(_fold(pc))
    conf = report.confusion()
    if conf:
        ct = Table(title="confusion (misclassified only)", title_justify="left")
        for col in ("expected", "predicted", "count"):
            ct.add_column(col)
        for (e, p), n in conf.most_common():
            ct.add_row(e, p, str(n))
        console.print(_fold(ct))
    cal = Table(title="calibration (confidence vs accuracy)", title_justify="left")
    for col in ("bin", "cases", "mean conf", "accuracy"):
        cal.add_column(col)
    for b, n, c, a in report.calibration():
        cal.add_row(b, str(n), f"{c:.2f}", f"{a:.2f}")
    console.print(_fold(cal))
    pr = report.precision_recall()
    if pr:
        pt = Table(title="per-class precision / recall (top incident)", title_justify="left")
        for col in ("class", "tp", "predicted", "expected", "precision", "recall"):
            pt.add_column(col, justify="left" if col == "class" else "right")
        for cls, m in pr.items():
            pt.add_row(cls, str(m["tp"]), str(m["predicted"]), str(m["expected"]),
                       "-" if m["precision"] is None else f"{m['precision']:.2f}",
                       "-" if m["recall"] is None else f"{m['recall']:.2f}")
        console.print(_fold(pt))
    b, a = report.blame_accuracy(), report.action_accuracy()
    if b["labelled"]:
        keys = ", ".join(f"{k} {v['right']}/{v['labelled']}" for k, v in b["per_key"].items())
        console.print(f"blame right {b['right']}/{b['labelled']} ({keys})")
    if a["labelled"]:
        console.print(f"action right {a['right']}/{a['labelled']}")
    clean_rows = [r for r in report.results if r.case.clean]
    if clean_rows:
        bad = report.clean_incidents()
        console.print(f"clean runs: {len(bad)} of {len(clean_rows)} with an incident"
                      + (": " + "; ".join(f"{n}: {', '.join(c)}" for n, c in bad) if bad else ""))
    for name in sorted({r.case.split for r in report.results if r.case.split}):
        sub = report.split(name)
        console.print(f"split {name}: accuracy {sub.accuracy:.1%} ({sum(r.correct for r in sub.results)}/"
                      f"{len(sub.results)})")
    roots = [r for r in report.results if r.root_ok is not None]
    console.print(f"accuracy {report.accuracy:.1%} ({sum(r.correct for r in report.results)}/{len(report.results)}, "
                  f"chain accepted); strict {report.strict_accuracy:.1%}; root check "
                  f"{sum(bool(r.root_ok) for r in roots)}/{len(roots)}")
