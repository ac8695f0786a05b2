"""Corpus-evaluation tests: INDEX.md table parsing, the chain/list scoring rule, aggregate numbers."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufield.errors import InputError
from gpufield.triage.evaluate import EvalReport, evaluate, parse_index, score

CASES = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "triage-cases"

INDEX = """# index

Some prose with a `NOT_A_CASE` token.

| # | Case file | Source thread | Expected class | Root cause → expected action | Notes |
|---|---|---|---|---|---|
| 01 | `a.log` | http://x | `NCCL_COLLECTIVE_TIMEOUT` | Not established. | |
| 05 | `b.log` | http://x | `HEARTBEAT_MONITOR_TIMEOUT` → `LAUNCH_SKEW` | staggered | |
| 10 | `c.log` | http://x | `PEER_PROCESS_EXIT` (cascade) | victim | |
| 16 | `d.log` | http://x | `GPU_LOST_PCIE` → job hang | hw | |
| 34 | `e.log` | http://x | `STRAGGLER_COMPUTE` (masked) and `STRAGGLER_INPUT` | | |

## Narrative-only cases

| Source | Scenario | Expected class / lesson |
|---|---|---|
| http://y | text | `NAN_LOSS` with hardware root |
"""


def test_parse_index_label_grammar(tmp_path):
    p = tmp_path / "INDEX.md"
    p.write_text(INDEX, encoding="utf-8")
    cases = parse_index(p)
    assert [c.number for c in cases] == ["01", "05", "10", "16", "34"]  # narrative table has no case file
    by = {c.number: c for c in cases}
    assert (by["01"].mode, by["01"].classes) == ("single", ("NCCL_COLLECTIVE_TIMEOUT",))
    assert (by["05"].mode, by["05"].classes) == ("chain", ("HEARTBEAT_MONITOR_TIMEOUT", "LAUNCH_SKEW"))
    assert by["10"].cascade and not by["01"].cascade
    assert (by["16"].mode, by["16"].classes) == ("chain", ("GPU_LOST_PCIE",))
    assert (by["34"].mode, by["34"].expected) == ("all", "STRAGGLER_COMPUTE")


def test_parse_index_rejects_unknown_classes_with_the_line(tmp_path):
    p = tmp_path / "INDEX.md"
    p.write_text("| # | Case file | Expected class |\n|---|---|---|\n| 1 | `a.log` | `GPU_ON_FIRE` |\n", encoding="utf-8")
    with pytest.raises(InputError) as e:
        parse_index(p)
    assert e.value.line == 3 and "GPU_ON_FIRE" in str(e.value)
    p.write_text("no table here\n", encoding="utf-8")
    with pytest.raises(InputError, match="no case table"):
        parse_index(p)


def test_scoring_rule(tmp_path):
    p = tmp_path / "INDEX.md"
    p.write_text(INDEX, encoding="utf-8")
    by = {c.number: c for c in parse_index(p)}
    # chain: either class is correct; only the first is strict
    r = score(by["05"], [("LAUNCH_SKEW", True, 0.6)])
    assert r.correct and not r.strict
    r = score(by["05"], [("HEARTBEAT_MONITOR_TIMEOUT", False, 0.4)])
    assert r.correct and r.strict
    # list: both classes must be reported as established incidents, the top one among them; an
    # unestablished hint ("a compute straggler may be masked, wall time cannot name it") does not count
    assert not score(by["34"], [("STRAGGLER_INPUT", True, 0.8), ("STRAGGLER_COMPUTE", False, 0.3)]).correct
    r = score(by["34"], [("STRAGGLER_INPUT", True, 0.8), ("STRAGGLER_COMPUTE", True, 0.8)])
    assert r.correct and r.found == ("STRAGGLER_COMPUTE", "STRAGGLER_INPUT")
    assert not score(by["34"], [("STRAGGLER_INPUT", True, 0.8)]).correct
    # cascade: the root must be UNKNOWN
    assert score(by["10"], [("PEER_PROCESS_EXIT", False, 0.4)]).root_ok is True
    assert score(by["10"], [("PEER_PROCESS_EXIT", True, 0.9)]).root_ok is False
    # nothing reported
    r = score(by["01"], [])
    assert (r.predicted, r.correct) == ("NONE", False)


def test_corpus_accuracy_meets_the_bar(shared_dir):
    rep = evaluate(CASES)
    n = len(rep.results)
    assert n == len(parse_index(CASES / "INDEX.md")) >= 27
    # 26/27: case 34 (masked straggler, see tests/triage/test_corpus.py) is the known miss; any other is a regression
    assert {r.case.file for r in rep.results if not r.correct} <= {"34-straggler-masked-by-allreduce.log"}
    assert rep.accuracy >= 0.95, [(r.case.file, r.predicted) for r in rep.results if not r.correct]
    per = rep.per_class()
    # "by first expected class": each case counted once, under its first class ("A and B" included)
    assert sum(t for _, t in per.values()) == n
    assert sum(c for c, _ in per.values()) == sum(r.correct for r in rep.results)
    assert not any(r.error for r in rep.results)
    # calibration bins partition the cases
    assert sum(b[1] for b in rep.calibration()) == n


def test_evaluate_missing_directory_or_index(tmp_path):
    with pytest.raises(InputError, match="not a directory"):
        evaluate(tmp_path / "nope")
    with pytest.raises(InputError, match="no INDEX.md"):
        evaluate(tmp_path)


def test_per_class_counts_each_case_once_under_its_first_class(tmp_path):
    # the table is titled "by first expected class": an "A and B" case is one case, not two rows
    p = tmp_path / "INDEX.md"
    p.write_text(INDEX, encoding="utf-8")
    by = {c.number: c for c in parse_index(p)}
    rep = EvalReport(directory=str(tmp_path), results=[
        score(by["01"], [("NCCL_COLLECTIVE_TIMEOUT", True, 0.3)]),
        score(by["34"], [("STRAGGLER_INPUT", True, 0.8)]),  # only one of the two found: wrong
    ])
    per = rep.per_class()
    assert per == {"NCCL_COLLECTIVE_TIMEOUT": (1, 1), "STRAGGLER_COMPUTE": (0, 1)}
    assert sum(t for _, t in per.values()) == len(rep.results)
    assert rep.to_dict()["per_class"]["STRAGGLER_COMPUTE"] == {"correct": 0, "total": 1}


def test_eval_tables_fold_long_class_names_on_80_columns(shared_dir):
    """New-user trial: on an 80-column terminal the cases table cut class names with an ellipsis."""
    from rich.console import Console

    from gpufield.triage import render_eval

    report = evaluate(shared_dir / "data" / "triage-cases")
    con = Console(width=80, record=True, color_system=None)
    render_eval(report, con)
    text = con.export_text()
    assert "…" not in text
    assert max(len(line) for line in text.splitlines()) <= 80
    flat = "".join(ch for ch in text if ch.isalnum() or ch == "_")  # folded cells read back in order per column
    longest = max((c for r in report.results for c in r.case.classes), key=len)
    assert len(longest) > 20 and longest[:10] in flat
