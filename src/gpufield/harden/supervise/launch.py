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
    """Expand a Slurm host list (``gpu[01-03,07],login1`` -> ``gpu01 gpu02 gpu03 gpu07 login1``) with
    :func:`gpufield.harden.supervise.slurm.parse_hostlist` (no ``scontrol`` call).

    Raises:
        ValueError: an unbalanced bracket or a bad range.
    """
    from gpufield.harden.supervise.slurm import parse_hostlist

    return parse_hostlist(text)


def job_nodes(env: dict[str, str] | None = None) -> list[str]:
    """The job's hosts: ``SLURM_JOB_NODELIST`` (or ``SLURM_NODELIST``) expanded, else this host."""
    from gpufield.harden.supervise.slurm import expand_hostlist

    env = os.environ if env is None else env
    nl = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
    return expand_hostlist(nl) if nl else [socket.gethostname()]


def option_value(cmd: Sequence[str], *names: str) -> str | None:
    """The value of the first of ``names`` in a command (``--opt V`` or ``--opt=V``), or None."""
    for i, t in enumerate(cmd):
        key, eq, val = t.partition("=")
        if key in names:
            if eq:
                return val
            return cmd[i + 1] if i + 1 < len(cmd) else None
    return None


def rdzv_endpoint(cmd: Sequence[str]) -> tuple[str, int] | None:
    """``(host, port)`` of a torchrun command's c10d rendezvous (``--rdzv-backend c10d --rdzv-endpoint H:P``),
    or None (no torchrun, another backend, or no endpoint). A missing port is torchrun's default 29400.

    Raises:
        ValueError: the endpoint's port is not a number.
    """
    if launcher_index(cmd) is None:
        return None
    if option_value(cmd, "--rdzv-backend", "--rdzv_backend") != "c10d":
        return None
    ep = option_value(cmd, "--rdzv-endpoint", "--rdzv_endpoint")
    if not ep:
        return None
    host, sep, port = ep.rpartition(":")
    if not sep:
        return ep, 29400
    if not port.isdigit():
        raise ValueError(f"--rdzv-endpoint {ep!r}: the port is not a number")
    return host.strip("[]"), int(port)


def with_rdzv_id(cmd: list[str], attempt: int) -> tuple[list[str], str | None]:
    """A torchrun command whose ``--rdzv-id`` names the launch (``<id>-a<attempt>``, ``none`` when absent).

    A c10d rendezvous that an agent shut down is closed for good in its store; when the store
    outlives the launches (the multi-node supervisor hosts it), every launch needs its own id.

    Returns:
        ``(argv, note)``; the note is None when ``cmd`` is not a torchrun command.
    """
    idx = launcher_index(cmd)
    if idx is None:
        return cmd, None
    out = list(cmd)
    tail = out[idx + 1:]
    script = next((i for i, t in enumerate(tail) if not t.startswith("-") and (i == 0 or not _takes_value(tail[i - 1]))),
                  len(tail))
    for i in range(idx + 1, idx + 1 + script):  # the launcher's options only, not the script's
        t = out[i]
        key, eq, val = t.partition("=")
        if key in ("--rdzv-id", "--rdzv_id"):
            if eq:
                out[i] = f"{key}={val}-a{attempt}"
                return out, f"--rdzv-id {val}-a{attempt}: one rendezvous per launch"
            if i + 1 < len(out):
                out[i + 1] = f"{out[i + 1]}-a{attempt}"
                return out, f"--rdzv-id {out[i + 1]}: one rendezvous per launch"
    out[idx + 1:idx + 1] = ["--rdzv-id", f"none-a{attempt}"]
    return out, f"--rdzv-id none-a{attempt}: one rendezvous per launch"
