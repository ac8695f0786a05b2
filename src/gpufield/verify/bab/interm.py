"""Optimised intermediate bounds inside branch and bound (α,β-CROWN's ``enable_opt_interm_bounds``).

Plain β-CROWN re-bounds a domain's intermediate layers by CROWN with the split neurons clamped
and uses β only in the final objective. Here the pre-activation bounds of the layers deeper than
the shallowest new split are themselves bounded with free lower slopes α and split multipliers β
(one set per bounded neuron and sense), optimised jointly with the final α, β on the final
objective, as β-CROWN does for intermediate layers (Wang et al. 2021, arXiv:2103.06624; the
``enable_opt_interm_bounds`` option of α,β-CROWN) on top of α-CROWN's joint optimisation (Xu et
al. 2021, arXiv:2011.13824).

Both senses are lower bounds: row ``j`` of ``C = [I; −I]`` gives ``l_j``, row ``R + j`` gives
``−u_j``, so the β term ``−β s z`` (≤ 0 on the domain) is valid for both. Results are intersected
with the domain's sound CROWN bounds (:func:`~gpufield.verify.bab.bound.intermediate64`), so they
only tighten; for the proof the same parameters are re-evaluated in float64
(:func:`tighten64`), any α ∈ [0, 1] and β ≥ 0 giving a sound bound.

Shape legend: B domains, R bounded (unstable) neurons of a layer, N neurons of a layer, * node
shape without batch.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from gpufield.verify.alpha import valid_slopes
from gpufield.verify.bab.bound import clamp_splits
from gpufield.verify.graph import Graph
from gpufield.verify.ops.activation import adaptive_lower_slope
from gpufield.verify.propagate import Interval, ancestors, backward, onehot_spec


def init_interm(graph: Graph, layers: list[str], inter: Mapping[str, Interval], splits,
                root_alphas: Mapping[str, Mapping[str, torch.Tensor]] | None = None) -> dict:
    """Parameters of the optimised layers, warm-started from the root α-CROWN slopes.

    Args:
        graph: working-precision network.
        layers: ReLU input names to optimise, in topological order.
        inter: the domains' sound bounds ``[B, *]`` per ReLU input (working precision).
        splits: ReLU input -> int8 ``[B, N]``.
        root_alphas: ``{start: {relu: [2, N_start, 1, *relu]}}`` (index 0: lower pass, 1: upper),
            e.g. the root α-CROWN's; None: CROWN's adaptive slopes.

    Returns:
        ``{layer: {"rows": [R] long, "alpha": {relu: [1, 2R, B, *relu]}, "beta": {split layer:
        [2R, B, N]}}}``; layers without unstable neurons are left out.
    """
    relus = graph.relu_nodes()
    params = {}
    for m in layers:
        low, u = (t.flatten(1) for t in inter[m])
        rows = ((low < 0) & (u > 0)).any(0).nonzero().flatten()
        if len(rows) == 0:
            continue
        B = low.shape[0]
        anc = ancestors(graph, m)
        alpha = {}
        for r in relus:
            if r.name not in anc:
                continue
            root = None if root_alphas is None else root_alphas.get(m, {}).get(r.name)
            if root is not None:
                a = torch.cat([root[0][rows], root[-1][rows]]).to(low.dtype)  # [2R, 1, *relu]
                a = a.unsqueeze(0).expand(1, a.shape[0], B, *a.shape[2:])
            else:
                a = adaptive_lower_slope(*inter[r.inputs[0]]).unsqueeze(0).unsqueeze(0)
                a = a.expand(1, 2 * len(rows), *a.shape[2:])
            alpha[r.name] = a.clone()
        beta = {k: torch.zeros(2 * len(rows), B, s.shape[1], dtype=low.dtype, device=low.device)
                for k, s in splits.items() if k in anc and bool((s != 0).any())}
        params[m] = {"rows": rows, "alpha": alpha, "beta": beta}
    return params


def leaves(params: dict) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """``(alphas, betas)``: the optimisable tensors of :func:`init_interm`'s parameters."""
    return ([a for p in params.values() for a in p["alpha"].values()],
            [b for p in params.values() for b in p["beta"].values()])


def interm_bounds(graph: Graph, lo, hi, inter: Mapping[str, Interval], splits, params: dict) -> dict[str, Interval]:
    """The domains' intermediate bounds with the optimised layers re-bounded (differentiable).

    Args:
        graph: network (its dtype is the computation's).
        lo, hi: box ``[B, *input]``.
        inter: sound bounds per ReLU input ``[B, *]`` (with the splits clamped) and the input.
        splits: ReLU input -> ``[B, N]``.
        params: from :func:`init_interm` (same dtype as ``graph``).

    Returns:
        ``inter`` with each optimised layer replaced by the intersection of its old bounds and the
        new ones, splits clamped again (layers are done in topological order, each using the
        tightened layers before it).
    """
    out = dict(inter)
    for m, p in params.items():
        rows, shape = p["rows"], graph.shape(m)
        B = lo.shape[0]
        eye = onehot_spec(shape, rows, B, lo)
        C = torch.cat([eye, -eye])
        betas = {k: (-(b * splits[k].to(b.dtype))).reshape(b.shape[0], B, *graph.shape(k))
                 for k, b in p["beta"].items()}
        lb, _ = backward(graph, m, C, lo, hi, out, alphas=p["alpha"], upper=False, betas=betas)
        R = len(rows)
        lb = torch.where(torch.isnan(lb), torch.full_like(lb, -torch.inf), lb)  # NaN: no information
        low, u = (t.flatten(1) for t in out[m])
        new_l = torch.maximum(low[:, rows], lb[:R].T)
        new_u = torch.minimum(u[:, rows], -lb[R:].T)
        low = low.index_copy(1, rows, new_l)
        u = u.index_copy(1, rows, new_u)
        out[m] = clamp_splits({m: (low.reshape(B, *shape), u.reshape(B, *shape))}, {m: splits[m]} if m in splits else {})[m]
    return out


def tighten64(g64: Graph, lo64, hi64, inter64: Mapping[str, Interval], splits, params: dict) -> dict[str, Interval]:
    """Float64 re-evaluation of :func:`interm_bounds` with the optimised parameters (sound bounds).

    Args:
        g64: float64 network; ``lo64, hi64`` ``[B, *input]``; ``inter64`` the sound float64 bounds.
        params: the optimised parameters (any dtype; α is clamped to [0, 1] and β to ≥ 0 here).
            They are the optimiser's last iterate, unchecked: a non-finite entry (a float32
            overflow in the optimisation) becomes α = 0 / β = 0, since NaN passes ``clamp`` and a
            NaN bound would make an unstable ReLU look dead (an unsound final bound).
    """
    def a64(a):
        return valid_slopes(a.to(torch.float64))

    def b64(b):
        return torch.nan_to_num(b.detach().to(torch.float64), nan=0.0, posinf=0.0, neginf=0.0).clamp(min=0.0)

    p64 = {m: {"rows": p["rows"],
               "alpha": {r: a64(a) for r, a in p["alpha"].items()},
               "beta": {k: b64(b) for k, b in p["beta"].items()}}
           for m, p in params.items()}
    with torch.no_grad():
        return interm_bounds(g64, lo64, hi64, inter64, splits, p64)
