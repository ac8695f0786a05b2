"""ReLU-split refinement: a small branch and bound *without* β multipliers.

A domain is the input box plus sign constraints on some unstable pre-activations
(``z_j ≥ 0`` or ``z_j ≤ 0``). Its bounds come from α-CROWN run on a batch of domains (the batch
dimension of every bound tensor is the domain index), where a split enters by clamping that
neuron's intermediate bounds (``l ← 0`` or ``u ← 0``), which makes its relaxation exact and
tightens every deeper intermediate bound. The two children of a split cover the parent, so the
property holds when every leaf is proven; as elsewhere, a leaf counts only after a float64
re-evaluation of its slopes. Neurons are chosen by BaBSR's intercept score (Bunel et al.,
JMLR 2020, arXiv:1909.06588). β-CROWN (Wang et al. 2021, arXiv:2103.06624) would add the split
constraints to the objective with multipliers; that is the next step.

Shape legend: S spec rows, K clauses, B domains, * node shape without batch.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass

import torch

from gpufield.verify.alpha import AlphaConfig, alpha_crown, recheck
from gpufield.verify.graph import Graph
from gpufield.verify.propagate import Interval, backward, crown_intermediate
from gpufield.verify.spec import Spec

Split = tuple[str, int, int]
"""(ReLU input name, flat neuron index, +1 for z ≥ 0 / −1 for z ≤ 0)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class RefineConfig:
    """Branching budget.

    Attributes:
        max_domains: most domains to bound in total.
        batch: domains bounded together.
        alpha: optimiser for each batch (short: the root already ran the long one).
    """

    max_domains: int = 4096
    batch: int = 64
    alpha: AlphaConfig = AlphaConfig(iterations=20)

    def __post_init__(self):
        if self.max_domains < 1 or self.batch < 2:
            raise ValueError(f"max_domains={self.max_domains} >= 1 and batch={self.batch} >= 2 required")


@dataclass(frozen=True)
class RefineResult:
    """Outcome: ``proven`` is True only when every leaf passed the float64 re-check."""

    proven: bool
    domains: int
    seconds: float
    reason: str


def _with_splits(ref: dict[str, Interval], domains: list[tuple[Split, ...]]) -> dict[str, Interval]:
    B = len(domains)
    out = {k: (low.expand(B, *low.shape[1:]).clone(), u.expand(B, *u.shape[1:]).clone()) for k, (low, u) in ref.items()}
    for b, dom in enumerate(domains):
        for name, idx, sign in dom:
            low, u = out[name]
            if sign > 0:
                low[b].view(-1)[idx] = torch.clamp(low[b].view(-1)[idx], min=0.0)
            else:
                u[b].view(-1)[idx] = torch.clamp(u[b].view(-1)[idx], max=0.0)
    return out


def _empty(inter: dict[str, Interval], names: list[str]) -> torch.Tensor:
    """``[B]`` True where some bound crosses (l > u): the domain contains no input."""
    B = next(iter(inter.values()))[0].shape[0]
    e = torch.zeros(B, dtype=torch.bool, device=next(iter(inter.values()))[0].device)
    for n in names:
        low, u = inter[n]
        e |= (low > u).flatten(1).any(1)
    return e


def _branch(graph: Graph, spec: Spec, lo, hi, inter, domains) -> list[Split | None]:
    """BaBSR intercept score ``|mean_S min(A, 0) · t|`` over unstable, unsplit neurons."""
    record: dict[str, torch.Tensor] = {}
    with torch.no_grad():
        C = spec.C_SB(graph.output_shape, lo.shape[0], lo)
        backward(graph, graph.output_name, C, lo, hi, inter, upper=False, record=record)
    best_s = torch.full((lo.shape[0],), -1.0, dtype=lo.dtype, device=lo.device)
    best: list[Split | None] = [None] * lo.shape[0]
    for relu in graph.relu_nodes():
        name = relu.inputs[0]
        if relu.name not in record or name == graph.input_name:
            continue
        low, u = (t.flatten(1) for t in inter[name])
        unstable = (low < 0) & (u > 0)
        for b, dom in enumerate(domains):
            for n2, idx, _ in dom:
                if n2 == name:
                    unstable[b, idx] = False
        t = torch.where(unstable, -low * u / torch.where(unstable, u - low, torch.ones_like(u)), torch.zeros_like(u))
        score = (record[relu.name].flatten(2).clamp(max=0).mean(0) * t).abs()
        score = torch.where(unstable, score + 1e-12, torch.full_like(score, -1.0))
        s, idx = score.max(1)
        for b in range(lo.shape[0]):
            if s[b] > best_s[b]:
                best_s[b], best[b] = s[b], (name, int(idx[b]), 0)
    return best


def refine(graph: Graph, graph64: Graph, spec: Spec, lo, hi, lo64, hi64,
           ref: dict[str, Interval], ref64: dict[str, Interval], cfg: RefineConfig,
           *, margin_tol: float, deadline_s: float) -> RefineResult:
    """Split until every leaf is proven, the budget is spent, or a leaf cannot be split.

    Args:
        graph, graph64: working-precision and float64 copies of the network.
        spec: the still-open clauses.
        lo, hi / lo64, hi64: box ``[1, *input_shape]`` in each precision (outward rounded).
        ref, ref64: sound root bounds of every ReLU input (and the input) in each precision.
        cfg: budget.
        margin_tol: float64 margin a leaf needs.
        deadline_s: ``time.monotonic()`` deadline.

    Returns:
        :class:`RefineResult`.
    """
    t0 = time.monotonic()
    names = [r.inputs[0] for r in graph.relu_nodes() if r.inputs[0] != graph.input_name]
    queue: deque[tuple[Split, ...]] = deque([()])
    count = 0
    while queue:
        if time.monotonic() > deadline_s:
            return RefineResult(False, count, time.monotonic() - t0, "deadline")
        if count >= cfg.max_domains:
            return RefineResult(False, count, time.monotonic() - t0, "max_domains")
        doms = [queue.popleft() for _ in range(min(len(queue), cfg.batch))]
        count += len(doms)
        B = len(doms)
        loB, hiB = lo.expand(B, *lo.shape[1:]), hi.expand(B, *hi.shape[1:])
        with torch.no_grad():
            inter = crown_intermediate(graph, loB, hiB, ref=_with_splits(ref, doms))
        res = alpha_crown(graph, spec, loB, hiB, inter, inter, cfg.alpha, deadline_s)
        cand = (res.best_KB > 0).all(0) | _empty(inter, names)
        proven = torch.zeros(B, dtype=torch.bool, device=lo.device)
        if cand.any():
            lo64B, hi64B = lo64.expand(B, *lo64.shape[1:]), hi64.expand(B, *hi64.shape[1:])
            with torch.no_grad():
                inter64 = crown_intermediate(graph64, lo64B, hi64B, ref=_with_splits(ref64, doms))
                v64 = recheck(graph64, spec, lo64B, hi64B, inter64, res.snapshots)
            proven = ((v64 > margin_tol).all(0) | _empty(inter64, names)).to(lo.device)
        open_ = [b for b in range(B) if not bool(proven[b])]
        if not open_:
            continue
        sub = [doms[b] for b in open_]
        idx = torch.as_tensor(open_, device=lo.device)
        picks = _branch(graph, spec, loB[idx], hiB[idx], {k: (low[idx], u[idx]) for k, (low, u) in inter.items()}, sub)
        for dom, pick in zip(sub, picks, strict=True):
            if pick is None:
                return RefineResult(False, count, time.monotonic() - t0, "a leaf has no unstable neuron left")
            name, j, _ = pick
            queue.append((*dom, (name, j, 1)))
            queue.append((*dom, (name, j, -1)))
    return RefineResult(True, count, time.monotonic() - t0, "all leaves proven")
