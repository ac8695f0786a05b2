"""Affine ops with constant weights: Gemm/MatMul (:class:`Linear`) and 2-D convolution (:class:`Conv`).

IBP follows Gowal et al. 2018 (arXiv:1810.12715) in centre/radius form; the backward (CROWN)
rules follow Zhang et al. 2018 (arXiv:1811.00866): ``A_x = A_y W``, bias ``A_y b``.

Shape legend: S spec rows, B batch, I/O input/output features, * node shape without batch,
C channels, H/W spatial sizes.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from gpufield.verify.ops._util import dot_tail
from gpufield.verify.protocols import BackwardInputs


@dataclass(frozen=True, slots=True)
class Linear:
    """``y = x @ W_OI.T + b_O`` applied over the last dimension (ONNX Gemm, MatMul by a constant).

    Attributes:
        W_OI: weight ``[out, in]``.
        b_O: bias ``[out]`` or None.
    """

    W_OI: torch.Tensor
    b_O: torch.Tensor | None
    n_inputs: int = 1
    nonlinear: bool = False

    def forward(self, x):
        """``x [B, *, I] -> [B, *, O]``."""
        y = x @ self.W_OI.T
        return y if self.b_O is None else y + self.b_O

    def ibp(self, b):
        """Exact interval image of one affine layer (centre/radius)."""
        lo, hi = b
        c, r = (lo + hi) / 2, (hi - lo) / 2
        c2 = self.forward(c)
        r2 = r @ self.W_OI.abs().T
        return c2 - r2, c2 + r2

    def backward(self, lA, uA, ctx: BackwardInputs):
        """``A_SB*O @ W_OI -> A_SB*I``; bias ``Σ A·b``."""
        out = [(None if lA is None else lA @ self.W_OI, None if uA is None else uA @ self.W_OI)]
        lb = 0.0 if lA is None or self.b_O is None else dot_tail(lA, self.b_O)
        ub = 0.0 if uA is None or self.b_O is None else dot_tail(uA, self.b_O)
        return out, lb, ub

    def linear_forward(self, Lw, Lb, Uw, Ub):
        """Forward-mode linear bounds (:func:`~gpufield.verify.propagate.forward_linear`):
        ``L(x) ≤ z ≤ U(x)`` with ``Lw/Uw [B, *, I, N]``, ``Lb/Ub [B, *, I]`` gives
        ``W⁺L + W⁻U + b ≤ Wz + b ≤ W⁺U + W⁻L + b``."""
        Wp, Wn = self.W_OI.clamp(min=0), self.W_OI.clamp(max=0)

        def mv(M, X):  # M [O, I] over the I dim of X [B, *, I, N]
            return (X.transpose(-1, -2) @ M.T).transpose(-1, -2)

        b = 0.0 if self.b_O is None else self.b_O
        return (mv(Wp, Lw) + mv(Wn, Uw), Lb @ Wp.T + Ub @ Wn.T + b,
                mv(Wp, Uw) + mv(Wn, Lw), Ub @ Wp.T + Lb @ Wn.T + b)

    def cast(self, dtype, device):
        """Copy with constants in ``dtype`` on ``device``."""
        b = None if self.b_O is None else self.b_O.to(device=device, dtype=dtype)
        return Linear(self.W_OI.to(device=device, dtype=dtype), b)


@dataclass(frozen=True, slots=True)
class Conv:
    """2-D convolution ``y = conv2d(x, K) + b`` (ONNX Conv with 4-D weight).

    Attributes:
        K: kernel ``[C_out, C_in/groups, kH, kW]``.
        b: bias ``[C_out]`` or None.
        stride, padding, dilation: per spatial dim (symmetric padding only).
        groups: ONNX ``group``.
        in_hw: input spatial size ``(H_in, W_in)``, needed for the transposed convolution.
    """

    K: torch.Tensor
    b: torch.Tensor | None
    stride: tuple[int, int]
    padding: tuple[int, int]
    dilation: tuple[int, int]
    groups: int
    in_hw: tuple[int, int]
    n_inputs: int = 1
    nonlinear: bool = False

    def forward(self, x):
        """``x [B, C_in, H, W] -> [B, C_out, H', W']``."""
        return F.conv2d(x, self.K, self.b, self.stride, self.padding, self.dilation, self.groups)

    def ibp(self, b):
        """Centre/radius IBP: ``conv(c, K) + b`` and ``conv(r, |K|)``."""
        lo, hi = b
        c, r = (lo + hi) / 2, (hi - lo) / 2
        c2 = self.forward(c)
        r2 = F.conv2d(r, self.K.abs(), None, self.stride, self.padding, self.dilation, self.groups)
        return c2 - r2, c2 + r2

    def _back(self, A):
        S, B, Co, Ho, Wo = A.shape
        out_pad = []
        for i in range(2):
            k = self.K.shape[2 + i]
            full = (A.shape[3 + i] - 1) * self.stride[i] - 2 * self.padding[i]
            out_pad.append(self.in_hw[i] - (full + self.dilation[i] * (k - 1) + 1))
        x = F.conv_transpose2d(
            A.reshape(S * B, Co, Ho, Wo), self.K, None, self.stride, self.padding,
            tuple(out_pad), self.groups, self.dilation,
        )
        return x.reshape(S, B, *x.shape[1:])

    def backward(self, lA, uA, ctx: BackwardInputs):
        """``A_x = conv_transpose(A_y, K)``; bias ``Σ_{c,h,w} A_y[c,h,w]·b[c]``."""
        out = [(None if lA is None else self._back(lA), None if uA is None else self._back(uA))]
        if self.b is None:
            return out, 0.0, 0.0
        bb = self.b.view(-1, 1, 1)
        lb = 0.0 if lA is None else dot_tail(lA, bb)
        ub = 0.0 if uA is None else dot_tail(uA, bb)
        return out, lb, ub

    def cast(self, dtype, device):
        """Copy with constants in ``dtype`` on ``device``."""
        b = None if self.b is None else self.b.to(device=device, dtype=dtype)
        return Conv(self.K.to(device=device, dtype=dtype), b, self.stride, self.padding,
                    self.dilation, self.groups, self.in_hw)
