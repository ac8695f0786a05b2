"""Elementwise affine ops: Add/Sub/Mul/Div by constants, eval-mode BatchNormalization, and
Add/Sub of two perturbed tensors (residual connections).

Rules from verify.md §2.1/§2.2 (IBP: centre/radius; CROWN: ``A_x = A_y ⊙ scale``, bias
``Σ A_y ⊙ shift``; a sum node passes its A to both operands).

Shape legend: S spec rows, B batch, * node shape without batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from gpufield.verify.ops._util import dot_tail, interval_affine_diag, sum_to
from gpufield.verify.protocols import BackwardInputs


@dataclass(frozen=True, slots=True)
class Affine:
    """``y = x * scale + shift`` with constant ``scale``/``shift`` broadcast against ``[B, *in]``.

    Covers ONNX Add/Sub/Mul/Div with one constant operand and BatchNormalization (eval mode:
    ``scale = γ/√(σ²+ε)``, ``shift = β − scale·μ``, shaped ``[C, 1, 1]``).

    Attributes:
        scale: tensor broadcastable to the output (no batch dim) or a Python float.
        shift: tensor broadcastable to the output or a Python float.
        in_shape: node shape of the input (no batch).
        out_shape: node shape of the output (no batch; may be larger by broadcasting).
    """

    scale: torch.Tensor | float
    shift: torch.Tensor | float
    in_shape: tuple[int, ...]
    out_shape: tuple[int, ...]
    n_inputs: int = 1
    nonlinear: bool = False

    def forward(self, x):
        """``x [B, *in] -> [B, *out]``."""
        return x * self.scale + self.shift

    def ibp(self, b):
        """Exact interval image (scale may be negative)."""
        return interval_affine_diag(b[0], b[1], self.scale, self.shift)

    def _bias(self, A):
        if not torch.is_tensor(self.shift) and self.shift == 0.0:
            return 0.0
        sh = torch.as_tensor(self.shift, dtype=A.dtype, device=A.device)
        return dot_tail(A, torch.broadcast_to(sh, self.out_shape))

    def backward(self, lA, uA, ctx: BackwardInputs):
        """``A_x = sum_to(A_y ⊙ scale)``; bias ``Σ A_y ⊙ shift``."""
        def push(A):
            return None if A is None else sum_to(A * self.scale, self.in_shape)

        lb = 0.0 if lA is None else self._bias(lA)
        ub = 0.0 if uA is None else self._bias(uA)
        return [(push(lA), push(uA))], lb, ub

    def linear_forward(self, Lw, Lb, Uw, Ub):
        """Forward-mode linear bounds: ``scale⁺L + scale⁻U + shift ≤ y ≤ scale⁺U + scale⁻L + shift``
        (coefficients ``[B, *, N]``); only without broadcasting (``in_shape == out_shape``), else
        NotImplementedError."""
        if tuple(self.in_shape) != tuple(self.out_shape):
            raise NotImplementedError("forward-mode bounds of a broadcasting Affine")
        sc = torch.as_tensor(self.scale, dtype=Lb.dtype, device=Lb.device)
        sp, sn = sc.clamp(min=0), sc.clamp(max=0)
        return (sp[..., None] * Lw + sn[..., None] * Uw, sp * Lb + sn * Ub + self.shift,
                sp[..., None] * Uw + sn[..., None] * Lw, sp * Ub + sn * Lb + self.shift)

    def cast(self, dtype, device):
        """Copy with constants in ``dtype`` on ``device``."""
        def c(v):
            return v.to(device=device, dtype=dtype) if torch.is_tensor(v) else v

        return Affine(c(self.scale), c(self.shift), self.in_shape, self.out_shape)


@dataclass(frozen=True, slots=True)
class AddSub:
    """``y = x0 + sign·x1`` for two perturbed tensors (ONNX Add, or Sub with ``sign = -1``).

    Attributes:
        sign: +1.0 for Add, -1.0 for Sub.
        in_shapes: node shapes of both inputs (no batch).
    """

    sign: float
    in_shapes: tuple[tuple[int, ...], tuple[int, ...]]
    n_inputs: int = 2
    nonlinear: bool = False

    def forward(self, x0, x1):
        """Broadcasting sum/difference."""
        return x0 + self.sign * x1

    def ibp(self, b0, b1):
        """``[l0 + l1, u0 + u1]`` (Add) or ``[l0 − u1, u0 − l1]`` (Sub)."""
        if self.sign > 0:
            return b0[0] + b1[0], b0[1] + b1[1]
        return b0[0] - b1[1], b0[1] - b1[0]

    def backward(self, lA, uA, ctx: BackwardInputs):
        """Both operands receive the output's A (negated for the subtrahend)."""
        def push(A, i):
            if A is None:
                return None
            return sum_to(A if i == 0 else self.sign * A, self.in_shapes[i])

        return [(push(lA, 0), push(uA, 0)), (push(lA, 1), push(uA, 1))], 0.0, 0.0

    def cast(self, dtype, device):
        """Nothing to convert: the op has no constants."""
        return self
