"""``alpha`` mode in branch and bound: every rank runs the same search, each holding only its clauses' α and β.

What sets the peak of β-CROWN branch and bound on one device (measured with the storage tracker,
benchmarks/verify_RESULTS.md): tensors with a spec-row dimension — the FSB candidates' A-matrices
``[S, B·2k, N]`` and their slopes ``[1, S, B·2k, N]``, the batch's A-matrices ``[S, B, N]`` and
its α / β with their Adam state and best iterates, and each queued domain's α ``[1, S, 1, N]`` and
β ``[S, 1, N]``. So here the *clauses* are split: rank r owns the clause block of
:func:`~gpufield.verify.dist.alpha_shard.clause_block` and every spec-row tensor of the search
holds only that block's rows. Everything without a spec dimension (the heap's order, splits,
float64 intermediate bounds, branching decisions) is computed identically on every rank.

Why this is P = 1's search: α and β are per spec row, and the objective is a sum over clauses, so a
row's gradient comes from its own clause only. What couples the clauses is a *minimum* over them
(a domain's margin, the best-iterate choice, the FSB child score, the float64 bound) — an
``all_reduce(MIN)``, which is exact in any order — and BaBSR's mean over spec rows, which is taken
on the gathered rows (the same tensor as at P = 1). Time- and memory-dependent stops are agreed
by ``all_reduce(MAX)`` of the ranks' flags, and counterexample candidates are merged in P = 1's
order, so all ranks issue the same collectives and reach the same verdict. Bitwise equality with
P = 1 holds where the kernels round a row independently of the row count (observed on this CPU
for the tested shapes; not guaranteed by BLAS); otherwise the float32 optimiser differs at
rounding level and the search may branch differently in near-ties. Soundness does not depend on
it: every bound is the float64 re-evaluation (:func:`~gpufield.verify.bab.bound.bound64`) and
every counterexample is validated by onnxruntime, as at P = 1.

The domains' float64 intermediate CROWN passes (``[rows, B, N]`` A-matrices, the peak of
2-layer nets) are split by row as in the bounds path (:class:`~gpufield.verify.dist.alpha_shard.RowSplit`).
FSB's candidate children (the largest tensors: ``[S, B·2k, N]``) are split differently: by
*candidate*. Each rank gathers the batch's α, β of all rows (``[1, S, B, N]``, 1/2k of the
candidates' size), bounds its ``ceil(B·2k/P)`` candidates with the whole spec, and the candidate
scores are all-gathered (values, not a reduction).

Collectives per optimiser step: one ``all_reduce(MIN)`` of ``[B + 1]`` floats; per round: one for
the float64 bounds, gathers of the batch's α/β rows and of the FSB scores, one gather of the
BaBSR rows per ReLU layer, one ``all_gather_object`` of at most 8 candidate points per rank, one
flag ``all_reduce``.
"""

from __future__ import annotations

import torch

from gpufield.verify.dist.alpha_shard import clause_block
from gpufield.verify.dist.comm import Comm, staged
from gpufield.verify.spec import Spec


class SpecSplit:
    """The clause split of one branch-and-bound search (``RefineConfig.spec_split``).

    Args:
        comm: this process's place in the group.

    Attributes:
        calls: collectives issued (for reports).
    """

    def __init__(self, comm: Comm):
        from gpufield.verify.dist.alpha_shard import RowSplit

        self.comm = comm
        self.calls = 0
        self._counts: list[int] | None = None
        self.rows = RowSplit(comm)
        """Splits the domains' float64 intermediate CROWN rows (``[rows, B, N]`` A-matrices)."""

    def local(self, spec: Spec) -> Spec:
        """This rank's clauses of ``spec`` (renumbered), and remembers every rank's row count.

        Raises:
            ValueError: fewer clauses than ranks.
        """
        counts = []
        for r in range(self.comm.world):
            blk = clause_block(spec.n_clauses, Comm(r, self.comm.world, self.comm.group))
            counts.append(int(sum((spec.clause_S == k).sum() for k in blk)))
        self._counts = counts
        self.full = spec
        return spec.subset(clause_block(spec.n_clauses, self.comm))

    def _reduce(self, t: torch.Tensor, op: str) -> torch.Tensor:
        if self.comm.world == 1:
            return t
        import torch.distributed as dist

        self.calls += 1
        red = {"min": dist.ReduceOp.MIN, "max": dist.ReduceOp.MAX}[op]
        host = t.detach().cpu().clone() if staged(t, self.comm.group) else t.detach().clone().contiguous()
        dist.all_reduce(host, op=red, group=self.comm.group)
        return host.to(t.device)

    def min(self, v: torch.Tensor) -> torch.Tensor:
        """Elementwise minimum over the ranks of ``v`` (same shape everywhere; detached)."""
        return self._reduce(v, "min")

    def min_flag(self, v: torch.Tensor, flag: bool) -> tuple[torch.Tensor, bool]:
        """:meth:`min` of ``v`` ``[B]`` and whether any rank's ``flag`` is set, in one collective."""
        both = torch.cat([v.detach().reshape(-1), torch.tensor([-float(flag)], dtype=v.dtype, device=v.device)])
        out = self._reduce(both, "min")
        return out[:-1].reshape(v.shape), bool(out[-1] < 0)

    def any(self, flag: bool) -> bool:
        """Whether any rank's ``flag`` is set."""
        return bool(self._reduce(torch.tensor([float(flag)]), "max")[0] > 0)

    def gather_rows(self, t: torch.Tensor) -> torch.Tensor:
        """Every rank's spec rows of ``t`` (``[S_r, *rest]``) concatenated in clause order (``[S, *rest]``)."""
        if self.comm.world == 1:
            return t
        counts = self._counts
        q = max(counts)
        pad = t.new_zeros((q, *t.shape[1:]))
        pad[: t.shape[0]] = t.detach()
        self.calls += 1
        full = self.comm.all_gather_rows(pad)
        return torch.cat([full[r * q: r * q + c] for r, c in enumerate(counts)])

    def gather_alpha(self, a: torch.Tensor) -> torch.Tensor:
        """Slopes ``[1, S_r, B, *]`` of this rank's rows -> ``[1, S, B, *]`` of all rows."""
        return self.gather_rows(a[0]).unsqueeze(0)

    def candidates(self, n: int, device) -> tuple[torch.Tensor, int]:
        """This rank's block of ``n`` candidates (``ceil(n/P)`` indices, the last block padded with
        ``n − 1``) and the block length."""
        from gpufield.verify.dist.alpha_shard import RowSplit

        idx = RowSplit(self.comm).take(torch.arange(n, device=device))
        return idx, len(idx)

    def gather_candidates(self, v: torch.Tensor, n: int) -> torch.Tensor:
        """Every rank's values ``[q]`` of its :meth:`candidates` block -> ``[n]`` in candidate order."""
        if self.comm.world == 1:
            return v
        self.calls += 1
        return self.comm.all_gather_rows(v.detach().contiguous())[:n]

    def row_offset(self) -> int:
        """Index of this rank's first spec row in the full spec."""
        return sum(self._counts[: self.comm.rank])

    def first(self, items: list) -> list:
        """Every rank's ``items`` (``[(order key, payload)]``) merged and sorted by key."""
        if self.comm.world == 1:
            return sorted(items, key=lambda kv: kv[0])
        self.calls += 1
        got = self.comm.all_gather_object(items)
        return sorted((kv for part in got for kv in part), key=lambda kv: kv[0])
