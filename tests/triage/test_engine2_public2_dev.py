"""Root fixes for public2 dev-half rows (tests/triage/corpus/public2/INDEX.md), scored against the
rows' own labels (class, blame, action): the labels are the independent source; the log lines are
the real thread excerpts the rows cite. Only ``dev`` rows are read here (the test half stays unseen).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufield.triage import analyze
from gpufield.triage.catalog import cuda_driver_results
from gpufield.triage.evaluate import score
from gpufield.triage.labels import parse_index
from gpufield.triage.parsers import CudaParser, DcgmParser, NcclParser, TorchrunParser
from gpufield.triage.protocols import LineContext

CORPUS = Path(__file__).parent / "corpus" / "public2"
# row -> thread (INDEX.md "Source thread" column)
FIXED = {
    "q008": "https://github.com/NVIDIA/DCGM/issues/270",
    "q009": "https://github.com/NVIDIA/nccl/issues/629",
    "q016": "https://github.com/brain-score/vision/pull/950",
    "q018": "https://github.com/NVIDIA/nccl/issues/2428",
    "q022": "https://github.com/NVIDIA/nccl-tests/issues/188",
    "q026": "https://github.com/hiyouga/LlamaFactory/issues/315",
    "q031": "https://github.com/nagadit/DeepFaceLab_Linux/issues/89",
    "q037": "https://github.com/LTH14/mar/issues/69",
    "q042": "https://github.com/huggingface/peft/issues/335",
    "q048": "https://github.com/SmartFlowAI/EmoLLM/issues/290",
}
CTX = LineContext("x.log", 1, 2026, 0, None)


@pytest.fixture(scope="module")
def rows():
    return {c.number: c for c in parse_index(CORPUS / "INDEX.md") if c.number in FIXED}


@pytest.mark.parametrize("qid", sorted(FIXED))
def test_dev_row_is_right_on_class_blame_and_action(rows, qid):
    case = rows[qid]
    assert case.split == "dev"  # never a test-half row
    assert FIXED[qid] in (CORPUS / "INDEX.md").read_text(encoding="utf-8").split(f"| {qid} |", 1)[1].split("\n", 1)[0]
    res = analyze([str(CORPUS / p) for p in case.paths])
    top = res.incidents[0] if res.incidents else None
    r = score(case, [(i.cls, i.established, i.confidence) for i in res.incidents], top)
    assert r.correct, (qid, r.predicted, case.label)
    assert all(r.blame.values()), (qid, r.blamed, case.blame)
    assert r.action_ok is not False, (qid, top and (top.action_kind, top.action))


def test_nccl_cuda_failure_is_a_cuda_event_with_nccl_site():
    # q009 (NVIDIA/nccl#629): NCCL's CUDACHECK message; the class comes from the CUDA error
    ev = NcclParser().parse_line("<host-A>:104934:104934 [1] init.cc:204 NCCL WARN Cuda failure 'an illegal memory "
                                 "access was encountered'", CTX)
    assert (ev.source, ev.kind, ev.code, ev.host) == ("cuda", "cuda_illegal_address", "700", "<host-A>")
    assert ev.fields["site"] == "init.cc:204" and ev.fields["reported_by"] == "nccl"


def test_cuda_driver_api_names():
    # q031 (nagadit/DeepFaceLab_Linux#89), TensorFlow's fatal line
    line = ("F tensorflow/stream_executor/lib/statusor.cc:34] Attempting to fetch value instead of handling error "
            "Internal: failed initializing StreamExecutor for CUDA device ordinal 0: Internal: failed call to "
            "cuDevicePrimaryCtxRetain: CUDA_ERROR_ECC_UNCORRECTABLE: uncorrectable ECC error encountered")
    ev = CudaParser().parse_line(line, CTX)
    assert (ev.kind, ev.code, ev.gpu_index) == ("cuda_error", "214", 0)
    assert ev.fields["cuda_error"] == "cudaErrorECCUncorrectable"
    # generic driver names go through the same table (values: cuda.h enum cudaError_enum)
    ev = CudaParser().parse_line("RuntimeError: CUDA_ERROR_ILLEGAL_ADDRESS", CTX)
    assert ev.kind == "cuda_illegal_address" and ev.fields["message"] == "an illegal memory access was encountered"
    table = cuda_driver_results()
    assert table["CUDA_ERROR_LAUNCH_FAILED"].code == 719 and table["CUDA_ERROR_NO_DEVICE"].code == 100


def test_slurm_cgroup_oom_and_srun_task_oom():
    # q016 (brain-score/vision#950)
    p = TorchrunParser()
    a = p.parse_line("slurmstepd: error: Detected 1 oom-kill event(s) in StepId=37205392.0. Some of your processes "
                     "may have been killed by the cgroup out-of-memory handler.", CTX)
    b = p.parse_line("srun: error: <host-A>: task 0: Out Of Memory", CTX)
    assert (a.kind, a.fields["step"], a.fields["kills"], a.host) == ("host_oom_kill", "37205392.0", 1, None)
    assert (b.kind, b.host, b.fields["tasks"]) == ("host_oom_kill", "<host-A>", "0")


def test_store_bind_failure_and_dcgm_health_text():
    # q048 (SmartFlowAI/EmoLLM#290)
    ev = TorchrunParser().parse_line("The server socket has failed to listen on any local network address. useIpv6: 0, "
                                     "code: -98, name: EADDRINUSE, message: address already in use", CTX)
    assert ev.kind == "rendezvous_error" and ev.fields["bind_failed"]
    # q008 (NVIDIA/DCGM#270)
    ev = DcgmParser().parse_line("ERROR [1514002:1514004] [[Health]] Detected a WARNING in health system Thermal: "
                                 "'Detected clocks event due to thermal violation in GPU 2. Verify that the cooling "
                                 "on this machine is functional", CTX)
    assert (ev.kind, ev.gpu_index, ev.fields["active"]) == ("clock_event", 2, True)
    assert "thermal" in ev.fields["reason"].lower()
