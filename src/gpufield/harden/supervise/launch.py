"""Preparing the launch command and the node list (Slurm-aware where it is cheap).

For a torchrun command (``torchrun ...`` or ``python -m torch.distributed.run ...``) the supervisor
adds, right after the launcher:

- ``--tee 3 --log-dir <attempt>/torchrun`` (unless ``--tee``/``--redirects``/``--log-dir`` are
  given): every rank's stdout/stderr reach the launcher's console and a per-rank file;
- ``--max-restarts 0`` (a given ``--max-restarts`` is removed and reported): restarts are the
  supervisor's, counted against one budget;

and sets ``TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE='[rank${rank}]:'`` so each console line starts
with its *global* rank (torchrun's default prefix names the local rank). The supervisor then reads
one pipe (the launcher's merged stdout/stderr) with ``selectors``: no thread per rank or per line.

Placeholders in the command, substituted at every launch: ``{hosts}`` (remaining hosts, comma
separated), ``{nnodes}`` (their count), ``{exclude}`` (excluded hosts, comma separated, may be
empty), ``{attempt}`` (0-based launch number).
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Sequence
from pathlib import Path

PREFIX_TEMPLATE = "[rank${rank}]:"
_RESTART_OPTS = ("--max-restarts", "--max_restarts")
_OUTPUT_OPTS = ("--tee", "--redirects", "-r", "-t", "--log-dir", "--log_dir")


def launcher_index(cmd: Sequence[str]) -> int | None:
    """Index of the last token of the torchrun launcher in ``cmd`` (``torchrun`` or
    ``-m torch.distributed.run``), or None when ``cmd`` is not a torchrun command."""
    for i, tok in enumerate(cmd):
        if os.path.basename(tok) == "torchrun":
            return i
        if tok == "-m" and i + 1 < len(cmd) and cmd[i + 1] == "torch.distributed.run":
            return i + 1
        if tok.startswith("-m") and tok[2:] == "torch.distributed.run":
            return i
    return None


def _has(cmd: Sequence[str], names: Sequence[str]) -> bool:
    return any(t in names or t.split("=", 1)[0] in names for t in cmd)


def prepare(cmd: Sequence[str], log_dir: Path, subst: dict[str, str]) -> tuple[list[str], list[str]]:
    """The command to launch for one attempt.

    Args:
        cmd: the user's command (after ``--``).
        log_dir: folder for torchrun's per-rank logs of this attempt.
        subst: placeholder values (``hosts``, ``nnodes``, ``exclude``, ``attempt``).

    Returns:
        ``(argv, notes)``: the command and sentences about what was changed.

    Raises:
        ValueError: an unknown ``{placeholder}`` in the command.
    """
    out: list[str] = []
    for tok in cmd:
        try:
            out.append(tok.format_map(subst) if "{" in tok else tok)
        except (KeyError, IndexError, ValueError) as e:
            raise ValueError(f"command token {tok!r}: unknown placeholder {e}; known: "
                             f"{{{'}, {'.join(sorted(subst))}}}") from None
    idx = launcher_index(out)
    notes: list[str] = []
    if idx is None:
        return out, notes
    head, tail = out[: idx + 1], out[idx + 1:]
    script = next((i for i, t in enumerate(tail) if not t.startswith("-") and (i == 0 or not _takes_value(tail[i - 1]))), len(tail))
    opts, rest = tail[:script], tail[script:]
    kept: list[str] = []
    skip = False
    for i, t in enumerate(opts):
        if skip:
            skip = False
            continue
        if t in _RESTART_OPTS:
            notes.append(f"removed {t} {opts[i + 1] if i + 1 < len(opts) else ''}: restarts are the supervisor's")
            skip = True
            continue
        if t.split("=", 1)[0] in _RESTART_OPTS:
            notes.append(f"removed {t}: restarts are the supervisor's")
            continue
        kept.append(t)
    added = ["--max-restarts", "0"]
    if not _has(opts, _OUTPUT_OPTS):
        added += ["--tee", "3", "--log-dir", str(log_dir)]
    return head + added + kept + rest, notes


def _takes_value(opt: str) -> bool:
    """Whether a torchrun option token is followed by its value (``--nnodes 2``, not ``--standalone``)."""
    return opt.startswith("-") and "=" not in opt and opt not in ("--standalone", "--no-python", "--no_python",
                                                                   "-m", "--module", "--run-path", "--run_path")


def world_size(cmd: Sequence[str]) -> int:
    """Local ranks of a torchrun command (``--nproc-per-node N``), 0 when not given or not a number."""
    for i, t in enumerate(cmd):
        key, _, val = t.partition("=")
        if key in ("--nproc-per-node", "--nproc_per_node"):
            val = val or (cmd[i + 1] if i + 1 < len(cmd) else "")
            return int(val) if val.isdigit() else 0
    return 0


def expand_nodelist(text: str) -> list[str]:
    """Expand a Slurm host list (``gpu[01-03,07],login1`` -> ``gpu01 gpu02 gpu03 gpu07 login1``).

    Handles one bracket group per name (what Slurm prints for ``SLURM_JOB_NODELIST`` of flat
    clusters); ``scontrol show hostnames`` is the complete reference.

    Raises:
        ValueError: an unbalanced bracket or a bad range.
    """
    hosts: list[str] = []
    for part in re.findall(r"[^,\[]+(?:\[[^\]]*\])?[^,]*", text):
        m = re.fullmatch(r"([^\[\]]*)\[([^\]]+)\]([^\[\]]*)", part)
        if not m:
            if "[" in part or "]" in part:
                raise ValueError(f"Slurm node list {text!r}: cannot read {part!r}")
            hosts.append(part)
            continue
        pre, body, post = m.groups()
        for rng in body.split(","):
            lo, sep, hi = rng.partition("-")
            if not lo.isdigit() or (sep and not hi.isdigit()):
                raise ValueError(f"Slurm node list {text!r}: bad range {rng!r}")
            for n in range(int(lo), int(hi if sep else lo) + 1):
                hosts.append(f"{pre}{n:0{len(lo)}d}{post}")
    return hosts


def job_nodes(env: dict[str, str] | None = None) -> list[str]:
    """The job's hosts: ``SLURM_JOB_NODELIST`` (or ``SLURM_NODELIST``) expanded, else this host."""
    env = os.environ if env is None else env
    nl = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
    return expand_nodelist(nl) if nl else [socket.gethostname()]
