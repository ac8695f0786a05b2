"""``alpha`` mode: α-CROWN with the clauses (output-spec rows) split over ranks.

Rank r owns a contiguous block of ``K // P`` or ``K // P + 1`` clauses; it builds the slopes of only those
clauses' spec rows (``[1, S_r, B, *relu]`` per ReLU for the output start node, plus their λ) and
the Adam state of those, and runs the single-process :func:`~gpufield.verify.alpha.alpha_crown` on
:meth:`Spec.subset`. The A-matrices of the output pass shrink the same way (S_r rows).

When is this equal to P = 1? In this code the output-node slopes and λ are per spec row and the
objective is a sum over clauses, so a clause's slopes receive gradient only from that clause — *if
intermediate slopes are not optimised* (``optimize_intermediate=False``, as in BaB with frozen
intermediate bounds). Then each clause's trajectory is the P = 1 trajectory, provided every rank
stops at the same iteration as P = 1: one ``all_reduce`` per iteration decides "all clauses of all
ranks proven, or the last iteration, or any rank past its deadline". Rows are independent in exact
arithmetic, but a kernel's rounding may depend on the row count: on this CPU (torch 2.13 CPU, one
thread) the margins were bitwise equal on random MLPs and differed at float32 rounding level on
mnist 256x2 (9 rows vs 5 + 4). The contract is therefore ``rtol = atol = 1e-5`` in float32, and a
proof only counts after the float64 re-check (:func:`~gpufield.verify.alpha.recheck`), which each
rank can run on its own clauses' snapshots. With ``optimize_intermediate=True``
the intermediate slopes are shared by all clauses and each rank would optimise them for its own
clauses only: a different (still sound) optimisation, not P = 1's — this mode refuses it.

Collectives: one 2-float ``all_reduce(MAX)`` per iteration, one ``all_gather_object`` of the
``[K_r, B]`` margins at the end; both sizes depend only on agreed numbers.
"""

from __future__ import annotations

import time

import torch

from gpufield.verify.alpha import AlphaConfig, AlphaResult, alpha_crown
from gpufield.verify.dist.comm import Comm
from gpufield.verify.spec import Spec


def clause_block(n_clauses: int, comm: Comm) -> list[int]:
    """The contiguous clauses rank ``comm.rank`` owns: ``K // P`` of them, one more for the first ``K % P`` ranks.

    Raises:
        ValueError: fewer clauses than ranks (a rank would own none).
    """
    if n_clauses < comm.world:
        raise ValueError(f"{n_clauses} clauses cannot be split over {comm.world} ranks")
    q, rem = divmod(n_clauses, comm.world)
    start = comm.rank * q + min(comm.rank, rem)
    return list(range(start, start + q + (comm.rank < rem)))


def sharded_alpha_crown(graph, spec: Spec, x_lo, x_hi, ref, init_inter, cfg: AlphaConfig, comm: Comm,
                        deadline_s: float = float("inf")) -> tuple[torch.Tensor, AlphaResult]:
    """α-CROWN on this rank's clauses, stopping in lockstep with the others.

    Args:
        graph, x_lo, x_hi, ref, init_inter: as :func:`~gpufield.verify.alpha.alpha_crown`.
        spec: all clauses of the case (the same on every rank).
        cfg: optimiser settings; ``optimize_intermediate`` must be False.
        comm: this process's place in the group.
        deadline_s: ``time.monotonic()`` value; past it on any rank, all ranks stop.

    Returns:
        ``(best_KB, local)``: every clause's best margin ``[K, B]`` (gathered in clause order) and
        this rank's :class:`AlphaResult` (margins and snapshots of its clauses only).

    Raises:
        ValueError: ``optimize_intermediate`` is True, or fewer clauses than ranks.
    """
    if cfg.optimize_intermediate:
        raise ValueError("alpha sharding by clause needs optimize_intermediate=False "
                         "(intermediate slopes are shared by all clauses)")
    mine = clause_block(spec.n_clauses, comm)

    def stop(best, it):
        flags = torch.tensor([float(it == cfg.iterations or time.monotonic() > deadline_s),
                              float(not bool((best > 0).all()))])
        if comm.world > 1:
            import torch.distributed as dist

            dist.all_reduce(flags, op=dist.ReduceOp.MAX, group=comm.group)
        return bool(flags[0] > 0 or flags[1] == 0)

    local = alpha_crown(graph, spec.subset(mine), x_lo, x_hi, ref, init_inter, cfg, deadline_s, stop=stop)
    parts = comm.all_gather_object(local.best_KB.cpu())
    return torch.cat(parts).to(local.best_KB.device), local
