"""What ``gpufield run`` reads from Slurm and what it writes for it (read-only towards Slurm).

**Read.** :func:`slurm_job` takes the job from the environment ``srun`` gives every task:
``SLURM_JOB_ID``, ``SLURM_JOB_NODELIST`` (``SLURM_NODELIST`` on older releases), ``SLURM_NODEID``
(this node's index in the allocation, 0-based) and ``SLURM_JOB_NUM_NODES`` / ``SLURM_NNODES``.
The node list is compressed (``gpu[01-04,07],login1``); :func:`expand_hostlist` expands it with
``scontrol show hostnames`` when ``scontrol`` is on the PATH (the complete reference: it knows every
form the cluster's Slurm prints) and otherwise with :func:`parse_hostlist`, a small parser of the
bracket syntax (comma-separated names, each with any number of ``[a-b,c]`` groups of decimal
ranges, leading zeros kept). ``scontrol`` is only ever asked to *show*; the supervisor never changes
Slurm state (no ``scontrol update``, no drain): excluding a node is writing a file.

**Write.** :func:`exclude_text` is the exclude list as one comma-separated line: it works both as
``sbatch --exclude=$(cat FILE)`` (no spaces or newlines inside to split the word) and as
``--exclude=/path/FILE`` (Slurm takes an argument containing ``/`` for a file of host names).
:func:`hostfile_text` is the remaining hosts, one per line (torchrun's ``{hosts}`` placeholder,
MPI/DeepSpeed hostfiles). Sources: Slurm ``srun``/``sbatch`` man pages (``--exclude``, OUTPUT
ENVIRONMENT VARIABLES), ``scontrol`` man page (``show hostnames``).
"""

from __future__ import annotations

import itertools
import os
import re
import shutil
import subprocess
from dataclasses import dataclass

__all__ = ["SlurmJob", "exclude_text", "expand_hostlist", "hostfile_text", "parse_hostlist", "slurm_job"]

_GROUP = re.compile(r"\[([^\[\]]*)\]")


def parse_hostlist(text: str) -> list[str]:
    """Expand a Slurm host list without Slurm (``gpu[01-03,07],n[1-2]-ib[0-1]``).

    Args:
        text: the compressed list.

    Returns:
        The host names in Slurm's order (each name's groups expanded left to right, first group slowest).

    Raises:
        ValueError: an unbalanced bracket, an empty name or a range that is not ``a`` or ``a-b`` with ``a <= b``.
    """
    parts, depth, cur = [], 0, ""
    for ch in text.strip():
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        if depth < 0 or depth > 1:
            raise ValueError(f"Slurm host list {text!r}: unbalanced brackets")
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    if depth:
        raise ValueError(f"Slurm host list {text!r}: unbalanced brackets")
    parts.append(cur)
    hosts: list[str] = []
    for part in parts:
        part = part.strip()
        if not part:
            raise ValueError(f"Slurm host list {text!r}: empty host name")
        pieces = _GROUP.split(part)  # text, group, text, group, ..., text
        if any(c in p for p in pieces[0::2] for c in "[]"):
            raise ValueError(f"Slurm host list {text!r}: cannot read {part!r}")
        choices: list[list[str]] = []
        for i, p in enumerate(pieces):
            choices.append([p] if i % 2 == 0 else _ranges(p, text))
        hosts.extend("".join(c) for c in itertools.product(*choices))
    return hosts


def _ranges(body: str, text: str) -> list[str]:
    out: list[str] = []
    for rng in body.split(","):
        lo, sep, hi = rng.strip().partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()) or (sep and int(hi) < int(lo)):
            raise ValueError(f"Slurm host list {text!r}: bad range {rng!r} (expected N or N-M, N <= M)")
        width = len(lo)
        out.extend(f"{n:0{width}d}" for n in range(int(lo), int(hi if sep else lo) + 1))
    return out


def expand_hostlist(text: str, *, scontrol: str | None = "scontrol", timeout_s: float = 10.0) -> list[str]:
    """Expand a Slurm host list: ``scontrol show hostnames`` when available, else :func:`parse_hostlist`.

    Args:
        text: the compressed list (``SLURM_JOB_NODELIST``).
        scontrol: the program to ask (None: never ask, parse here).
        timeout_s: limit for the ``scontrol`` call, seconds.

    Returns:
        The host names, in order.

    Raises:
        ValueError: ``scontrol`` rejected the list (its message), or the list cannot be parsed here.
    """
    exe = shutil.which(scontrol) if scontrol else None
    if exe is None:
        return parse_hostlist(text)
    try:
        res = subprocess.run([exe, "show", "hostnames", text], capture_output=True, text=True,
                             timeout=timeout_s, check=False, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return parse_hostlist(text)  # a wedged or broken scontrol: the documented syntax still reads
    if res.returncode != 0:
        raise ValueError(f"scontrol show hostnames {text!r} failed ({res.returncode}): {res.stderr.strip()}")
    return [h for h in res.stdout.split() if h]


@dataclass(frozen=True, kw_only=True, slots=True)
class SlurmJob:
    """The Slurm job this process runs in.

    Attributes:
        job_id: ``SLURM_JOB_ID``.
        nodes: the allocation's hosts, expanded, in Slurm's order.
        node_id: this node's index in ``nodes`` (``SLURM_NODEID``), or None outside a job step.
    """

    job_id: str
    nodes: tuple[str, ...]
    node_id: int | None

    def __post_init__(self) -> None:
        if not self.nodes:
            raise ValueError("a Slurm job has at least one node")
        if self.node_id is not None and not 0 <= self.node_id < len(self.nodes):
            raise ValueError(f"SLURM_NODEID {self.node_id} is outside the node list of {len(self.nodes)} host(s)")

    @property
    def node(self) -> str | None:
        """This node's host name from the node list, or None without ``SLURM_NODEID``."""
        return None if self.node_id is None else self.nodes[self.node_id]


def slurm_job(env: dict[str, str] | None = None, *, scontrol: str | None = "scontrol") -> SlurmJob | None:
    """The Slurm job of ``env`` (default: this process's environment), or None outside Slurm.

    Raises:
        ValueError: the node list cannot be expanded, ``SLURM_NODEID`` is not a number or lies
            outside the list, or the list's length differs from ``SLURM_JOB_NUM_NODES``.
    """
    env = os.environ if env is None else env
    job_id = env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID")
    nodelist = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
    if not job_id or not nodelist:
        return None
    nodes = tuple(expand_hostlist(nodelist, scontrol=scontrol))
    count = env.get("SLURM_JOB_NUM_NODES") or env.get("SLURM_NNODES")
    if count and count.isdigit() and int(count) != len(nodes):
        raise ValueError(f"SLURM_JOB_NODELIST {nodelist!r} expands to {len(nodes)} host(s) but "
                         f"SLURM_JOB_NUM_NODES is {count}")
    raw = env.get("SLURM_NODEID")
    if raw is not None and not raw.strip().isdigit():
        raise ValueError(f"SLURM_NODEID {raw!r} is not a node index")
    return SlurmJob(job_id=job_id, nodes=nodes, node_id=None if raw is None else int(raw))


def exclude_text(excluded: list[str] | tuple[str, ...]) -> str:
    """The exclude file's text: one comma-separated line (empty when nothing is excluded)."""
    return ",".join(excluded) + "\n" if excluded else ""


def hostfile_text(hosts: list[str] | tuple[str, ...]) -> str:
    """The hostfile's text: one host per line."""
    return "".join(h + "\n" for h in hosts)
