"""Root fixes for the public5 dev-half misses (tests/triage/corpus/public5), each checked on the dev row's real
excerpt against the row's own label, plus a real counter-example where the fix could over-fire. Lines are
verbatim from the cited threads; no test-half row is used here.

Independent sources: the rows' labels (class, blame, action) from each thread's resolution; the message formats
as the programs print them (mm/oom_kill.c dump_header, mm/show_mem.c, NCCL src/bootstrap.cc, busybox nslookup,
urllib3's NameResolutionError), seen in the real lines below.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from _triage_helpers import check_dev_row, events_of_text, top_incident_of_text

from gpufield.triage.labels import parse_index

CORPUS = Path(__file__).parent / "corpus" / "public5"
# dev row -> thread (INDEX.md "Source thread" column)
FIXED = {
    "p005": "https://github.com/RTXteam/RTX/issues/1680",
    "p006": "https://github.com/marin-community/marin/issues/6940",
    "p021": "https://github.com/cBio/cbio-cluster/issues/232",
    "p024": "https://github.com/modelscope/ms-swift/issues/6368",
}


@pytest.fixture(scope="module")
def rows():
    return {c.number: c for c in parse_index(CORPUS / "INDEX.md") if c.number in FIXED}


@pytest.mark.parametrize("rid", sorted(FIXED))
def test_row_is_right_on_class_blame_and_action(rows, rid):
    check_dev_row(CORPUS, rows[rid], FIXED[rid])


# --- the OOM report's header establishes the kill even when the victim line is cut off -----------------------


def test_oom_report_header_is_a_kill_with_its_trigger_task(tmp_path):
    # https://github.com/RTXteam/RTX/issues/1680 (dmesg -T; memcg OOM)
    line = ("[Wed Sep 29 07:12:20 2021] python3 invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, "
            "oom_score_adj=0")
    (e,) = [e for e in events_of_text(tmp_path, line) if e.kind == "host_oom_kill"]
    assert (e.fields["trigger"], e.fields["gfp_mask"], e.fields.get("pid"), e.fields["report_header"]) == (
        "python3", "0xcc0", None, True)
    top = top_incident_of_text(tmp_path, line)
    assert (top.cls, top.established) == ("HOST_OOM_KILL", True)


# --- NCCL's bootstrap text without its WARN prefix (PyTorch's "Last error:" detail, a pasted title) ----------


def test_bare_bootstrap_no_interface_is_network_config_but_the_info_line_is_not(tmp_path):
    # https://github.com/marin-community/marin/issues/6940 (the message as quoted)
    (e,) = events_of_text(tmp_path, "Bootstrap : no socket interface found")
    assert (e.kind, e.fields["message"]) == ("nccl_warn", "Bootstrap : no socket interface found")
    # a healthy run's INFO line (NVIDIA/nccl#1232 format) stays an init fact, not a warning
    info = "[0] node0:13571:13571 [0] NCCL INFO Bootstrap : Using enp10s0:10.10.7.107<0>"
    assert [e.kind for e in events_of_text(tmp_path, info)] == ["nccl_bootstrap"]


# --- a host name the launch could not resolve is the rendezvous endpoint; a model download's is not --------


def test_http_download_name_resolution_failure_is_not_a_rendezvous(tmp_path):
    # https://github.com/yerfor/GeneFace/issues/283: urllib3 could not resolve huggingface.co (a download)
    text = "\n".join([
        "Traceback (most recent call last):",
        '  File "/home/zhangyw/.conda/envs/geneface/lib/python3.9/site-packages/requests/adapters.py", line 589, in send',
        "    resp = conn.urlopen(",
        '  File "/home/zhangyw/.conda/envs/geneface/lib/python3.9/site-packages/urllib3/connectionpool.py", line 843, in urlopen',
        "    retries = retries.increment(",
        '  File "/home/zhangyw/.conda/envs/geneface/lib/python3.9/site-packages/urllib3/util/retry.py", line 519, in increment',
        "    raise MaxRetryError(_pool, url, reason) from reason  # type: ignore[arg-type]",
        "urllib3.exceptions.MaxRetryError: HTTPSConnectionPool(host='huggingface.co', port=443): Max retries exceeded "
        "with url: /facebook/hubert-large-ls960-ft/resolve/main/preprocessor_config.json (Caused by NameResolutionError("
        "\"<urllib3.connection.HTTPSConnection object at 0x78a62d8f0040>: Failed to resolve 'huggingface.co' "
        "([Errno -3] Temporary failure in name resolution)\"))",
    ])
    evs = events_of_text(tmp_path, text)
    assert not [e for e in evs if e.kind == "name_unresolved"]  # a Python exception line, read as one
    top = top_incident_of_text(tmp_path, text)
    assert top is None or top.cls != "RENDEZVOUS_UNREACHABLE"


def test_unresolved_master_name_is_the_rendezvous_endpoint(tmp_path):
    # https://github.com/modelscope/ms-swift/issues/6368 (the DLC wait script, then torchrun's own traceback)
    text = (CORPUS / "p024-dlc-nslookup-master-0-name-does-not-resolve-torchrun.log").read_text(encoding="utf-8")
    names = [e.fields["name"] for e in events_of_text(tmp_path, text) if e.kind == "name_unresolved"]
    assert names == ["(null)", "dlc1dwuhvtro4c27-master-0"]
    top = top_incident_of_text(tmp_path, text)
    assert (top.cls, top.established) == ("RENDEZVOUS_UNREACHABLE", True)
    assert "dlc1dwuhvtro4c27-master-0" in top.action
    # the wait script's lines alone (no launch in the log) name no rendezvous
    alone = "nslookup: can't resolve 'dlc1dwuhvtro4c27-master-0': Name does not resolve"
    top = top_incident_of_text(tmp_path, alone)
    assert top is None or top.cls != "RENDEZVOUS_UNREACHABLE"


# --- a memory report with no free swap is host memory exhaustion, named on the syslog host ------------------


def test_free_swap_zero_is_an_unestablished_host_oom_on_its_host(tmp_path):
    # https://github.com/cBio/cbio-cluster/issues/232 (the admin's syslog line)
    line = "Mar 10 01:33:03 cpu-6-2 kernel: Free swap  = 0kB"
    (e,) = events_of_text(tmp_path, line)
    assert (e.kind, e.host, e.fields["free_swap_kb"]) == ("mem_report", "cpu-6-2", 0)
    top = top_incident_of_text(tmp_path, line)
    assert (top.cls, top.established, top.host) == ("HOST_OOM_KILL", False, "cpu-6-2")
