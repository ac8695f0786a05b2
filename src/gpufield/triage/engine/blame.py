"""Blame extraction, its own stage: which host, rank, GPU and peer an incident's evidence names.

Rules decide *what* failed; this stage reads *who* from the evidence lines, the same way for every
class, so a rule that only knows "this event is the root" still gets a host, rank, GPU and peer:

- host: the line's prefix (syslog / journal host, NCCL ``host:pid:tid``; never the ``kernel:`` tag),
  a ChildFailedError ``host :`` entry, Slurm (``srun: error: node001: task 3: Killed``,
  ``SLURMD_NODENAME=``), Kubernetes (``NODE_NAME=``, ``KUBERNETES_NODE_NAME=``, ``spec.nodeName``);
- rank: ``[rankN]:`` / ``[Rank N]`` prefixes (already on the event), ``rank=N``, ``RANK=N`` in an
  environment dump;
- GPU: PCI bus id on the line, else a ``GPU-<uuid>`` joined to its bus id through the
  ``NVRM: GPU at PCI:...: GPU-...`` lines, nvidia-smi ``--query-gpu=pci.bus_id,uuid`` CSVs or NVML
  sampler CSVs of the same host (the timeline's GPU map);
- peer: ``IP:port`` / ``IP<port>`` on the line, an IB device and port (``mlx5_0:1``).

:func:`busy_rank` implements the waiting-victim rule: in a collective the ranks that *time out* are
the ones that arrived and waited; the rank to blame is the one that never timed out (it was busy
elsewhere: tokenising, validating, saving), when the logs leave exactly one such rank.

All patterns are RE2-compatible (no look-around, no back-references).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from gpufield.triage.events import Event

_SLURM_TASK = re.compile(r"srun: error: (?P<host>[A-Za-z0-9][\w.-]*): tasks? (?P<tasks>[\d,\-]+): ")
_ENV_HOST = re.compile(r"\b(?:SLURMD_NODENAME|SLURM_TOPOLOGY_ADDR|NODE_NAME|KUBERNETES_NODE_NAME|K8S_NODE_NAME)"
                       r"=(?P<host>[A-Za-z0-9][\w.-]*)")
_K8S_NODE = re.compile(r"\bspec\.nodeName[\"']?\s*[:=]\s*[\"']?(?P<host>[A-Za-z0-9][\w.-]*)")
_CHILD_HOST = re.compile(r"^\s*host\s*:\s*(?P<host>[A-Za-z0-9<][\w.<>-]*)\s*$", re.MULTILINE)
_ENV_RANK = re.compile(r"(?:^|[\s,;{'\"])(?:RANK|GLOBAL_RANK|SLURM_PROCID|OMPI_COMM_WORLD_RANK)['\"]?\s*[=:]\s*['\"]?"
                       r"(?P<rank>\d+)\b")
_KV_RANK = re.compile(r"\brank[=:]\s*(?P<rank>\d+)\b")
_IP_PORT = re.compile(r"\b(?P<ip>(?:\d{1,3}\.){3}\d{1,3})(?:[:<](?P<port>\d{1,5})>?)?")
_IB_PORT = re.compile(r"\b(?P<dev>mlx5_\d+|mlx4_\d+|ibp\w+|bnxt_re\d+|irdma\d+|efa_\d+)[:/](?P<port>\d+)\b")
_BDF = re.compile(r"\b(?:[0-9a-fA-F]{4,8}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]\b")
# [8d6bf97c3bf4:3039 :0:3095] Caught signal 7 (...)   (UCX's error handler: host:pid:thread-index:tid)
_UCX_HOST = re.compile(r"^\[(?P<host>[A-Za-z0-9<][\w.<>-]*):\d+ *:\d+:\d+\]")
_GPU_ORD = re.compile(r"\bNVRM: GPU(\d+) |\bGPU (\d+) has a total capacity")
_NOT_HOSTS = frozenset({"kernel", "kernel:", "localhost", "-", ""})


@dataclass(frozen=True, slots=True)
class Blame:
    """What the evidence names.

    Attributes:
        host, rank, gpu, peer: the blamed entities (None where the lines do not say).
        why: ``entity -> file:line`` of the line each one was read from.
    """

    host: str | None = None
    rank: int | None = None
    gpu: str | None = None
    peer: str | None = None
    why: tuple[tuple[str, str], ...] = ()


def host_in_text(raw: str) -> str | None:
    """A host name written in the text of a line (UCX handler prefix, Slurm task error, env dump, Kubernetes,
    ChildFailedError)."""
    for pat in (_UCX_HOST, _SLURM_TASK, _ENV_HOST, _K8S_NODE, _CHILD_HOST):
        m = pat.search(raw)
        if m and m["host"].lower() not in _NOT_HOSTS:
            return m["host"]
    return None


def rank_in_text(raw: str) -> int | None:
    """A global rank written in the text (``RANK=3`` env dump, ``rank=3``)."""
    m = _ENV_RANK.search(raw) or _KV_RANK.search(raw)
    return int(m["rank"]) if m else None


def peer_in_text(raw: str) -> str | None:
    """``10.0.0.2:5000`` / ``10.0.0.2<5000>`` -> ``10.0.0.2:5000``; else an IB ``device:port``; else None."""
    m = _IP_PORT.search(raw)
    if m and all(int(x) <= 255 for x in m["ip"].split(".")):
        return f"{m['ip']}:{m['port']}" if m["port"] else m["ip"]
    m = _IB_PORT.search(raw)
    return f"{m['dev']}:{m['port']}" if m else None


def gpu_of_event(e: Event, uuid_to_bdf: dict[tuple[str | None, str], str]) -> str | None:
    """The event's GPU as a PCI bus id when it can be known (UUID joined through the host's GPU map)."""
    if e.gpu_bdf:
        return e.gpu_bdf
    if e.gpu_uuid:
        return uuid_to_bdf.get((e.host, e.gpu_uuid)) or uuid_to_bdf.get((None, e.gpu_uuid)) or e.gpu_uuid
    m = _BDF.search(e.raw)
    if m:
        return m.group(0).lower()
    if e.gpu_index is not None:
        return f"GPU {e.gpu_index}"
    m = _GPU_ORD.search(e.raw)  # "NVRM: GPU0 nvCheckFailedNoLog ...", "GPU 0 has a total capacity ..."
    return f"GPU {m.group(1) or m.group(2)}" if m else None


def uuid_map(gpu_uuid: dict[tuple[str | None, str], str]) -> dict[tuple[str | None, str], str]:
    """Invert the timeline's ``(host, bdf) -> uuid`` map into ``(host, uuid) -> bdf`` (plus a host-less key)."""
    out: dict[tuple[str | None, str], str] = {}
    for (host, bdf), uuid in gpu_uuid.items():
        out[(host, uuid)] = bdf
        out.setdefault((None, uuid), bdf)
    return out


def extract(evidence: Sequence[Event], gpu_uuid: dict[tuple[str | None, str], str] | None = None) -> Blame:
    """The entities the evidence lines name, first line that names each one winning.

    Args:
        evidence: root evidence, root first.
        gpu_uuid: the timeline's ``(host, bdf) -> uuid`` map (for UUID -> bus id joins).
    """
    inv = uuid_map(gpu_uuid or {})
    got: dict[str, object] = {}
    why: list[tuple[str, str]] = []

    def put(key: str, value: object, e: Event) -> None:
        if value is not None and key not in got:
            got[key] = value
            why.append((key, e.where))

    for e in evidence:
        put("host", e.host if (e.host or "").lower() not in _NOT_HOSTS else None, e)
        put("host", host_in_text(e.raw), e)
        put("rank", e.rank, e)
        put("rank", rank_in_text(e.raw) if e.kind not in ("nccl_init",) else None, e)
        put("gpu", gpu_of_event(e, inv), e)
        put("peer", e.fields.get("peer") or peer_in_text(e.raw) if e.source in ("nccl", "torchrun") else None, e)
    return Blame(got.get("host"), got.get("rank"), got.get("gpu"), got.get("peer"), tuple(why))  # type: ignore[arg-type]


def busy_rank(timed_out: Iterable[int], seen: Iterable[int], world: int | None = None) -> int | None:
    """The one rank that did not time out while the others waited, or None when the logs do not single it out.

    Args:
        timed_out: ranks whose watchdog timed out (they arrived and waited).
        seen: every rank any line names.
        world: the world size when a line states it (``nranks``), else ``max(seen) + 1``.
    """
    t = set(timed_out)
    s = set(seen) | t
    if not t:
        return None
    n = world if world else max(s) + 1
    if n <= len(t):
        return None  # every rank the logs know of timed out: the busy one is not in the input
    idle = sorted(set(range(n)) - t)
    return idle[0] if len(idle) == 1 else None


def majority_host(events: Iterable[Event]) -> str | None:
    """The host most evidence lines name (ties: first seen), or None."""
    c = Counter(e.host for e in events if e.host and e.host.lower() not in _NOT_HOSTS)
    return c.most_common(1)[0][0] if c else None
