"""Per-rank step-time aggregate (gpufield.triage.steptime) on the real faults dev runs.

``sleep-ddp-2r-rank1-0.3s`` (faults INDEX, dev): rank 1 sleeps 0.3 s per step from step 2, but
faultloop's ``s/step`` is measured around the whole step including the loss all_reduce, so both
ranks print the same time: the aggregate must equal the numbers in the file, and no rank may be
named from them (an honest non-detection, like shared case 34).
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from gpufield.triage.analyze import analyze
from gpufield.triage.steptime import StepTimeConfig, slow_ranks

FAULTS = Path(__file__).parent / "corpus" / "faults"
SLEEP = FAULTS / "sleep-ddp-2r-rank1-0.3s.log"


def _per_rank_from_file(path: Path) -> dict[int, np.ndarray]:
    out: dict[int, list[float]] = {}
    for line in path.read_text().splitlines():
        m = re.match(r"\[rank(\d+)\] step \d+ .*\| ([\d.]+) s/step$", line)
        if m:
            out.setdefault(int(m[1]), []).append(float(m[2]))
    return {r: np.array(v) for r, v in out.items()}


def test_aggregate_matches_every_step_line_despite_loss_thinning():
    want = _per_rank_from_file(SLEEP)
    res = analyze([str(SLEEP)])
    got = {e.rank: e for e in res.events if e.kind == "step_time"}
    assert set(got) == set(want) == {0, 1}
    for r, v in want.items():
        f = got[r].fields
        assert f["count"] == len(v) == 12
        assert f["mean_s"] == pytest.approx(v.mean())
        assert f["std_s"] == pytest.approx(v.std(ddof=1))
        assert f["max_s"] == pytest.approx(v.max())
    # the loss thinning keeps only a few of the 24 step lines as loss events
    assert sum(e.kind == "loss" for e in res.events) < 24


def test_equalised_ddp_step_times_name_no_rank():
    res = analyze([str(SLEEP)])
    steps = [e for e in res.events if e.kind == "step_time"]
    assert slow_ranks(steps) == []
    assert not any(i.cls == "STRAGGLER_COMPUTE" and i.rank is not None for i in res.incidents)


def test_peer_ratio_rule_names_the_slow_rank_when_the_log_shows_it():
    # the same real aggregate with rank 1 made 30 % slower than its peer: named, severity high
    res = analyze([str(SLEEP)])
    steps = [e for e in res.events if e.kind == "step_time"]
    slow = [e for e in steps if e.rank == 1][0]
    slow.fields["mean_s"] *= 1.3
    (hit,) = slow_ranks(steps)
    assert hit[0].rank == 1 and hit[1] == pytest.approx(1.3, rel=0.02)
    assert StepTimeConfig().severity(hit[1] - 1) == "high"
    assert StepTimeConfig().severity(0.07) == "low" and StepTimeConfig().severity(0.12) == "medium"


@pytest.mark.parametrize("bad", [dict(min_steps=1), dict(min_ratio=1.0), dict(severity_bands=(0.2, 0.1, 0.3))])
def test_config_validation(bad):
    with pytest.raises(ValueError):
        StepTimeConfig(**bad)


def test_sampling_past_the_per_file_cap_keeps_the_mean_and_the_line_numbers(tmp_path):
    # the real faultloop lines of the sleep run, repeated past FULL_LINES: the sampled aggregate's
    # mean is the numpy mean of every stated duration (the repeats do not change it), it counts
    # fewer lines than the file has, and its last line number is a line holding that rank's step
    from gpufield.triage.steptime import FULL_LINES

    lines = [ln for ln in SLEEP.read_text().splitlines() if re.match(r"\[rank\d\] step ", ln)]
    reps = 2 * FULL_LINES // len(lines) + 1
    big = tmp_path / "big.log"
    big.write_text("\n".join(lines * reps) + "\n")
    want = _per_rank_from_file(SLEEP)
    res = analyze([str(big)])
    got = {e.rank: e for e in res.events if e.kind == "step_time"}
    text = big.read_text().splitlines()
    for r, v in want.items():
        f = got[r].fields
        assert len(v) * reps > f["count"] >= FULL_LINES // 2
        assert f["mean_s"] == pytest.approx(v.mean(), rel=0.02)
        assert text[got[r].line - 1].startswith(f"[rank{r}] step ")
        assert text[f["first_line"] - 1].startswith(f"[rank{r}] step ")
        assert not any(t.startswith(f"[rank{r}] step ") for t in text[: f["first_line"] - 1])


def _block_search_rows(block: bytes, scan) -> list[int]:
    """The reference: lines where the RE2 search over the whole block stops (``StepTimes`` before
    sampling), as row indices."""
    rows, pos, end = [], 0, len(block)
    while pos < end:
        hit = scan.find(block, pos, end)
        if hit < 0:
            break
        rows.append(block.count(b"\n", 0, hit))
        le = block.find(b"\n", hit, end)
        pos = end if le < 0 else le + 1
    return rows


@pytest.mark.parametrize("share", [0.0, 1.0])  # run-on lines found by one block search / line by line
def test_vectorised_step_rows_equal_the_block_search_also_across_line_ends(share, monkeypatch):
    # the per-line pass (pyarrow) must stop at exactly the lines the block search stops at, including
    # matches that run on into the next line through \s ("step\n5", "time :\n 3 ms")
    import random

    from gpufield.triage import steptime as stp

    monkeypatch.setattr(stp, "_RUNS_ON_LINE_SHARE", share)
    from gpufield.triage.parsers._regex import ByteScanner
    from gpufield.triage.parsers._regex import compile as re2_compile

    scan = ByteScanner(stp._BLOCK_PATTERN)
    per_line = re2_compile(stp._BLOCK_PATTERN)
    words = ["step", "iter", "iteration", "global_step", "time", "train time", "step_time", "s/step", "ms/it",
             "iter time (ms):", "elapsed time per iteration (ms):", "'train_steps_per_second':", ":", "=", " ", "\t",
             "\r", "\n", "\n", "0", "12", "3.5", "ms", "s", "loss", "x", "steps", "\xe9", "-"]
    rng = random.Random(24)
    checked = runs_on = 0
    for _ in range(600):
        text = "".join(rng.choice(words) for _ in range(rng.randint(1, 150)))
        block = text.encode() + (b"\n" if rng.random() < 0.8 else b"")
        nl = np.flatnonzero(np.frombuffer(block, dtype=np.uint8) == 10)
        n = len(nl) + (0 if block.endswith(b"\n") else 1)
        starts = np.empty(n + 1, dtype=np.int32)
        starts[0] = 0
        starts[1:len(nl) + 1] = nl + 1
        starts[n] = len(block)
        want = _block_search_rows(block, scan)
        lo = rng.randint(0, n - 1) if n > 1 else 0
        assert stp._hit_rows(block, starts, lo, n, scan).tolist() == [r for r in want if r >= lo], block
        checked += len(want)
        runs_on += sum(1 for r in want if not per_line.search(block[starts[r]:starts[r + 1]].decode()))
    assert checked > 200 and runs_on > 25  # both kinds of stop were exercised
