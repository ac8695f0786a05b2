"""ONNX Gather with constant indices along a non-batch axis (a selection, so linear).

IBP gathers both bounds; CROWN adds A into the gathered positions (``index_add``, the adjoint
of ``index_select``; repeated indices accumulate).

Shape legend: S spec rows, B batch, * node shape without batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from gpufield.verify.protocols import BackwardInputs


@dataclass(frozen=True, slots=True)
class Gather:
    """``y = take(x, indices, axis)`` with constant ``indices``.

    Attributes:
        axis: axis over the node shape (ONNX axis minus one).
        indices: flat non-negative int64 indices.
        index_shape: the ONNX indices' shape (``()`` for a scalar, which drops the axis).
        in_shape: node shape of the input (no batch).
    """

    axis: int
    indices: torch.Tensor
    index_shape: tuple[int, ...]
    in_shape: tuple[int, ...]
    n_inputs: int = 1
    nonlinear: bool = False

    @classmethod
    def from_onnx(cls, b, node, attrs, ins):
        """Build from an ONNX Gather node.

        Raises:
            ModelFormatError: input-dependent indices, the batch axis, or an index out of range.
        """
        shape = tuple(b.shapes[ins[0]])
        if ins[1] not in b.const or ins[0] in b.const:
            raise b.err("only Gather of the input with constant indices is supported", node)
        axis = int(attrs.get("axis", 0)) % (len(shape) + 1)
        if axis == 0:
            raise b.err("Gather along the batch axis is not supported", node)
        idx = np.asarray(b.const[ins[1]]).astype(np.int64)
        n = shape[axis - 1]
        if (idx < -n).any() or (idx >= n).any():
            raise b.err(f"Gather indices out of range for axis {axis} of length {n}", node)
        idx = np.where(idx < 0, idx + n, idx)
        return cls(axis - 1, torch.as_tensor(idx.reshape(-1)), tuple(idx.shape), shape), [ins[0]]

    def forward(self, x):
        """``index_select`` along the axis, reshaped to the indices' shape."""
        d = 1 + self.axis
        y = x.index_select(d, self.indices.to(x.device))
        return y.reshape(*y.shape[:d], *self.index_shape, *y.shape[d + 1:])

    def ibp(self, b):
        """Gather both bounds."""
        return self.forward(b[0]), self.forward(b[1])

    def _back(self, A):
        d = 2 + self.axis
        A = A.reshape(*A.shape[:d], len(self.indices), *A.shape[d + len(self.index_shape):])
        out = A.new_zeros(*A.shape[:2], *self.in_shape)
        return out.index_add(d, self.indices.to(A.device), A)

    def backward(self, lA, uA, ctx: BackwardInputs):
        """A added into the gathered positions; no bias."""
        return [(None if lA is None else self._back(lA), None if uA is None else self._back(uA))], 0.0, 0.0

    def cast(self, dtype, device):
        """Indices on ``device``."""
        return Gather(self.axis, self.indices.to(device), self.index_shape, self.in_shape)
