"""Bounding a batch of split domains: β-CROWN (Wang et al. 2021, arXiv:2103.06624).

A domain is the input box plus sign constraints ``s_j z_j ≥ 0`` on some ReLU inputs. Its
intermediate bounds are its parent's with the new split clamped (``l ← 0`` / ``u ← 0``), then
re-bounded by CROWN in **float64** and intersected with the parent's (so they only tighten and
are sound up to float64 rounding). The final bound adds, for every split, the Lagrangian term
``−β_j s_j z_j`` (``β_j ≥ 0``; it is ≤ 0 on the domain, so the bound stays sound for any β) to
the backward pass; lower ReLU slopes α of the final objective and β are optimised jointly with
Adam in the working precision, warm-started from the parent. With β = 0 the bound equals the
α-CROWN bound on the clamped intermediate bounds, and the best iterate is kept from iteration 0,
so a split domain's bound is never looser than without β.

Soundness: the best α, β of every domain are re-evaluated in float64 on the float64
intermediate bounds (:func:`bound64`); only that value is the domain's lower bound.

Shape legend: S spec rows, K clauses, B domains, N flattened neurons of a node, * node shape.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

import torch

from gpufield.verify.alpha import _Adam
from gpufield.verify.graph import Graph
from gpufield.verify.propagate import Interval, backward, crown_intermediate
from gpufield.verify.spec import Spec

Splits = dict[str, torch.Tensor]
"""ReLU input name -> int8 ``[B, N]``: +1 (``z ≥ 0``), −1 (``z ≤ 0``) or 0 (not split)."""


def clamp_splits(inter: Mapping[str, Interval], splits: Splits) -> dict[str, Interval]:
    """Intermediate bounds with every split applied (``l ← max(l, 0)`` / ``u ← min(u, 0)``)."""
    out = dict(inter)
    for name, s_BN in splits.items():
        low, u = inter[name]
        shape = low.shape
        low = torch.where(s_BN > 0, low.flatten(1).clamp(min=0), low.flatten(1)).reshape(shape)
        u = torch.where(s_BN < 0, u.flatten(1).clamp(max=0), u.flatten(1)).reshape(shape)
        out[name] = (low, u)
    return out


def empty_mask(inter: Mapping[str, Interval], names) -> torch.Tensor:
    """``[B]`` True where a sound lower bound exceeds its upper bound: no input is in the domain."""
    B = inter[names[0]][0].shape[0]
    e = torch.zeros(B, dtype=torch.bool, device=inter[names[0]][0].device)
    for n in names:
        low, u = inter[n]
        e |= (low > u).flatten(1).any(1)
    return e


def intermediate64(g64: Graph, lo64, hi64, parent64: Mapping[str, Interval], splits: Splits,
                   fixed: frozenset[str] = frozenset(), row_split=None) -> dict[str, Interval]:
    """Float64 CROWN bounds of every ReLU input of the domains, intersected with the parents'.

    Args:
        g64: float64 network.
        lo64, hi64: box ``[B, *input]``.
        parent64: the parents' bounds per ReLU input ``[B, *]`` (float64, sound).
        splits: the domains' splits (the new one included).
        fixed: ReLU inputs that keep the parents' bounds (layers up to the shallowest new split:
            no split of theirs changed; a parent's bounds stay sound for its children).
        row_split: the re-bounded rows split over processes
            (:class:`~gpufield.verify.dist.alpha_shard.RowSplit`), see
            :func:`~gpufield.verify.propagate.crown_intermediate`.

    Returns:
        name -> ``(l, u)`` ``[B, *]`` with the splits clamped.
    """
    ref = clamp_splits(parent64, splits)
    with torch.no_grad():
        inter = crown_intermediate(g64, lo64, hi64, ref=ref, fixed=fixed, row_split=row_split)
    return clamp_splits({k: v for k, v in inter.items() if k in parent64}, splits)


def beta_terms(graph: Graph, beta: Mapping[str, torch.Tensor], splits: Splits) -> dict[str, torch.Tensor]:
    """``−β·s`` per split node, shaped ``[S, B, *node]`` for :func:`~gpufield.verify.propagate.backward`."""
    out = {}
    for name, b_SBN in beta.items():
        s = splits[name].to(b_SBN.dtype)
        out[name] = (-(b_SBN * s)).reshape(*b_SBN.shape[:2], *graph.shape(name))
    return out


def final_bound(graph: Graph, spec: Spec, lo, hi, inter, alpha, beta, splits, record=None) -> torch.Tensor:
    """Clause margins ``[K, B]`` of the spec rows under fixed intermediate bounds, α and β.

    Args:
        alpha: ReLU node name -> ``[1, S, B, *]`` lower slopes of the final objective.
        beta: ReLU input name -> ``[S, B, N]`` (≥ 0).
        record: see :func:`~gpufield.verify.propagate.backward`.
    """
    C = spec.C_SB(graph.output_shape, lo.shape[0], lo)
    lb, _ = backward(graph, graph.output_name, C, lo, hi, inter, alphas=alpha, upper=False,
                     record=record, betas=beta_terms(graph, beta, splits) if beta else None)
    return spec.clause_value(spec.margins(lb))


def _select(mask_B, new, old, dim):
    shape = [1] * new.dim()
    shape[dim] = -1
    return torch.where(mask_B.reshape(shape), new, old)


def optimise(graph: Graph, spec: Spec, lo, hi, inter, splits: Splits, alpha0, beta0, *,
             iterations: int, lr_alpha: float, lr_beta: float, use_beta: bool,
             deadline_s: float, interm: dict | None = None, split=None) -> tuple[dict, dict, torch.Tensor]:
    """Joint Adam on α (``[1, S, B, *]``, clamped to [0, 1]) and β (``[S, B, N]``, clamped ≥ 0).

    Args:
        interm: optional parameters of optimised intermediate layers
            (:func:`~gpufield.verify.bab.interm.init_interm`); they are optimised in place with
            the others (last iterate kept) and every iteration bounds the final objective on the
            intermediate bounds they give (:func:`~gpufield.verify.bab.interm.interm_bounds`).
        split: a :class:`~gpufield.verify.dist.bab_shard.SpecSplit` (``spec`` is then this rank's
            clauses): a domain's margin is the minimum over all ranks' clauses, and the deadline
            stop is agreed, so every rank keeps the same best iterates and steps as often.

    Returns:
        ``(alpha, beta, best_B)``: the parameters of each domain's best iterate (the worst clause
        margin is the criterion; iteration 0 is the warm start) and that margin in working precision.
    """
    from gpufield.verify.bab.interm import interm_bounds
    from gpufield.verify.bab.interm import leaves as interm_leaves

    alpha = {k: v.clone().requires_grad_() for k, v in alpha0.items()}
    beta = {k: v.clone().requires_grad_() for k, v in beta0.items()} if use_beta else {}
    ia, ib = interm_leaves(interm) if interm else ([], [])
    for t in ia + ib:
        t.requires_grad_()
    opt_a = _Adam(list(alpha.values()) + ia, lr_alpha, 0.98)
    opt_b = _Adam(list(beta.values()) + ib, lr_beta, 0.98) if beta or ib else None
    best_a = {k: v.detach().clone() for k, v in alpha.items()}
    best_b = {k: v.detach().clone() for k, v in (beta if use_beta else beta0).items()}  # β off: stays 0
    best = None
    for it in range(iterations + 1):
        cur = interm_bounds(graph, lo, hi, inter, splits, interm) if interm else inter
        val_KB = final_bound(graph, spec, lo, hi, cur, alpha, beta, splits)
        v_B = val_KB.detach().min(0).values
        late = time.monotonic() > deadline_s
        if split is not None:
            v_B, late = split.min_flag(v_B, late)
        imp = torch.ones_like(v_B, dtype=torch.bool) if best is None else v_B > best
        best = v_B.clone() if best is None else torch.where(imp, v_B, best)
        with torch.no_grad():
            for k, v in alpha.items():
                best_a[k] = _select(imp, v.detach(), best_a[k], 2)
            for k, v in beta.items():
                best_b[k] = _select(imp, v.detach(), best_b[k], 1)
        if it == iterations or bool((best > 0).all()) or late:
            break
        loss = -(val_KB * (val_KB.detach() <= 0)).sum()
        if not loss.requires_grad:
            break
        pa, pb = list(alpha.values()) + ia, list(beta.values()) + ib
        grads = torch.autograd.grad(loss, pa + pb, allow_unused=True)
        opt_a.step(grads[:len(pa)])
        if opt_b is not None:
            opt_b.step(grads[len(pa):])
        with torch.no_grad():
            for v in pa:
                v.clamp_(0.0, 1.0)
            for v in pb:
                v.clamp_(min=0.0)
    for t in ia + ib:
        t.requires_grad_(False)
    return best_a, best_b, best


def bound64(g64: Graph, spec: Spec, lo64, hi64, inter64, alpha, beta, splits, names,
            record=None, split=None) -> torch.Tensor:
    """Sound domain lower bounds ``[B]``: float64 re-evaluation of α, β (+inf for empty domains).

    With ``split`` (:class:`~gpufield.verify.dist.bab_shard.SpecSplit`) ``spec``, α and β are this
    rank's clauses and the result is the minimum over every rank's (the same on all ranks)."""
    with torch.no_grad():
        a64 = {k: v.to(torch.float64) for k, v in alpha.items()}
        b64 = {k: v.to(torch.float64) for k, v in beta.items()}
        v = final_bound(g64, spec, lo64, hi64, inter64, a64, b64, splits, record=record).min(0).values
        if split is not None:
            v = split.min(v)
    return torch.where(empty_mask(inter64, names), torch.full_like(v, torch.inf), v)
