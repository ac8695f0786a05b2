"""``alpha`` mode: α-CROWN with the clauses (output-spec rows) and the intermediate rows split over ranks.

Two splits, both exact per row:

* *intermediate rows* (:class:`RowSplit`): every intermediate CROWN pass (``C = I`` over a
  layer's unstable neurons) bounds only this rank's ``ceil(n/P)`` rows (the last block padded
  with copies of the last row, so every rank runs the same number of passes of the same size),
  then one ``all_gather`` of the ``[rows, 2, B]`` bounds gives every rank all of them. These
  passes' A-matrices ``[rows, B, N]`` are what sets the P = 1 peak of α-CROWN on wide MLPs
  (benchmarks/verify_RESULTS.md, "what sets the peak"), so they shrink to ~1/P per rank.
* *clauses* (below): the output start node's slopes, λ and their Adam state.

With the weights FSDP-sharded as well (the default of the ``alpha`` mode in
:mod:`~gpufield.verify.dist.worker` and ``verify run``), all three classes that make up the peak
(weights, A-matrices, slopes + Adam state) are ~1/P per rank.

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

Collectives: one 2-float ``all_reduce(MAX)`` per iteration, one ``all_gather`` of ``[ceil(n/P), 2,
B]`` bounds per re-bounded layer and pass (:class:`RowSplit`), the FSDP gathers of the weights,
one ``all_gather_object`` of the ``[K_r, B]`` margins at the end; all sizes depend only on agreed
numbers.
"""

from __future__ import annotations

import time

import torch

from gpufield.verify.alpha import AlphaConfig, AlphaResult, alpha_crown
from gpufield.verify.dist.comm import Comm
from gpufield.verify.spec import Spec


class RowSplit:
    """Splits a layer's re-bounded rows over ranks for :func:`~gpufield.verify.propagate.crown_intermediate`.

    Args:
        comm: this process's place in the group.

    Attributes:
        calls: number of :meth:`join` collectives issued (one per re-bounded layer and pass).
    """

    def __init__(self, comm: Comm):
        self.comm = comm
        self.calls = 0

    def take(self, rows: torch.Tensor) -> torch.Tensor:
        """This rank's block of ``rows`` (``[n]`` long): ``ceil(n/P)`` of them, the last block padded
        with copies of ``rows[-1]`` (same length on every rank). ``rows`` must be the same on every rank."""
        n, P = len(rows), self.comm.world
        q = -(-n // P)
        if n == 0 or P == 1:
            return rows
        padded = torch.cat([rows, rows[-1:].expand(q * P - n)]) if q * P > n else rows
        return padded[self.comm.rank * q:(self.comm.rank + 1) * q]

    def join(self, lo_BR: torch.Tensor, hi_BR: torch.Tensor, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Every rank's bounds of its :meth:`take` rows, gathered: ``[B, q]`` each in, ``[B, n]`` each out.

        Raises:
            ValueError: a bound requires grad (the gather is not differentiable; intermediate
                slopes must not be optimised under this split).
        """
        if self.comm.world == 1:
            return lo_BR, hi_BR
        if lo_BR.requires_grad or hi_BR.requires_grad:
            raise ValueError("RowSplit gathers intermediate bounds without gradient: "
                             "optimised intermediate slopes cannot be row-split")
        self.calls += 1
        both = torch.stack([lo_BR.T, hi_BR.T], 1).contiguous()  # [q, 2, B]
        full = self.comm.all_gather_rows(both)[:n]
        return full[:, 0].T.contiguous(), full[:, 1].T.contiguous()


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
                        deadline_s: float = float("inf"), row_split: RowSplit | None = None
                        ) -> tuple[torch.Tensor, AlphaResult]:
    """α-CROWN on this rank's clauses, stopping in lockstep with the others.

    Args:
        graph, x_lo, x_hi, ref, init_inter: as :func:`~gpufield.verify.alpha.alpha_crown`.
        spec: all clauses of the case (the same on every rank).
        cfg: optimiser settings; ``optimize_intermediate`` must be False.
        comm: this process's place in the group.
        deadline_s: ``time.monotonic()`` value; past it on any rank, all ranks stop.
        row_split: also split every iteration's intermediate CROWN rows (None: each rank
            bounds all of them, as before).

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

    local = alpha_crown(graph, spec.subset(mine), x_lo, x_hi, ref, init_inter, cfg, deadline_s, stop=stop,
                        row_split=row_split)
    parts = comm.all_gather_object(local.best_KB.cpu())
    return torch.cat(parts).to(local.best_KB.device), local
