"""Root fixes for the public3 dev-half misses (tests/triage/corpus/public3/DEV-MISSES.md), each checked on the
row's real excerpt against the row's own label, and on a second real example of the same log form from another
public thread (none of them a public3 test row). Lines are verbatim from the cited threads.

Independent sources: the rows' labels (class, action) from each thread's resolution; NCCL's
``ncclGetErrorString`` / ``ncclResult_t`` as shipped in ``data/nccl_result.csv``; the kernel's OOM-killer
formats (mm/oom_kill.c) as real logs print them.
"""

from __future__ import annotations

import csv
import io
from importlib import resources
from pathlib import Path

import pytest
from _triage_helpers import check_dev_row, events_of_text, top_incident_of_text

from gpufield.triage.catalog import nccl_result, nccl_result_of_error_string
from gpufield.triage.labels import parse_index

CORPUS = Path(__file__).parent / "corpus" / "public3"
# row -> thread (INDEX.md "Source thread" column)
FIXED = {
    "r018": "https://github.com/NVIDIA/nccl/issues/473",
    "r026": "https://github.com/NVIDIA/nccl-tests/issues/206",
    "r031": "https://github.com/NVIDIA/nccl-tests/issues/219",
    "r032": "https://github.com/hiyouga/LlamaFactory/issues/6154",
    "r040": "https://github.com/alibaba-archive/alicloud-duplicity/issues/3",
}




@pytest.fixture(scope="module")
def rows():
    return {c.number: c for c in parse_index(CORPUS / "INDEX.md") if c.number in FIXED}


@pytest.mark.parametrize("rid", sorted(FIXED))
def test_dev_row_is_right_on_class_and_action(rows, rid):
    check_dev_row(CORPUS, rows[rid], FIXED[rid], blame=False)


# --- ncclGetErrorString texts -> ncclResult_t ------------------------------------------------------------------


def test_every_current_error_string_maps_back_to_its_code():
    for code in range(9):
        info = nccl_result(code)
        got = nccl_result_of_error_string(info.text)
        assert got is not None and got.code == code, (code, info.text)


def test_release_table_agrees_with_the_result_table_and_keeps_old_texts():
    text = resources.files("gpufield.triage").joinpath("data", "nccl_error_string.csv").read_text("utf-8")
    rows = list(csv.DictReader(io.StringIO("\n".join(ln for ln in text.splitlines() if not ln.startswith("#")))))
    current = {int(r["code"]): r["text"] for r in rows if r["last"] == "-"}
    assert current == {c: nccl_result(c).text for c in range(9)}  # two transcriptions of init.cc agree
    assert all(nccl_result(int(r["code"])).name == r["name"] for r in rows)
    # NCCL <= 2.17 printed the short texts (no "run with NCCL_DEBUG" hint), e.g. PyTorch's "NCCL Error 2: unhandled
    # system error" in the r018 thread; a word that merely starts the same way is not a match
    assert nccl_result_of_error_string("internal error").name == "ncclInternalError"
    assert nccl_result_of_error_string("unhandled system error").code == 2
    assert nccl_result_of_error_string("timeouts") is None and nccl_result_of_error_string("bogus") is None


# --- nccl-tests "Test NCCL failure" lines ----------------------------------------------------------------------


@pytest.mark.parametrize(("line", "kind", "code", "host"), [
    # r018, NVIDIA/nccl#473 (NCCL 2.8.4: the short text)
    ("fastmoe: Test NCCL failure common.cu:777 'unhandled system error'", "nccl_system_error", "2", "fastmoe"),
    # r031, NVIDIA/nccl-tests#219 (NCCL >= 2.18 text + " / " + ncclGetLastError())
    ("Test NCCL failure common.cu:959 'internal error - please report this issue to the NCCL developers / '",
     "nccl_internal_error", "3", None),
    # NVIDIA/nccl-tests#166
    ("ubuntu: Test NCCL failure common.cu:958 'unhandled system error (run with NCCL_DEBUG=INFO for details) / '",
     "nccl_system_error", "2", "ubuntu"),
    # NVIDIA/nccl-tests#322
    ("HCA-14: Test NCCL failure common.cu:1204 'unhandled cuda error (run with NCCL_DEBUG=INFO for details) / '",
     "nccl_internal_error", "1", "HCA-14"),
    # NVIDIA/nccl-tests#6 (nccl-tests before 2019: no host, no "Test")
    ("NCCL failure common.cu:908 'unhandled cuda error'.", "nccl_internal_error", "1", None),
])
def test_nccl_tests_failure_line_is_the_nccl_error_of_its_result(tmp_path, line, kind, code, host):
    evs = events_of_text(tmp_path, line)
    assert len(evs) == 1
    ev = evs[0]
    assert (ev.source, ev.kind, ev.code, ev.host) == ("nccl", kind, code, host)
    assert ev.fields["result"] == nccl_result(int(code)).name and ev.fields["site"].startswith("common.cu:")


def test_nccl_tests_testcheck_line_is_not_an_nccl_error(tmp_path):
    # NVIDIA/nccl-tests#322: the TESTCHECK line that follows carries no NCCL result
    assert events_of_text(tmp_path, " .. HCA-14 pid 1015577: Test failure common.cu:915") == []


def test_nccl_tests_system_error_with_the_shm_warning_is_established_shm(tmp_path):
    # NVIDIA/nccl-tests#166: NCCL says which syscall failed; the bare-error prior (r018) is then not needed
    top = top_incident_of_text(tmp_path, "\n".join([
        "ubuntu:9621:9685 [0] misc/shmutils.cc:112 NCCL WARN Error while creating shared memory segment "
        "/dev/shm/nccl-zTYolS (size 5967872)",
        "ubuntu:9621:9685 [0] NCCL INFO transport/shm.cc:114 -> 2",
        "ubuntu: Test NCCL failure common.cu:958 'unhandled system error (run with NCCL_DEBUG=INFO for details) / '",
    ]))
    assert (top.cls, top.established, top.action_kind) == ("CONTAINER_SHM_IPC", True, "FIX_CONFIG")


def test_bare_internal_error_prior_yields_to_a_named_cause(tmp_path):
    # NVIDIA/nccl-tests#204: the same internal error, but another host's WARN names a closed peer connection
    top = top_incident_of_text(tmp_path, "\n".join([
        "DisAI-4090-2: Test NCCL failure common.cu:961 'internal error - please report this issue to the NCCL "
        "developers / '",
        "DisAI-4090-3:63755:63768 [0] misc/socket.cc:50 NCCL WARN socketProgress: Connection closed by remote peer "
        "10.102.0.232<40318>",
    ]))
    assert top is not None and top.rule != "nccl_internal_prior"


# --- torch.distributed store errors ----------------------------------------------------------------------------


@pytest.mark.parametrize("line", [
    "torch.distributed.DistStoreError: Socket Timeout",  # r032; also alibaba/Pai-Megatron-Patch#468
    "RuntimeError: Socket Timeout",  # pytorch/pytorch#55571 (TCPStore.wait before DistStoreError existed)
    # OpenRLHF/OpenRLHF#1040 (the TCPStore server: the other ranks never joined)
    "torch.distributed.DistStoreError: Timed out after 1801 seconds waiting for clients. 1/3 clients joined.",
])
def test_store_errors_are_rendezvous_errors(tmp_path, line):
    evs = events_of_text(tmp_path, line)
    assert [(e.source, e.kind) for e in evs] == [("torchrun", "rendezvous_error")]
    top = top_incident_of_text(tmp_path, line)  # no endpoint in the line: the action asks for what each node was told to reach
    assert (top.cls, top.action_kind) == ("RENDEZVOUS_UNREACHABLE", "FIX_CONFIG")
    assert "MASTER_ADDR" in top.action and "<endpoint not named>" not in top.action


# --- kernel OOM killer, pre-4.19 wordings ----------------------------------------------------------------------


@pytest.mark.parametrize(("line", "pid", "name", "anon_kb", "cgroup", "score"), [
    # r040, alibaba-archive/alicloud-duplicity#3 (dmesg)
    ("[35881895.791331] Out of memory: Kill process 21518 (python2) score 752 or sacrifice child",
     21518, "python2", None, False, 752),
    ("[35881895.792304] Killed process 21518 (python2) total-vm:13345928kB, anon-rss:12721928kB, file-rss:4kB",
     21518, "python2", 12721928, None, None),
    # genular/pandora#49 (journal, 4.x: shmem-rss)
    ("May 07 21:43:54 doom kernel: Killed process 27438 (R) total-vm:38349780kB, anon-rss:1041924kB, file-rss:4kB, "
     "shmem-rss:0kB", 27438, "R", 1041924, None, None),
    # linux-test-project/ltp#1080 (RHEL 7: memory cgroup, ", UID n," after the name)
    ("Aug 16 20:29:54 hgzmm3cs239 kernel: Memory cgroup out of memory: Kill process 42453 (memcg_test_1) score 0 or "
     "sacrifice child", 42453, "memcg_test_1", None, True, 0),
    ("Aug 16 20:29:54 hgzmm3cs239 kernel: Killed process 42452 (memcg_test_1), UID 0, total-vm:7296kB, anon-rss:96kB, "
     "file-rss:164kB, shmem-rss:0kB", 42452, "memcg_test_1", 96, None, None),
    # redis/redis#2174 (RHEL 6, 2.6.32: ", UID n," before the name)
    ("Nov 29 01:00:04 localhost kernel: Killed process 21578, UID 503, (redis-server) total-vm:9100804kB, "
     "anon-rss:9066596kB, file-rss:64kB", 21578, "redis-server", 9066596, None, None),
])
def test_pre_4_19_oom_killer_lines(tmp_path, line, pid, name, anon_kb, cgroup, score):
    evs = events_of_text(tmp_path, line)
    assert [e.kind for e in evs] == ["host_oom_kill"]
    f = evs[0].fields
    assert (f["pid"], f["name"], f.get("anon_rss_kb"), f.get("cgroup"), f.get("score")) == (pid, name, anon_kb,
                                                                                              cgroup, score)


def test_oom_pair_counts_one_kill_and_names_the_host(tmp_path):
    # genular/pandora#49: the chosen task and its kill are one kill on host "doom"
    top = top_incident_of_text(tmp_path, "\n".join([
        "May 07 21:43:54 doom kernel: Out of memory: Kill process 27438 (R) score 31 or sacrifice child",
        "May 07 21:43:54 doom kernel: Killed process 27438 (R) total-vm:38349780kB, anon-rss:1041924kB, "
        "file-rss:4kB, shmem-rss:0kB",
    ]))
    assert (top.cls, top.host, top.established) == ("HOST_OOM_KILL", "doom", True)
    assert "(1 kill(s))" in top.note


# --- InfiniBand memory registration refused: the memlock limit -------------------------------------------------


def test_ibv_reg_mr_without_error_text_gets_the_memlock_action(tmp_path):
    # NCCL before 2.8 printed no errno; the fix was the memory-lock limit
    # (https://hhhyunwoo.github.io/posts/infiniband-nccl-issue)
    top = top_incident_of_text(tmp_path, "\n".join([
        "ibvwrap.c: 106 NCCL WARN Call to ibv_reg_mr failed",
        "NCCL INFO ib_plugin.c:448 -> 2",
        "NCCL INFO include/net.h:23 -> 2",
        "NCCL INFO transport/net.cc:248 -> 2",
    ]))
    assert (top.cls, top.action_kind) == ("NCCL_NETWORK_CONFIG", "FIX_CONFIG")
    assert "ulimit -l" in top.action and "memlock" in top.action


def test_ibv_create_cq_enomem_is_not_given_the_memlock_action(tmp_path):
    # deepseek-ai/DeepEP#143: a CQ, not a memory registration (NVIDIA/nccl#1191: the same error at 700 nodes
    # persisted with ulimit -l unlimited), so it keeps the IB set-up action
    top = top_incident_of_text(tmp_path, "\n".join([
        "msm-h200-2:4016:4653 [7] misc/ibvwrap.cc:190 NCCL WARN Call to ibv_create_cq failed with error Cannot "
        "allocate memory",
        "msm-h200-2:4016:4653 [7] NCCL INFO transport/net_ib.cc:659 -> 2",
    ]))
    assert top.cls == "NCCL_NETWORK_CONFIG" and "memlock" not in top.action
