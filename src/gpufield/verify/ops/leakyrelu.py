"""ONNX LeakyRelu ``y = x`` for ``x >= 0``, ``alpha·x`` otherwise (``0 <= alpha <= 1``).

Convex and piecewise linear, so for ``l < 0 < u`` the upper line is the chord through
``(l, alpha·l)`` and ``(u, u)`` and any line ``y >= s·z`` with ``alpha <= s <= 1`` through the
origin is a lower line; CROWN's adaptive choice (``s = 1`` if ``u > -l`` else ``alpha``) is used,
as for ReLU (Zhang et al. 2018, arXiv:1811.00866). Stable neurons are exact. No optimisable
slope and no branching (``relu_relaxation = False``).

Shape legend: S spec rows, B batch, * node shape without batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from gpufield.verify.ops._sshape import backward_lines
from gpufield.verify.protocols import BackwardInputs


@dataclass(frozen=True, slots=True)
class LeakyRelu:
    """``y = max(x, alpha·x)`` for ``0 <= alpha <= 1``.

    Attributes:
        alpha: the negative-side slope.
    """

    alpha: float = 0.01
    n_inputs: int = 1
    nonlinear: bool = True
    relu_relaxation: bool = False

    @classmethod
    def from_onnx(cls, b, node, attrs, ins):
        """Build from an ONNX LeakyRelu node.

        Raises:
            ModelFormatError: ``alpha`` outside [0, 1] (the function is then not convex).
        """
        a = float(attrs.get("alpha", 0.01))
        if not 0.0 <= a <= 1.0:
            raise b.err(f"LeakyRelu alpha={a} outside [0, 1] is not supported", node)
        return cls(a), [ins[0]]

    def forward(self, x):
        """Exact LeakyRelu."""
        return torch.where(x >= 0, x, self.alpha * x)

    def ibp(self, b):
        """Monotone: the image of both bounds."""
        return self.forward(b[0]), self.forward(b[1])

    def lines(self, low, up):
        """``(aL, bL, aU, bU)`` ``[B, *]``: lower and upper lines on ``[low, up]``."""
        a = self.alpha
        cross = (low < 0) & (up > 0)
        stable = torch.where(low >= 0, torch.ones_like(low), torch.full_like(low, a))
        w = torch.where(cross, up - low, torch.ones_like(low))
        su = torch.where(cross, (up - a * low) / w, stable)
        bu = torch.where(cross, up - su * up, torch.zeros_like(low))
        # the chord's rounding: move the intercept out by a few epsilons of the values involved
        bu = bu + torch.where(cross, 8 * torch.finfo(low.dtype).eps * (up.abs() + low.abs()), torch.zeros_like(low))
        sl = torch.where(cross, torch.where(up > -low, torch.ones_like(low), torch.full_like(low, a)), stable)
        return sl, torch.zeros_like(low), su, bu

    def backward(self, lA, uA, ctx: BackwardInputs):
        """Lower pass ``A⁺ s_L + A⁻ s_U``, bias ``A⁻ b_U``; upper pass the reverse."""
        return backward_lines(lA, uA, *self.lines(*ctx.in_bounds[0]))

    def cast(self, dtype, device):
        """No tensor constants."""
        return self
