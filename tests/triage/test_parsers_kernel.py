"""Kernel-log parser on the real example lines of triage.md §2.2 (fixture kernel_variants.log).

Expected values are read off the lines themselves (bus id, Xid, pid, flags) and, for timestamps,
computed independently with :mod:`datetime`.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from _triage_helpers import by_line
from _triage_helpers import ns as _ns

from gpufield.triage.parsers import KernelParser
from gpufield.triage.protocols import LineContext

DATA = Path(__file__).parent / "data"




EV = by_line(DATA / "kernel_variants.log")




@pytest.mark.parametrize(("line", "xid", "bdf", "pid", "name"), [
    (1, 79, "0000:3b:00.0", 1234, None),
    (2, 79, "0000:03:00.0", None, None),               # pid='<unknown>', name=<unknown>
    (3, 79, "0000:2b:00.0", None, None),               # no pid field at all
    (4, 119, "0000:61:00.0", 1346198, "nvidia-smi"),
    (5, 119, "0000:83:00.0", 849, "nv_open_q"),
    (6, 48, "0000:07:00.0", None, None),
    (7, 63, "0000:86:00.0", None, None),               # name='<unknown>' quoted
    (8, 31, "0000:65:00.0", 31245, "python3"),
    (9, 13, "0002:00:00.0", 2519562, "python3"),
    (10, 94, "0000:01:00.0", 7194, None),
    (12, 95, "0000:01:00.0", 7062, None),
    (13, 149, "0019:01:00.0", None, None),
    (14, 145, "0018:01:00.0", None, None),
    (15, 3, "0000:01:00.0", None, None),               # legacy "Xid (0000:01:00)" without PCI:
])
def test_xid_variants(line, xid, bdf, pid, name):
    e = EV[line]
    assert (e.kind, e.source, e.code, e.gpu_bdf) == ("xid", "kernel", str(xid), bdf)
    assert e.fields["xid"] == xid and e.pid == pid and e.fields.get("name") == name
    assert e.where.endswith(f"kernel_variants.log:{line}")


def test_xid_message_details():
    assert EV[6].fields["phys_addr"] == "0x7fdf0de80"
    assert EV[6].fields["mnemonic"] == "ROBUST_CHANNEL_GPU_ECC_DBE"
    assert EV[10].fields["gpu_instance"] == 5                       # MIG "GPU-I:05"
    assert (EV[10].fields["rst"], EV[10].fields["d_rst"]) == (False, False)
    assert (EV[12].fields["rst"], EV[12].fields["d_rst"]) == (True, False)   # RST: Yes
    assert EV[13].fields["subcode"] == "NETIR" and EV[13].fields["fatal"] is True
    assert EV[13].fields["link"] == -1 and EV[13].fields["intrinfo"] == "0x000fe406"
    assert EV[14].fields["subcode"] == "RLW_RXPIPE" and EV[14].fields["fatal"] is False
    assert EV[14].fields["link"] == 13 and EV[14].fields["error_status"] == "0x00000008"
    assert "Timeout after 6s" in EV[5].fields["message"]


def test_prefix_times_hosts_and_monotonic():
    assert EV[1].mono_s == pytest.approx(1843.308145) and EV[1].ts_ns is None
    assert EV[4].ts_ns == _ns(2023, 3, 3, 4, 27, 8)                  # dmesg -T
    assert EV[6].host == "node-a" and EV[6].ts_ns == _ns(2026, 12, 2, 10, 43, 35)   # syslog, year from options
    assert EV[6].mono_s == pytest.approx(240314.528856)
    assert EV[7].mono_s == pytest.approx(16450076.435595)             # "kernel: [..]"
    # journal short-iso with +02:00 offset -> 17:02:39.123456 UTC
    assert EV[8].host == "node-b" and EV[8].ts_ns == _ns(2026, 5, 18, 17, 2, 39, us=123456)
    # journal short-precise (no zone -> UTC)
    assert EV[9].ts_ns == _ns(2026, 5, 18, 19, 2, 39, us=654321)


def test_fallen_off_the_bus_multiline_and_single_line():
    e = EV[17]
    assert e.kind == "gpu_fell_off_bus" and e.gpu_bdf == "0000:b3:00.0" and e.code == "79"
    assert e.fields["pci_id"] == "10de:26b5" and e.fields["multiline"] is True
    assert e.raw.count("\n") == 2 and "not responding to commands" in e.raw
    assert 18 not in EV and 19 not in EV                              # continuation lines joined
    assert EV[20].kind == "gpu_fell_off_bus" and EV[20].gpu_bdf == "0000:2b:00.0"


def test_gpu_map_other_nvrm_sxid():
    assert EV[16].kind == "gpu_map" and EV[16].gpu_bdf == "0000:00:08.0"
    assert EV[16].gpu_uuid == "GPU-6d1a8b4e-3c5f-4a1e-9b1c-0e2f3a4b5c6d"
    assert EV[21].kind == "nvrm_other" and EV[21].severity == "error"
    assert "RmInitAdapter failed" in EV[21].fields["message"]
    s = EV[22]
    assert (s.kind, s.code, s.gpu_bdf) == ("sxid", "24007", "0000:c3:00.0")
    assert s.fields["fatal"] is True and s.fields["link"] == 30 and s.fields["switch"] == "nvidia-nvswitch0"
    assert s.fields["message"] == "sourcetrack timeout error"


def test_pcie_aer_record():
    e = EV[23]
    assert e.kind == "pcie_aer" and e.severity == "warning" and e.gpu_bdf == "0000:00:03.0"
    f = e.fields
    assert (f["severity_text"], f["type"], f["vendor_device"]) == ("Corrected", "Data Link Layer", "8086:6f08")
    assert (f["status"], f["mask"], f["errors"]) == ("00001000", "00002000", ["[12] Timeout"])
    assert not {24, 25, 26} & EV.keys()


def test_link_state_and_oom_killer():
    assert EV[27].kind == "nic_link_state" and EV[27].fields["state"] == "DOWN" and EV[27].fields["hca"] == "mlx5_5"
    a, b, c = EV[28], EV[29], EV[30]
    assert a.kind == b.kind == c.kind == "host_oom_kill"
    assert (a.fields["pid"], a.fields["name"], a.fields["anon_rss_kb"]) == (571, "python", 257104)
    assert a.host == "raspberrypiz2"
    assert (b.fields["pid"], b.fields["total_vm_kb"], b.fields["cgroup"]) == (4567, 8123456, False)
    assert (c.fields["name"], c.fields["cgroup"]) == ("order-worker", True)


def test_parse_line_is_pure_and_rejects_other_text():
    p = KernelParser()
    ctx = LineContext(file="x", line=1, year=2026)
    line = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus."
    assert p.parse_line(line, ctx) == p.parse_line(line, ctx)
    assert p.parse_line("step 10 | loss 1.23 | lr 2e-5", ctx) is None


def test_truncated_xid_line_still_parses():
    # corpus case 13 was cut at "pid='<unknow"
    e = KernelParser().parse_line("Aug 29 16:58:38 h kernel: [14282.651831] NVRM: Xid (PCI:0000:03:00): 79, pid='<unknow",
                                  LineContext(file="x", line=1, year=2026))
    assert e is not None and e.code == "79" and e.gpu_bdf == "0000:03:00.0" and e.pid is None


def test_journal_short_monotonic_prefix():
    e = EV[31]
    assert (e.kind, e.host, e.mono_s, e.gpu_bdf) == ("xid", "node-7", pytest.approx(1843.30815), "0000:3b:00.0")
