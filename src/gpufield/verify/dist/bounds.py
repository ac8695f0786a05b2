"""The bounds one verification case computes (IBP, CROWN, α-CROWN), identical on every P.

:func:`case_bounds` calls the single-process functions of :mod:`gpufield.verify` (``ibp``,
``crown_intermediate``, ``backward``, ``alpha_crown``) on whatever graph it is given: the original
graph at P = 1, the :func:`~gpufield.verify.dist.fsdp.shard_graph` copy under ``--shard fsdp``.
There is no second implementation of any bound.

Shape legend: S spec rows, K clauses, B batch (1), * node shape.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from gpufield.verify.alpha import AlphaConfig, alpha_crown
from gpufield.verify.dist.alpha_shard import RowSplit, sharded_alpha_crown
from gpufield.verify.dist.comm import Comm
from gpufield.verify.graph import Graph
from gpufield.verify.propagate import backward, crown_intermediate, ibp
from gpufield.verify.spec import Spec

METHODS = ("ibp", "crown", "alpha")


@dataclass(frozen=True, kw_only=True, slots=True)
class BoundsConfig:
    """Which bounds to compute for a case.

    Attributes:
        methods: subset of ``ibp``, ``crown``, ``alpha`` (CROWN and α-CROWN start from IBP).
        alpha_iterations: Adam steps of α-CROWN (fixed count: no early stop on a proof, so the
            work, and the collective schedule, do not depend on the values).
        memory_budget_bytes: spec-chunk cap of the intermediate CROWN passes.
        optimize_intermediate: α-CROWN also optimises intermediate slopes (must be False for
            the clause-sharded ``alpha`` mode).
        alpha_row_split: in the ``alpha`` mode, split the intermediate CROWN rows over the ranks
            too (False: only the clauses are split, every rank bounds every intermediate row).
    """

    methods: tuple[str, ...] = METHODS
    alpha_iterations: int = 5
    memory_budget_bytes: int = 2 << 30
    optimize_intermediate: bool = True
    alpha_row_split: bool = True

    def __post_init__(self):
        bad = [m for m in self.methods if m not in METHODS]
        if bad or not self.methods:
            raise ValueError(f"methods {self.methods} must be a non-empty subset of {METHODS}")
        if self.alpha_iterations < 0 or self.memory_budget_bytes <= 0:
            raise ValueError(f"alpha_iterations={self.alpha_iterations}, memory_budget_bytes="
                             f"{self.memory_budget_bytes} must be >= 0 / > 0")


def case_bounds(graph: Graph, spec: Spec, lo: torch.Tensor, hi: torch.Tensor,
                cfg: BoundsConfig, alpha_comm: Comm | None = None) -> dict[str, torch.Tensor]:
    """Bounds of one box with the single-process code path.

    Args:
        graph: the network (sharded or not).
        spec: the case's clause rows (``C_SM`` ``[S, M]``).
        lo, hi: box ``[B, *input_shape]`` in the graph's dtype.
        cfg: which methods.
        alpha_comm: when given, α-CROWN runs clause-sharded over this group
            (:func:`~gpufield.verify.dist.alpha_shard.sharded_alpha_crown`) and every
            intermediate CROWN pass (the initial one and α-CROWN's) bounds only this rank's rows
            (:class:`~gpufield.verify.dist.alpha_shard.RowSplit`).

    Returns:
        name -> tensor: ``ibp/lo``, ``ibp/hi`` (output ``[B, *out]``); ``crown/lb``, ``crown/ub``
        (spec rows ``[S, B]``) and ``crown/<relu input>/lo|hi`` (every intermediate bound);
        ``alpha/best`` (clause margins ``[K, B]``) and ``alpha/param/<key>`` (the last snapshot of
        slopes; clause-sharded: ``alpha/local_param_bytes``, the bytes of this rank's slopes); all
        detached.
    """
    out: dict[str, torch.Tensor] = {}
    split = None if alpha_comm is None or not cfg.alpha_row_split else RowSplit(alpha_comm)
    with torch.no_grad():
        ib = ibp(graph, lo, hi)
        out["ibp/lo"], out["ibp/hi"] = ib[graph.output_name]
        if cfg.methods == ("ibp",):
            return out
        inter = crown_intermediate(graph, lo, hi, ref=ib, memory_budget_bytes=cfg.memory_budget_bytes,
                                   row_split=split)
        for k, (lo_k, hi_k) in inter.items():
            if k != graph.input_name:
                out[f"crown/{k}/lo"], out[f"crown/{k}/hi"] = lo_k, hi_k
        if "crown" in cfg.methods:
            C = spec.C_SB(graph.output_shape, lo.shape[0], lo)
            out["crown/lb"], out["crown/ub"] = backward(graph, graph.output_name, C, lo, hi, inter)
    if "alpha" in cfg.methods:
        acfg = AlphaConfig(iterations=cfg.alpha_iterations, memory_budget_bytes=cfg.memory_budget_bytes,
                           optimize_intermediate=cfg.optimize_intermediate)
        if alpha_comm is None:
            res = alpha_crown(graph, spec, lo, hi, {**ib, **inter}, inter, acfg)
            out["alpha/best"] = res.best_KB
            for k, v in res.snapshots[max(res.snapshots)].items():
                out[f"alpha/param/{k}"] = v
        else:
            out["alpha/best"], res = sharded_alpha_crown(graph, spec, lo, hi, {**ib, **inter}, inter,
                                                         acfg, alpha_comm, row_split=split)
            last = res.snapshots[max(res.snapshots)].values()
            out["alpha/local_param_bytes"] = torch.tensor(sum(v.numel() * v.element_size() for v in last))
        out["alpha/iterations"] = torch.tensor(res.iterations)
    return out
