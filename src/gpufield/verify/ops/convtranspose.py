"""ONNX ConvTranspose (2-D, constant kernel, explicit symmetric pads, ``output_padding``).

``y = conv_transpose2d(x, K) + b`` is linear. IBP in centre/radius form (``conv_transpose(c, K)
+ b``, ``conv_transpose(r, |K|)``, Gowal et al. 2018, arXiv:1810.12715); the CROWN step is the
adjoint, a plain convolution of A with the same kernel, stride, padding, dilation and groups
(the mirror of Conv's rule in verify.md §2.2), bias ``Σ_{c,h,w} A[c,h,w]·b[c]``.

Shape legend: S spec rows, B batch, C channels, H/W spatial sizes.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from gpufield.verify.ops._util import dot_tail
from gpufield.verify.protocols import BackwardInputs


@dataclass(frozen=True, slots=True)
class ConvTranspose:
    """``y = conv_transpose2d(x, K, b)``.

    Attributes:
        K: kernel ``[C_in, C_out/groups, kH, kW]`` (ONNX layout).
        b: bias ``[C_out]`` or None.
        stride, padding, output_padding, dilation: per spatial dim.
        groups: ONNX ``group``.
    """

    K: torch.Tensor
    b: torch.Tensor | None
    stride: tuple[int, int]
    padding: tuple[int, int]
    output_padding: tuple[int, int]
    dilation: tuple[int, int]
    groups: int
    n_inputs: int = 1
    nonlinear: bool = False

    @classmethod
    def from_onnx(cls, b, node, attrs, ins):
        """Build from an ONNX ConvTranspose node.

        Raises:
            ModelFormatError: not 2-D, an input-dependent kernel, ``auto_pad``/``output_shape``,
                or asymmetric pads.
        """
        ins = list(node.input)  # positional: an omitted optional input is ""
        shape = b.shapes[ins[0]]
        K = b.const.get(ins[1])
        if K is None or K.ndim != 4 or len(shape) != 3:
            raise b.err("only 2-D ConvTranspose with a constant kernel is supported", node)
        auto = attrs.get("auto_pad", b"NOTSET")
        if auto not in (b"NOTSET", "NOTSET") or "output_shape" in attrs:
            raise b.err("ConvTranspose auto_pad/output_shape are not supported (give pads)", node)
        pads = list(attrs.get("pads", [0, 0, 0, 0]))
        if pads[:2] != pads[2:]:
            raise b.err(f"only symmetric ConvTranspose pads are supported (pads={pads})", node)
        bias = b.t(b.const[ins[2]]) if len(ins) > 2 and ins[2] else None
        op = cls(b.t(K), bias, tuple(attrs.get("strides", [1, 1])), tuple(pads[:2]),
                 tuple(attrs.get("output_padding", [0, 0])), tuple(attrs.get("dilations", [1, 1])),
                 int(attrs.get("group", 1)))
        return op, [ins[0]]

    def forward(self, x):
        """``x [B, C_in, H, W] -> [B, C_out, H', W']``."""
        return F.conv_transpose2d(x, self.K, self.b, self.stride, self.padding, self.output_padding,
                                  self.groups, self.dilation)

    def ibp(self, bounds):
        """Centre/radius IBP."""
        lo, hi = bounds
        c, r = (lo + hi) / 2, (hi - lo) / 2
        r2 = F.conv_transpose2d(r, self.K.abs(), None, self.stride, self.padding, self.output_padding,
                                self.groups, self.dilation)
        c2 = self.forward(c)
        return c2 - r2, c2 + r2

    def _back(self, A):
        S, B = A.shape[:2]
        x = F.conv2d(A.reshape(S * B, *A.shape[2:]), self.K, None, self.stride, self.padding,
                     self.dilation, self.groups)
        return x.reshape(S, B, *x.shape[1:])

    def backward(self, lA, uA, ctx: BackwardInputs):
        """``A_x = conv2d(A_y, K)`` (the adjoint); bias ``Σ A_y·b``."""
        out = [(None if lA is None else self._back(lA), None if uA is None else self._back(uA))]
        if self.b is None:
            return out, 0.0, 0.0
        bb = self.b.view(-1, 1, 1)
        return out, (0.0 if lA is None else dot_tail(lA, bb)), (0.0 if uA is None else dot_tail(uA, bb))

    def cast(self, dtype, device):
        """Copy with constants in ``dtype`` on ``device``."""
        bias = None if self.b is None else self.b.to(device=device, dtype=dtype)
        return ConvTranspose(self.K.to(device=device, dtype=dtype), bias, self.stride, self.padding,
                             self.output_padding, self.dilation, self.groups)
