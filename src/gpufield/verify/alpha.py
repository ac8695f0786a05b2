"""α-CROWN: optimised ReLU lower slopes for every ReLU (and Sigmoid/Tanh tangent points),
intermediate layers included.

Follows Xu et al., "Fast and Complete", ICLR 2021 (arXiv:2011.13824): one free slope per
(start node, ReLU, spec row, batch element, neuron), initialised from CROWN's adaptive choice,
optimised by Adam on the final objective with learning-rate decay, clamped to [0, 1], and the
best bound per clause over all iterations kept (so it is never looser than the CROWN
initialisation evaluated at iteration 0). Intermediate bounds are recomputed with their own
slopes in every iteration ("joint optimisation") and intersected with sound reference bounds.
For a clause with several rows a combination ``λ = softmax(θ)`` of its rows is optimised too.

Soundness of a float32 run: every snapshot of slopes that proves a clause is re-evaluated by
:func:`recheck` in float64 (weights are exact in float64, the box is the parsed float64 box);
only a float64 margin above ``margin_tol`` counts as proof.

Shape legend: S spec rows, K clauses, B batch, * node shape without batch, M outputs.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from gpufield.verify.graph import Graph
from gpufield.verify.ops.activation import adaptive_lower_slope
from gpufield.verify.propagate import Interval, ancestors, backward, crown_intermediate
from gpufield.verify.spec import Spec


@dataclass(frozen=True, kw_only=True, slots=True)
class AlphaConfig:
    """Optimiser settings (α,β-CROWN defaults: Adam, lr 0.1, decay 0.98, 100 iterations).

    Attributes:
        iterations: Adam steps at most.
        lr: initial learning rate.
        lr_decay: multiplicative decay per step.
        optimize_intermediate: also optimise slopes of intermediate start nodes.
        memory_budget_bytes: cap for one chunk of intermediate A-matrices.
    """

    iterations: int = 100
    lr: float = 0.1
    lr_decay: float = 0.98
    optimize_intermediate: bool = True
    memory_budget_bytes: int = 2 << 30

    def __post_init__(self):
        if self.iterations < 0 or self.lr <= 0 or not 0 < self.lr_decay <= 1:
            raise ValueError(f"bad AlphaConfig: iterations={self.iterations} lr={self.lr} "
                             f"lr_decay={self.lr_decay}")


@dataclass
class AlphaResult:
    """Outcome of :func:`alpha_crown`.

    Attributes:
        best_KB: best float32 clause margin per (clause, batch) over all iterations.
        snapshots: iteration -> detached parameters that achieved some clause's best.
        iterations: Adam steps taken.
        seconds: wall time.
    """

    best_KB: torch.Tensor
    snapshots: dict[int, dict[str, torch.Tensor]] = field(default_factory=dict)
    iterations: int = 0
    seconds: float = 0.0


def _key(start: str, relu: str) -> str:
    return f"{start}|{relu}"


def alpha_nodes(graph: Graph) -> list:
    """The non-linear nodes with optimisable parameters: ReLU-relaxed ones (one lower slope per
    neuron) and ops with an ``alpha_init(low, up)`` method (Sigmoid, Tanh: tangent points).
    Every parameter's valid range is [0, 1]: any value in it gives a sound bound."""
    return [n for n in graph.nonlinear_nodes()
            if getattr(n.op, "relu_relaxation", True) or hasattr(n.op, "alpha_init")]


def _init(node, low, up) -> torch.Tensor:
    init = getattr(node.op, "alpha_init", None)
    return adaptive_lower_slope(low, up) if init is None else init(low, up)


def init_params(graph: Graph, spec: Spec, inter: dict[str, Interval], batch: int,
                optimize_intermediate: bool) -> dict[str, torch.Tensor]:
    """Parameters ``[2 or 1, S, B, ...]`` keyed ``"start|node"`` (CROWN's choice as the start:
    ReLU ``[.., *relu]`` adaptive slopes, Sigmoid/Tanh ``[.., 2, *]`` tangent points) and ``θ``
    per multi-row clause."""
    like = next(iter(inter.values()))[0]
    nodes = alpha_nodes(graph)
    starts = [graph.output_name]
    if optimize_intermediate:
        starts += [r.inputs[0] for r in nodes if r.inputs[0] != graph.input_name]
    params: dict[str, torch.Tensor] = {}
    for start in dict.fromkeys(starts):
        anc = ancestors(graph, start)
        final = start == graph.output_name
        S = len(spec.C_SM) + len(spec.multi_row_clauses()) if final else torch.Size(graph.shape(start)).numel()
        for relu in nodes:
            if relu.name in anc:
                a = _init(relu, *inter[relu.inputs[0]])
                params[_key(start, relu.name)] = a.unsqueeze(0).unsqueeze(0).expand(
                    1 if final else 2, S, *a.shape).clone()
    for k in spec.multi_row_clauses():
        n = int((spec.clause_S == k).sum())
        params[f"lambda|{k}"] = torch.zeros(n, dtype=like.dtype, device=like.device)
    return params


def _spec_rows(spec: Spec, params, like):
    C = torch.as_tensor(spec.C_SM, dtype=like.dtype, device=like.device)
    b = torch.as_tensor(spec.b_S, dtype=like.dtype, device=like.device)
    rows, rhs, cl = [C], [b], [torch.as_tensor(spec.clause_S)]
    for k in spec.multi_row_clauses():
        m = torch.as_tensor(spec.clause_S == k, device=like.device)
        lam = torch.softmax(params[f"lambda|{k}"], 0)
        rows.append((lam @ C[m]).unsqueeze(0))
        rhs.append((lam @ b[m]).unsqueeze(0))
        cl.append(torch.tensor([k]))
    return torch.cat(rows), torch.cat(rhs), torch.cat(cl).numpy()


def valid_slopes(a: torch.Tensor) -> torch.Tensor:
    """An optimiser's slopes made valid: non-finite entries (a float32 overflow) become 0, then
    clamped to [0, 1] (NaN passes ``clamp``, and a NaN bound makes an unstable ReLU look dead).
    Same shape and dtype; detached."""
    return torch.nan_to_num(a.detach(), nan=0.0, posinf=0.0, neginf=0.0).clamp(0.0, 1.0)


def tables(params: dict[str, torch.Tensor]) -> dict[str, dict[str, torch.Tensor]]:
    """Group slopes by start node: ``{start: {relu: [2|1, S, B, *]}}`` (λ entries dropped)."""
    out: dict[str, dict[str, torch.Tensor]] = {}
    for key, v in params.items():
        start, relu = key.split("|")
        if start != "lambda":
            out.setdefault(start, {})[relu] = v
    return out


def bound_pass(graph: Graph, spec: Spec, x_lo, x_hi, ref: dict[str, Interval],
               params: dict[str, torch.Tensor], memory_budget_bytes: int = 2 << 30,
               row_split=None) -> torch.Tensor:
    """One full α-CROWN evaluation: intermediate bounds with their slopes, then the spec.

    Args:
        graph: network (dtype of the computation).
        spec: the case's clause rows.
        x_lo, x_hi: box ``[B, *input_shape]``.
        ref: sound bounds to intersect intermediate bounds with.
        params: from :func:`init_params` (same dtype/device as the graph).
        memory_budget_bytes: chunking cap for intermediate bounds.
        row_split: intermediate rows split over processes (see
            :func:`~gpufield.verify.propagate.crown_intermediate`); needs intermediate slopes
            that are not optimised (the split bounds are gathered without gradient).

    Returns:
        clause margins ``[K, B]`` (lower bounds of the best row/combination of each clause).
    """
    tabs = tables(params)
    out = graph.output_name
    inter = crown_intermediate(graph, x_lo, x_hi, ref=ref, alphas=tabs,
                               memory_budget_bytes=memory_budget_bytes, row_split=row_split)
    C_SM, b_S, clause_S = _spec_rows(spec, params, x_lo)
    B = x_lo.shape[0]
    C = C_SM.reshape(len(C_SM), 1, *graph.output_shape).expand(len(C_SM), B, *graph.output_shape)
    lb, _ = backward(graph, out, C, x_lo, x_hi, inter, alphas=tabs.get(out), upper=False)
    return spec.clause_value(lb - b_S.reshape(-1, 1), clause_S)


class _Adam:
    """Adam (Kingma & Ba 2015, arXiv:1412.6980) with exponential learning-rate decay.

    Written out (a few lines) because ``torch.optim`` imports ``torch._dynamo`` on first use,
    which costs seconds per process; VNN-COMP runs every instance in a fresh process.
    """

    def __init__(self, params, lr, decay, betas=(0.9, 0.999), eps=1e-8):
        self.params, self.lr, self.decay, self.betas, self.eps = params, lr, decay, betas, eps
        self.m = [torch.zeros_like(p) for p in params]
        self.v = [torch.zeros_like(p) for p in params]
        self.t = 0

    @torch.no_grad()
    def step(self, grads):
        self.t += 1
        b1, b2 = self.betas
        for p, g, m, v in zip(self.params, grads, self.m, self.v, strict=True):
            if g is None:
                continue
            m.mul_(b1).add_(g, alpha=1 - b1)
            v.mul_(b2).addcmul_(g, g, value=1 - b2)
            denom = (v / (1 - b2**self.t)).sqrt_().add_(self.eps)
            p.addcdiv_(m, denom, value=-self.lr / (1 - b1**self.t))
        self.lr *= self.decay


def alpha_crown(graph: Graph, spec: Spec, x_lo, x_hi, ref: dict[str, Interval],
                init_inter: dict[str, Interval], cfg: AlphaConfig,
                deadline_s: float = float("inf"), stop=None, row_split=None) -> AlphaResult:
    """Optimise slopes to maximise the clause margins; keep the best per clause.

    Args:
        graph: network in the working dtype (float32 by default).
        spec: the case's clauses.
        x_lo, x_hi: box ``[B, *input_shape]`` (outward-rounded to the working dtype).
        ref: sound reference bounds (IBP ∩ CROWN) for every ReLU input.
        init_inter: bounds the adaptive initial slopes are taken from (CROWN).
        cfg: optimiser settings.
        deadline_s: ``time.monotonic()`` deadline: no iteration starts that would end after it
            (estimated by the previous iteration's duration).
        stop: optional ``stop(best_KB, it) -> bool`` replacing the stop decision (every clause
            proven, ``it == cfg.iterations`` or past ``deadline_s``); the spec-sharded mode of
            :mod:`gpufield.verify.dist` makes it one decision for all ranks.
        row_split: see :func:`bound_pass` (the ``alpha`` mode of :mod:`gpufield.verify.dist`).

    Returns:
        :class:`AlphaResult` with per-clause best margins and the parameter snapshots behind them.
    """
    t0 = time.monotonic()
    params = init_params(graph, spec, init_inter, x_lo.shape[0], cfg.optimize_intermediate)
    leaves = [p.requires_grad_() for p in params.values()]
    opt = _Adam(leaves, cfg.lr, cfg.lr_decay)
    best = None
    best_iter = None
    res = AlphaResult(best_KB=torch.empty(0))
    t_last = t0
    for it in range(cfg.iterations + 1):
        val = bound_pass(graph, spec, x_lo, x_hi, ref, params, cfg.memory_budget_bytes, row_split)
        v = val.detach()
        if best is None:
            best, best_iter = v.clone(), torch.zeros_like(v, dtype=torch.long)
            improved = torch.ones_like(v, dtype=torch.bool)
        else:
            improved = v > best
            best = torch.where(improved, v, best)
            best_iter = torch.where(improved, torch.full_like(best_iter, it), best_iter)
        if improved.any():
            res.snapshots[it] = {k: p.detach().clone() for k, p in params.items()}
            live = set(best_iter.flatten().tolist())
            for old in [t for t in res.snapshots if t not in live]:
                del res.snapshots[old]
        res.iterations = it
        now = time.monotonic()
        step_s, t_last = now - t_last, now  # the next iteration takes about as long as this one
        if stop is not None:
            if stop(best, it):
                break
        elif bool((best > 0).all()) or it == cfg.iterations or now + step_s > deadline_s:
            break
        open_ = best <= 0
        loss = -(val * open_).sum()
        if not loss.requires_grad:  # no ReLU and no λ: nothing to optimise
            break
        grads = torch.autograd.grad(loss, leaves, allow_unused=True)
        opt.step(grads)
        with torch.no_grad():
            for k, p in params.items():
                if not k.startswith("lambda|"):
                    p.clamp_(0.0, 1.0)
    res.best_KB = best
    res.seconds = time.monotonic() - t0
    return res


def recheck(graph64: Graph, spec: Spec, x_lo64, x_hi64, ref64: dict[str, Interval],
            snapshots: dict[int, dict[str, torch.Tensor]]) -> torch.Tensor:
    """Re-evaluate slope snapshots in float64 and return the best clause margins ``[K, B]``.

    Any slopes in [0, 1] (and any λ) give a valid bound, so each float64 evaluation is a sound
    lower bound up to float64 rounding; the maximum over snapshots is too.
    """
    best = None
    with torch.no_grad():
        for snap in snapshots.values():
            p64 = {k: v.to(dtype=torch.float64, device=x_lo64.device) for k, v in snap.items()}
            v = bound_pass(graph64, spec, x_lo64, x_hi64, ref64, p64)
            best = v if best is None else torch.maximum(best, v)
    return best
