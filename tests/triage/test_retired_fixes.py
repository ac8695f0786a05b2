"""Issue 23: root fixes written from the misses of the retired test halves (split ``retired-test``; their blind
score is on record in benchmarks/triage_RESULTS.md, RETIRED-MISSES.md per corpus). Each test runs the engine on
the real excerpts of the rows the fix was written for and checks them against their own INDEX labels, plus the
rows the rule must leave alone."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufield.triage import analyze
from gpufield.triage.evaluate import score
from gpufield.triage.labels import parse_index

CORPUS = Path(__file__).resolve().parent / "corpus"


def _case(sub: str, number: str):
    return next(c for c in parse_index(CORPUS / sub / "INDEX.md") if c.number == number)


def _scored(sub: str, number: str):
    case = _case(sub, number)
    res = analyze([str(CORPUS / sub / p) for p in case.paths])
    top = res.incidents[0] if res.incidents else None
    return case, score(case, [(i.cls, i.established, i.confidence) for i in res.incidents], top)


@pytest.mark.parametrize("sub, number", [("public", "p060"), ("public", "p033"),  # retired rows of the fix
                                         ("public", "p032"), ("public", "p034")])  # dev rows it must keep
def test_loss_scale_collapse_is_below_the_default_initial_scale(sub, number):
    # p060: DeepSpeed's FP16_Optimizer form '[deepspeed] fp16 dynamic loss scale overflow! ... reducing to 1' is the
    # scale at its floor; p033 (clean): six skips calibrating 2**32 down to 2**26 are not a collapse; p032: five
    # skips from 64 to 2 are
    case, r = _scored(sub, number)
    assert case.split in ("dev", "retired-test")
    assert r.correct and r.action_ok is not False, (number, r.predicted, r.reported)


@pytest.mark.parametrize("sub, number, cls", [("public2", "q029", "SETUP_PHASE_TIMEOUT"),  # retired rows of the fix
                                              ("public2", "q045", "LAUNCH_SKEW"),
                                              ("public3", "r032", "RENDEZVOUS_UNREACHABLE")])  # dev row it keeps
def test_errors_that_show_the_store_answered_are_not_an_unreachable_rendezvous(sub, number, cls):
    # q029: a rank waiting in the store for rank 0's ncclUniqueId reached the store; q045: RendezvousClosedError is
    # a closed rendezvous read from the store (a late node); r032: a bare DistStoreError socket timeout stays
    case, r = _scored(sub, number)
    assert r.predicted == cls and r.correct and r.action_ok is not False, (number, r.predicted, r.reported)


@pytest.mark.parametrize("sub, number", [("public", "p038"), ("public3", "r008"),  # retired rows of the fix
                                         ("public3", "r009")])  # dev row it keeps
def test_dataloader_bus_error_forms_are_shm_exhaustion(sub, number):
    # p038: the worker's own SIGBUS handler text (torch/csrc/DataLoader.cpp); r008: the main process's message wrapped
    # after "Bus" by the reporter
    case, r = _scored(sub, number)
    assert r.predicted == "SHM_EXHAUSTED" and r.action_ok is not False, (number, r.predicted, r.reported)


@pytest.mark.parametrize("sub, number", [("public", "p054"), ("public2", "q030")])
def test_cascades_of_a_worker_that_went_away_are_peer_exit(sub, number):
    # p054: torchrun SIGTERMs the workers still alive (it stops the group after one failed); q030: the c10d store
    # client's socket was reset by the store's process before any progress
    case, r = _scored(sub, number)
    assert r.predicted == "PEER_PROCESS_EXIT" and r.root_ok and r.action_ok, (number, r.predicted, r.reported)


def test_store_reset_after_progress_is_no_incident(tmp_path):
    # the same reset printed after training progressed and the run finished is an exit-order warning, not a fault
    from _triage_helpers import top_incident_of_text

    assert top_incident_of_text(tmp_path, "\n".join([
        "step 10 loss 2.31", "step 20 loss 2.05", "training finished",
        "[rank1]:[W729 10:15:17.529361055 TCPStore.cpp:125] [c10d] recvValue failed on SocketImpl(fd=76, "
        "addr=[localhost]:60950, remote=[localhost]:29500): Connection reset by peer"])) is None


def test_nccl_mismatched_collective_check_is_a_desync_on_the_rank_it_names():
    # p037: NCCL's own 'Mismatched collective detected ... at and around rank 39'
    case, r = _scored("public", "p037")
    assert r.predicted == "COLLECTIVE_DESYNC" and r.blame_ok and r.action_ok, (r.predicted, r.blamed)


def test_nccl_cuda_oom_while_building_the_communicator_is_init_oom():
    # r010: NCCL's own "Cuda failure 'out of memory'" (alloc.h) with its return chain through p2p.cc/init.cc
    case, r = _scored("public3", "r010")
    assert r.predicted == "CUDA_OOM_INIT" and r.correct, (r.predicted, r.reported)


def test_xla_quoted_bootstrap_no_socket_interface_is_network_config():
    # r030: XLA's "Last NCCL warning(error): 'Bootstrap : no socket interface found'"
    case, r = _scored("public3", "r030")
    assert r.predicted == "NCCL_NETWORK_CONFIG" and r.action_ok, (r.predicted, r.reported)


def test_cuda_ecc_error_blames_the_one_rank_its_lines_name():
    # q033: the traceback has no rank; the same error re-raised by '[Rank 1] NCCL watchdog thread' names it
    case, r = _scored("public2", "q033")
    assert r.predicted == "ECC_UNCORRECTABLE" and r.blame_ok, (r.predicted, r.blamed)


def test_rm_init_adapter_failure_is_an_unestablished_lost_gpu_on_its_bus_id():
    # q043: NVRM "GPU 0000:81:00.0: RmInitAdapter failed!" (the GPU keeps disappearing; BMC logged a PCIe bus error)
    case, r = _scored("public2", "q043")
    assert r.predicted == "GPU_LOST_PCIE" and r.blame_ok and r.action_ok, (r.predicted, r.blamed)


def test_gdb_sigbus_stop_inside_ncclshmopen_is_container_shm():
    # p003: gdb's 'Thread N "x" received signal SIGBUS, Bus error.' with frame #0 in ncclShmOpen (JAX)
    case, r = _scored("public", "p003")
    assert r.predicted == "CONTAINER_SHM_IPC" and r.action_ok, (r.predicted, r.reported)


def test_etcd_v2_api_connection_refused_is_an_unreachable_rendezvous():
    # q006: python-etcd (torch's etcd rendezvous client) retrying /v2/machines on 'Connection refused'
    case, r = _scored("public2", "q006")
    assert r.predicted == "RENDEZVOUS_UNREACHABLE" and r.correct, (r.predicted, r.reported)


def test_aer_recovery_failure_names_the_gpu_below_the_port():
    # p027: fatal AER on root port 0000:00:03.0; the kernel's "nvidia 0000:03:00.0: AER: can't recover" names the GPU
    case, r = _scored("public", "p027")
    assert r.predicted == "GPU_LOST_PCIE" and r.blame_ok and r.action_ok, (r.predicted, r.blamed)
