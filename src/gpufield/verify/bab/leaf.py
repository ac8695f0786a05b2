"""Leaves without unstable neurons: the network is affine on the domain, so a linear program decides.

On such a leaf every pre-activation is an exact affine function of the input, ``z_j = a_j·x + e_j``,
and the domain is the polytope ``{x ∈ box : s_j z_j ≥ 0}``. For each spec row the LP
``min c·x s.t. s_j(a_j·x + e_j) ≥ 0`` (scipy/HiGHS) gives optimal duals ``μ_j ≥ 0``; taken as the
β of that row they make the β-CROWN bound equal the LP optimum (LP duality), and the caller
re-evaluates them in float64 (:func:`~gpufield.verify.bab.bound.bound64`), so the proof never
relies on the LP solver's arithmetic. A clause whose rows are jointly feasible on the polytope
gives a counterexample candidate (the LP point), which is validated by onnxruntime.

Shape legend: S spec rows, N input size, J split neurons.
"""

from __future__ import annotations

import numpy as np
import torch
from scipy.optimize import linprog

from gpufield.verify.graph import Graph
from gpufield.verify.propagate import backward, concretize, onehot_spec
from gpufield.verify.spec import Spec


def _affine(g64: Graph, start: str, C, lo, hi, inter):
    rec: dict[str, torch.Tensor] = {}
    lb, _ = backward(g64, start, C, lo, hi, inter, upper=False, record=rec)
    A = rec.get(g64.input_name)
    if A is None:
        A = torch.zeros(C.shape[0], 1, lo.flatten(1).shape[1], dtype=lo.dtype, device=lo.device)
    bias = lb - concretize(A, lo, hi, -1.0)
    return A.flatten(2)[:, 0].cpu().numpy(), bias[:, 0].cpu().numpy()


def solve_leaf(g64: Graph, spec: Spec, lo64, hi64, inter64, splits, S: int):
    """LP on one fully stable leaf (batch 1, float64 tensors).

    Returns:
        ``(beta, points)``: β per split node ``[S, 1, N_node]`` (float64) from the LP duals, and
        candidate inputs ``[P, N]`` (numpy) at which some clause holds in the LP.
    """
    rows_A, rows_b, where = [], [], []
    for name, s_BN in splits.items():
        idx = s_BN[0].nonzero().flatten()
        if len(idx) == 0:
            continue
        C = onehot_spec(g64.shape(name), idx, 1, lo64)
        a, e = _affine(g64, name, C, lo64, hi64, inter64)
        sg = s_BN[0, idx].double().cpu().numpy()
        rows_A.append(-sg[:, None] * a)
        rows_b.append(sg * e)
        where += [(name, int(j)) for j in idx.tolist()]
    A_ub = np.concatenate(rows_A) if rows_A else np.zeros((0, lo64.numel()))
    b_ub = np.concatenate(rows_b) if rows_b else np.zeros(0)
    bounds = list(zip(lo64.flatten().cpu().numpy(), hi64.flatten().cpu().numpy(), strict=True))
    c_S, d_S = _affine(g64, g64.output_name, spec.C_SB(g64.output_shape, 1, lo64), lo64, hi64, inter64)
    beta = {name: torch.zeros(S, 1, s.shape[1], dtype=torch.float64, device=lo64.device) for name, s in splits.items()}
    if len(b_ub):  # phase 1: an empty polytope gets a Farkas combination y (min of slack > 0)
        n, J = A_ub.shape[1], len(b_ub)
        r = linprog(np.r_[np.zeros(n), np.ones(J)], A_ub=np.c_[A_ub, -np.eye(J)], b_ub=b_ub,
                    bounds=bounds + [(0, None)] * J, method="highs")
        if r.status == 0 and r.fun > 1e-9:
            y = np.clip(-r.ineqlin.marginals, 0, None)
            lo_n, hi_n = lo64.flatten().cpu().numpy(), hi64.flatten().cpu().numpy()
            for s in range(len(c_S)):  # min over box of c·x + d − b, made positive by M·(y·violation)
                low = c_S[s] @ np.where(c_S[s] >= 0, lo_n, hi_n) + d_S[s] - spec.b_S[s]
                M = (max(0.0, -low) + 1.0) / r.fun
                for (name, j), m in zip(where, y, strict=True):
                    beta[name][s, 0, j] = float(M * m)
            return beta, []
    for s in range(len(c_S)):
        r = linprog(c_S[s], A_ub=A_ub if len(b_ub) else None, b_ub=b_ub if len(b_ub) else None,
                    bounds=bounds, method="highs")
        if r.status == 0 and len(b_ub):
            mu = np.clip(-r.ineqlin.marginals, 0, None)
            for (name, j), m in zip(where, mu, strict=True):
                beta[name][s, 0, j] = float(m)
    points = []
    for k in range(spec.n_clauses):
        m = spec.clause_S == k
        # the deepest point of the clause: min t s.t. rows − b ≤ t, on the polytope
        A2 = np.r_[np.c_[A_ub, np.zeros(len(A_ub))], np.c_[c_S[m], -np.ones(int(m.sum()))]]
        b2 = np.r_[b_ub, spec.b_S[m] - d_S[m]]
        obj = np.r_[np.zeros(A_ub.shape[1]), 1.0]
        r = linprog(obj, A_ub=A2, b_ub=b2, bounds=bounds + [(None, None)], method="highs")
        if r.status == 0 and r.fun <= 0:
            points.append(r.x[:-1])
    return beta, points
