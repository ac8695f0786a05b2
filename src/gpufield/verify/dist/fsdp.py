"""FSDP mode: weights sharded by output rows, each layer gathered just in time and freed after use.

Every Linear/Gemm weight ``W_OI`` (and every Conv kernel ``K``, dim 0 = output channels) is cut
into P contiguous row blocks of ``ceil(O/P)`` rows (the last block zero-padded); rank r keeps only
block r. A :class:`ShardedOp` stands in the graph where the op was. Whenever the propagation code
asks it for a forward, an IBP step or a CROWN backward step, it all-gathers the full weight into
the graph's one preallocated :class:`GatherBuffer` (sized for the largest padded layer), builds the
*original* op around a view of it and delegates to that op's own method: the arithmetic is the
single-process code path, on a bit-identical weight, so bounds are bitwise identical to P = 1 (the
paper's FSDP finding, verify.md §1.4). No reference to the view survives the step, and the next
layer's gather overwrites the buffer. (A fresh buffer per gather was tried first: gloo's work
objects release their output tensors on a worker thread, so the moment a buffer died, and the
measured peak, differed between ranks and runs.)

α-CROWN differentiates through ``A @ W``: autograd would keep every gathered weight alive until the
backward pass (the paper's retained-copies defect). A ``saved_tensors_hooks`` pair replaces a saved
gathered weight by a small token and re-gathers it when the autograd backward needs it (what
PyTorch FSDP does for its own backward), so the retained memory stays at the shards.

Collective schedule: one gather per sharded op per call, in the order the (rank-independent)
traversal of the graph reaches it, and one per re-gather in the (equally rank-independent) autograd
backward; every rank runs the same computation, so the schedules agree.

Memory per rank: weights ``Σ_k ceil(O_k/P)·I_k`` (≈ 1/P) plus the buffer ``max_k P·ceil(O_k/P)·I_k``,
everything else as at P = 1. So the peak is ≤ P = 1's exactly when the buffer ≤ the bytes sharding
saved, ``(1 − 1/P)`` of the weights up to padding (true for deep MLPs; not for a 2-layer net at P = 2,
nor quite for mnist 256x4 at P = 2 — see benchmarks/verify_RESULTS.md).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

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


@dataclass(eq=False)
class GatherBuffer:
    """One flat buffer that every sharded op of a graph gathers its full weight into.

    Attributes:
        flat: ``[max_k P·ceil(O_k/P)·prod(rest_k)]`` in the weights' dtype/device.
    """

    flat: torch.Tensor
    _casts: dict = field(default_factory=dict, repr=False)

    def view(self, shape: tuple[int, ...]) -> torch.Tensor:
        """A contiguous ``shape`` view of the buffer's first elements."""
        return self.flat[: torch.Size(shape).numel()].view(shape)

    def cast(self, dtype, device) -> GatherBuffer:
        """The buffer for a cast copy of the graph (one per dtype/device, shared by all its ops)."""
        if self.flat.dtype == dtype and self.flat.device == torch.device(device):
            return self
        key = (dtype, str(device))
        if key not in self._casts:
            self._casts[key] = GatherBuffer(torch.empty(self.flat.numel(), dtype=dtype, device=device))
        return self._casts[key]


@dataclass(frozen=True, slots=True)
class ShardedOp:
    """A Linear or Conv op whose weight is held as this rank's row block.

    Attributes:
        shard: ``[ceil(O/P), *rest]`` this rank's rows of the weight.
        rows: O, the weight's true number of rows (padding excluded).
        template: the original op with its weight replaced by an empty tensor (bias and
            attributes kept; the bias is small and replicated).
        comm: the group to gather over.
        buffer: the graph's gather buffer.
    """

    shard: torch.Tensor
    rows: int
    template: Linear | Conv
    comm: Comm
    buffer: GatherBuffer
    n_inputs: int = 1
    nonlinear: bool = False

    @property
    def field(self) -> str:
        """Name of the weight field of the template's class (``W_OI`` or ``K``)."""
        return _WEIGHT_FIELD[type(self.template)]

    def gather(self) -> torch.Tensor:
        """The full weight ``[O, *rest]`` (a contiguous view of the gather buffer, valid until the next gather)."""
        out = self.buffer.view((self.comm.world * self.shard.shape[0], *self.shard.shape[1:]))
        return self.comm.all_gather_rows(self.shard, out)[: self.rows]

    def full_op(self) -> Linear | Conv:
        """The original op with the gathered weight (dies with the caller's reference)."""
        return dataclasses.replace(self.template, **{self.field: self.gather()})

    def _call(self, method: str, *args):
        op = self.full_op()
        W = getattr(op, self.field)
        # the hooks live as long as the saved tensors (PyTorch keeps both functions): capture the
        # buffer's address, never a tensor (with fresh gather buffers that kept every layer alive)
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
                         self.template.cast(dtype, device), self.comm, self.buffer.cast(dtype, device))


def spec_side(graph: Graph) -> frozenset[str]:
    """Nodes between the output and the nearest non-linear ops (output included), walking back.

    Their backward step multiplies the spec matrix itself. Under clause sharding a rank whose
    clauses have a λ (a differentiable spec row) saves such a weight for autograd and a rank
    without one does not, so their autograd re-gathers would differ; the ``alpha`` mode keeps
    these (small: output-layer) weights replicated.
    """
    out, todo = set(), [graph.output_name]
    while todo:
        name = todo.pop()
        if name == graph.input_name or name in out:
            continue
        node = graph.node(name)
        if node.op.nonlinear:
            continue
        out.add(name)
        todo.extend(node.inputs)
    return frozenset(out)


def shard_graph(graph: Graph, comm: Comm, keep: frozenset[str] = frozenset()) -> Graph:
    """A copy of ``graph`` in which every Linear/Conv weight is replaced by this rank's row block.

    Args:
        graph: the network (any dtype/device; the shards keep them).
        comm: this process's place in the group.
        keep: node names whose weights stay whole (e.g. :func:`spec_side`).

    Returns:
        A graph with :class:`ShardedOp` nodes; its bounds are bitwise those of ``graph``.
    """
    shards = {}
    for n in graph.nodes:
        fld = _WEIGHT_FIELD.get(type(n.op))
        if fld is not None and comm.world > 1 and n.name not in keep:
            shards[n.name] = shard_rows(getattr(n.op, fld).contiguous(), comm)
    if not shards:
        return graph
    some = next(iter(shards.values()))
    buffer = GatherBuffer(some.new_empty(max(comm.world * s.numel() for s in shards.values())))
    nodes = []
    for n in graph.nodes:
        op = n.op
        if n.name in shards:
            fld = _WEIGHT_FIELD[type(op)]
            W = getattr(op, fld)
            template = dataclasses.replace(op, **{fld: W.new_empty(0)})
            op = ShardedOp(shards[n.name], W.shape[0], template, comm, buffer)
        nodes.append(Node(n.name, op, n.inputs, n.shape, n.onnx_name))
    return Graph(graph.input_name, graph.input_shape, tuple(nodes), graph.output_name, graph.source)
