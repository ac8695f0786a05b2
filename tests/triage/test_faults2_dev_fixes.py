"""Root fixes for the dev-half misses of the fault-injection corpus faults2 (tests/triage/corpus/faults2),
each checked on the row's real torchrun log against the row's own label (ground truth by construction:
the injected fault and its rank, benchmarks/triage_faults2.py), plus a check of the mechanism itself.

Never a test-half row: the rows are asserted to be dev rows.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufield.triage import analyze
from gpufield.triage.evaluate import score
from gpufield.triage.labels import parse_index

CORPUS = Path(__file__).parent / "corpus" / "faults2"


@pytest.fixture(scope="module")
def rows():
    return {c.number: c for c in parse_index(CORPUS / "INDEX.md")}


def _top(rows, number: str):
    case = rows[number]
    assert case.split == "dev"  # never a test-half row
    res = analyze([str(CORPUS / p) for p in case.paths])
    top = res.incidents[0] if res.incidents else None
    r = score(case, [(i.cls, i.established, i.confidence) for i in res.incidents], top)
    assert r.correct, (number, r.predicted)
    assert r.blame_ok is not False, (number, top and (top.host, top.rank))
    assert r.action_ok is not False, (number, top and (top.action_kind, top.action))
    return top


def test_compute_time_names_the_straggler_the_wall_time_hides(rows):
    # rank 1 sleeps 0.3 s per step; the loss all_reduce equalises the printed s/step of both ranks, the step
    # lines' "compute N ms" part (measured before the collective) is ~0.3 s longer on rank 1 only
    top = _top(rows, "sleep-ddp-mlp-2r-rank1-step1")
    assert top.cls == "STRAGGLER_COMPUTE" and top.rank == 1
    assert "compute time" in top.note


def test_checkpoint_timeout_blames_the_rank_that_did_not_time_out(rows):
    # rank 1 stalls 30 s before dcp.save; rank 0 times out inside dcp.save (its traceback frame is the save mark)
    top = _top(rows, "ckptstall-fsdp2-mlp-2r-rank1-step3")
    assert top.cls == "CHECKPOINT_SAVE_TIMEOUT" and top.rank == 1


def test_rank_that_exited_zero_early_is_the_peer_that_left(rows):
    # rank 1's data runs out: it exits 0; rank 0 gets gloo's "Connection closed by peer"; torchrun's summary
    # lists rank 0 only (an exit code 0 is no failure)
    top = _top(rows, "exit0-ddp-mlp-2r-rank1-step3")
    assert top.cls == "PEER_PROCESS_EXIT" and top.rank == 1
    assert top.action_kind == "FIX_CONFIG" and "same number of steps" in top.action


def test_python_logging_rank_tag_after_the_level_names_the_rank():
    # faults2 dev sleep-fsdp2-mlp-3r-rank2-step2: logging.basicConfig(format="%(asctime)s %(levelname)s [rank2] ...")
    from gpufield.triage.parsers._prefix import split_prefix

    line = ("2026-12-02 04:06:52,626 INFO [rank2] train: step 2 | loss 5.6626 | grad_norm 1.0114 | 0.486 s/step")
    assert split_prefix(line, 2026).rank == 2
    assert split_prefix("2026-12-02 04:06:52,626 INFO waiting for [rank3]", 2026).rank is None  # not the tag
    res = analyze([str(CORPUS / "sleep-fsdp2-mlp-3r-rank2-step2.log")])
    assert sorted(e.rank for e in res.events if e.kind == "step_time") == [0, 1, 2]  # one timing per rank


def test_common_slowdown_is_an_unnamed_straggler_hint(rows):
    from gpufield.triage.steptime import slowdown

    # rank 2 sleeps 0.4 s per step from step 2; all three ranks' wall times jump together (the collective)
    assert rows["sleep-fsdp2-mlp-3r-rank2-step2"].split == "dev"
    top = analyze([str(CORPUS / "sleep-fsdp2-mlp-3r-rank2-step2.log")]).incidents[0]  # class right; blame stays wrong
    assert top.cls == "STRAGGLER_COMPUTE" and not top.established and top.rank is None
    assert "at step 2 " in top.note
    # the same form in the first fault corpus: faults dev sleep-ddp-2r-rank1-0.3s (0.3 s from step 2)
    other = analyze([str(CORPUS.parent / "faults" / "sleep-ddp-2r-rank1-0.3s.log")]).incidents
    assert other and other[0].cls == "STRAGGLER_COMPUTE" and "at step 2 " in other[0].note
    # the series rule itself: steps 0-1 of that log, then 0.36 s steps; a noisy flat series is no slowdown
    assert slowdown([0.073, 0.064, 0.357, 0.365, 0.363, 0.365, 0.363, 0.360])[0] == 2
    assert slowdown([0.069, 0.043, 0.027, 0.033, 0.036, 0.031, 0.05, 0.04, 0.03]) is None


def test_faultloop2_nangrad_keeps_the_loss_finite_and_the_gradients_nan():
    # the faults2 "clean (NaN grad-norm warnings only)" rows rest on this: 0*sqrt(0*h) is 0 forward, NaN backward
    import torch

    from gpufield.testing import faultloop2

    a = faultloop2._parse(["--fault", "nangrad", "--model", "transformer", "--hidden", "16", "--vocab", "32"])
    model = faultloop2._model(a)
    model.poison = True
    x = torch.randint(0, 32, (2, 9), generator=torch.Generator().manual_seed(0))
    loss = torch.nn.functional.cross_entropy(model(x[:, :-1]).reshape(-1, 32), x[:, 1:].reshape(-1))
    loss.backward()
    assert torch.isfinite(loss)
    assert torch.isnan(torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0))
    with pytest.raises(SystemExit):  # a worker exception needs a DataLoader with workers
        faultloop2._parse(["--fault", "worker_exception"])
