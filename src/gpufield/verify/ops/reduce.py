"""ONNX ReduceSum and ReduceMean over non-batch axes: linear ops with non-negative weights.

IBP reduces both bounds (exact, the weights are 1 or ``1/n``); the CROWN step broadcasts A back
over the reduced axes, times the weight (verify.md §2.2, linear ops).

Shape legend: S spec rows, B batch, * node shape without batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpufield.verify.protocols import BackwardInputs


@dataclass(frozen=True, slots=True)
class Reduce:
    """``y = scale · Σ_axes x`` (``scale = 1`` for ReduceSum, ``1/n`` for ReduceMean).

    Attributes:
        axes: reduced node dims (ONNX axes minus one), sorted.
        keepdims: ONNX ``keepdims``.
        scale: the weight of every summand.
        in_shape: node shape of the input (no batch).
    """

    axes: tuple[int, ...]
    keepdims: bool
    scale: float
    in_shape: tuple[int, ...]
    n_inputs: int = 1
    nonlinear: bool = False

    @classmethod
    def from_onnx(cls, b, node, attrs, ins):
        """Build from ONNX ReduceSum/ReduceMean (axes as attribute or, opset 13+/18+, a constant input).

        Raises:
            ModelFormatError: input-dependent axes, or a reduction over the batch axis (also
                the default "all axes").
        """
        ins = list(node.input)  # positional: an omitted optional input is ""
        shape = tuple(b.shapes[ins[0]])
        rank = len(shape) + 1
        if len(ins) > 1 and ins[1]:
            if ins[1] not in b.const:
                raise b.err(f"{node.op_type} axes must be constant", node)
            axes = [int(a) for a in np.asarray(b.const[ins[1]]).reshape(-1)]
        else:
            axes = list(attrs.get("axes", []))
        if not axes:
            if int(attrs.get("noop_with_empty_axes", 0)):
                axes = []
            else:
                raise b.err(f"{node.op_type} over all axes would reduce the batch", node)
        axes = sorted({a % rank for a in axes})
        if 0 in axes:
            raise b.err(f"{node.op_type} over the batch axis is not supported", node)
        n = int(np.prod([shape[a - 1] for a in axes])) if axes else 1
        scale = 1.0 / n if node.op_type == "ReduceMean" else 1.0
        return cls(tuple(a - 1 for a in axes), bool(attrs.get("keepdims", 1)), scale, shape), [ins[0]]

    def forward(self, x):
        """Sum (times ``scale``) over the axes."""
        if not self.axes:
            return x
        return x.sum(dim=tuple(a + 1 for a in self.axes), keepdim=self.keepdims) * self.scale

    def ibp(self, b):
        """Reduce both bounds (non-negative weights)."""
        return self.forward(b[0]), self.forward(b[1])

    def _back(self, A):
        if not self.axes:
            return A
        if not self.keepdims:
            for a in self.axes:  # sorted: each unsqueeze lands at its original position
                A = A.unsqueeze(2 + a)
        return (A * self.scale).expand(*A.shape[:2], *self.in_shape)

    def backward(self, lA, uA, ctx: BackwardInputs):
        """A broadcast back over the reduced axes, times ``scale``; no bias."""
        return [(None if lA is None else self._back(lA), None if uA is None else self._back(uA))], 0.0, 0.0

    def cast(self, dtype, device):
        """No tensor constants."""
        return self
