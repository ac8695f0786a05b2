"""Host and environment checks of preflight on fake /sys and /dev trees built in tmp_path.

Kernel lines are the triage wing's labelled real-format lines (``tests/triage/data/kernel_variants.log``);
interface-list semantics follow the NCCL docs (prefixes, ``^`` excludes, ``=`` exact).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpufield.harden.preflight import (
    PreflightConfig,
    PreflightContext,
    parse_if_list,
    run_preflight,
)
from gpufield.testing import FakeNvml

KERNEL_LOG = Path(__file__).resolve().parents[1] / "triage" / "data" / "kernel_variants.log"


def _run(tmp_path, only, *, environ=None, **cfg):
    ctx = PreflightContext(PreflightConfig(**cfg), root=tmp_path, environ=environ or {},
                           nvml=FakeNvml(library_found=False))
    rep = run_preflight(only=only, context=ctx)
    assert len(rep.results) == 1
    return rep.results[0]


def _net(root: Path, **ifs: str) -> None:
    for name, state in ifs.items():
        d = root / "sys/class/net" / name
        d.mkdir(parents=True)
        (d / "operstate").write_text(state + "\n")


def _ib(root: Path, dev: str, port: int, state: str, rate: str = "400 Gb/sec (4X NDR)") -> None:
    d = root / "sys/class/infiniband" / dev / "ports" / str(port)
    d.mkdir(parents=True)
    codes = {"ACTIVE": "4: ACTIVE", "DOWN": "1: DOWN", "INIT": "2: INIT"}
    (d / "state").write_text(codes[state] + "\n")
    (d / "phys_state").write_text("5: LinkUp\n" if state == "ACTIVE" else "3: Disabled\n")
    (d / "rate").write_text(rate + "\n")
    (d / "link_layer").write_text("InfiniBand\n")


@pytest.mark.parametrize(("value", "selected"), [
    ("eth", ["eth0", "eth1"]),            # prefix
    ("=eth", []),                         # exact: no interface is called "eth"
    ("=eth1", ["eth1"]),
    ("^eth,lo", ["docker0", "ib0"]),      # exclude prefixes
    ("^=eth0", ["docker0", "eth1", "ib0", "lo"]),
    ("ib,eth1", ["eth1", "ib0"]),
])
def test_nccl_if_list_semantics(value, selected):
    names = ["docker0", "eth0", "eth1", "ib0", "lo"]
    lst = parse_if_list(value)
    assert [n for n in names if lst.matches(n)] == selected


def test_socket_ifname_checks_real_interfaces(tmp_path):
    _net(tmp_path, eth0="up", eth1="down", lo="unknown")
    r = _run(tmp_path, ["env.socket_ifname"], environ={"NCCL_SOCKET_IFNAME": "eth0"})
    assert r.status == "pass" and r.values["NCCL_SOCKET_IFNAME"]["selected"] == ["eth0"]
    r = _run(tmp_path, ["env.socket_ifname"], environ={"NCCL_SOCKET_IFNAME": "=eth"})
    assert r.status == "fail" and "matches no interface (have eth0, eth1, lo)" in r.reason
    r = _run(tmp_path, ["env.socket_ifname"], environ={"NCCL_SOCKET_IFNAME": "=eth1"})
    assert r.status == "fail" and "down" in r.reason
    r = _run(tmp_path, ["env.socket_ifname"], environ={"GLOO_SOCKET_IFNAME": "eth"})  # gloo: exact names
    assert r.status == "fail" and "GLOO_SOCKET_IFNAME" in r.reason
    r = _run(tmp_path, ["env.socket_ifname"], environ={"NCCL_SOCKET_IFNAME": "^eth"})
    assert r.status == "warn" and "only loopback" in r.reason
    assert _run(tmp_path, ["env.socket_ifname"]).status == "pass"  # unset: NCCL chooses


def test_ib_ports(tmp_path):
    assert _run(tmp_path, ["net.ib_ports"]).status == "skip"
    for i in range(4):
        _ib(tmp_path, f"mlx5_{i}", 1, "ACTIVE")
    _ib(tmp_path, "mlx5_4", 1, "DOWN")
    r = _run(tmp_path, ["net.ib_ports"])
    assert r.status == "warn" and "mlx5_4/1 DOWN" in r.reason
    assert [p["state"] for p in r.values["ports"]] == ["ACTIVE"] * 4 + ["DOWN"]
    r = _run(tmp_path, ["net.ib_ports"], environ={"NCCL_IB_HCA": "mlx5_0:1,mlx5_1:1"})
    assert r.status == "pass" and r.values["NCCL_IB_HCA"]["selected"] == ["mlx5_0/1", "mlx5_1/1"]
    r = _run(tmp_path, ["net.ib_ports"], environ={"NCCL_IB_HCA": "mlx5"})  # prefix takes mlx5_4 too
    assert r.status == "fail" and "mlx5_4/1 DOWN" in r.reason
    r = _run(tmp_path, ["net.ib_ports"], environ={"NCCL_IB_HCA": "^=mlx5_4"})
    assert r.status == "pass"
    r = _run(tmp_path, ["net.ib_ports"], environ={"NCCL_IB_HCA": "=mlx5_9"})
    assert r.status == "fail" and "matches no port" in r.reason


def test_ib_port_trained_down_warns(tmp_path):
    _ib(tmp_path, "mlx5_0", 1, "ACTIVE")
    _ib(tmp_path, "mlx5_1", 1, "ACTIVE", rate="200 Gb/sec (4X HDR)")
    r = _run(tmp_path, ["net.ib_ports"])
    assert r.status == "warn" and "different rates" in r.reason


def test_debug_nccl_variables_flagged(tmp_path):
    env = {"NCCL_P2P_DISABLE": "1", "NCCL_DEBUG": "TRACE", "NCCL_IB_DISABLE": "0", "NCCL_SOCKET_IFNAME": "eth0",
           "TORCH_NCCL_ASYNC_ERROR_HANDLING": "0"}
    r = _run(tmp_path, ["env.nccl"], environ=env)
    assert r.status == "warn"
    flagged = [f.split("=")[0] for f in r.values["flagged"]]
    assert flagged == ["NCCL_P2P_DISABLE", "NCCL_DEBUG", "TORCH_NCCL_ASYNC_ERROR_HANDLING"]  # IB_DISABLE=0 is fine
    assert r.values["set"]["NCCL_SOCKET_IFNAME"] == "eth0"
    assert _run(tmp_path, ["env.nccl"], environ={"NCCL_DEBUG": "WARN"}).status == "pass"


def test_kernel_xid_from_real_lines(tmp_path):
    r = _run(tmp_path, ["kernel.xid"], kernel_log=str(KERNEL_LOG))
    assert r.values["xids"] == r.values["xids"][-10:]
    assert r.status == "fail" and r.severity == "critical"  # Xid 79: fallen off the bus
    codes = {int(k) for k in r.values["xid_counts"]}
    assert {79, 119, 48, 63, 31} <= codes
    assert r.values["lines_read"] == len(KERNEL_LOG.read_text().splitlines())
    text = KERNEL_LOG.read_text().splitlines()
    # every "NVRM: Xid" line, plus the file's two fallen-off-the-bus messages that carry no Xid number
    assert sum(r.values["xid_counts"].values()) == sum("NVRM: Xid" in x for x in text) + 2
    # the three-line "NVRM: The NVIDIA GPU ... has fallen off the bus" record at lines 17-19 is one event
    fell = [x for x in r.values["xids"] if x["kind"] == "gpu_fell_off_bus"]
    assert {x["bdf"] for x in fell} >= {"0000:b3:00.0", "0000:2b:00.0"}


def test_kernel_xid_from_fake_kmsg(tmp_path):
    kmsg = tmp_path / "dev" / "kmsg"
    kmsg.parent.mkdir(parents=True)
    kmsg.write_text("6,1,100,-;Linux version 6.8.0\n"
                    "4,2,200,-;NVRM: Xid (PCI:0000:18:00): 13, pid=2231, name=python, Graphics SM Warp Exception\n")
    r = _run(tmp_path, ["kernel.xid"])
    assert r.status == "warn" and r.values["xid_counts"] == {"13": 1}
    assert r.values["xids"][0]["bdf"] == "0000:18:00.0"
    kmsg.write_text("6,1,100,-;Linux version 6.8.0\n")
    assert _run(tmp_path, ["kernel.xid"]).status == "pass"
    kmsg.unlink()
    r = _run(tmp_path, ["kernel.xid"])
    assert r.status == "skip" and "cannot read the kernel log" in r.reason


def test_disk_and_shm(tmp_path):
    st = os.statvfs(tmp_path)
    free_gib = st.f_bavail * st.f_frsize / 2**30
    r = _run(tmp_path, ["host.disk"], checkpoint_dir=str(tmp_path), min_free_disk_gib=0)
    assert r.status == "pass" and r.values["free_gib"] == pytest.approx(free_gib, abs=0.5)
    r = _run(tmp_path, ["host.disk"], checkpoint_dir=str(tmp_path), min_free_disk_gib=free_gib * 4 + 1)
    assert r.status == "fail" and "need" in r.reason
    r = _run(tmp_path, ["host.disk"], checkpoint_dir=str(tmp_path / "nope"))
    assert r.status == "fail" and "does not exist" in r.reason
    (tmp_path / "afile").write_text("x")
    r = _run(tmp_path, ["host.disk"], checkpoint_dir=str(tmp_path / "afile"))
    assert r.status == "fail" and "is not a directory" in r.reason
    assert _run(tmp_path, ["host.shm"]).status == "fail"  # no dev/shm under the fake root
    (tmp_path / "dev" / "shm").mkdir(parents=True)
    size = st.f_blocks * st.f_frsize / 2**30
    r = _run(tmp_path, ["host.shm"], min_shm_gib=0.001)
    assert r.status == "pass" and r.values["size_gib"] == pytest.approx(size, abs=0.01)
    assert _run(tmp_path, ["host.shm"], min_shm_gib=size * 2 + 1).status == "fail"
