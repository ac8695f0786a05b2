"""Root fixes of branch triage-v3 (issue 23), each checked on a labelled real input of a *dev* row:
public thread excerpts (tests/triage/corpus/public, public2) and real torchrun runs (corpus/faults,
made by benchmarks/triage_faults.py). The rows' own labels (class, blame, action) are the independent
source; test-half rows are never read here.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufield.triage import analyze
from gpufield.triage.engine.actions import ACTIONS, VARIANTS, Variant, action_for
from gpufield.triage.evaluate import score
from gpufield.triage.labels import parse_index
from gpufield.triage.parsers import PARSERS, PythonExceptionParser, SmiParser, TorchrunParser
from gpufield.triage.protocols import LineContext

CORPUS = Path(__file__).parent / "corpus"
#: dev rows each fix was written for, by sub-corpus; every one must be right on class, blame and action
ROWS = {
    "public": ("p018", "p023", "p035", "p051", "p058"),
    "public2": ("q013", "q038", "q040", "q046", "q049"),
    "faults": ("desync-ddp-2r-rank1-step5",
               "exception-ddp-2r-rank1-step4", "clean-noisy-ddp-2r-seed6", "clean-noisy-fsdp2-3r-seed7",
               "clean-noisy-ddp-4r-seed8-logdir", "clean-noisy-fsdp2-2r-seed9",
               "restart-exception-ddp-2r-rank1-step3", "restart-exception-fsdp2-3r-rank0-step2-logdir",
               "sigstop-fsdp2-2r-rank1-step3-v3", "nan-fsdp2-3r-rank1-step4-v3",
               "exception-fsdp2-2r-rank0-step3-logdir-v3", "oom-fsdp2-2r-rank0-step4-v3"),
}
CTX = LineContext("x.log", 1, 2026, 0, None)


def _case(sub: str, rid: str):
    case = next(c for c in parse_index(CORPUS / sub / "INDEX.md") if c.number == rid)
    assert case.split == "dev"  # never a test-half row
    return case


def _analyze(sub: str, case):
    return analyze([str(CORPUS / sub / p) for p in case.paths])


@pytest.mark.parametrize(("sub", "rid"), [(s, r) for s, rs in ROWS.items() for r in rs])
def test_dev_row_is_right_on_class_blame_and_action(sub, rid):
    case = _case(sub, rid)
    res = _analyze(sub, case)
    top = res.incidents[0] if res.incidents else None
    r = score(case, [(i.cls, i.established, i.confidence) for i in res.incidents], top)
    assert r.correct, (rid, r.predicted, case.label, [(i.cls, i.note) for i in res.incidents])
    assert all(r.blame.values()), (rid, r.blamed, case.blame)
    assert r.action_ok is not False, (rid, top and (top.action_kind, top.action, top.next_evidence))


def test_a_caught_and_retried_save_error_is_a_warning_of_a_healthy_run():
    # a real torchrun run: rank 0's first torch.save fails (missing folder), its traceback is printed, the retry
    # succeeds and every rank trains on to exit code 0 (faults/MANIFEST.json)
    res = _analyze("faults", _case("faults", "clean-noisy-ddp-2r-seed6"))
    assert res.incidents == []
    assert any("RuntimeError" in m and "training went on" in m for m, _ in res.engine.warnings)
    text = (CORPUS / "faults" / "clean-noisy-ddp-2r-seed6.log").read_text(encoding="utf-8")
    assert "RuntimeError: Parent directory" in text and "find_unused_parameters=True" in text


def test_an_exception_that_ends_a_rank_is_still_its_exit():
    # the same parser path, a rank that does *not* train on after its exception: still the root
    res = _analyze("faults", _case("faults", "exception-ddp-2r-rank1-step4"))
    top = res.incidents[0]
    assert (top.cls, top.rank, top.action_kind) == ("PEER_PROCESS_EXIT", 1, "FIX_CONFIG")


def test_oom_with_the_device_reporting_free_memory_is_fragmentation():
    # jhc13/taggui#188: 20 MiB failed while the device reported 2.35 GiB free; fixed by expandable_segments
    top = _analyze("public", _case("public", "p051")).incidents[0]
    assert top.cls == "CUDA_OOM_FRAGMENTATION" and "2.35 GiB free" in top.note
    assert "expandable_segments:True" in top.action


def test_sigkill_without_an_oom_killer_line_is_an_unestablished_host_oom_on_the_killed_rank():
    # label conflict, decided for the shared label (case 29, HOST_OOM_KILL on the same evidence) and the
    # issue's wording (only torchrun's own kill is "not OOM"): the fault corpus' PEER_PROCESS_EXIT label on
    # these self-SIGKILL runs is a counted miss, the rank blame and the action's first check still hold
    top = _analyze("faults", _case("faults", "sigkill-ddp-3r-rank2-step3")).incidents[0]
    assert (top.cls, top.established, top.rank) == ("HOST_OOM_KILL", False, 2)
    assert "Out of memory: Killed process" in top.action


def test_flat_pasted_traceback_keeps_its_frames():
    # kubeflow/pytorch-operator#313: the paste lost its indentation; the frames still say where it was raised
    lines = (CORPUS / "public2" / "q040-tcpstore-host-not-found-k8s-pytorchjob.log").read_text().splitlines()[1:11]
    p = PythonExceptionParser()
    assert p.opens_record(lines[0])
    rec = [lines[0]]
    for x in lines[1:]:
        if not p.continues_record(rec, x):
            break
        rec.append(x)
    assert rec[-1].startswith("store = TCPStore(")  # the exception line is left to the parsers
    ev = p.parse_record(rec, CTX)[0]
    assert ev.fields["frames"][-1].endswith("rendezvous.py:126:_tcp_rendezvous_handler")
    assert ev.fields["user_frame"] == "<home>/aihub/pytorchjobDemo2.py:115"


def test_failure_block_without_its_header_gives_the_rank_its_own_error():
    # pytorch#148976: the paste starts at the block's "bug.py FAILED" title; the entry's traceback ends with
    # rank 1's desync report, which must be read and carry rank 1
    lines = (CORPUS / "public2" / "q038-desync-detail-barrier-seqnum-torch-bug.log").read_text().splitlines()
    p = next(x for x in PARSERS if isinstance(x, TorchrunParser))  # the table's, with its inner parsers
    start = next(i for i, x in enumerate(lines) if x.endswith(" FAILED"))
    assert p.opens_record(lines[start]) and not TorchrunParser().opens_record("Worker group FAILED.")
    rec = [lines[start]]
    for x in lines[start + 1:]:
        if not p.continues_record(rec, x):
            break
        rec.append(x)
    evs = p.parse_record(rec, CTX)
    assert [(e.kind, e.rank) for e in evs] == [("child_failed", 1), ("desync", 1)]
    # a title line alone (a test runner's "x FAILED") gives nothing
    assert TorchrunParser().parse_record(["test_x FAILED"], CTX) == []


def test_topo_matrix_is_parsed_and_alone_suggests_p2p_over_the_switches():
    # NVIDIA/nccl#667: all_reduce_perf hung on every PXB/PIX pair; the reporter pasted only the matrix
    lines = (CORPUS / "public2" / "q046-topo-matrix-pxb-pix-pairs-hang-acs.log").read_text().splitlines()
    p = SmiParser()
    assert p.opens_record(lines[0]) and all(p.continues_record(lines[:i], lines[i]) for i in range(1, len(lines)))
    ev = p.parse_record(lines, CTX)[0]
    assert ev.kind == "gpu_topology" and ev.fields["links"] == {
        "0-1": "PXB", "0-2": "SYS", "0-3": "SYS", "1-2": "SYS", "1-3": "SYS", "2-3": "PIX"}
    top = _analyze("public2", _case("public2", "q046")).incidents[0]
    assert (top.cls, top.established) == ("P2P_BROKEN", False) and "0-1, 2-3" in top.note


def test_topology_printed_by_a_healthy_run_is_no_incident():
    # the same matrix beside a real clean run's log (training progress, exit 0): context, not a failure
    res = analyze([str(CORPUS / "public2" / "q046-topo-matrix-pxb-pix-pairs-hang-acs.log"),
                   str(CORPUS / "faults" / "clean-ddp-2r-seed0.log")])
    assert res.incidents == []


def test_ipv4_mapped_roce_gids_do_not_get_the_gid_index_fix():
    # NVIDIA/nccl#1814: status 12 with localGid ::ffff:<ip> (already the RoCE v2 IPv4 GID): no fix posted, the
    # GID index is not it; NVIDIA/nccl#902 (old format, no GID): NCCL_IB_TIMEOUT was the maintainer's knob
    p018 = _analyze("public", _case("public", "p018")).incidents[0]
    p023 = _analyze("public", _case("public", "p023")).incidents[0]
    assert "NCCL_IB_GID_INDEX" not in p018.action and "NCCL_IB_TIMEOUT" in p018.action
    assert "NCCL_IB_TIMEOUT" in p023.action


def test_action_variants_match_by_facts():
    v = Variant(facts=(("roce", "yes"), ("gid", "!ipv4_mapped"), ("peer", "*")), kind=None, template=None, next=None)
    assert v.matches({"roce": "yes", "peer": "10.0.0.2"})  # gid absent counts as "not ipv4_mapped"
    assert not v.matches({"roce": "yes", "gid": "ipv4_mapped", "peer": "10.0.0.2"})
    assert not v.matches({"roce": "yes", "peer": "-"})  # "-" is "not named"
    # every variant's kind is a known kind and every class of a variant has a default
    assert set(VARIANTS) <= set(ACTIONS)
    kind, text, nxt = action_for("UNKNOWN", {"scheduler_reason": "TIME LIMIT", "job_id": "7"}, exception=True)
    assert kind == "FIX_CONFIG" and "time limit" in text and nxt == ("sacct -j 7",)  # the scheduler's variant first


def test_oom_raised_while_the_model_is_moved_to_the_gpu_is_an_init_oom(tmp_path):
    # https://github.com/allenai/scifact/issues/15 (maintainer: RoBERTa-large does not fit when it is loaded): the
    # OOM line itself names no phase; the traceback above it shows from_pretrained(...).to(device)
    log = tmp_path / "run.log"
    log.write_text(
        "Traceback (most recent call last):\n"
        '  File "verisci/inference/rationale_selection/transformer.py", line 30, in <module>\n'
        "    model = AutoModelForSequenceClassification.from_pretrained(args.model).to(device).eval()\n"
        "  ...........\n"
        "    return t.to(device, dtype if t.is_floating_point() else None, non_blocking)\n"
        "RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 3.95 GiB total capacity; 786.99 MiB "
        "already allocated; 14.50 MiB free; 792.00 MiB reserved in total by PyTorch)\n", encoding="utf-8")
    top = analyze([str(log)]).incidents[0]
    assert top.cls == "CUDA_OOM_INIT" and "meta device" in top.action
