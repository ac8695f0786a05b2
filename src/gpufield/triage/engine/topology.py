"""Address book: which host owns which IP, so that an IB/socket peer address names a host.

NCCL prints each rank's bootstrap/OOB address at init (``NCCL_DEBUG=INFO``), and IB completion
errors carry the reporter's own GID (an IPv4-mapped ``::ffff:a.b.c.d`` on RoCE)::

    node-b:51220:51220 [0] NCCL INFO Bootstrap : Using eth0:10.42.0.12<0>
    node-b:51220:51220 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB eth0:10.42.0.12<0>
    node-a:48106:48613 [5] ... NCCL WARN NET/IB : Got completion from peer 10.42.0.12<59213> ... localGid ::ffff:10.42.0.11

The parsers emit no event for INFO lines, so the raw files are scanned for these two shapes (a
literal prefilter keeps it fast). Format: NVIDIA/nccl ``src/bootstrap.cc`` / ``net_ib`` INFO lines.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

from gpufield.triage.events import Event

# "<host>:<pid>:<tid> [<dev>] NCCL INFO Bootstrap : Using eth0:10.42.0.12<0>" (also "... ; OOB eth0:ip<0>")
_USING = re.compile(r"(?:^|\]:|\s)(?P<host>[A-Za-z0-9][\w.-]*):\d+:\d+ \[\d+\] NCCL INFO "
                    r"(?:Bootstrap|NET/Socket|NET/IB)\b[^\n]*?(?:Using|OOB) (?:\[\d+\])?\w[\w.-]*:"
                    r"(?P<ip>\d{1,3}(?:\.\d{1,3}){3})<")
_LOCAL_GID = re.compile(r"localGid ::ffff:(?P<ip>\d{1,3}(?:\.\d{1,3}){3})")


def scan_text(text: str) -> dict[str, str]:
    """``ip -> host`` from NCCL bootstrap/OOB INFO lines of one file's text (pure)."""
    out: dict[str, str] = {}
    if "NCCL INFO" not in text:
        return out
    for line in text.splitlines():
        if "NCCL INFO" in line and ("Using" in line or "OOB" in line):
            m = _USING.search(line)
            if m:
                out.setdefault(m["ip"], m["host"])
    return out


def scan_files(files: Iterable[str | Path], *, max_bytes: int = 64 << 20) -> dict[str, str]:
    """``ip -> host`` over several files; unreadable or binary files are skipped."""
    out: dict[str, str] = {}
    for f in files:
        try:
            with open(f, "rb") as fh:
                data = fh.read(max_bytes)
        except OSError:
            continue
        if b"\x00" in data[:8192]:
            continue
        for ip, host in scan_text(data.decode("utf-8", "replace")).items():
            out.setdefault(ip, host)
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
