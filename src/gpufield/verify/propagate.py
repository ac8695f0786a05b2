"""Graph traversal for IBP and CROWN (the math lives in the ops; this file never knows a formula).

IBP: Gowal et al. 2018, arXiv:1810.12715. CROWN backward linear bound propagation: Zhang et al.
2018, arXiv:1811.00866, on a DAG as in auto_LiRPA (Xu et al. 2020, arXiv:2002.12920): A-matrices
start at the bounded node as the spec matrix ``C`` and move to the inputs in reverse topological
order; A's arriving from several consumers are summed; the box concretises the result.

Shape legend: S spec rows, B batch (boxes / future BaB domains), * node shape without batch,
N flattened node size. Alphas are ``[2, S, B, *relu]`` (index 0: lower pass, 1: upper pass).
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from gpufield.verify.graph import Graph
from gpufield.verify.protocols import BackwardInputs

Interval = tuple[torch.Tensor, torch.Tensor]
AlphaTable = Mapping[str, torch.Tensor]
"""ReLU node name -> its slopes ``[2, S, B, *relu]`` for one start node."""


def ibp(graph: Graph, x_lo: torch.Tensor, x_hi: torch.Tensor) -> dict[str, Interval]:
    """Interval bounds of every tensor.

    Args:
        graph: the network.
        x_lo, x_hi: input box ``[B, *input_shape]`` in the graph's dtype.

    Returns:
        name -> ``(lo_B*, hi_B*)`` for the input and every node.
    """
    out = {graph.input_name: (x_lo, x_hi)}
    for n in graph.nodes:
        out[n.name] = n.op.ibp(*(out[i] for i in n.inputs))
    return out


def ancestors(graph: Graph, name: str) -> set[str]:
    """Names of all tensors ``name`` depends on (the graph input included, ``name`` excluded)."""
    seen, todo = set(), [name]
    while todo:
        cur = todo.pop()
        if cur == graph.input_name:
            continue
        for i in graph.node(cur).inputs:
            if i not in seen:
                seen.add(i)
                todo.append(i)
    return seen


def concretize(A: torch.Tensor, x_lo: torch.Tensor, x_hi: torch.Tensor, sign: float) -> torch.Tensor:
    """``min`` (sign=−1) or ``max`` (sign=+1) of ``A·x`` over the box: ``A·c ± |A|·r``.

    Args:
        A: ``[S, B, *input_shape]``.
        x_lo, x_hi: ``[B, *input_shape]``.

    Returns:
        ``[S, B]``.
    """
    A_SBN = A.flatten(2)
    c_BN, r_BN = ((x_lo + x_hi) / 2).flatten(1), ((x_hi - x_lo) / 2).flatten(1)
    return torch.einsum("sbn,bn->sb", A_SBN, c_BN) + sign * torch.einsum("sbn,bn->sb", A_SBN.abs(), r_BN)


def backward(
    graph: Graph,
    start: str,
    C: torch.Tensor,
    x_lo: torch.Tensor,
    x_hi: torch.Tensor,
    inter: Mapping[str, Interval],
    *,
    alphas: AlphaTable | None = None,
    lower: bool = True,
    upper: bool = True,
    record: dict[str, torch.Tensor] | None = None,
    betas: Mapping[str, torch.Tensor] | None = None,
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """CROWN bounds of ``C · start`` over the input box.

    Args:
        graph: the network.
        start: name of the bounded tensor.
        C: spec ``[S, B, *shape(start)]``.
        x_lo, x_hi: input box ``[B, *input_shape]``.
        inter: pre-activation bounds ``(l_B*, u_B*)`` for every ReLU input among the ancestors.
        alphas: optional ReLU slopes for this start node (``[2, S, B, *]`` per ReLU name).
        lower, upper: which bound(s) to compute.
        record: if given, receives the lower-pass A-matrix arriving at each ReLU output
            (``[S, B, *relu]``, detached), e.g. for branching scores, and the one arriving
            at the graph input (its minimising box vertex is a counterexample candidate).
        betas: β-CROWN split terms for the lower pass (Wang et al. 2021, arXiv:2103.06624):
            tensor name -> ``[S, B, *shape]`` added to the lower-pass A-matrix of that tensor
            when it is reached, i.e. the term ``−Σ β_j s_j z_j`` (``β ≥ 0``, split sign ``s_j``;
            the caller passes ``−β·s``), which is ≤ 0 on the split domain.

    Returns:
        ``(lb_SB, ub_SB)`` (None for a bound not requested).

    Raises:
        KeyError: a ReLU input has no intermediate bounds in ``inter``.
    """
    A: dict[str, list] = {start: [C if lower else None, C if upper else None]}
    lbias = ubias = 0.0
    for pos in range(graph.position(start), -1, -1):
        node = graph.nodes[pos]
        lA, uA = A.pop(node.name, (None, None))
        if betas is not None and lA is not None and node.name in betas:
            lA = lA + betas[node.name]
        if lA is None and uA is None:
            continue
        if node.op.nonlinear:
            if record is not None and lA is not None:
                record[node.name] = lA.detach()
            a = None if alphas is None else alphas.get(node.name)
            ctx = BackwardInputs(
                tuple(inter[i] for i in node.inputs),
                None if a is None else a[0],
                None if a is None else a[-1],
            )
        else:
            ctx = BackwardInputs((None,) * len(node.inputs))
        pushed, lb, ub = node.op.backward(lA, uA, ctx)
        lbias = lbias + lb
        ubias = ubias + ub
        for name, (l_new, u_new) in zip(node.inputs, pushed, strict=True):
            slot = A.setdefault(name, [None, None])
            if l_new is not None:
                slot[0] = l_new if slot[0] is None else slot[0] + l_new
            if u_new is not None:
                slot[1] = u_new if slot[1] is None else slot[1] + u_new
    lA, uA = A.pop(graph.input_name, (None, None))
    if record is not None and lA is not None:
        record[graph.input_name] = lA.detach()
    S, B = C.shape[:2]
    zero = C.new_zeros(S, B)
    lb = ub = None
    if lower:
        lb = (zero if lA is None else concretize(lA, x_lo, x_hi, -1.0)) + lbias
    if upper:
        ub = (zero if uA is None else concretize(uA, x_lo, x_hi, 1.0)) + ubias
    return lb, ub


def onehot_spec(shape: tuple[int, ...], idx: torch.Tensor, batch: int, like: torch.Tensor) -> torch.Tensor:
    """Rows ``idx`` (flat neuron indices) of the identity over a node: ``[S, B, *shape]``."""
    n = torch.Size(shape).numel()
    C = torch.zeros(len(idx), n, dtype=like.dtype, device=like.device)
    C[torch.arange(len(idx), device=like.device), idx.to(like.device)] = 1.0
    return C.reshape(len(idx), 1, *shape).expand(len(idx), batch, *shape)


def chunk_rows(graph: Graph, start: str, batch: int, memory_budget_bytes: int, itemsize: int) -> int:
    """How many spec rows to bound at once so the live A-matrices stay under the budget."""
    widest = max([graph.shape(n) for n in ancestors(graph, start) | {start}],
                 key=lambda s: torch.Size(s).numel())
    per_row = 8 * batch * max(1, torch.Size(widest).numel()) * itemsize  # lA, uA + temporaries
    return max(1, memory_budget_bytes // per_row)


def crown_intermediate(
    graph: Graph,
    x_lo: torch.Tensor,
    x_hi: torch.Tensor,
    *,
    ref: Mapping[str, Interval] | None = None,
    alphas: Mapping[str, AlphaTable] | None = None,
    memory_budget_bytes: int = 2 << 30,
    fixed: set[str] | frozenset[str] = frozenset(),
    row_split=None,
) -> dict[str, Interval]:
    """CROWN bounds of every non-linear op's input, layer by layer in topological order.

    Each ReLU input is bounded by its own backward pass with ``C = I`` (all its neurons),
    chunked along the spec rows under ``memory_budget_bytes``. With ``ref`` (sound bounds, e.g.
    IBP): only neurons unstable under ``ref`` (in any batch element) are re-bounded, the others
    keep ``ref`` (a stable neuron's relaxation is exact whatever its bounds), results are
    intersected with ``ref``, and a node that is an affine image of the box takes ``ref`` as is.

    Args:
        graph, x_lo, x_hi: network and input box ``[B, *input_shape]``.
        ref: known sound bounds to intersect with (name -> interval).
        alphas: start node name -> ReLU slopes (α-CROWN); None gives adaptive CROWN.
        memory_budget_bytes: cap on the A-matrices of one chunk.
        fixed: ReLU inputs whose ``ref`` bounds are taken as they are (not re-bounded), e.g. layers
            a branch-and-bound split cannot tighten.
        row_split: optional splitter of the re-bounded rows over processes
            (:class:`gpufield.verify.dist.alpha_shard.RowSplit`): ``take(rows)`` gives this
            process's rows, which it bounds (chunked as above), and ``join(lo_BR, hi_BR, n)``
            returns every process's results ``[B, n]`` in the order of ``rows``. Each row's bound
            is its own backward pass, so the split changes which process computes a row, not how.

    Returns:
        name -> ``(l_B*, u_B*)`` for every ReLU input (and the graph input).
    """
    B = x_lo.shape[0]
    inter: dict[str, Interval] = {graph.input_name: (x_lo, x_hi)}
    nonlin = graph.nonlinear_nodes()
    relus = {r.name for r in nonlin}
    # inputs of a non-linear op whose relaxation depends on its bounds even where they do not
    # cross 0 (Sigmoid, Tanh, MaxPool): every neuron is re-bounded, not only the unstable ones
    dense = {i for r in nonlin if not getattr(r.op, "relu_relaxation", True) for i in r.inputs}
    for relu in nonlin:
        start = relu.inputs[0]
        if start in inter:
            continue
        shape = graph.shape(start)
        n = torch.Size(shape).numel()
        r = None if ref is None else ref.get(start)
        if r is not None and (start in fixed or not (relus & ancestors(graph, start))):
            inter[start] = r  # an affine image of the box: the reference (IBP) is already exact
            continue
        if r is None or start in dense:
            rows = torch.arange(n, device=x_lo.device)
        else:  # only neurons unstable under the reference bounds can change a relaxation
            rows = ((r[0] < 0) & (r[1] > 0)).flatten(1).any(0).nonzero().flatten()
            if len(rows) == 0:
                inter[start] = r
                continue
        step = chunk_rows(graph, start, B, memory_budget_bytes, x_lo.element_size())
        los, his = [], []
        table = None if alphas is None else alphas.get(start)
        mine = rows if row_split is None else row_split.take(rows)
        for i in range(0, len(mine), step):
            idx = mine[i:i + step]
            C = onehot_spec(shape, idx, B, x_lo)
            tab = None if table is None else {k: v[:, idx] for k, v in table.items()}
            lb, ub = backward(graph, start, C, x_lo, x_hi, inter, alphas=tab)
            los.append(lb)
            his.append(ub)
        lo_BR, hi_BR = torch.cat(los).T, torch.cat(his).T
        if row_split is not None:
            lo_BR, hi_BR = row_split.join(lo_BR, hi_BR, len(rows))
        if r is None:
            lo, hi = lo_BR.reshape(B, *shape), hi_BR.reshape(B, *shape)
        else:
            l_ref, u_ref = r[0].flatten(1), r[1].flatten(1)
            # fmax/fmin: a NaN bound (float32 overflow into the slopes, or slopes left NaN by an
            # optimiser) falls back to the reference instead of making the neuron look stable
            lo_BR = torch.fmax(lo_BR, l_ref[:, rows])
            hi_BR = torch.fmin(hi_BR, u_ref[:, rows])
            lo = l_ref.index_copy(1, rows, lo_BR).reshape(B, *shape)
            hi = u_ref.index_copy(1, rows, hi_BR).reshape(B, *shape)
        inter[start] = (lo, hi)
    return inter


def forward_linear(graph: Graph, x_lo: torch.Tensor, x_hi: torch.Tensor,
                   ref: Mapping[str, Interval] | None = None) -> dict[str, Interval] | None:
    """Bounds of every non-linear op's input by forward-mode linear relaxation.

    Each tensor ``z`` carries two linear functions of the input, ``L(x) ≤ z ≤ U(x)`` on the box
    (coefficients ``[B, *shape, N]`` and offsets ``[B, *shape]``, N the flattened input size),
    pushed through the ops in topological order by their ``linear_forward`` rules; a ReLU's
    relaxation uses the concretised bounds of its input (intersected with ``ref``). Costs one
    pass with N coefficient columns instead of one backward pass per layer with a row per
    neuron: the cheap choice when N is small (input-split branch and bound; auto_LiRPA's
    forward mode, Xu et al. 2020, arXiv:2002.12920). Usually looser than backward CROWN.

    Args:
        graph: the network.
        x_lo, x_hi: input box ``[B, *input_shape]``.
        ref: sound bounds to intersect with (e.g. IBP), name -> interval.

    Returns:
        name -> ``(l_B*, u_B*)`` for every non-linear op's input (and the graph input), or None
        when some op has no ``linear_forward`` rule (or a graph with a two-input op).
    """
    B = x_lo.shape[0]
    N = x_lo[0].numel()
    eye = torch.eye(N, dtype=x_lo.dtype, device=x_lo.device).reshape(1, *x_lo.shape[1:], N).expand(B, *x_lo.shape[1:], N)
    zero = torch.zeros_like(x_lo)
    fn = {graph.input_name: (eye, zero, eye, zero)}
    c = ((x_lo + x_hi) / 2).flatten(1)
    r = ((x_hi - x_lo) / 2).flatten(1)

    def conc(W, b, sign):  # min (sign -1) / max (+1) of W·x + b over the box
        Wf = W.reshape(B, -1, N)
        v = torch.einsum("bkn,bn->bk", Wf, c) + sign * torch.einsum("bkn,bn->bk", Wf.abs(), r)
        return v.reshape(b.shape) + b

    out: dict[str, Interval] = {graph.input_name: (x_lo, x_hi)}
    for node in graph.nodes:
        rule = getattr(node.op, "linear_forward", None)
        if rule is None or node.op.n_inputs != 1:
            return None
        (Lw, Lb, Uw, Ub) = fn[node.inputs[0]]
        if node.op.nonlinear:
            name = node.inputs[0]
            if name not in out:
                lo, hi = conc(Lw, Lb, -1.0), conc(Uw, Ub, 1.0)
                if ref is not None and name in ref:
                    lo, hi = torch.fmax(lo, ref[name][0]), torch.fmin(hi, ref[name][1])
                out[name] = (lo, hi)
            fn[node.name] = rule(Lw, Lb, Uw, Ub, out[name])
        else:
            try:
                fn[node.name] = rule(Lw, Lb, Uw, Ub)
            except NotImplementedError:
                return None
    return out
