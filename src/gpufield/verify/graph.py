"""The verifier's graph IR: a DAG of :class:`~gpufield.verify.protocols.BoundOp` nodes.

Built from ONNX by :func:`gpufield.verify.io.onnx_load.load_onnx`. Constants are folded into
the ops, so edges only carry tensors that depend on the input. Each node names its output
tensor; the batch is an explicit leading dimension of every value and never part of a shape
stored here.

Shape legend: B batch, * node shape without batch.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from gpufield.verify.protocols import BoundOp


@dataclass(frozen=True, slots=True)
class Node:
    """One op application.

    Attributes:
        name: the output tensor's name (unique in the graph).
        op: the op with its constants.
        inputs: names of the perturbed input tensors (graph input or earlier nodes).
        shape: output node shape without batch.
        onnx_name: the ONNX node name(s) it came from, for error messages.
    """

    name: str
    op: BoundOp
    inputs: tuple[str, ...]
    shape: tuple[int, ...]
    onnx_name: str = ""


@dataclass(frozen=True)
class Graph:
    """A verified-network DAG in topological order.

    Attributes:
        input_name: name of the single perturbed input.
        input_shape: its node shape without batch (e.g. ``(784, 1)``).
        nodes: nodes in topological order.
        output_name: name of the output tensor.
        source: where it was loaded from (path), for messages.
    """

    input_name: str
    input_shape: tuple[int, ...]
    nodes: tuple[Node, ...]
    output_name: str
    source: str = ""
    _index: dict[str, int] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self):
        self._index.update({n.name: i for i, n in enumerate(self.nodes)})
        seen = {self.input_name}
        for n in self.nodes:
            missing = [i for i in n.inputs if i not in seen]
            if missing:
                raise ValueError(f"node {n.name} reads {missing} before they are produced")
            seen.add(n.name)
        if self.output_name not in seen:
            raise ValueError(f"output {self.output_name} is not produced by any node")

    def node(self, name: str) -> Node:
        """The node producing tensor ``name``."""
        return self.nodes[self._index[name]]

    def position(self, name: str) -> int:
        """Topological index of tensor ``name`` (−1 for the graph input)."""
        return -1 if name == self.input_name else self._index[name]

    def shape(self, name: str) -> tuple[int, ...]:
        """Node shape (no batch) of tensor ``name``."""
        return self.input_shape if name == self.input_name else self.node(name).shape

    @property
    def output_shape(self) -> tuple[int, ...]:
        """Node shape of the output (no batch)."""
        return self.shape(self.output_name)

    def nonlinear_nodes(self) -> list[Node]:
        """The non-linear nodes in topological order: every one needs intermediate bounds of
        its input(s) before a CROWN pass goes through it."""
        return [n for n in self.nodes if n.op.nonlinear]

    def relu_nodes(self) -> list[Node]:
        """The non-linear nodes with ReLU's relaxation (an optimisable lower slope α ∈ [0, 1] per
        neuron and a split at 0) in topological order: the ones α-CROWN, branch and bound and
        the MIP treat. Ops say so with ``relu_relaxation`` (default True for a non-linear op
        that does not have the attribute); Sigmoid, Tanh and MaxPool set it False."""
        return [n for n in self.nodes if n.op.nonlinear and getattr(n.op, "relu_relaxation", True)]

    @property
    def relu_only(self) -> bool:
        """True when every non-linear node has ReLU's relaxation (branch and bound and the MIP
        need that)."""
        return len(self.relu_nodes()) == len(self.nonlinear_nodes())

    def forward(self, x: torch.Tensor, upto: str | None = None) -> torch.Tensor:
        """Exact forward. ``x``: ``[B, *input_shape]``; returns ``[B, *output_shape]``."""
        vals = {self.input_name: x}
        stop = upto or self.output_name
        for n in self.nodes:
            vals[n.name] = n.op.forward(*(vals[i] for i in n.inputs))
            if n.name == stop:
                break
        return vals[stop]

    def cast(self, dtype: torch.dtype, device: torch.device | str = "cpu") -> Graph:
        """A copy with every constant in ``dtype`` on ``device``."""
        nodes = tuple(
            Node(n.name, n.op.cast(dtype, device), n.inputs, n.shape, n.onnx_name) for n in self.nodes
        )
        return Graph(self.input_name, self.input_shape, nodes, self.output_name, self.source)

    @property
    def dtype(self) -> torch.dtype:
        """dtype of the first tensor constant found (float32 if none)."""
        for n in self.nodes:
            for v in getattr(n.op, "__dataclass_fields__", {}):
                t = getattr(n.op, v)
                if torch.is_tensor(t) and t.is_floating_point():
                    return t.dtype
        return torch.float32

    @property
    def device(self) -> torch.device:
        """device of the first tensor constant found (cpu if none)."""
        for n in self.nodes:
            for v in getattr(n.op, "__dataclass_fields__", {}):
                t = getattr(n.op, v)
                if torch.is_tensor(t):
                    return t.device
        return torch.device("cpu")
