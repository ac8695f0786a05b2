"""FSDP mode: weights sharded by output rows, each layer gathered just in time and freed after use.

Every Linear/Gemm weight ``W_OI`` (and every Conv kernel ``K``, dim 0 = output channels) is cut
into P contiguous row blocks of ``ceil(O/P)`` rows (the last block zero-padded); rank r keeps only
block r. A :class:`ShardedOp` stands in the graph where the op was. Whenever the propagation code
asks it for a forward, an IBP step or a CROWN backward step, it all-gathers the full weight into
one fresh buffer, builds the *original* op around it and delegates to that op's own method: the
arithmetic is the single-process code path, on a bit-identical weight, so bounds are bitwise
identical to P = 1 (the paper's FSDP finding, verify.md §1.4). The buffer dies when the step
returns, before the next layer is gathered.

α-CROWN differentiates through ``A @ W``: autograd would keep every gathered weight alive until the
backward pass (the paper's retained-copies defect). A ``saved_tensors_hooks`` pair replaces a saved
gathered weight by a small token and re-gathers it when the autograd backward needs it (what
PyTorch FSDP does for its own backward), so the retained memory stays at the shards.

Collective schedule: one gather per sharded op per call, in the order the (rank-independent)
traversal of the graph reaches it, and one per re-gather in the (equally rank-independent) autograd
backward; every rank runs the same computation, so the schedules agree.

Memory per rank: weights ``Σ_k ceil(O_k/P)·I_k`` (≈ 1/P) resident, plus the one layer being used.
Peak ≤ P = 1's exactly when the largest layer ≤ (1 − 1/P) of all weights (true for deep MLPs;
a 2-layer net at P = 2 cannot satisfy it — see benchmarks/verify_RESULTS.md).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from gpufield.verify.dist.comm import Comm
from gpufield.verify.graph import Graph, Node
from gpufield.verify.ops.linear import Conv, Linear

_WEIGHT_FIELD = {Linear: "W_OI", Conv: "K"}


def _rows_per_rank(n: int, world: int) -> int:
    return -(-n // world)


def shard_rows(W: torch.Tensor, comm: Comm) -> torch.Tensor:
    """Rank ``comm.rank``'s block of ``ceil(O/P)`` rows of ``W`` (zero rows pad the last block).

    Args:
        W: ``[O, *rest]``.
        comm: this process's place in the group.

    Returns:
        ``[ceil(O/P), *rest]`` contiguous copy (same dtype/device as ``W``).
    """
    R = _rows_per_rank(W.shape[0], comm.world)
    out = W.new_zeros((R, *W.shape[1:]))
    lo, hi = comm.rank * R, min((comm.rank + 1) * R, W.shape[0])
    if hi > lo:
        out[: hi - lo] = W[lo:hi]
    return out


@dataclass(frozen=True, slots=True)
class ShardedOp:
    """A Linear or Conv op whose weight is held as this rank's row block.

    Attributes:
        shard: ``[ceil(O/P), *rest]`` this rank's rows of the weight.
        rows: O, the weight's true number of rows (padding excluded).
        template: the original op with its weight replaced by an empty tensor (bias and
            attributes kept; the bias is small and replicated).
        comm: the group to gather over.
    """

    shard: torch.Tensor
    rows: int
    template: Linear | Conv
    comm: Comm
    n_inputs: int = 1
    nonlinear: bool = False

    @property
    def field(self) -> str:
        """Name of the weight field of the template's class (``W_OI`` or ``K``)."""
        return _WEIGHT_FIELD[type(self.template)]

    def gather(self) -> torch.Tensor:
        """The full weight ``[O, *rest]`` (a contiguous prefix of one fresh all-gather buffer)."""
        return self.comm.all_gather_rows(self.shard)[: self.rows]

    def full_op(self) -> Linear | Conv:
        """The original op with the gathered weight (dies with the caller's reference)."""
        return dataclasses.replace(self.template, **{self.field: self.gather()})

    def _call(self, method: str, *args):
        op = self.full_op()
        W = getattr(op, self.field)
        # the hooks live as long as the saved tensors (PyTorch keeps both functions): capture the
        # buffer's address, never the buffer itself, or every gathered weight stays alive
        ptr, dev = W.untyped_storage().data_ptr(), W.device
        del W

        def pack(t):
            if t.device == dev and t.untyped_storage().data_ptr() == ptr:
                return ("gathered", t.shape, t.stride(), t.storage_offset())
            return t

        def unpack(p):
            if isinstance(p, torch.Tensor):
                return p
            _, shape, stride, offset = p
            return self.gather().as_strided(shape, stride, offset)

        with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
            return getattr(op, method)(*args)

    def forward(self, *xs):
        """The template's exact forward with the gathered weight."""
        return self._call("forward", *xs)

    def ibp(self, *bounds):
        """The template's IBP step with the gathered weight."""
        return self._call("ibp", *bounds)

    def backward(self, lA, uA, ctx):
        """The template's CROWN backward step with the gathered weight."""
        return self._call("backward", lA, uA, ctx)

    def cast(self, dtype, device):
        """Copy with the shard and the template's constants in ``dtype`` on ``device``."""
        return ShardedOp(self.shard.to(device=device, dtype=dtype), self.rows,
                         self.template.cast(dtype, device), self.comm)


def shard_graph(graph: Graph, comm: Comm) -> Graph:
    """A copy of ``graph`` in which every Linear/Conv weight is replaced by this rank's row block.

    Args:
        graph: the network (any dtype/device; the shards keep them).
        comm: this process's place in the group.

    Returns:
        A graph with :class:`ShardedOp` nodes; its bounds are bitwise those of ``graph``.
    """
    nodes = []
    for n in graph.nodes:
        op = n.op
        fld = _WEIGHT_FIELD.get(type(op))
        if fld is not None and comm.world > 1:
            W = getattr(op, fld)
            template = dataclasses.replace(op, **{fld: W.new_empty(0)})
            op = ShardedOp(shard_rows(W.contiguous(), comm), W.shape[0], template, comm)
        nodes.append(Node(n.name, op, n.inputs, n.shape, n.onnx_name))
    return Graph(graph.input_name, graph.input_shape, tuple(nodes), graph.output_name, graph.source)
