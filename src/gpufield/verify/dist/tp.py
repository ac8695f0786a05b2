"""``tp`` mode (the paper's Megatron tensor parallelism, for comparison): weights *and* A-matrices sharded.

Consecutive Linear layers are paired (Col, Row) in topological order, as in the paper
(verify.md §1.3); an odd last one (the output layer) stays replicated. A Col layer keeps its rows
``W[rows_r]`` (its output neurons are split: the "sharded zone" up to the Row layer holds ``h/P``
features per rank); a Row layer keeps its columns ``W[:, cols_r]`` and all-reduces its partial
product. In the CROWN backward pass A enters a Row layer replicated and leaves it sharded
(``A @ W[:, cols_r]``, no communication); inside the zone ReLU steps are local; a Col layer
all-reduces ``A_local @ W[rows_r]`` back to a replicated A. Every partial bias term (Col bias
rows, zone ReLU intercepts) is all-reduced in the op that makes it, so the propagation code of
:mod:`gpufield.verify.propagate` runs unchanged on the sharded graph.

Intermediate bounds of a zone's neurons (the Col outputs) cannot be bounded by CROWN without the
other ranks' rows, so they are IBP bounds with local weights (``crown_intermediate(fixed=...)``):
exact for the first zone (an affine image of the box), looser for every later one — the paper's
trade-off. Requires every paired layer's width to be divisible by P.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from gpufield.verify.dist.comm import Comm
from gpufield.verify.graph import Graph, Node
from gpufield.verify.ops.activation import Relu
from gpufield.verify.ops.linear import Linear
from gpufield.verify.propagate import crown_intermediate, ibp


def _sum(t, comm: Comm):
    """All-reduce SUM of a tensor (a Python float 0.0 stays 0.0); identity at P = 1."""
    if comm.world == 1 or not torch.is_tensor(t):
        return t
    import torch.distributed as dist

    from gpufield.verify.dist.comm import staged

    t = t.contiguous()  # callers pass fresh results (matmuls, sums): reduced in place, no copy
    if staged(t, comm.group):  # gloo on a CUDA tensor: through host memory
        h = t.cpu()
        dist.all_reduce(h, group=comm.group)
        t.copy_(h)
        return t
    dist.all_reduce(t, group=comm.group)
    return t


@dataclass(frozen=True, slots=True)
class ColLinear:
    """Rows ``W[rows_r]`` of a Linear: local output features ``[B, h/P]`` (no communication forward).

    Attributes:
        local: the Linear on this rank's rows (and bias rows).
        comm: the group.
    """

    local: Linear
    comm: Comm
    n_inputs: int = 1
    nonlinear: bool = False

    def forward(self, x):
        """``[B, I] -> [B, h/P]``."""
        return self.local.forward(x)

    def ibp(self, b):
        """Local rows of the exact one-layer interval image."""
        return self.local.ibp(b)

    def backward(self, lA, uA, ctx):
        """``A_local @ W[rows_r]`` and the bias rows' term, all-reduced to replicated values."""
        out, lb, ub = self.local.backward(lA, uA, ctx)
        (l_new, u_new), = out
        return ([(None if l_new is None else _sum(l_new, self.comm), None if u_new is None else _sum(u_new, self.comm))],
                _sum(lb, self.comm), _sum(ub, self.comm))

    def cast(self, dtype, device):
        """Copy in ``dtype`` on ``device``."""
        return ColLinear(self.local.cast(dtype, device), self.comm)


@dataclass(frozen=True, slots=True)
class RowLinear:
    """Columns ``W[:, cols_r]`` of a Linear and its full bias: partial products all-reduced.

    Attributes:
        W_part: ``[O, h/P]``.
        b_O: full bias ``[O]`` or None.
        comm: the group.
    """

    W_part: torch.Tensor
    b_O: torch.Tensor | None
    comm: Comm
    n_inputs: int = 1
    nonlinear: bool = False

    def forward(self, x):
        """``all_reduce(x_local @ W_part.T) + b``."""
        y = _sum(x @ self.W_part.T, self.comm)
        return y if self.b_O is None else y + self.b_O

    def ibp(self, b):
        """Centre/radius: ``Σ_r c_r W_r + b`` and ``Σ_r |W_r| r_r`` (each an all-reduce)."""
        lo, hi = b
        c = self.forward((lo + hi) / 2)
        r = _sum(((hi - lo) / 2) @ self.W_part.abs().T, self.comm)
        return c - r, c + r

    def backward(self, lA, uA, ctx):
        """Replicated ``A [S,B,O]`` -> this rank's slice ``A @ W_part`` (no communication); bias ``A·b`` once."""
        return Linear(self.W_part, self.b_O).backward(lA, uA, ctx)

    def cast(self, dtype, device):
        """Copy in ``dtype`` on ``device``."""
        b = None if self.b_O is None else self.b_O.to(device=device, dtype=dtype)
        return RowLinear(self.W_part.to(device=device, dtype=dtype), b, self.comm)


@dataclass(frozen=True, slots=True)
class ZoneRelu:
    """ReLU on a zone's local features; its intercept terms are partial sums, all-reduced."""

    comm: Comm
    n_inputs: int = 1
    nonlinear: bool = True

    def forward(self, x):
        """Exact ReLU."""
        return torch.relu(x)

    def ibp(self, b):
        """``[max(l,0), max(u,0)]``."""
        return Relu().ibp(b)

    def backward(self, lA, uA, ctx):
        """The ReLU relaxation on local A and bounds; bias all-reduced."""
        out, lb, ub = Relu().backward(lA, uA, ctx)
        return out, _sum(lb, self.comm), _sum(ub, self.comm)

    def cast(self, dtype, device):
        """No constants."""
        return self


def tp_graph(graph: Graph, comm: Comm) -> tuple[Graph, set[str]]:
    """The Megatron-sharded copy of a Linear/ReLU chain and the names of its Col outputs.

    Args:
        graph: chain of Linear, ReLU and reshape ops.
        comm: this process's place in the group.

    Returns:
        ``(graph_r, zone_starts)``: this rank's graph (zone nodes have local shapes ``h/P``) and the
        Col output names, whose intermediate bounds must be IBP (pass as ``fixed``).

    Raises:
        ValueError: a Col layer's width is not divisible by P, or a zone contains an op other
            than ReLU.
    """
    linears = [n.name for n in graph.nodes if isinstance(n.op, Linear)]
    pairs = {c: r for c, r in zip(linears[0:len(linears) - 1:2], linears[1::2], strict=False)}
    rows = set(pairs.values())
    P, k = comm.world, comm.rank
    nodes, zone, starts, in_zone = [], {}, set(), None
    for n in graph.nodes:
        op, shape = n.op, n.shape
        if n.name in pairs:
            h = op.W_OI.shape[0]
            if h % P:
                raise ValueError(f"layer {n.name} has {h} outputs, not divisible by P={P}")
            sl = slice(k * h // P, (k + 1) * h // P)
            b = None if op.b_O is None else op.b_O[sl].clone()
            op, shape, in_zone = ColLinear(Linear(op.W_OI[sl].clone(), b), comm), (h // P,), sl
            starts.add(n.name)
        elif n.name in rows:
            op, in_zone = RowLinear(op.W_OI[:, in_zone].clone(), op.b_O, comm), None
        elif in_zone is not None:
            if not isinstance(op, Relu):
                raise ValueError(f"sharded zone contains {type(op).__name__} at {n.name}")
            op, shape = ZoneRelu(comm), (in_zone.stop - in_zone.start,)
        zone[n.name] = in_zone
        nodes.append(Node(n.name, op, n.inputs, shape, n.onnx_name))
    g = Graph(graph.input_name, graph.input_shape, tuple(nodes), graph.output_name, graph.source)
    return g, starts


def tp_crown(g: Graph, starts: set[str], x_lo, x_hi, C, memory_budget_bytes: int = 2 << 30):
    """CROWN bounds of ``C · output`` under TP: IBP inside zones, CROWN elsewhere.

    Args:
        g, starts: :func:`tp_graph`'s sharded graph and zone starts (the same call on every rank).
        x_lo, x_hi: box ``[B, *input_shape]``.
        C: spec ``[S, B, *output_shape]`` (replicated).

    Returns:
        ``(lb_SB, ub_SB)``, replicated on every rank.
    """
    from gpufield.verify.propagate import backward

    with torch.no_grad():
        ib = ibp(g, x_lo, x_hi)
        inter = crown_intermediate(g, x_lo, x_hi, ref=ib, fixed=starts, memory_budget_bytes=memory_budget_bytes)
        return backward(g, g.output_name, C, x_lo, x_hi, inter)
