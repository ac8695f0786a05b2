"""From the unsafe polytopes of a :class:`~gpufield.verify.io.vnnlib.Case` to spec matrices.

A clause (polytope) ``A y ≤ b`` is infeasible over the box when some non-negative combination
``λᵀ(A y − b)`` has a positive lower bound. Every row alone is such a combination (``λ = e_i``);
:mod:`gpufield.verify.alpha` additionally optimises one combination per multi-row clause.

Shape legend: S spec rows (all rows of all clauses), M outputs, K clauses, B batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from gpufield.verify.io.vnnlib import Case


@dataclass(frozen=True)
class Spec:
    """All clause rows of one case stacked.

    Attributes:
        C_SM: float64 row coefficients ``[S, M]``.
        b_S: float64 right-hand sides ``[S]``; row ``s`` is proven when ``lb(C_s y) − b_s > 0``.
        clause_S: int ``[S]``, the clause of each row.
        n_clauses: K.
    """

    C_SM: np.ndarray
    b_S: np.ndarray
    clause_S: np.ndarray
    n_clauses: int

    @classmethod
    def from_case(cls, case: Case, n_outputs: int) -> Spec:
        """Stack the rows of ``case.clauses``."""
        rows = [c.A_KM for c in case.clauses]
        C = np.concatenate(rows) if rows else np.zeros((0, n_outputs))
        b = np.concatenate([c.b_K for c in case.clauses]) if rows else np.zeros(0)
        cl = np.concatenate([np.full(len(c.b_K), k) for k, c in enumerate(case.clauses)]) if rows else np.zeros(0, int)
        return cls(C, b, cl.astype(np.int64), len(case.clauses))

    def C_SB(self, out_shape: tuple[int, ...], batch: int, like: torch.Tensor) -> torch.Tensor:
        """The spec as a starting A-matrix ``[S, B, *out_shape]`` in ``like``'s dtype/device."""
        C = torch.as_tensor(self.C_SM, dtype=like.dtype, device=like.device)
        return C.reshape(len(C), 1, *out_shape).expand(len(C), batch, *out_shape)

    def clause_value(self, margin_SB: torch.Tensor, clause_S: np.ndarray | None = None) -> torch.Tensor:
        """Best proven margin per clause: ``max`` of its rows' ``lb − b``.

        Args:
            margin_SB: row margins ``[S, B]``.
            clause_S: clause index of each row (defaults to :attr:`clause_S`).

        Returns:
            ``[K, B]``; −inf for a clause without rows (it can never be proven).
        """
        idx_S = torch.as_tensor(self.clause_S if clause_S is None else clause_S, device=margin_SB.device)
        out = torch.full((self.n_clauses, margin_SB.shape[1]), -torch.inf,
                         dtype=margin_SB.dtype, device=margin_SB.device)
        idx = idx_S.reshape(-1, 1).expand_as(margin_SB)
        return out.scatter_reduce(0, idx, margin_SB, reduce="amax", include_self=True)

    def margins(self, lb_SB: torch.Tensor) -> torch.Tensor:
        """``lb_SB − b_S`` in ``lb_SB``'s dtype (``[S, B]``)."""
        return lb_SB - torch.as_tensor(self.b_S, dtype=lb_SB.dtype, device=lb_SB.device).reshape(-1, 1)

    def subset(self, clauses: list[int]) -> Spec:
        """The spec restricted to ``clauses`` (renumbered 0..len-1 in the given order)."""
        new = {k: i for i, k in enumerate(clauses)}
        keep = np.isin(self.clause_S, clauses)
        return Spec(self.C_SM[keep], self.b_S[keep],
                    np.array([new[k] for k in self.clause_S[keep]], dtype=np.int64), len(clauses))

    def multi_row_clauses(self) -> list[int]:
        """Clauses with more than one row (candidates for an optimised combination)."""
        counts = np.bincount(self.clause_S, minlength=self.n_clauses)
        return [k for k in range(self.n_clauses) if counts[k] > 1]
