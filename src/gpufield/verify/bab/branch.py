"""Branching heuristics: which unstable ReLU to split next in each domain.

* ``babsr``: BaBSR's intercept score ``|mean_S min(A, 0) · (−l u / (u − l))|`` from the A-matrix
  arriving at each ReLU (Bunel et al., JMLR 2020, arXiv:1909.06588).
* ``fsb``: filtered smart branching (De Palma et al., ICLR 2021, arXiv:2104.06718; α,β-CROWN's
  default): the top ``k`` BaBSR candidates of each domain are each tried — both children bounded
  with the parent's α, β and intermediate bounds, only the split neuron clamped — and the one
  whose worse child has the best bound wins.

Shape legend: S spec rows, B domains, N neurons of one ReLU layer, T all unstable candidates of a
domain over layers (concatenated).
"""

from __future__ import annotations

import torch

from gpufield.verify.bab.bound import clamp_splits, final_bound
from gpufield.verify.graph import Graph
from gpufield.verify.spec import Spec

BRANCHING = ("babsr", "fsb")


def babsr_scores(graph: Graph, inter, record, split=None) -> tuple[torch.Tensor, list[tuple[str, int]]]:
    """Scores ``[B, T]`` over the concatenated ReLU inputs (−1 where not unstable) and layer offsets.

    With ``split`` (:class:`~gpufield.verify.dist.bab_shard.SpecSplit`) ``record`` holds this
    rank's spec rows; the mean is taken over every rank's rows, gathered."""
    scores, layers = [], []
    for relu in graph.relu_nodes():
        name = relu.inputs[0]
        if name == graph.input_name or relu.name not in record:
            continue
        low, u = (t.flatten(1) for t in inter[name])
        unstable = (low < 0) & (u > 0)
        t = torch.where(unstable, -low * u / torch.where(unstable, u - low, torch.ones_like(u)), torch.zeros_like(u))
        rec = record[relu.name] if split is None else split.gather_rows(record[relu.name])
        s = (rec.flatten(2).clamp(max=0).mean(0) * t).abs()
        scores.append(torch.where(unstable, s + 1e-12, torch.full_like(s, -1.0)))
        layers.append((name, low.shape[1]))
    return torch.cat(scores, 1), layers


def _locate(layers, flat: int) -> tuple[str, int]:
    for name, n in layers:
        if flat < n:
            return name, flat
        flat -= n
    raise IndexError(flat)


def choose(graph: Graph, spec: Spec, lo, hi, inter, alpha, beta, splits, record, *,
           method: str, k: int, split=None) -> list[tuple[str, int] | None]:
    """One split decision per domain (None: no unstable neuron left).

    Args:
        graph: working-precision network; ``lo, hi`` ``[B, *input]``; ``inter`` the domains'
            intermediate bounds (working precision); ``alpha``, ``beta``, ``splits`` as in
            :func:`~gpufield.verify.bab.bound.final_bound`; ``record`` the A-matrices of that pass.
        method: ``babsr`` or ``fsb``.
        k: FSB candidates per domain.
        split: :class:`~gpufield.verify.dist.bab_shard.SpecSplit` (``spec``, α, β, ``record``
            are this rank's clauses): scores combine every rank's rows, the same decisions on all.
    """
    if method not in BRANCHING:
        raise ValueError(f"branching {method!r} not in {BRANCHING}")
    sc, layers = babsr_scores(graph, inter, record, split)
    B = sc.shape[0]
    if method == "babsr" or k <= 1:
        val, ind = (t.tolist() for t in sc.max(1))
        return [None if val[b] < 0 else _locate(layers, ind[b]) for b in range(B)]
    k = min(k, sc.shape[1])
    top = sc.topk(k, 1)
    valid = top.values >= 0  # [B, k]
    # children: domain b, candidate c, sign ± -> row (b * k + c) * 2 + (0: +, 1: −)
    rows = torch.arange(B, device=lo.device).repeat_interleave(2 * k)
    offs, o = {}, 0
    for name, n in layers:
        offs[name] = (o, n)
        o += n
    cand = top.indices.repeat_interleave(2, 1).flatten()  # [B*2k]
    sign = torch.tensor([1, -1], dtype=torch.int8, device=lo.device).repeat(B * k)
    n_ch = len(rows)
    if split is not None:  # this rank bounds its block of the children, with every spec row
        sel, _ = split.candidates(n_ch, lo.device)
        rows, cand, sign = rows[sel], cand[sel], sign[sel]
        spec = split.full
        alpha = {n: split.gather_alpha(a) for n, a in alpha.items()}
        beta = {n: split.gather_rows(b) for n, b in beta.items()}
    ch_splits = {n: s[rows].clone() for n, s in splits.items()}
    for name, (o, n) in offs.items():
        m = (cand >= o) & (cand < o + n)
        if m.any():
            if name not in ch_splits:
                ch_splits[name] = torch.zeros(len(rows), n, dtype=torch.int8, device=lo.device)
            r = m.nonzero().flatten()
            ch_splits[name][r, cand[r] - o] = sign[r]
    ch_inter = clamp_splits({n: (lw[rows], u[rows]) for n, (lw, u) in inter.items()}, ch_splits)
    ch_alpha = {n: a[:, :, rows] for n, a in alpha.items()}
    ch_beta = {n: b[:, rows] for n, b in beta.items()}
    with torch.no_grad():
        v = final_bound(graph, spec, lo[rows], hi[rows], ch_inter, ch_alpha, ch_beta,
                        {n: ch_splits[n] for n in ch_beta}).min(0).values
        if split is not None:
            v = split.gather_candidates(v, n_ch)
    v = torch.nan_to_num(v, nan=-torch.inf).reshape(B, k, 2).min(2).values
    v = torch.where(valid, v, torch.full_like(v, -torch.inf))
    chosen = top.indices.gather(1, v.max(1).indices.unsqueeze(1)).squeeze(1).tolist()
    any_valid = valid.any(1).tolist()
    return [_locate(layers, chosen[b]) if any_valid[b] else None for b in range(B)]
