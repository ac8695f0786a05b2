"""ONNX Sign (``-1``, ``0``, ``1``): monotone non-decreasing, so bounded by constants.

IBP ``[sign(l), sign(u)]`` is exact for a monotone function; the CROWN lines are the same
constants (slope 0): ``sign(l) <= sign(z) <= sign(u)`` on ``[l, u]``. No linear line with a
non-zero slope is valid across the jump at 0 without losing the constant bounds, so this is the
relaxation used (as for any step function); PGD gets no gradient through it.

Shape legend: S spec rows, B batch, * node shape without batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from gpufield.verify.ops._sshape import backward_lines
from gpufield.verify.protocols import BackwardInputs


@dataclass(frozen=True, slots=True)
class Sign:
    """``y = sign(x)`` elementwise."""

    n_inputs: int = 1
    nonlinear: bool = True
    relu_relaxation: bool = False

    @classmethod
    def from_onnx(cls, b, node, attrs, ins):
        """Build from an ONNX Sign node (no attributes)."""
        return cls(), [ins[0]]

    def forward(self, x):
        """Exact sign."""
        return torch.sign(x)

    def ibp(self, b):
        """``[sign(l), sign(u)]``."""
        return torch.sign(b[0]), torch.sign(b[1])

    def backward(self, lA, uA, ctx: BackwardInputs):
        """Constant lines ``sign(l)`` and ``sign(u)``."""
        low, up = ctx.in_bounds[0]
        zero = torch.zeros_like(low)
        return backward_lines(lA, uA, zero, torch.sign(low), zero, torch.sign(up))

    def cast(self, dtype, device):
        """No constants."""
        return self
