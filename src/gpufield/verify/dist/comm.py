"""Process-group plumbing for :mod:`gpufield.verify.dist`: one :class:`Comm` per process.

Started by ``torchrun`` (which sets ``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``/``MASTER_PORT``);
without those variables the process is a world of one and no collective is ever issued, so the
same code path serves P = 1 and P > 1. Backend ``gloo`` on CPU, ``nccl`` on GPUs.

Every collective here takes sizes that depend only on the graph and on globally agreed numbers,
never on rank-local data (verify.md §6.3: the paper's domain-parallel + FSDP deadlock came from
rank-dependent collective schedules).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta

import torch

BACKENDS = ("gloo", "nccl")

GATHER_STATS = {"calls": 0, "bytes": 0, "seconds": 0.0}
"""Process-wide count of :meth:`Comm.all_gather_rows` collectives: calls, bytes received, wall seconds."""


@dataclass(frozen=True, kw_only=True, slots=True)
class DistConfig:
    """How to join the process group.

    Attributes:
        backend: ``gloo`` (CPU) or ``nccl`` (one GPU per rank).
        timeout_s: collective timeout in seconds (a stuck peer fails loudly instead of hanging).
    """

    backend: str = "gloo"
    timeout_s: float = 120.0

    def __post_init__(self):
        if self.backend not in BACKENDS:
            raise ValueError(f"backend {self.backend!r} not in {BACKENDS}")
        if not self.timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0, got {self.timeout_s}")


@dataclass(frozen=True, slots=True)
class Comm:
    """This process's place in the group.

    Attributes:
        rank: 0-based rank.
        world: number of ranks P (1: no process group, collectives are identities).
        group: the ``torch.distributed`` process group (None: the default group).
    """

    rank: int = 0
    world: int = 1
    group: object | None = None

    def all_gather_rows(self, shard: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """Concatenate every rank's ``shard`` along dim 0 into one buffer.

        Args:
            shard: ``[R, *rest]``, the same shape, dtype and device on every rank.
            out: contiguous ``[P·R, *rest]`` buffer to gather into (None: a fresh one).

        Returns:
            ``[P·R, *rest]`` contiguous (rank r's rows at ``[r·R, (r+1)·R)``); ``shard`` itself at P = 1.
            Done under ``no_grad`` into one buffer (``all_gather_single``), never a list + ``cat``
            that autograd could record (the paper's retained-copies defect, verify.md §1.4).
        """
        if self.world == 1:
            return shard
        import time


        t0 = time.perf_counter()
        with torch.no_grad():
            full = shard.new_empty((self.world * shard.shape[0], *shard.shape[1:])) if out is None else out
            if staged(shard, self.group):  # gloo on CUDA tensors: through host memory
                host = torch.empty(full.shape, dtype=full.dtype)
                _gather_into(host, shard.cpu().contiguous(), self.group)
                full.copy_(host)
            else:
                _gather_into(full, shard.contiguous(), self.group)
        GATHER_STATS["calls"] += 1
        GATHER_STATS["bytes"] += full.numel() * full.element_size()
        GATHER_STATS["seconds"] += time.perf_counter() - t0
        return full

    def all_gather_object(self, obj):
        """Every rank's picklable ``obj`` as a list indexed by rank (``[obj]`` at P = 1)."""
        if self.world == 1:
            return [obj]
        import torch.distributed as dist

        out = [None] * self.world
        dist.all_gather_object(out, obj, group=self.group)
        return out


def _gather_into(out: torch.Tensor, t: torch.Tensor, group) -> None:
    """All-gather ``t`` into one buffer: ``all_gather_single`` (torch >= 2.12; ``all_gather_into_tensor``,
    which it replaces, before: the H200 machine has torch 2.11)."""
    import torch.distributed as dist

    fn = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    fn(out, t, group=group)


def staged(t: torch.Tensor, group=None) -> bool:
    """Whether a collective on ``t`` goes through host memory: a CUDA tensor in a gloo group.

    Gloo's CUDA paths cover only some collectives (all-reduce, broadcast); rather than rely on
    them, :mod:`gpufield.verify.dist` copies CUDA tensors to the host and back under gloo (2 ranks
    sharing one GPU); NCCL groups use the device tensors directly.
    """
    if not t.is_cuda:
        return False
    import torch.distributed as dist

    return dist.get_backend(group) == "gloo"


def init_from_env(cfg: DistConfig | None = None) -> Comm:
    """Join the group ``torchrun`` described in the environment (or a world of one without it).

    Args:
        cfg: backend and timeout (default gloo, 120 s).

    Returns:
        This process's :class:`Comm`.

    Raises:
        RuntimeError: from ``torch.distributed`` when the rendezvous fails or times out.
    """
    cfg = cfg or DistConfig()
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world == 1:
        return Comm()
    import torch.distributed as dist

    if not dist.is_initialized():
        dist.init_process_group(cfg.backend, timeout=timedelta(seconds=cfg.timeout_s))
    return Comm(rank=dist.get_rank(), world=dist.get_world_size())


def shutdown(comm: Comm) -> None:
    """Leave the process group (no-op for a world of one)."""
    if comm.world > 1:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()
