"""Topology from NCCL's init lines: which host owns which IP, and which rank drives which GPU.

NCCL prints each rank's bootstrap/OOB address and its communicator placement at init
(``NCCL_DEBUG=INFO``), and IB completion errors carry the reporter's own GID (an IPv4-mapped
``::ffff:a.b.c.d`` on RoCE)::

    node-b:51220:51220 [0] NCCL INFO Bootstrap : Using eth0:10.42.0.12<0>
    node-b:51220:51220 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB eth0:10.42.0.12<0>
    node-b:51225:51225 [5] NCCL INFO comm 0x55d0c6a0 rank 13 nranks 16 cudaDev 5 nvmlDev 5 busId ab000 commId 0x3f1c - Init COMPLETE
    node-a:48106:48613 [5] ... NCCL WARN NET/IB : Got completion from peer 10.42.0.12<59213> ... localGid ::ffff:10.42.0.11

The NCCL parser turns the first two shapes into ``nccl_bootstrap`` events and the third into
``nccl_init`` events (``gpu_bdf`` decoded from ``busId``, see
:func:`gpufield.triage.parsers._prefix.bus_id_to_bdf`); this module builds the maps from those
events, so no input file is read twice. This joins kernel-side evidence (Xid on a PCI bus id) to
job-side evidence (a rank), triage.md 5.3 ``topology`` / 5.12 item 1. Formats: NVIDIA/nccl
``src/bootstrap.cc``, ``src/init.cc`` (``Init COMPLETE``), ``net_ib`` / ``net_socket`` INFO lines.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from gpufield.triage.events import Event

_LOCAL_GID = re.compile(r"localGid ::ffff:(?P<ip>\d{1,3}(?:\.\d{1,3}){3})")


@dataclass(slots=True)
class Topology:
    """What the init lines say.

    Attributes:
        ip_host: ``ip -> hostname``.
        gpu_rank: ``(hostname, pci bus id) -> rank`` in the largest communicator that GPU joined
            (the world communicator, so a global rank, when its init line was logged).
    """

    ip_host: dict[str, str] = field(default_factory=dict)
    gpu_rank: dict[tuple[str, str], int] = field(default_factory=dict)

    def update(self, other: Topology) -> None:
        """Add ``other``'s entries that are not known yet."""
        for ip, host in other.ip_host.items():
            self.ip_host.setdefault(ip, host)
        for key, rank in other.gpu_rank.items():
            self.gpu_rank.setdefault(key, rank)


def from_events(events: Iterable[Event]) -> Topology:
    """The address book and GPU -> rank map from parsed events.

    ``nccl_bootstrap`` events give ``ip -> host`` for every address a process announced (first seen
    wins); IB completion errors add the reporter's own IPv4-mapped ``localGid``. ``nccl_init``
    events give ``(host, gpu_bdf) -> rank``, taken from the communicator with the most ranks (a
    sub-communicator's rank is not the global rank); events without a host are skipped.

    Args:
        events: parsed events in any order.

    Returns:
        A :class:`Topology` (empty maps when the logs lack NCCL INFO init lines).
    """
    out = Topology()
    size: dict[tuple[str, str], int] = {}
    for e in events:
        if not e.host:
            continue
        if e.kind == "nccl_bootstrap":
            for addr in e.fields.get("addresses") or ():
                out.ip_host.setdefault(str(addr).split(":", 1)[1], e.host)
        elif e.kind == "nccl_init" and e.gpu_bdf and isinstance(e.fields.get("rank"), int):
            key, n = (e.host, e.gpu_bdf), int(e.fields.get("nranks") or 0)
            if key not in size or n > size[key]:
                out.gpu_rank[key], size[key] = e.fields["rank"], n
        elif e.kind == "ib_completion_error":
            m = _LOCAL_GID.search(e.raw)
            if m:
                out.ip_host.setdefault(m["ip"], e.host)
    return out
