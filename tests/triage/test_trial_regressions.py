"""Regressions from the new-user trial: an impossible timestamp, a ``.gz`` that is not gzip, a file
with no recognised line (the eval table's per-class count is in ``test_eval.py``)."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest
from rich.console import Console

from gpufield.triage import analyze
from gpufield.triage.analyze import TriageResult
from gpufield.triage.ingest import ingest
from gpufield.triage.report.summary import one_line, render

XID79 = "Aug 29 16:58:38 host-a kernel: [14282.651831] NVRM: Xid (PCI:0000:03:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.\n"
BAD_XID48 = "Mar 99 99:99:99 node-a kernel: NVRM: Xid (PCI:0000:3b:00): 48, pid=1, DBE (double bit error) (0x0000): FB_ADDR 0x1\n"
EARLY_XID13 = ("Aug 29 16:40:00 node-a kernel: NVRM: Xid (PCI:0000:3b:00): 13, pid=1, Graphics SM Warp Exception "
               "on (GPC 0, TPC 0): Out Of Range Address\n")


def _text(result: TriageResult) -> str:
    con = Console(record=True, width=200)
    render(result, con)
    return con.export_text()


def test_an_impossible_timestamp_keeps_the_event_and_warns_with_file_and_line(tmp_path):
    f = tmp_path / "kern.log"
    f.write_text(XID79 + BAD_XID48, encoding="utf-8")
    res = ingest([f])
    xid48 = [e for e in res.events if e.code == "48"]
    assert len(xid48) == 1 and xid48[0].ts_ns is None and xid48[0].gpu_bdf == "0000:3b:00.0"
    assert xid48[0].fields["bad_timestamp"] == "Mar 99 99:99:99"
    warns = [str(w) for w in res.stats.warnings]
    assert any(w.startswith(f"{f}:2: invalid timestamp 'Mar 99 99:99:99'") for w in warns), warns
    result = analyze([str(f)])
    assert any(f"{f}:2: invalid timestamp" in w for w in result.stats["warnings"])
    assert result.verdict is not None and result.verdict.cls == "GPU_FELL_OFF_BUS"


def test_a_valid_timestamp_gives_no_warning(tmp_path):
    f = tmp_path / "kern.log"
    f.write_text(XID79, encoding="utf-8")
    res = ingest([f])
    assert "bad_timestamp" not in res.events[0].fields
    assert not any("invalid timestamp" in str(w) for w in res.stats.warnings)


def test_an_untimed_event_does_not_take_an_earlier_neighbours_time_and_become_the_root(tmp_path):
    # node-a's log: an early Xid 13, then an Xid 48 whose stamp is unreadable. Inheriting the
    # Xid 13's time made the Xid 48 look 18 minutes older than host-a's Xid 79 and the root.
    (tmp_path / "node-a.log").write_text(EARLY_XID13 + BAD_XID48, encoding="utf-8")
    (tmp_path / "host-a.log").write_text(XID79, encoding="utf-8")
    result = analyze([str(tmp_path / "node-a.log"), str(tmp_path / "host-a.log")])
    assert result.verdict.cls == "GPU_FELL_OFF_BUS", [(i.cls, i.host) for i in result.incidents]
    tl = result.engine.timeline
    bad = next(e for e in tl.events if e.code == "48")
    assert tl.t(bad) is None and tl.events[-1] is bad  # untimed: after every timed event


def test_a_gz_name_on_plain_text_is_reported(tmp_path):
    f = tmp_path / "kern.log.gz"
    f.write_text(XID79, encoding="utf-8")
    res = ingest([f])
    warns = [str(w) for w in res.stats.warnings]
    assert any(w.startswith(f"{f}: ") and "not gzip data" in w for w in warns), warns
    assert [e.code for e in res.events] == ["79"]  # still read, by its content
    # real gzip under the same name: no such warning
    g = tmp_path / "ok.log.gz"
    g.write_bytes(gzip.compress(XID79.encode()))
    res = ingest([g])
    assert not any("not gzip" in str(w) for w in res.stats.warnings) and len(res.events) == 1


def test_no_recognised_line_says_so_and_what_to_collect(tmp_path):
    f = tmp_path / "notes.log"
    f.write_text("hello\nworld\n", encoding="utf-8")
    result = analyze([str(f)])
    assert result.verdict is None  # "no incident" stays a verdict (exit 0 in the CLI)
    text = " ".join(_text(result).split())
    assert f"no line of {f} was recognised" in text
    assert "understood: kernel log / dmesg" in text
    assert "collect next:" in text and "NCCL_DEBUG=INFO" in text and "torchrun" in text and "Xid" in text
    assert f"no line of {f} was recognised" in one_line(result)


def test_events_without_an_incident_keep_the_old_message(tmp_path):
    f = tmp_path / "train.log"
    f.write_text("".join(f"step {s} | loss {2.0 - s / 1000:.4f} | lr 1e-4\n" for s in range(50)), encoding="utf-8")
    result = analyze([str(f)])
    text = _text(result)
    assert "No failure signature found in" in text and "was recognised" not in text


# --- new-user trial, session 15 -------------------------------------------------------------

_DATA = Path(__file__).parent / "data"


def test_sigstopped_rank_is_blamed_when_torchrun_had_to_sigkill_it():
    # real 2-rank run (data/README.md): only rank 0 timed out; rank 1 ignored SIGTERM and was SIGKILLed
    res = analyze([str(_DATA / "faultloop_sigstop_2r_rank1.log")])
    v = res.incidents[0]
    assert v.cls == "NCCL_COLLECTIVE_TIMEOUT" and v.rank == 1


def test_socket_interface_list_pasted_without_the_nccl_prefix(tmp_path):
    # https://github.com/NVIDIA/nccl/issues/697: NCCL chose docker bridges; fixed by NCCL_SOCKET_IFNAME=bond0.
    # Pasted without the "host:pid:tid [dev] NCCL" prefix the INFO line was not read as NCCL's interface list.
    f = tmp_path / "paste.log"
    f.write_text("ncclSystemError: System call (socket, malloc, munmap, etc) failed.\n"
                 "INFO NET/Socket : Using [0]bond0:192.168.1.161<0> [1]br-05ab815fa14e:172.19.0.1<0> "
                 "[2]br-d5d80d7dbbad:172.21.0.1<0>\n")
    v = analyze([str(f)]).incidents[0]
    assert v.cls == "NCCL_NETWORK_CONFIG" and "NCCL_SOCKET_IFNAME" in v.action and "br-05ab815fa14e" in v.action


_XID31 = "".join(line + "\n" for line in (  # the thread's three Xid 31 lines, verbatim
    '[Fri Jan 29 23:42:34 2021] NVRM: Xid (PCI:0000:db:00): 31, pid=13641, Ch 00000008, intr 00000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_10 faulted @ 0x7fd7_90743000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ',
    '[Sat Jan 30 00:05:20 2021] NVRM: Xid (PCI:0000:db:00): 31, pid=14323, Ch 00000008, intr 00000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_10 faulted @ 0x7efe_ba290000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ',
    '[Sat Jan 30 00:32:48 2021] NVRM: Xid (PCI:0000:db:00): 31, pid=33275, Ch 00000008, intr 00000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_10 faulted @ 0x7f57_2c9e8000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ',
))


def test_one_gpu_faulting_in_several_processes_is_a_gpu_suspect(tmp_path):
    # https://github.com/pytorch/pytorch/issues/51382 ("Likely a faulty device"): Xid 31 on one GPU from three
    # processes; the reporter concluded the device was faulty. The same faults spread over several GPUs stay a
    # code fault (a buggy kernel faults wherever it runs).
    f = tmp_path / "kern.log"
    f.write_text(_XID31)
    v = analyze([str(f)]).incidents[0]
    assert v.cls == "CUDA_ILLEGAL_ADDRESS" and v.action_kind == "EXCLUDE_NODE" and "dcgmi diag" in v.action
    assert v.gpu == "0000:db:00.0"
    f.write_text(_XID31.replace("0000:db:00): 31, pid=14323", "0000:3d:00): 31, pid=14323"))
    v = analyze([str(f)]).incidents[0]
    assert v.cls == "CUDA_ILLEGAL_ADDRESS" and v.action_kind == "STOP"



_XID45_4GPU = "".join(line + "\n" for line in (  # the thread's lines, verbatim
    'kernel: NVRM: Xid (PCI:0000:dc:00): 45, pid=1818990, name=python3, Ch 00000001 caused by previous Xid 149',
    'kernel: NVRM: Xid (PCI:0000:ed:00): 45, pid=1818992, name=python3, Ch 0000000c caused by previous Xid 145',
    'kernel: NVRM: Xid (PCI:0000:ba:00): 45, pid=1818989, name=python3, Ch 00000002 caused by previous Xid 145',
    'kernel: NVRM: Xid (PCI:0000:97:00): 45, pid=1818987, name=python3, Ch 00000003 caused by previous Xid 145',
    'kernel: NVRM: Xid (PCI:0000:dc:00): 45, pid=1818990, name=python3, Ch 00000002 caused by previous Xid 149',
    'kernel: NVRM: Xid (PCI:0000:ba:00): 45, pid=1818989, name=python3, Ch 00000003 caused by previous Xid 145',
))


def test_nvlink_faults_on_several_gpus_are_one_node_fabric_fault(tmp_path):
    # https://github.com/NVIDIA/open-gpu-kernel-modules/issues/1150: Xid 45 after Xid 149/145 on four GPUs of one
    # node, cleared only by rebooting it: one incident naming every GPU, a node-level action
    f = tmp_path / "kern.log"
    f.write_text(_XID45_4GPU)
    res = analyze([str(f)])
    nvl = [i for i in res.incidents if i.cls == "NVLINK_FAULT"]
    assert len(nvl) == 1 and nvl[0] is res.incidents[0]
    v = nvl[0]
    assert v.action_kind == "EXCLUDE_NODE" and "4 GPUs" in v.action
    for gpu in ("0000:dc:00.0", "0000:ed:00.0", "0000:ba:00.0", "0000:97:00.0"):
        assert gpu in v.action


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-be"])  # "utf-16": the machine's order with a BOM (LE here)
def test_utf16_log_reads_as_its_utf8_original(tmp_path, shared_dir, encoding):
    # a UTF-16 export (PowerShell's '>' writes UTF-16 LE with a BOM) used to be skipped as binary (NUL bytes);
    # it must give the very events of the UTF-8 file, also across the transcoder's read boundaries
    src = shared_dir / "data" / "triage-cases" / "13-xid79-gpu-lost-syslog.log"
    text = src.read_text(encoding="utf-8") * 400  # ~1 MB of UTF-8, > 2 MB as UTF-16
    a, b = tmp_path / "utf8.log", tmp_path / "utf16.log"
    a.write_text(text, encoding="utf-8")
    raw = text.encode(encoding)
    b.write_bytes(raw if raw[:2] in (b"\xff\xfe", b"\xfe\xff") else b"\xfe\xff" + raw)
    def key(p):
        return [(e.kind, e.line, e.host, e.code, e.gpu_bdf) for e in ingest([str(p)]).events]
    want = key(a)
    assert want and key(b) == want
