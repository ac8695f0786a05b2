"""Root fixes for the public4 misses (tests/triage/corpus/public4, every row a dev row), each checked on the
row's real excerpt against the row's own label, and, where a general form exists, on a second real example of
the same form from another public thread. Lines are verbatim from the cited threads.

Independent sources: the rows' labels (class, blame, action) from each thread's resolution; the message
formats as the programs print them (Megatron-LM's NaN guard, Slurm's task/cgroup OOM report, bash's job
notification, darknet's ``check_error``, ``nvidia-smi -q``), seen in the real lines below.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from _triage_helpers import check_dev_row, events_of_text, top_incident_of_text

from gpufield.triage.labels import parse_index

CORPUS = Path(__file__).parent / "corpus" / "public4"
# row -> thread (INDEX.md "Source thread" column)
FIXED = {
    "p002": "https://github.com/leptonai/gpud/pull/80",
    "p013": "https://github.com/nextflow-io/nextflow/issues/5932",
    "p014": "https://github.com/dstndstn/tractor/issues/126",
    "p015": "https://github.com/hiyouga/LlamaFactory/issues/2097",
    "p018": "https://github.com/NVIDIA/Megatron-LM/issues/780",
    "p019": "https://github.com/alibaba/Pai-Megatron-Patch/issues/60",
    "p020": "https://github.com/alibaba/Pai-Megatron-Patch/issues/366",
    "p027": "https://github.com/AlexeyAB/darknet/issues/3496",
    "p031": "https://github.com/NVIDIA/nccl/issues/2013",
}




@pytest.fixture(scope="module")
def rows():
    return {c.number: c for c in parse_index(CORPUS / "INDEX.md") if c.number in FIXED}


@pytest.mark.parametrize("rid", sorted(FIXED))
def test_row_is_right_on_class_blame_and_action(rows, rid):
    check_dev_row(CORPUS, rows[rid], FIXED[rid])


# --- Megatron's NaN guard: an assertion that stops the run, not a printed metric ------------------------------


def test_megatron_nan_guard_names_rank_node_and_device(tmp_path):
    # https://github.com/alibaba/Pai-Megatron-Patch/issues/60 (older optimizer wording)
    line = ("AssertionError: Rank 3: found NaN in local grad norm in backwards pass. Device: 3, node: "
            "set-zw04-kubernetes-pc133.mt")
    nan = [e for e in events_of_text(tmp_path, line) if e.kind == "nan_loss"]
    assert len(nan) == 1
    e = nan[0]
    assert (e.rank, e.host, e.gpu_index, e.fields["fatal"], e.fields["is_loss"]) == (
        3, "set-zw04-kubernetes-pc133.mt", 3, True, False)
    top = top_incident_of_text(tmp_path, line)
    assert (top.cls, top.established, top.rank) == ("NAN_LOSS", True, 3)


def test_megatron_core_rerun_machine_wording_is_the_same_event(tmp_path):
    # https://github.com/modelscope/ms-swift/issues/8366 (Megatron-Core rerun state machine, title of the issue)
    line = ("GKD训练Qwen3.5时报错Rank 7, node ed04b71d5c00, device 7, iteration -1: Unexpected result nan "
            "(message='found NaN in local grad norm for bucket #0 in backward pass before data-parallel "
            "communication collect")
    nan = [e for e in events_of_text(tmp_path, line) if e.kind == "nan_loss"]
    assert [(e.rank, e.host, e.gpu_index) for e in nan] == [(7, "ed04b71d5c00", 7)]
    assert top_incident_of_text(tmp_path, line).cls == "NAN_LOSS"


# --- Slurm task/cgroup OOM: newer singular wording ----------------------------------------------------------


@pytest.mark.parametrize("line, step", [
    # https://github.com/dstndstn/tractor/issues/126 (re-prefixed by a wrapper)
    ("qdo-srun.py: srun#64: slurmstepd: error: Detected 1 oom_kill event in StepId=43622791.67. Some of the step "
     "tasks have been OOM Killed.", "43622791.67"),
    # https://github.com/nextflow-io/nextflow/issues/5932 (title)
    ("slurmstepd: error: Detected 1 oom_kill event in StepId=11300781.0.", "11300781.0"),
    # https://github.com/lanl/PyBNF/issues/118 (older wording, still read)
    ("slurmstepd: error: Detected 2 oom-kill event(s) in step 3756240.batch cgroup.", "3756240.batch"),
])
def test_slurm_oom_kill_wordings(tmp_path, line, step):
    oom = [e for e in events_of_text(tmp_path, line) if e.kind == "host_oom_kill"]
    assert [e.fields["step"] for e in oom] == [step]
    top = top_incident_of_text(tmp_path, line)
    assert (top.cls, top.established) == ("HOST_OOM_KILL", True)


def test_action_names_the_host_the_blame_stage_found(tmp_path):
    # https://github.com/nextflow-io/nextflow/issues/5932: srun names the node; the action must say it
    line = ("slurmstepd: error: Detected 1 oom_kill event in StepId=11300781.0. Some of the step tasks have been "
            "OOM Killed. srun: error: sdumont6156: task 0: Out Of Memory")
    top = top_incident_of_text(tmp_path, line)
    assert top.host == "sdumont6156" and "sdumont6156" in top.action and "not named" not in top.action


# --- bash's "<pid> Killed" job notification ----------------------------------------------------------------


@pytest.mark.parametrize("line, pid", [
    ("cli_demo.sh: line 5: 12989 Killed", 12989),  # https://github.com/hiyouga/LlamaFactory/issues/2097
    # https://github.com/ArjunaCluster/ArjunaUsers/issues/52 (a Slurm batch script)
    ("/var/spool/slurmd/job00191/slurm_script: line 28:  8156 Killed                  python3 main.py --prop hform "
     "--epochs 400 --lr_milestones 50 100 200 --gamma 0.25 --normalizing_const_AO 10000.0 --lr_generator 0.001 "
     "--lr_conv 0.001", 8156),
])
def test_bash_killed_is_a_sigkill_of_unknown_sender(tmp_path, line, pid):
    sig = [e for e in events_of_text(tmp_path, line) if e.kind == "signal_death"]
    assert [(e.pid, e.fields["signal"], e.fields.get("sent_by_agent")) for e in sig] == [(pid, 9, None)]
    top = top_incident_of_text(tmp_path, line)
    # a bare SIGKILL: the OOM killer is the commonest sender, not established (lead's decision, RESULTS.md)
    assert (top.cls, top.established) == ("HOST_OOM_KILL", False)
    assert "dmesg" in top.action


def test_bash_killed_with_the_oom_line_is_established(tmp_path):
    # https://github.com/ArjunaCluster/ArjunaUsers/issues/52: the script's Killed line and Slurm's cgroup report
    text = ("/var/spool/slurmd/job00191/slurm_script: line 28:  8156 Killed                  python3 main.py\n"
            "slurmstepd: error: Detected 1 oom-kill event(s) in StepId=191.batch cgroup. Some of your processes may "
            "have been killed by the cgroup out-of-memory handler.")
    top = top_incident_of_text(tmp_path, text)
    assert (top.cls, top.established) == ("HOST_OOM_KILL", True)


def test_word_killed_in_prose_is_not_a_signal(tmp_path):
    # https://github.com/deepspeedai/DeepSpeed/issues/3160: the DeepSpeed launcher's own teardown line
    line = "[2023-04-07 13:09:33,201] [INFO] [launch.py:318:sigkill_handler] Killing subprocess 80"
    assert not [e for e in events_of_text(tmp_path, line) if e.kind == "signal_death" and e.fields.get("reporter")]


# --- darknet's check_error: "CUDA Error:" / "CUDA Error Prev:" -----------------------------------------------


@pytest.mark.parametrize("line, name", [
    ("CUDA Error: uncorrectable ECC error encountered: Cannot allocate memory",  # AlexeyAB/darknet#3496
     "cudaErrorECCUncorrectable"),
    ("CUDA Error Prev: an illegal memory access was encountered: File exists", None),  # AlexeyAB/darknet#3259
])
def test_darknet_cuda_error_lines(tmp_path, line, name):
    evs = [e for e in events_of_text(tmp_path, line) if e.source == "cuda"]
    assert len(evs) == 1
    if name:
        assert evs[0].kind == "cuda_error" and evs[0].fields["cuda_error"] == name
    else:
        assert evs[0].kind == "cuda_illegal_address"
    assert top_incident_of_text(tmp_path, line).cls == ("ECC_UNCORRECTABLE" if name else "CUDA_ILLEGAL_ADDRESS")


# --- nvidia-smi -q: a section pasted without its GPU header; a pending row remap ------------------------------


PENDING = """    Remapped Rows
        Correctable Error                 : 0
        Uncorrectable Error               : 4
        Pending                           : Yes"""  # https://github.com/leptonai/gpud/pull/80


def test_headless_remapped_rows_section_is_read(tmp_path):
    evs = [e for e in events_of_text(tmp_path, PENDING, "smi-q.txt") if e.kind == "row_remap"]
    assert [(e.fields["uncorrectable"], e.fields["pending"], e.line) for e in evs] == [(4, True, 2)]


def test_pending_remap_needs_a_gpu_reset(tmp_path):
    top = top_incident_of_text(tmp_path, PENDING)
    assert (top.cls, top.action_kind) == ("GPU_RESET_REQUIRED", "RESET_GPU")
    assert "4 uncorrectable" in top.note


# --- ibv_modify_qp cannot bring the queue pair to RTR: the NICs do not reach each other ----------------------


@pytest.mark.parametrize("line", [
    # https://github.com/NVIDIA/nccl-tests/issues/185
    "dgxh100-3:225140:225355 [0] misc/ibvwrap.cc:187 NCCL WARN Call to ibv_modify_qp failed with error Network is "
    "unreachable",
    # https://github.com/NVIDIA/nccl-tests/issues/227 (title)
    "Test fail caused by ibvwrap.c:160 NCCL WARN Call to ibv_modify_qp failed with error Connection timed out.",
])
def test_qp_connect_failure_gets_the_fabric_reachability_action(tmp_path, line):
    top = top_incident_of_text(tmp_path, line)
    assert (top.cls, top.action_kind) == ("NCCL_NETWORK_CONFIG", "FIX_CONFIG")
    assert "NCCL_IB_GID_INDEX" in top.action and "NCCL_CROSS_NIC" in top.action


def test_other_ibv_failures_keep_their_own_action(tmp_path):
    # https://github.com/NVIDIA/nccl-tests/issues/206 (title; public3 dev row r026): memory registration refused
    top = top_incident_of_text(tmp_path, "misc/ibvwrap.cc:278 NCCL WARN Call to ibv_reg_mr_iova2 failed with error Cannot allocate memory")
    assert top.cls == "NCCL_NETWORK_CONFIG" and "NCCL_CROSS_NIC" not in top.action and "memlock" in top.action.lower()
