"""Worst-case time per parser pattern on adversarial lines: Python ``re`` (before) vs RE2 (now).

Patterns are collected from the parser modules as ``tests/triage/test_patterns_linear.py`` does;
the adversarial lines are that test's (runs of word characters, colons, spaces, digits, the
pattern's own literals repeated). For each pattern the slowest line is reported:

* RE2 (``gpufield.triage.parsers._regex``): measured at ``--length`` (default 40,000 characters);
* stdlib ``re``: measured at 1,000 and 4,000 characters; at ``--length`` only when the 4,000-character
  worst case is under ``--std-budget-s`` / 100 (else the quadratic-or-worse growth would take
  minutes per line): those rows give the growth exponent between 1k and 4k and an extrapolation,
  labelled ``est.``.

Run::

    PYTHONPATH=src .venv/bin/python benchmarks/triage_patterns.py [--length 40000] [--top 12]
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "triage"))
from test_patterns_linear import PATTERNS, adversarial  # noqa: E402


def worst(search, pattern: str, n: int, reps: int = 1) -> tuple[float, int]:
    """(slowest seconds, index of that line) over the adversarial lines of length ``n``."""
    best = (0.0, -1)
    for i, line in enumerate(adversarial(pattern, n)):
        t = time.perf_counter()
        for _ in range(reps):
            search(line)
        dt = (time.perf_counter() - t) / reps
        if dt > best[0]:
            best = (dt, i)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--length", type=int, default=40_000)
    ap.add_argument("--top", type=int, default=12)
    ap.add_argument("--std-budget-s", type=float, default=5.0)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    rows = []
    c0 = time.process_time()
    for text, p in PATTERNS.items():
        std = re.compile(text, re.ASCII | (re.IGNORECASE if p.ignore_case else 0))
        s1, _ = worst(std.search, text, 1000)
        s4, _ = worst(std.search, text, 4000)
        k = math.log(max(s4, 1e-7) / max(s1, 1e-7), 4) if s1 > 1e-5 else 1.0
        if s4 < a.std_budget_s / 100:
            sl, _ = worst(std.search, text, a.length)
            est = False
        else:
            sl, est = s4 * (a.length / 4000) ** k, True
        r2, _ = worst(p.search, text, a.length)
        rows.append({"pattern": text, "std_1k_s": s1, "std_4k_s": s4, "growth_exp": round(k, 2),
                     "std_at_length_s": sl, "std_estimated": est, "re2_at_length_s": r2})
    rows.sort(key=lambda r: -r["std_at_length_s"])
    out = {"length": a.length, "patterns": len(rows), "cpu_s": round(time.process_time() - c0, 1),
           "re2_worst_s": max(r["re2_at_length_s"] for r in rows),
           "re2_total_worst_s": sum(r["re2_at_length_s"] for r in rows),
           "std_worst_s": rows[0]["std_at_length_s"], "rows": rows}
    if a.json:
        print(json.dumps(out, indent=1))
        return
    print(f"{len(rows)} patterns, adversarial lines of {a.length} characters; slowest under stdlib re first")
    print("| pattern (first 60 chars) | re 1k | re 4k | growth exp. | re at length | RE2 at length |")
    print("|---|---:|---:|---:|---:|---:|")
    for r in rows[: a.top]:
        sl = f"{r['std_at_length_s']:.3g} s" + (" (est.)" if r["std_estimated"] else "")
        pat = r["pattern"][:60].replace("|", "\\|")
        print(f"| `{pat}` | {r['std_1k_s'] * 1e3:.2f} ms | {r['std_4k_s'] * 1e3:.1f} ms | {r['growth_exp']} | {sl} | "
              f"{r['re2_at_length_s'] * 1e3:.3f} ms |")
    print(f"RE2 worst single pattern: {out['re2_worst_s'] * 1e3:.3f} ms; all {len(rows)} patterns' worst lines summed: "
          f"{out['re2_total_worst_s'] * 1e3:.1f} ms; stdlib worst: {out['std_worst_s']:.3g} s; CPU {out['cpu_s']} s")


if __name__ == "__main__":
    main()
