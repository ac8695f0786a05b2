"""Topology from NCCL's init lines: which host owns which IP, and which rank drives which GPU.

NCCL prints each rank's bootstrap/OOB address and its communicator placement at init
(``NCCL_DEBUG=INFO``), and IB completion errors carry the reporter's own GID (an IPv4-mapped
``::ffff:a.b.c.d`` on RoCE)::

    node-b:51220:51220 [0] NCCL INFO Bootstrap : Using eth0:10.42.0.12<0>
    node-b:51220:51220 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB eth0:10.42.0.12<0>
    node-b:51225:51225 [5] NCCL INFO comm 0x55d0c6a0 rank 13 nranks 16 cudaDev 5 nvmlDev 5 busId ab000 commId 0x3f1c - Init COMPLETE
    node-a:48106:48613 [5] ... NCCL WARN NET/IB : Got completion from peer 10.42.0.12<59213> ... localGid ::ffff:10.42.0.11

``busId`` is NCCL's ``busIdToInt64`` of the PCI id (hex digits of ``dddd:bb:dd.f``), so ``ab000`` is
``0000:ab:00.0``. This joins kernel-side evidence (Xid on a PCI bus id) to job-side evidence (a
rank), triage.md 5.3 ``topology`` / 5.12 item 1. The parsers emit no event for INFO lines, so the
raw files are scanned for these shapes (a literal prefilter keeps it fast). Formats: NVIDIA/nccl
``src/bootstrap.cc``, ``src/init.cc`` (``Init COMPLETE``), ``net_ib`` INFO lines.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from gpufield.triage.events import Event

# "<host>:<pid>:<tid> [<dev>] NCCL INFO Bootstrap : Using eth0:10.42.0.12<0>" (also "... ; OOB eth0:ip<0>")
_USING = re.compile(r"(?:^|\]:|\s)(?P<host>[A-Za-z0-9][\w.-]*):\d+:\d+ \[\d+\] NCCL INFO "
                    r"(?:Bootstrap|NET/Socket|NET/IB)\b[^\n]*?(?:Using|OOB) (?:\[\d+\])?\w[\w.-]*:"
                    r"(?P<ip>\d{1,3}(?:\.\d{1,3}){3})<")
# "... NCCL INFO comm 0x55d0c6a0 rank 13 nranks 16 cudaDev 5 nvmlDev 5 busId ab000 commId ..."
_COMM = re.compile(r"(?:^|\]:|\s)(?P<host>[A-Za-z0-9][\w.-]*):\d+:\d+ \[\d+\] NCCL INFO comm 0x[0-9a-fA-F]+ "
                   r"rank (?P<rank>\d+) nranks \d+ cudaDev \d+ (?:nvmlDev \d+ )?busId (?P<bus>[0-9a-fA-F]+)\b")
_LOCAL_GID = re.compile(r"localGid ::ffff:(?P<ip>\d{1,3}(?:\.\d{1,3}){3})")


@dataclass(slots=True)
class Topology:
    """What the init lines say.

    Attributes:
        ip_host: ``ip -> hostname``.
        gpu_rank: ``(hostname, pci bus id) -> global rank`` of the default communicator.
    """

    ip_host: dict[str, str] = field(default_factory=dict)
    gpu_rank: dict[tuple[str, str], int] = field(default_factory=dict)

    def update(self, other: Topology) -> None:
        """Add ``other``'s entries that are not known yet."""
        for ip, host in other.ip_host.items():
            self.ip_host.setdefault(ip, host)
        for key, rank in other.gpu_rank.items():
            self.gpu_rank.setdefault(key, rank)


def bus_id_to_bdf(bus: str) -> str:
    """NCCL ``busId`` (hex digits of ``dddd:bb:dd.f``, leading zeros dropped) -> ``dddd:bb:dd.f``."""
    d = bus.lower().rjust(9, "0")[-9:]
    return f"{d[0:4]}:{d[4:6]}:{d[6:8]}.{d[8]}"


def scan_text(text: str) -> Topology:
    """Topology from one file's text (pure)."""
    out = Topology()
    if "NCCL INFO" not in text:
        return out
    for line in text.splitlines():
        if "NCCL INFO" not in line:
            continue
        if "Using" in line or "OOB" in line:
            m = _USING.search(line)
            if m:
                out.ip_host.setdefault(m["ip"], m["host"])
        if "busId" in line:
            m = _COMM.search(line)
            if m:
                out.gpu_rank.setdefault((m["host"], bus_id_to_bdf(m["bus"])), int(m["rank"]))
    return out


def scan_files(files: Iterable[str | Path], *, max_bytes: int = 64 << 20) -> Topology:
    """Topology over several files; unreadable or binary files are skipped."""
    out = Topology()
    for f in files:
        try:
            with open(f, "rb") as fh:
                data = fh.read(max_bytes)
        except OSError:
            continue
        if b"\x00" in data[:8192]:
            continue
        out.update(scan_text(data.decode("utf-8", "replace")))
    return out


def from_events(events: Iterable[Event]) -> dict[str, str]:
    """``ip -> host`` from the reporter's own GID in IB completion errors."""
    out: dict[str, str] = {}
    for e in events:
        if e.host and e.kind == "ib_completion_error":
            m = _LOCAL_GID.search(e.raw)
            if m:
                out.setdefault(m["ip"], e.host)
    return out
