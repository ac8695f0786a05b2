"""MIP backends of the root refinement (:mod:`gpufield.verify.milp_bounds`): HiGHS and Gurobi.

One :class:`MipBackend` per solver; a backend answers ``min c·x`` over one refinement model and
returns its **dual bound** (valid at a time limit, unlike the primal value) or None, and the
primal point it found (the caller re-evaluates it in the real network as a consistency check).
Gurobi may stop early once the dual bound reaches ``stop_at`` (the neuron is then proven stable
on that side; ``BestBdStop``, α,β-CROWN's setting in its ``bab-refine``, Wang et al. 2021).
HiGHS ignores ``stop_at``: with ``objective_bound`` as a cutoff and RENS off, HiGHS 1.12 answered
"infeasible" for models whose minimum lay below the cutoff, which read as "stable" made a live
neuron dead (tests/verify/test_mip_stop_soundness.py).

- ``highs``: scipy's :func:`scipy.optimize.milp` (HiGHS), always available.
- ``gurobi``: ``gurobipy`` when installed with a licence (the pip wheel's own licence solves
  models of up to 2,000 variables and constraints: enough for 256x4 mnist_fc). On 256x4 layer-1
  problems it was 3-4x faster than HiGHS (2.7-4.5 s against 7-20 s, one thread, CPU).

Shapes: ``A`` CSR ``[rows, cols]`` float64, bounds ``[cols]``/``[rows]``, ``c [cols]``.
"""

from __future__ import annotations

import warnings
from typing import Protocol

import numpy as np

# only the dual bound is used: primal heuristics (sub-MIPs) cost ~2/3 of the time and give nothing
_HIGHS = {"disp": False, "presolve": True, "mip_heuristic_effort": 0.0, "mip_heuristic_run_rins": False,
          "mip_heuristic_run_rens": False, "mip_heuristic_run_root_reduced_cost": False}
SOLVERS = ("highs", "gurobi")


class MipBackend(Protocol):
    """A MIP solver for :func:`~gpufield.verify.milp_bounds.milp_refine` (extension point)."""

    def solve(self, key, model, c: np.ndarray, *, time_limit_s: float, stop_at: float | None,
              gap: float) -> tuple[float | None, str, np.ndarray | None]:
        """Dual bound of ``min c·x`` over ``model`` (``(A, row_lo, row_hi, var_lo, var_hi,
        integrality, _)``, cached under ``key``), a status: ``optimal``, ``time limit``,
        ``stopped`` (dual bound ≥ ``stop_at``) or why there is no bound (value None), and the
        solver's primal point ``[cols]`` (None when it has none)."""


class HighsBackend:
    """HiGHS through scipy (the model is rebuilt per call; scipy keeps no HiGHS object)."""

    def solve(self, key, model, c, *, time_limit_s, stop_at, gap):
        from scipy.optimize import Bounds, LinearConstraint, milp

        A, rlo, rhi, vlo, vhi, integ, _ = model
        mip = bool(integ.any())  # no binary: an LP
        opts = {"time_limit": time_limit_s, **_HIGHS}  # no objective_bound cutoff: see the module doc
        if mip:
            opts["mip_rel_gap"] = gap
        with warnings.catch_warnings():  # scipy warns about HiGHS options it does not list itself
            warnings.simplefilter("ignore")
            r = milp(c, integrality=integ if mip else None, bounds=Bounds(vlo, vhi),
                     constraints=[LinearConstraint(A, rlo, rhi)], options=opts)
        v = r.mip_dual_bound if mip else (r.fun if r.status == 0 else None)
        if r.status not in (0, 1) or v is None or not np.isfinite(v):
            return None, f"status {r.status}", None
        return float(v), "optimal" if r.status == 0 else "time limit", r.x


class GurobiBackend:
    """Gurobi (one thread per worker); the model is built once per key and only re-objectived."""

    def __init__(self):
        self._key, self._m, self._x = None, None, None

    def solve(self, key, model, c, *, time_limit_s, stop_at, gap):
        import gurobipy as gp

        try:
            if self._key != key:
                A, rlo, rhi, vlo, vhi, integ, _ = model
                env = gp.Env(empty=True)
                env.setParam("OutputFlag", 0)
                env.start()
                m = gp.Model(env=env)
                x = m.addMVar(A.shape[1], lb=vlo, ub=vhi, vtype=np.where(integ > 0, "B", "C"))
                eq = rlo == rhi
                lo_, hi_ = ~eq & np.isfinite(rlo), ~eq & np.isfinite(rhi)
                for sel, sense_rhs in ((eq, None), (lo_, ">"), (hi_, "<")):
                    if sel.any():
                        if sense_rhs is None:
                            m.addConstr(A[sel] @ x == rlo[sel])
                        elif sense_rhs == ">":
                            m.addConstr(A[sel] @ x >= rlo[sel])
                        else:
                            m.addConstr(A[sel] @ x <= rhi[sel])
                m.Params.Threads = 1
                self._key, self._m, self._x = key, m, x
            m = self._m
            m.Params.TimeLimit = max(time_limit_s, 0.01)
            m.Params.MIPGap = gap
            m.Params.BestBdStop = float("inf") if stop_at is None else float(stop_at)
            m.setObjective(c @ self._x, gp.GRB.MINIMIZE)
            m.reset()
            m.optimize()
        except gp.GurobiError as e:  # e.g. the pip licence's size cap
            self._key = None
            return None, f"gurobi error {e.errno}", None
        st = m.Status
        if st not in (gp.GRB.OPTIMAL, gp.GRB.TIME_LIMIT, gp.GRB.USER_OBJ_LIMIT):
            return None, f"status {st}", None
        v = float(m.ObjBound) if m.IsMIP else (float(m.ObjVal) if st == gp.GRB.OPTIMAL else None)
        if v is None or not np.isfinite(v):
            return None, f"status {st}", None
        x = np.asarray(self._x.X, dtype=np.float64) if m.SolCount > 0 else None
        return v, {gp.GRB.OPTIMAL: "optimal", gp.GRB.TIME_LIMIT: "time limit"}.get(st, "stopped"), x


def backend(name: str) -> MipBackend:
    """The backend called ``name`` (``highs`` or ``gurobi``).

    Raises:
        ValueError: unknown name, or ``gurobi`` without an importable ``gurobipy``.
    """
    if name == "highs":
        return HighsBackend()
    if name == "gurobi":
        try:
            import gurobipy  # noqa: F401
        except ImportError as e:
            raise ValueError("mip solver 'gurobi' needs gurobipy: pip install \"gpufield[mip]\" "
                             "(or gurobipy with your own licence)") from e
        return GurobiBackend()
    raise ValueError(f"mip solver {name!r} not in {SOLVERS}")
