"""ONNX Clip ``y = min(max(x, a), b)`` (ReLU6, Hardtanh) with constant ``a`` and/or ``b``.

Piecewise linear and monotone, convex at ``a`` and concave at ``b``; for ``l <= z <= u``:

* wholly on one piece (``u <= a``, ``l >= b`` or ``a <= l``, ``u <= b``): exact (a constant or
  the identity).
* across ``a`` only: upper = the chord through ``(l, a)`` and ``(u, u)``; lower = ``y >= z`` or
  ``y >= a``, whichever is closer on the longer side (CROWN's adaptive ReLU choice, Zhang et al.
  2018, arXiv:1811.00866).
* across ``b`` only: the mirror image (lower = chord through ``(l, l)``, ``(u, b)``; upper = ``y <=
  z`` or ``y <= b``).
* across both: lower = ``y >= a`` or the line through ``(a, a)`` and ``(u, b)`` (below ``a`` left
  of ``a``, below ``z`` on ``[a, b]`` as its slope is < 1, below ``b`` up to ``u``); upper = ``y
  <= b`` or the line through ``(l, a)`` and ``(b, b)``; each sloped line where its span is the
  longer side.

Soundness of each line: our derivation above, checked by sampling in tests/verify/test_ops_v3.py.
Intercepts of sloped lines move outward by a few float epsilons for rounding. No optimisable
parameters and no branching (``relu_relaxation = False``).

Shape legend: S spec rows, B batch, * node shape without batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from gpufield.verify.ops._sshape import backward_lines
from gpufield.verify.protocols import BackwardInputs


@dataclass(frozen=True, slots=True)
class Clip:
    """``y = clamp(x, a, b)``; ``a`` or ``b`` None where the model leaves that side open.

    Attributes:
        a: lower clip value or None.
        b: upper clip value or None (``a <= b`` when both are given).
    """

    a: float | None
    b: float | None
    n_inputs: int = 1
    nonlinear: bool = True
    relu_relaxation: bool = False

    @classmethod
    def from_onnx(cls, b, node, attrs, ins):
        """Build from ONNX Clip (opset < 11: ``min``/``max`` attributes; 11+: optional constant
        inputs).

        Raises:
            ModelFormatError: input-dependent ``min``/``max``, NaN, or ``min > max``.
        """
        ins = list(node.input)  # positional: an omitted optional input is ""

        def value(i, key):
            if len(ins) > i and ins[i]:
                if ins[i] not in b.const:
                    raise b.err(f"Clip {key} must be constant", node)
                v = float(np.asarray(b.const[ins[i]]).reshape(-1)[0])
            elif key in attrs:
                v = float(attrs[key])
            else:
                return None
            if np.isnan(v):
                raise b.err(f"Clip {key} is NaN", node)
            return None if np.isinf(v) or abs(v) >= float(np.finfo(np.float32).max) else v

        lo, hi = value(1, "min"), value(2, "max")
        if lo is not None and hi is not None and lo > hi:
            raise b.err(f"Clip min {lo} > max {hi}", node)
        return cls(lo, hi), [ins[0]]

    def forward(self, x):
        """Exact clamp."""
        return torch.clamp(x, min=self.a, max=self.b)

    def ibp(self, b):
        """Monotone: the clamped bounds."""
        return self.forward(b[0]), self.forward(b[1])

    def lines(self, low, up):
        """``(aL, bL, aU, bU)`` ``[B, *]``: ``aL z + bL <= clamp(z) <= aU z + bU`` on the box."""
        one, zero = torch.ones_like(low), torch.zeros_like(low)
        a = low - 1 if self.a is None else torch.full_like(low, self.a)  # open side: never crossed
        b = up + 1 if self.b is None else torch.full_like(low, self.b)
        eps = 8 * torch.finfo(low.dtype).eps * (1 + low.abs() + up.abs() + a.abs() + b.abs())

        def safe(d):
            return torch.where(d > 0, d, one)

        below, above = up <= a, low >= b
        cross_a, cross_b = (low < a) & (up > a), (low < b) & (up > b)
        # defaults: exact on one piece
        aL = aU = torch.where(below | above, zero, one)
        bL = bU = torch.where(below, a, torch.where(above, b, zero))
        # across a only
        only_a = cross_a & ~cross_b
        s = (up - a) / safe(up - low)
        aU = torch.where(only_a, s, aU)
        bU = torch.where(only_a, a - s * low + eps, bU)
        ident = (up - a) > (a - low)
        aL = torch.where(only_a, ident.to(low.dtype), aL)
        bL = torch.where(only_a, torch.where(ident, zero, a), bL)
        # across b only
        only_b = cross_b & ~cross_a
        s = (b - low) / safe(up - low)
        aL = torch.where(only_b, s, aL)
        bL = torch.where(only_b, low - s * low - eps, bL)
        ident = (b - low) > (up - b)
        aU = torch.where(only_b, ident.to(low.dtype), aU)
        bU = torch.where(only_b, torch.where(ident, zero, b), bU)
        # across both
        both = cross_a & cross_b
        sl = (b - a) / safe(up - a)
        sloped = (up - a) >= (a - low)
        aL = torch.where(both, torch.where(sloped, sl, zero), aL)
        bL = torch.where(both, torch.where(sloped, a - sl * a - eps, a), bL)
        su = (b - a) / safe(b - low)
        sloped = (b - low) >= (up - b)
        aU = torch.where(both, torch.where(sloped, su, zero), aU)
        bU = torch.where(both, torch.where(sloped, b - su * b + eps, b), bU)
        return aL, bL, aU, bU

    def backward(self, lA, uA, ctx: BackwardInputs):
        """Lower pass ``A⁺ a_L + A⁻ a_U`` with bias ``A⁺ b_L + A⁻ b_U``; upper pass the reverse."""
        return backward_lines(lA, uA, *self.lines(*ctx.in_bounds[0]))

    def cast(self, dtype, device):
        """No tensor constants."""
        return self
