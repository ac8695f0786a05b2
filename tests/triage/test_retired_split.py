"""Issue 23, 2026-12-02: the retirement of a blind test half (split ``retired-test``, docs/triage-labels.md). The
label readers accept the value and keep it apart; the split tool retires a whole test half only with a dated
record and never moves dev rows; the scorer reports retired rows as their own bucket. Nothing here runs the engine
on a real case."""

from __future__ import annotations

import pytest
from _corpus_checks import load_benchmark

from gpufield.triage.evaluate import evaluate
from gpufield.triage.labels import parse_index

EVAL = load_benchmark("triage_eval_corpus")
SPLIT = load_benchmark("triage_corpus_split")
HEAD = "# corpus\n\n| # | Case file | Expected class | blame | action | split |\n|---|---|---|---|---|---|\n"


def _corpus(tmp_path, splits):
    for i in range(len(splits)):
        (tmp_path / f"c{i}.log").write_text("2026-12-02 10:00:00 training finished\n", encoding="utf-8")
    idx = tmp_path / "INDEX.md"
    idx.write_text(HEAD + "".join(f"| c{i} | `c{i}.log` | clean | - | - | {s} |\n" for i, s in enumerate(splits)),
                   encoding="utf-8")
    return idx


def test_retire_moves_test_rows_only_with_a_dated_record(tmp_path):
    idx = _corpus(tmp_path, ["dev", "test", "test", "dev"])
    with pytest.raises(SystemExit, match="YYYY-MM-DD"):
        SPLIT.retire_test(idx, "blind score 3/4")  # no date: refused, nothing written
    assert [r.split for r in EVAL.read_index(idx)] == ["dev", "test", "test", "dev"]
    assert SPLIT.retire_test(idx, "2026-12-02: blind 1/2 at abc1234") == 2
    assert [r.split for r in EVAL.read_index(idx)] == ["dev", "retired-test", "retired-test", "dev"]
    assert "Retired test half: 2026-12-02: blind 1/2 at abc1234" in idx.read_text(encoding="utf-8")
    with pytest.raises(SystemExit, match="no test row"):
        SPLIT.retire_test(idx, "2026-12-03 again")  # dev rows are never the retirement's to move
    # a retired row counts as the test row it was: the tool assigns nothing and leaves every split as it is
    assert SPLIT.assign(idx, 23, write=False)[1:] == (0, 0)


def test_readers_keep_retired_rows_apart(tmp_path):
    idx = _corpus(tmp_path, ["dev", "retired-test"])
    assert [c.split for c in parse_index(idx)] == ["dev", "retired-test"]
    rep = evaluate(tmp_path, split="retired-test")
    assert [r.case.number for r in rep.results] == ["c1"]
    assert [r.case.number for r in evaluate(tmp_path, split="dev").results] == ["c0"]
    assert set(evaluate(tmp_path).to_dict()["splits"]) == {"dev", "retired-test"}


def test_scorer_buckets(tmp_path, capsys):
    (tmp_path / "s").mkdir()
    _corpus(tmp_path / "s", ["dev", "retired-test", "test"])
    assert EVAL.main(["--corpus", str(tmp_path), "--sub", "s", "--half", "dev", "--with-retired"]) == 0
    out = capsys.readouterr().out
    assert "dev/s " in out and "retired-test/s " in out and "\ntest/" not in "\n" + out
    assert EVAL.main(["--corpus", str(tmp_path), "--sub", "s", "--half", "test", "--with-retired"]) == 2
