"""ONNX Concat of perturbed tensors and constants along a non-batch axis.

IBP concatenates the bounds (a constant is its own lower and upper bound); CROWN splits the
output's A along the axis: each perturbed part gets its slice, a constant part ``k`` adds the
bias ``Σ A_k · const_k`` (auto_LiRPA ``BoundConcat``; verify.md §2.2, linear ops).

Shape legend: S spec rows, B batch, * node shape without batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from gpufield.verify.ops._util import dot_tail
from gpufield.verify.protocols import BackwardInputs


@dataclass(frozen=True, slots=True)
class Concat:
    """``y = concat(parts, axis)``; each part is a perturbed input (its index) or a constant.

    Attributes:
        axis: the concatenation axis over the node shape (ONNX axis minus one, non-negative).
        parts: per ONNX input, an ``int`` (position among the op's perturbed inputs) or a
            constant tensor of node shape (no batch).
        sizes: each part's length along ``axis``.
        n_inputs: number of perturbed inputs.
    """

    axis: int
    parts: tuple
    sizes: tuple[int, ...]
    n_inputs: int = 1
    nonlinear: bool = False

    @classmethod
    def from_onnx(cls, b, node, attrs, ins):
        """Build from an ONNX Concat node.

        Raises:
            ModelFormatError: concatenation along the batch axis, or a constant part that varies
                along the batch.
        """
        shapes = [b.shapes[i] if i in b.shapes else None for i in ins]
        rank = 1 + len(next(s for s in shapes if s is not None))
        axis = int(attrs.get("axis", 0)) % rank
        if axis == 0:
            raise b.err("Concat along the batch axis is not supported", node)
        parts, sizes, edges = [], [], []
        for name, s in zip(ins, shapes, strict=True):
            if s is None:
                c = np.asarray(b.const[name])
                if c.ndim != rank or c.shape[0] != 1:
                    raise b.err(f"constant Concat operand of shape {c.shape} must be [1, ...]", node)
                parts.append(b.t(c[0]))
                sizes.append(c.shape[axis])
            else:
                parts.append(len(edges))
                edges.append(name)
                sizes.append(s[axis - 1])
        return cls(axis - 1, tuple(parts), tuple(sizes), len(edges)), edges

    def _cat(self, xs):
        B = xs[0].shape[0] if xs else 1
        return torch.cat([xs[p] if isinstance(p, int) else p.unsqueeze(0).expand(B, *p.shape)
                          for p in self.parts], dim=1 + self.axis)

    def forward(self, *xs):
        """Concatenate along ``axis`` (constants broadcast over the batch)."""
        return self._cat(xs)

    def ibp(self, *bounds):
        """Concatenated lower and upper bounds."""
        return self._cat([b[0] for b in bounds]), self._cat([b[1] for b in bounds])

    def backward(self, lA, uA, ctx: BackwardInputs):
        """Each perturbed part gets its slice of A; constants give bias ``Σ A_k · const``."""
        pushed = [[None, None] for _ in range(self.n_inputs)]
        bias = [0.0, 0.0]
        for side, A in enumerate((lA, uA)):
            if A is None:
                continue
            for p, chunk in zip(self.parts, torch.split(A, list(self.sizes), dim=2 + self.axis), strict=True):
                if isinstance(p, int):
                    pushed[p][side] = chunk if pushed[p][side] is None else pushed[p][side] + chunk
                else:
                    bias[side] = bias[side] + dot_tail(chunk, p)
        return [tuple(x) for x in pushed], bias[0], bias[1]

    def cast(self, dtype, device):
        """Constant parts in ``dtype`` on ``device``."""
        parts = tuple(p if isinstance(p, int) else p.to(device=device, dtype=dtype) for p in self.parts)
        return Concat(self.axis, parts, self.sizes, self.n_inputs)
