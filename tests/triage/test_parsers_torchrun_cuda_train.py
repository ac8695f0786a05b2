"""torchrun, CUDA and training-loop parsers on the real lines of triage.md §2.9-2.11.

Byte counts are computed here from the printed numbers (PyTorch prints binary units: MiB = 2**20).
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from _triage_helpers import by_line

from gpufield.triage.ingest import IngestOptions, ingest
from gpufield.triage.parsers import CudaParser
from gpufield.triage.protocols import LineContext

DATA = Path(__file__).parent / "data"
MiB, GiB = 2**20, 2**30




RUN = by_line(DATA / "torchrun_blocks.log")
CUDA = by_line(DATA / "cuda_variants.log")
TRAIN = by_line(DATA / "train_variants.log")


def test_elastic_lines():
    assert RUN[1].kind == "signal_death" and RUN[1].fields["signal_name"] == "SIGTERM" and RUN[1].pid == 426
    assert RUN[1].fields["sent_by_agent"] is True and RUN[1].severity == "info"
    a, b = RUN[2], RUN[3]
    assert (a.kind, a.code, a.pid, a.fields["local_rank"]) == ("child_failed", "1", 429, 3)
    assert (b.code, b.pid, b.fields["signal_name"]) == ("-6", 29577, "SIGABRT")
    assert b.ts_ns == int(datetime(2026, 11, 29, 11, 57, 7, tzinfo=UTC).timestamp()) * 10**9 + 249000000
    assert RUN[58].kind == "rendezvous_error" and RUN[58].code == "RendezvousTimeoutError"


def test_child_failed_block_three_failures():
    entries = [RUN[n] for n in (10, 17, 26)]           # lines of "[1]:", "[2]:", "[0]:"
    assert [e.rank for e in entries] == [1, 2, 0]
    assert [e.pid for e in entries] == [2319246, 2319247, 2319245]
    assert [e.fields["root_cause"] for e in entries] == [False, False, True]
    assert {e.host for e in entries} == {"gpu005.aire.lee.alces.network"}
    assert all(e.fields["script"] == "scripts/pretrain_tdv.py" and e.code == "1" for e in entries)
    assert entries[2].severity == "fatal" and entries[2].fields.get("error_file") is None
    assert entries[0].ts_ns == int(datetime(2026, 6, 21, 21, 35, 22, tzinfo=UTC).timestamp()) * 10**9
    assert not set(range(5, 35)) - {10, 17, 26} & RUN.keys()   # the block's other lines make no events


def test_child_failed_block_without_closing_separator():
    root, other = RUN[49], RUN[40]
    assert (root.rank, root.pid, root.fields["root_cause"], root.host) == (0, 8206, True, "rtxA6000")
    assert (other.rank, other.pid, other.fields["root_cause"]) == (1, 8207, False)


def test_corpus_style_signal_block(tmp_path):
    block = "\n".join([
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:",
        "train.py FAILED", "-" * 60, "Failures:", "  <NO_OTHER_FAILURES>", "-" * 60,
        "Root Cause (first observed failure):", "[0]:", "  time      : 2025-06-12_22:45:44",
        "  host      : node-7", "  rank      : 12 (local_rank: 4)", "  exitcode  : -9 (pid: 79468)",
        "  error_file: <N/A>", "  traceback : Signal 9 (SIGKILL) received by PID 79468", "-" * 60, ""])
    p = tmp_path / "agent.log"
    p.write_text(block)
    (e,) = ingest([p]).events
    assert (e.rank, e.fields["local_rank"], e.code, e.fields["signal"], e.fields["signal_name"]) == (12, 4, "-9", 9, "SIGKILL")
    assert e.line == 8 and e.host == "node-7"


def test_oom_three_generations():
    g3, g2, g1 = CUDA[1], CUDA[2], CUDA[3]
    assert g3.fields["generation"] == 3 and g3.gpu_index == 0
    assert g3.fields["tried_bytes"] == round(938.00 * MiB) and g3.fields["capacity_bytes"] == round(5.60 * GiB)
    assert g3.fields["free_bytes"] == round(49.44 * MiB) and g3.fields["process_bytes"] == round(948.00 * MiB)
    assert g3.fields["allocated_bytes"] == round(3.73 * GiB)
    assert g3.fields["reserved_bytes"] == round(3.73 * GiB) + round(233.73 * MiB)
    assert g2.fields["generation"] == 2 and g2.fields["tried_bytes"] == round(8.06 * GiB)   # "capacty" typo
    assert g2.fields["capacity_bytes"] == round(23.70 * GiB) and g2.fields["free_bytes"] == round(1.27 * GiB)
    assert g1.fields["generation"] == 1 and g1.gpu_index == 3
    assert (g1.fields["tried_bytes"], g1.fields["allocated_bytes"]) == (round(388.00 * MiB), round(28.42 * GiB))
    assert (g1.fields["free_bytes"], g1.fields["reserved_bytes"]) == (round(340.94 * MiB), round(30.39 * GiB))
    assert all(e.kind == "cuda_oom" and e.code == "2" for e in (g1, g2, g3))


def test_cuda_errors_and_boilerplate():
    assert CUDA[4].kind == "cuda_illegal_address" and CUDA[4].code == "700"
    assert (CUDA[5].kind, CUDA[5].fields["cuda_error"], CUDA[5].code) == ("cuda_error", "cudaErrorECCUncorrectable", "214")
    assert CUDA[6].fields["cuda_error"] == "cudaErrorNvlinkUncorrectable"
    assert not {7, 8, 9} & CUDA.keys()             # "CUDA kernel errors might be ..." etc.
    assert CUDA[10].kind == "bus_error" and CUDA[10].pid == 56811 and CUDA[10].fields["shm_hint"] is True
    assert CUDA[12].kind == "gpu_handle_error" and CUDA[12].gpu_bdf == "0000:03:00.0"


def test_oom_at_checkpoint_gather_is_tagged():
    line = ("fully_sharded_data_parallel.py:2224: UserWarning: Failed to clone() tensor with name lm_head.weight. "
            "Error: CUDA out of memory. Tried to allocate 502.00 MiB (GPU 1; 39.59 GiB total capacity; 35.54 GiB "
            "already allocated; 276.19 MiB free; 37.22 GiB reserved in total by PyTorch) If reserved memory is >> allocated "
            "memory try setting max_split_size_m")
    e = CudaParser().parse_line(line, LineContext("x", 1, 2026))
    assert e.fields["phase"] == "checkpoint_gather" and e.gpu_index == 1 and e.fields["tried_bytes"] == round(502 * MiB)


def test_training_lines():
    o = [TRAIN[n] for n in (1, 2, 3)]
    assert [(e.fields["loss_scale"], e.fields["new_loss_scale"]) for e in o] == [(4294967296.0, 2147483648.0), (2.0, 1.0), (8.0, 4.0)]
    assert all(e.kind == "loss_scale_overflow" and e.rank == 0 for e in o)
    assert TRAIN[4].kind == "skipped_step" and (TRAIN[4].fields["step"], TRAIN[4].fields["skipped"]) == (2, 2)
    assert 5 not in TRAIN                          # skipped=0 is no incident
    assert TRAIN[6].kind == "nan_loss" and (TRAIN[6].fields["iter"], TRAIN[6].fields["step"]) == (16, 1)
    assert 7 not in TRAIN                          # finite loss: only with with_loss=True


def test_with_loss_option():
    evs = ingest([DATA / "train_variants.log"], options=IngestOptions(with_loss=True)).events
    losses = [e for e in evs if e.kind == "loss"]
    assert [(e.line, e.fields["loss"], e.fields["iter"], e.fields["step"]) for e in losses] == [(7, 1.921, 13, 0)]


@pytest.mark.parametrize(("text", "value"), [
    ("step 7 | loss: nan | grad_norm: 1.2", "nan"),
    ("{'loss': inf, 'learning_rate': 2e-05, 'epoch': 0.1}", "inf"),
    ("iteration 100/ 1000 | lm loss: NaN |", "NaN"),
])
def test_nan_inf_forms(text, value):
    from gpufield.triage.parsers import TrainParser

    e = TrainParser().parse_line(text, LineContext("x", 1, 2026))
    assert e.kind == "nan_loss" and e.fields["value"] == value
    assert TrainParser().parse_line("2026-01-01 INFO step 3 loss 0.53 info", LineContext("x", 1, 2026)) is None
