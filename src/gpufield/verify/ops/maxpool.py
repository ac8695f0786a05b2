"""ONNX MaxPool (1-D/2-D, explicit or SAME padding, dilations; ``ceil_mode=0``) with CROWN bounds.

For one output ``y = max_k x_k`` over a window with input bounds ``l_k <= x_k <= u_k``:

* IBP: ``[max_k l_k, max_k u_k]`` (max is monotone in every argument).
* lower line: ``y >= x_j`` with ``j = argmax_k l_k`` (true for any window member).
* upper line: with ``i = argmax_k u_k`` and ``c = max(0, max_{k != i} u_k - l_i)``,
  ``y <= x_i + c``: if ``x_i`` is the maximum, ``c >= 0``; otherwise the maximum ``x_k <= u_k
  <= l_i + c <= x_i + c``. When ``i`` dominates (``l_i >= u_k`` for all other ``k``) ``c = 0``
  and both lines are ``y = x_i`` (exact). Otherwise the constant ``y <= u_i`` is used instead
  where it is lower at the centre of the box (``(l_i + u_i)/2 + c > u_i``).

These are the CROWN-style MaxPool relaxations of auto_LiRPA's ``BoundMaxPool`` (Xu et al. 2020,
arXiv:2002.12920) and DeepPoly (Singh et al., POPL 2019) in form; the soundness argument above
is ours. Padding reads ``-inf`` (ONNX semantics) and is never selected. No optimisable slopes
and no branching (``relu_relaxation = False``).

Shape legend: S spec rows, B batch, O output positions (flat), K window slots, N input size.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from gpufield.verify.ops._pool import gather, pool_geometry, scatter, window_table
from gpufield.verify.ops._util import dot_tail
from gpufield.verify.protocols import BackwardInputs


@dataclass(frozen=True, slots=True)
class MaxPool:
    """``y[c, o] = max`` of the input over window ``o`` (an index table, see :mod:`._pool`).

    Attributes:
        idx: ``[O, K]`` int64 flat input indices, ``N`` for padding.
        in_shape: node shape of the input (no batch).
        out_shape: node shape of the output (no batch).
    """

    idx: torch.Tensor
    in_shape: tuple[int, ...]
    out_shape: tuple[int, ...]
    n_inputs: int = 1
    nonlinear: bool = True
    relu_relaxation: bool = False

    @classmethod
    def from_onnx(cls, b, node, attrs, ins):
        """Build from an ONNX MaxPool node.

        Raises:
            ModelFormatError: unsupported geometry (see :func:`._pool.pool_geometry`), or the
                Indices output is used.
        """
        if len(node.output) > 1 and node.output[1] and b.uses.get(node.output[1], 0):
            raise b.err("the MaxPool Indices output is not supported", node)
        shape = b.shapes[ins[0]]
        idx, out_shape = window_table(shape, *pool_geometry(b, node, attrs, shape))
        return cls(idx, tuple(shape), out_shape), [ins[0]]

    @property
    def _n(self) -> int:
        return int(torch.Size(self.in_shape).numel())

    def forward(self, x):
        """``x [B, *in] -> [B, *out]``."""
        return gather(x, self.idx, float("-inf")).amax(-1).reshape(x.shape[0], *self.out_shape)

    def ibp(self, b):
        """Max of the lower and of the upper bounds."""
        return self.forward(b[0]), self.forward(b[1])

    def lines(self, low, up):
        """The relaxation: ``x_j <= y <= s·x_i + c`` per output.

        Returns:
            ``(j, i, s, c)``: flat input indices ``[B, O]`` of the lower and upper lines, the
            upper slope ``s`` in {0, 1} and offset ``c`` ``[B, O]``.
        """
        lg, ug = gather(low, self.idx, float("-inf")), gather(up, self.idx, float("-inf"))
        B = low.shape[0]
        idx = self.idx.to(low.device).unsqueeze(0).expand(B, *self.idx.shape)
        j = idx.gather(2, lg.argmax(-1, keepdim=True)).squeeze(-1)
        ui, ki = ug.max(-1, keepdim=True)
        i = idx.gather(2, ki).squeeze(-1)
        li = lg.gather(2, ki).squeeze(-1)
        ui = ui.squeeze(-1)
        others = ug.scatter(2, ki, float("-inf")).amax(-1)  # max_{k != i} u_k (-inf: one member)
        eps = torch.finfo(low.dtype).eps
        gap = (others - li).clamp(min=0)
        gap = torch.where(gap > 0, gap + 4 * eps * (others.abs() + li.abs()), gap)
        linear = (gap == 0) | ((li + ui) / 2 + gap <= ui)
        s = linear.to(low.dtype)
        c = torch.where(linear, gap, ui)
        return j, i, s, c

    def backward(self, lA, uA, ctx: BackwardInputs):
        """Lower pass: ``A⁺`` to ``x_j``, ``A⁻ s`` to ``x_i`` and bias ``A⁻ c``; upper pass the reverse."""
        j, i, s, c = self.lines(*ctx.in_bounds[0])
        n = self._n
        out = []
        lb = ub = 0.0
        for A, lower in ((lA, True), (uA, False)):
            if A is None:
                out.append(None)
                continue
            A = A.flatten(2)
            pos, neg = A.clamp(min=0), A.clamp(max=0)
            to_low, to_up = (pos, neg) if lower else (neg, pos)
            Ax = scatter(to_low, j, n) + scatter(to_up * s, i, n)
            out.append(Ax.reshape(*A.shape[:2], *self.in_shape))
            bias = dot_tail(to_up, c)
            if lower:
                lb = bias
            else:
                ub = bias
        return [(out[0], out[1])], lb, ub

    def cast(self, dtype, device):
        """The index table on ``device``."""
        return MaxPool(self.idx.to(device), self.in_shape, self.out_shape)
