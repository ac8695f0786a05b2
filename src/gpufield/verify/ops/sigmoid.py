"""ONNX Sigmoid ``y = 1 / (1 + exp(-x))`` with CROWN's S-shaped relaxation.

IBP: ``[σ(l), σ(u)]`` (σ is increasing). CROWN: tangent/chord lines in the convex, concave and
crossing cases of Zhang et al. 2018 (arXiv:1811.00866, Sec. 3.2); see
:mod:`gpufield.verify.ops._sshape` for the cases and why each line is sound. No optimisable
slopes (α-CROWN leaves it at the CROWN lines), no branching.

Shape legend: S spec rows, B batch, * node shape without batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from gpufield.verify.ops._sshape import alpha_init, backward_lines, relax
from gpufield.verify.protocols import BackwardInputs


def _dsigmoid(x):
    s = torch.sigmoid(x)
    return s * (1 - s)


@dataclass(frozen=True, slots=True)
class Sigmoid:
    """``y = σ(x)`` elementwise."""

    n_inputs: int = 1
    nonlinear: bool = True
    relu_relaxation: bool = False

    @classmethod
    def from_onnx(cls, b, node, attrs, ins):
        """Build from an ONNX Sigmoid node (no attributes)."""
        return cls(), [ins[0]]

    def forward(self, x):
        """Exact sigmoid."""
        return torch.sigmoid(x)

    def ibp(self, b):
        """``[σ(l), σ(u)]``."""
        return torch.sigmoid(b[0]), torch.sigmoid(b[1])

    def lines(self, low, up, alpha=None):
        """``(aL, bL, aU, bU)``: ``aL z + bL <= σ(z) <= aU z + bU`` for ``low <= z <= up``
        (``[B, *]``; ``[S, B, *]`` with tangent-point parameters ``alpha`` ``[S, B, 2, *]``, see
        :func:`gpufield.verify.ops._sshape.relax`)."""
        return relax(torch.sigmoid, _dsigmoid, low, up, alpha)

    def alpha_init(self, low, up):
        """α-CROWN's starting tangent-point parameters ``[B, 2, *]`` (CROWN's lines)."""
        return alpha_init(low, up)

    def backward(self, lA, uA, ctx: BackwardInputs):
        """Lower pass ``A⁺ a_L + A⁻ a_U`` with bias ``A⁺ b_L + A⁻ b_U``; upper pass the reverse
        (each pass with its own α when given)."""
        low, up = ctx.in_bounds[0]
        if ctx.alpha_lower is None and ctx.alpha_upper is None:
            return backward_lines(lA, uA, *self.lines(low, up))
        pushed_l, lb, _ = backward_lines(lA, None, *self.lines(low, up, ctx.alpha_lower))
        pushed_u, _, ub = backward_lines(None, uA, *self.lines(low, up, ctx.alpha_upper))
        return [(pushed_l[0][0], pushed_u[0][1])], lb, ub

    def cast(self, dtype, device):
        """No constants."""
        return self
