"""Process-tree helpers on Linux ``/proc``: the launcher's worker processes, their ranks and states.

torchrun starts each worker in its own session (``start_new_session``), so signalling the
launcher's process group does not reach them; the supervisor finds them as descendants of the
launcher and reads their rank from ``/proc/<pid>/environ`` (``RANK``, ``LOCAL_RANK``), readable for
processes of the same user.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True, slots=True)
class Proc:
    """One worker process.

    Attributes:
        pid: process id.
        rank: global rank (``RANK`` of its environment).
        local_rank: ``LOCAL_RANK``, or None.
        state: one letter of ``/proc/<pid>/stat`` (``R`` running, ``S`` sleeping, ``T`` stopped,
            ``Z`` zombie, ``D`` uninterruptible).
    """

    pid: int
    rank: int
    local_rank: int | None
    state: str


def _stat(pid: int) -> tuple[str, int] | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read().decode(errors="replace")
    except OSError:
        return None
    rest = data[data.rfind(")") + 2:].split()  # the command name may hold spaces and parentheses
    return rest[0], int(rest[1])


def state(pid: int) -> str | None:
    """The one-letter state of ``pid`` from ``/proc/<pid>/stat``, or None when it is gone."""
    st = _stat(pid)
    return st[0] if st else None


def descendants(root: int) -> list[int]:
    """Pids of every live descendant of ``root`` (one scan of ``/proc``)."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            st = _stat(int(name))
            if st:
                children.setdefault(st[1], []).append(int(name))
    out, todo = [], [root]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def _env(pid: int) -> dict[str, str]:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            raw = f.read()
    except OSError:
        return {}
    env = {}
    for item in raw.split(b"\0"):
        k, sep, v = item.partition(b"=")
        if sep and k in (b"RANK", b"LOCAL_RANK", b"TORCHELASTIC_RUN_ID"):
            env[k.decode()] = v.decode(errors="replace")
    return env


def workers(root: int) -> dict[int, Proc]:
    """The rank processes under launcher ``root``: descendants whose environment has ``RANK``,
    the topmost per rank (a DataLoader worker inherits its rank's environment).

    Returns:
        rank -> :class:`Proc`.
    """
    out: dict[int, Proc] = {}
    for pid in descendants(root):
        env = _env(pid)
        if "RANK" not in env or "TORCHELASTIC_RUN_ID" not in env:
            continue
        try:
            rank = int(env["RANK"])
        except ValueError:
            continue
        st = state(pid)
        if st is None:
            continue
        if rank not in out or pid < out[rank].pid:
            lr = env.get("LOCAL_RANK", "")
            out[rank] = Proc(pid=pid, rank=rank, local_rank=int(lr) if lr.isdigit() else None, state=st)
    return out


def kill_tree(root: int, *, grace_s: float = 5.0) -> None:
    """End launcher ``root`` and all its descendants: SIGTERM (SIGCONT first, so stopped processes
    can act on it), then SIGKILL to whatever is left after ``grace_s`` seconds."""
    pids = [root, *descendants(root)]
    for pid in pids:
        for sig in (signal.SIGCONT, signal.SIGTERM):
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(state(p) not in (None, "Z") for p in pids):
        time.sleep(0.05)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
