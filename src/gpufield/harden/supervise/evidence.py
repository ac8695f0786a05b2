"""Evidence the supervisor gathers from a live or finished attempt: exceptions per rank, monitor
records, stack dumps, and who to blame for a hang."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from gpufield.harden.supervise.progress import Progress

_PREFIXES = re.compile(r"^(?:\[rank\d+\]:\s*)+")
#: a Python exception line at the end of a traceback (``RuntimeError: ...``, ``torch.OutOfMemoryError: ...``)
EXC_RE = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Interrupt))(?::\s?(.*))?$")
#: exceptions that are a peer's or the fabric's, not the rank's own code
COMM_RE = re.compile(r"gloo|nccl|c10d|Dist(?:Backend|Network|Store)Error|Connection (?:closed|reset|refused)"
                     r"|Broken pipe|Socket Timeout|timed out|ProcessGroup|watchdog|SignalException"
                     r"|ChildFailedError|Rendezvous", re.IGNORECASE)
#: a checkpoint path announced in a line (``saving checkpoint to /ckpt/step100``)
CKPT_RE = re.compile(r"checkpoint (?:to|at|in)\s+(\S+)", re.IGNORECASE)


@dataclass(slots=True)
class LineFacts:
    """Facts collected line by line during an attempt.

    Attributes:
        in_traceback: ranks currently inside a printed traceback.
        exceptions: rank -> last exception line of that rank.
        checkpoint: last checkpoint path announced.
    """

    in_traceback: set = field(default_factory=set)
    exceptions: dict = field(default_factory=dict)
    checkpoint: str | None = None

    def feed(self, rank: int | None, text: str) -> None:
        """Take one line (rank prefix removed by the parser; nested prefixes are removed here)."""
        body = _PREFIXES.sub("", text).rstrip()
        if rank is not None:
            if body.startswith("Traceback (most recent call last)"):
                self.in_traceback.add(rank)
            elif rank in self.in_traceback and EXC_RE.match(body):
                self.exceptions[rank] = body
                self.in_traceback.discard(rank)
        m = CKPT_RE.search(body)
        if m:
            self.checkpoint = m.group(1)

    def user_exception(self) -> tuple[int, str] | None:
        """``(rank, line)`` of a rank whose exception is not a communication error, or None."""
        for r, line in sorted(self.exceptions.items()):
            if not COMM_RE.search(line):
                return r, line
        return None


class MonitorTail:
    """Tails the monitor hook's per-rank files (``rank<R>.log``) into a :class:`Progress`.

    Args:
        folder: ``GPUFIELD_MONITOR_DIR`` of the attempt.
    """

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.offsets: dict[str, int] = {}
        self.partial: dict[str, bytes] = {}
        self.records = 0

    def poll(self, progress: Progress, now: float) -> None:
        """Read new records of every rank file and apply them."""
        try:
            names = [n for n in os.listdir(self.folder) if n.startswith("rank") and n.endswith(".log")]
        except OSError:
            return
        for name in names:
            try:
                rank = int(name[4:-4])
            except ValueError:
                continue
            path = self.folder / name
            off = self.offsets.get(name, 0)
            try:
                with open(path, "rb") as f:
                    f.seek(off)
                    data = f.read()
            except OSError:
                continue
            if not data:
                continue
            self.offsets[name] = off + len(data)
            data = self.partial.pop(name, b"") + data
            lines = data.split(b"\n")
            if lines[-1]:
                self.partial[name] = lines[-1]
            for raw in lines[:-1]:
                self._apply(progress, rank, raw.decode(errors="replace").split(), now)

    def _apply(self, progress: Progress, rank: int, f: list[str], now: float) -> None:
        if not f:
            return
        self.records += 1
        try:
            if f[0] == "S":
                progress.on_step(rank, int(f[1]), now, source="monitor")
            elif f[0] == "A":
                progress.on_arrive(rank, int(f[1]), int(f[2]) / 1e9)
            elif f[0] == "D":
                progress.on_depart(rank, int(f[1]))
            elif f[0] == "P":
                progress.on_phase(rank, f[1], now)
            elif f[0] == "E":
                progress.on_phase(rank, None, now)
            elif f[0] == "I":
                v = progress.view(rank)
                v.pid, v.host, v.local_rank, v.gpu, v.stacks = int(f[1]), f[2], int(f[3]), f[4], f[5] == "1"
        except (IndexError, ValueError):
            pass  # a torn or foreign record: ignore


def stack_sizes(folder: Path) -> dict[int, int]:
    """rank -> current size in bytes of its ``stack-rank<R>.txt`` dump file."""
    out = {}
    for p in folder.glob("stack-rank*.txt"):
        try:
            out[int(p.stem[len("stack-rank"):])] = p.stat().st_size
        except (ValueError, OSError):
            pass
    return out


def blame_hang(states: dict[int, str | None], dumped: dict[int, bool], not_arrived: tuple[int, ...],
               behind: tuple[int, ...], stale: tuple[int, ...], all_ranks: tuple[int, ...],
               in_phase: tuple[int, ...] = ()) -> tuple[tuple[int, ...], str]:
    """The ranks to blame for a hang, strongest evidence first.

    Args:
        states: rank -> process state letter (``T`` stopped, ``Z`` zombie, None gone).
        dumped: rank -> whether it wrote a stack dump when asked (only ranks that were asked).
        not_arrived / behind / stale / in_phase: from :class:`~gpufield.harden.supervise.progress.Stall`.
        all_ranks: every rank known.

    Returns:
        ``(ranks, why)``; ranks empty when nothing singles one out.
    """
    stopped = tuple(sorted(r for r, s in states.items() if s in ("T", "t", "Z", None)))
    if stopped and len(stopped) < len(all_ranks):
        return stopped, "process stopped, zombie or gone (/proc state " + ",".join(
            f"{r}:{states[r] or 'gone'}" for r in stopped) + ")"
    if in_phase and len(in_phase) < len(all_ranks):
        return in_phase, "still inside its announced long phase after the phase timeout"
    silent = tuple(sorted(r for r, ok in dumped.items() if not ok))
    if silent and len(silent) < len(dumped):
        return silent, "did not answer the SIGUSR1 stack-dump request"
    if not_arrived and len(not_arrived) < len(all_ranks):
        return not_arrived, "never entered the collective its peers entered"
    if behind and len(behind) < len(all_ranks):
        return behind, "never reached the step its peers reached"
    if stale and len(stale) < len(all_ranks):
        return stale, "silent longer than the hang timeout while its peers progressed"
    if stopped:
        return stopped, "every rank stopped"
    return (), "all ranks stalled at the same point"
