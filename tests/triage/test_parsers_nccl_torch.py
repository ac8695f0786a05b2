"""NCCL and PyTorch-distributed parsers on the real lines of triage.md §2.7-2.8.

Expected values are read off the lines; IB status names come from rdma-core's enum order,
NCCL result names from nccl.h (both restated in triage.md §2.7).
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from _triage_helpers import by_line

from gpufield.triage.parsers import NcclParser, TorchParser
from gpufield.triage.protocols import LineContext

DATA = Path(__file__).parent / "data"




NCCL = by_line(DATA / "nccl_variants.log")
TORCH = by_line(DATA / "torch_variants.log")


@pytest.mark.parametrize(("line", "status", "name", "opcode", "vendor", "peer", "host", "dev"), [
    (1, 12, "IBV_WC_RETRY_EXC_ERR", 1, 129, None, "node-a", 0),              # oldest: no peer
    (2, 4, "IBV_WC_LOC_PROT_ERR", 32564, 81, "fe80::1%ib0<53249>", "node-b", 1),
    (3, 12, "IBV_WC_RETRY_EXC_ERR", 0, 129, "10.1.2.3<59426>", "node-c", 3),  # status= form
])
def test_ib_completion_generations(line, status, name, opcode, vendor, peer, host, dev):
    e = NCCL[line]
    assert (e.kind, e.source, e.code) == ("ib_completion_error", "nccl", str(status))
    f = e.fields
    assert (f["status"], f["status_text"], f["opcode"], f["vendor_err"], f.get("peer")) == (status, name, opcode, vendor, peer)
    assert e.host == host and e.gpu_index == dev and e.rank is None   # [N] is cudaDev, not a rank


def test_ib_current_format_with_status_text():
    # NVIDIA/nccl src/transport/net_ib/p2p.cc: "status=%s(%d) opcode=%s(%d) vendor_err=%u ... hca %s"
    line = ("h:1:2 [0] transport/net_ib/p2p.cc:123 NCCL WARN NET/IB: Got completion from peer 10.0.0.2<4242> with "
            "status=transport retry counter exceeded(12) opcode=RDMA_WRITE(1) len=0 vendor_err=129 hca mlx5_0")
    e = NcclParser().parse_line(line, LineContext("x", 1, 2026))
    assert e.fields["status"] == 12 and e.fields["opcode"] == 1 and e.fields["opcode_text"] == "RDMA_WRITE"
    assert e.fields["vendor_err"] == 129 and e.fields["hca"] == "mlx5_0"
    assert NCCL[3].fields["direction"] == "Recv" and NCCL[3].fields["hca"] == "mlx5_10"


def test_async_remote_and_warn_lines():
    assert NCCL[4].kind == "ib_async_event" and NCCL[4].fields["event"] == "port error"
    assert NCCL[5].kind == "nccl_remote_error" and NCCL[5].fields["peer"] == "10.0.0.7<58355>"
    assert NCCL[5].fields["site"] == "misc/socket.cc:518" and NCCL[5].pid == 183006
    assert NCCL[6].kind == "nccl_warn" and NCCL[6].code == "6" and NCCL[6].fields["result"] == "ncclRemoteError"
    assert NCCL[7].kind == "nccl_remote_error" and NCCL[7].fields["peer"] == "node-f.cluster<47861>"
    for line in (8, 9, 10):
        assert NCCL[line].kind == "nccl_warn" and NCCL[line].severity == "warning"
    assert NCCL[11].kind == "nccl_return" and NCCL[11].fields == {"site": "transport/net.cc:1302", "retcode": 6,
                                                                  "result": "ncclRemoteError"}
    assert 15 not in NCCL       # "Channel 00/0 : 1[1] -> 2[2] via P2P" is ordinary INFO output


def test_nccl_errors_wrapped_by_pytorch():
    a, b, c = NCCL[12], NCCL[13], NCCL[14]
    assert (a.kind, a.code, a.fields["nccl_version"]) == ("nccl_remote_error", "6", "2.18.6")
    assert a.fields["exc_type"] == "torch.distributed.DistBackendError"
    assert (b.kind, b.code, b.fields["nccl_version"]) == ("nccl_system_error", "2", "2.12.10")
    assert (c.kind, c.code) == ("nccl_system_error", "2")


def _ns(*args: int, frac_ns: int = 0) -> int:
    return int(datetime(*args, tzinfo=UTC).timestamp()) * 10**9 + frac_ns


@pytest.mark.parametrize(("line", "rank", "seq", "op", "numel", "timeout", "ran"), [
    (1, 0, 1, "BROADCAST", 131072000, 600000, 600081),
    (2, 1, 469508, "ALLREDUCE", None, 1800000, 1802212),     # no Numel fields
    (3, None, 458, "ALLREDUCE", None, None, 1800600),        # oldest order, "ms"
])
def test_watchdog_timeout_variants(line, rank, seq, op, numel, timeout, ran):
    e = TORCH[line]
    assert (e.kind, e.rank, e.code) == ("watchdog_timeout", rank, str(seq))
    f = e.fields
    assert (f["seq"], f["op_type"], f.get("numel_in"), f.get("timeout_ms"), f["ran_for_ms"]) == (seq, op, numel, timeout, ran)
    assert f["level"] == "E"


def test_glog_time_and_pg_status():
    assert TORCH[1].ts_ns == _ns(2026, 12, 18, 20, 27, 21, frac_ns=426415540)
    e = TORCH[4]
    assert e.kind == "last_enqueued" and e.rank == 0
    assert (e.fields["seq"], e.fields["last_enqueued"], e.fields["last_completed"], e.fields["pg"]) == (619725, 619732, 619724, 0)


def test_wrapped_timeout_fr_heartbeat_store():
    assert TORCH[5].kind == "flight_recorder" and TORCH[5].fields["enabled"] is False
    w = TORCH[6]
    assert w.kind == "watchdog_timeout" and w.fields["wrapped"] is True and w.fields["seq"] == 469508
    assert TORCH[7].kind == "python_exception" and TORCH[7].fields["exc_type"] == "c10::DistBackendError"
    h = TORCH[8]
    assert h.kind == "heartbeat_timeout" and h.rank == 7 and h.fields["pg"] == 3
    assert TORCH[9].kind == "rendezvous_error" and TORCH[9].fields["endpoint"] == "10.0.0.1:29500"
    assert TORCH[9].fields["timeout_s"] == 60
    assert TORCH[10].kind == "rendezvous_error" and TORCH[10].fields["message"] == "Socket Timeout"
    assert TORCH[11].kind == "flight_recorder" and (TORCH[11].fields["seq"], TORCH[11].fields["entry"]) == (5, 4)
    assert TORCH[14].fields["missing_ranks"] == [1]


def test_progress_bar_glued_before_record():
    # corpus case 02: tqdm output and the record share one physical line
    line = ("Generating train split: 2230000 examples [29:59, 1466.92 examples/s][E ProcessGroupNCCL.cpp:475] [Rank 1] "
            "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=2, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
            "Timeout(ms)=1800000) ran for 1800449 milliseconds before timing out.")
    e = TorchParser().parse_line(line, LineContext("x", 1, 2026))
    assert (e.rank, e.fields["seq"], e.fields["numel_in"], e.fields["timeout_ms"]) == (1, 2, 1, 1800000)


def test_heartbeat_fatal_and_truncated_line():
    line = ("[rank144]:[F ProcessGroupNCCL.cpp:1169] [PG 0 Rank 144] [PG 0 Rank 144] ProcessGroupNCCL's watchdog got "
            "stuck for 600 seconds without making progress in monitoring enqueued collectives. ... (TORCH_NCCL_ENABLE_MONITORING=")
    e = TorchParser().parse_line(line, LineContext("x", 1, 2026))
    assert e.kind == "heartbeat_timeout" and e.severity == "fatal" and e.fields["timeout_s"] == 600 and e.rank == 144
    cut = "[rank3]:[E ProcessGroupNCCL.cpp:563] [Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=31"
    e = TorchParser().parse_line(cut, LineContext("x", 1, 2026))
    assert e.kind == "watchdog_timeout" and e.fields["seq"] == 31 and e.fields["truncated"] is True


def test_nccl_errors_reraised_by_pytorch():
    ev = by_line(DATA / "nccl_errors_reraised.log")
    kinds = {n: e.kind for n, e in ev.items()}
    assert kinds == {1: "pg_teardown", 2: "nccl_remote_error", 3: "nccl_remote_error", 5: "ib_completion_error",
                     6: "nccl_remote_error", 7: "nccl_remote_error", 9: "nccl_remote_error", 10: "nccl_internal_error",
                     11: "nccl_internal_error", 12: "nccl_internal_error", 14: "nccl_internal_error", 15: "nccl_error",
                     16: "nccl_error", 20: "nccl_warn", 21: "last_enqueued", 22: "nccl_remote_error", 23: "desync",
                     24: "elastic_restart"}
    w = ev[2]
    assert (w.rank, w.code, w.fields["via"], w.fields["nccl_version"], w.fields["pg"]) == (9, "6", "watchdog", "2.20.5", 0)
    assert ev[5].fields["status_text"] == "IBV_WC_WR_FLUSH_ERR" and ev[5].fields["vendor_err"] == 244
    assert ev[9].fields["peer"] == "gpu-node1.int.hpcie.labs.faculty.ie.edu<45074>"
    assert ev[10].code == "3" and ev[14].rank == 0                       # "[rank0]: ncclInternalError ..."
    assert ev[15].code == "5" and ev[15].fields["nccl_version"] == "2.28.9"
    assert (ev[20].host, ev[20].pid, ev[20].gpu_index) == ("gpu005", 2319246, 1)   # NCCL_DEBUG_TIMESTAMP_FORMAT prefix
    assert ev[20].ts_ns == _ns(2026, 6, 21, 21, 35, 22)
    assert (ev[22].fields["seq"], ev[22].fields["op_type"], ev[22].fields["via"]) == (89, "ALLREDUCE", "async_exception")
    assert ev[23].fields["op_type"] == "ALLGATHER"
    assert (ev[24].fields["restart_count"], ev[24].fields["attempts_left"]) == (3, 3)


def test_cuda_error_reraised_by_watchdog():
    a, b = TORCH[16], TORCH[17]
    assert (a.kind, a.code, a.fields["cuda_error"], a.fields["via"]) == ("cuda_error", "719", "cudaErrorLaunchFailure", "watchdog")
    assert a.rank is None                       # "Rank 1" of PG 2 is not a global rank
    assert (b.kind, b.rank, b.code) == ("cuda_error", 4, "719")
    assert b.ts_ns == _ns(2026, 10, 23, 17, 16, 46, frac_ns=22239569)


INIT = by_line(DATA / "nccl_init_variants.log")


def test_nccl_init_lines_become_topology_events():
    e = INIT[4]  # NVIDIA/nccl#1267: busId 30 is 0000:00:03.0
    assert (e.kind, e.source, e.severity, e.host, e.gpu_bdf, e.gpu_index) == \
        ("nccl_init", "nccl", "info", "instance-8g-96c-2", "0000:00:03.0", 0)
    assert e.fields == {"rank": 0, "nranks": 1, "cuda_dev": 0, "nvml_dev": 0, "bus_id": "30", "comm": "0x55f90cbfd740",
                        "comm_id": "0x795b968dc454cfee", "state": "START"}
    assert (INIT[1].kind, INIT[1].fields["transport"], INIT[1].fields["ip"]) == ("nccl_bootstrap", "Bootstrap", "10.128.0.31")
    assert (INIT[3].fields["transport"], INIT[3].fields["addresses"]) == ("NET/Socket", ["ens7:10.128.0.31"])
    assert (INIT[5].host, INIT[6].host, INIT[6].fields["ip"]) == ("node0", "node2", "10.10.7.109")  # "[N] " tag first
    assert (INIT[7].host, INIT[7].fields["ifname"], INIT[7].fields["ip"]) == ("n122-246-085", "ib1", "fe80::966d:ae03:b2:62c4")
    assert 2 not in INIT and 8 not in INIT  # "NET/IB : No device found." and channel lines are no events


def test_old_warn_format_and_bare_socket_init_detail():
    old = INIT[9]  # NCCL 2.0: no "NCCL" before WARN
    assert (old.kind, old.fields["site"], old.fields["message"]) == \
        ("nccl_warn", "include/socket.h:185", "Call to connect failed : Connection refused")
    assert INIT[10].kind == "nccl_warn" and INIT[10].fields["site"] == "misc/socket.cc:537"
    bare = INIT[13]
    assert (bare.kind, bare.severity, bare.fields["result"]) == ("nccl_warn", "error", "ncclInternalError")
    assert bare.fields["message"].startswith("ncclSocketInit: connecting to address  with family 59408")
    assert INIT[11].kind == "nccl_internal_error"


@pytest.mark.parametrize("bus,bdf", [("ab000", "0000:ab:00.0"), ("30", "0000:00:03.0"), ("11b000", "0001:1b:00.0"),
                                     ("AB000", "0000:ab:00.0"), ("1000b10", "0010:00:b1.0")])
def test_bus_id_to_bdf(bus, bdf):
    from gpufield.triage.parsers._prefix import bus_id_to_bdf

    assert bus_id_to_bdf(bus) == bdf
