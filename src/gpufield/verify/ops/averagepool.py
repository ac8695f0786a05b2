"""ONNX AveragePool (1-D/2-D, explicit or SAME padding, dilations, ``count_include_pad``;
``ceil_mode=0``): a linear op with non-negative weights.

``y_o = Σ_k w_ok x_idx[o,k]`` with ``w_ok = 1/count_o`` on real inputs and 0 on padding, where
``count_o`` is the window size (``count_include_pad=1``) or its number of real inputs (ONNX
default 0). IBP: the same average of lower and of upper bounds (exact, ``w >= 0``); CROWN:
``A_x = Σ_o A_o w_o`` scattered to the window's inputs (verify.md §2.2, linear ops).

Shape legend: S spec rows, B batch, O output positions (flat), K window slots, N input size.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from gpufield.verify.ops._pool import gather, pool_geometry, window_table
from gpufield.verify.protocols import BackwardInputs


@dataclass(frozen=True, slots=True)
class AveragePool:
    """``y[o] = Σ_k w[o, k] · x[idx[o, k]]``.

    Attributes:
        idx: ``[O, K]`` int64 flat input indices, ``N`` for padding.
        w: ``[O, K]`` weights (0 on padding).
        in_shape: node shape of the input (no batch).
        out_shape: node shape of the output (no batch).
    """

    idx: torch.Tensor
    w: torch.Tensor
    in_shape: tuple[int, ...]
    out_shape: tuple[int, ...]
    n_inputs: int = 1
    nonlinear: bool = False

    @classmethod
    def from_onnx(cls, b, node, attrs, ins):
        """Build from an ONNX AveragePool node (see :func:`._pool.pool_geometry` for refusals)."""
        shape = b.shapes[ins[0]]
        idx, out_shape = window_table(shape, *pool_geometry(b, node, attrs, shape))
        real = idx < int(torch.Size(shape).numel())
        count = real.shape[1] if int(attrs.get("count_include_pad", 0)) else real.sum(1, keepdim=True)
        w = b.t(real.double().numpy() / (count if isinstance(count, int) else count.double().numpy()))
        return cls(idx, w, tuple(shape), out_shape), [ins[0]]

    def forward(self, x):
        """``x [B, *in] -> [B, *out]``."""
        return (gather(x, self.idx, 0.0) * self.w).sum(-1).reshape(x.shape[0], *self.out_shape)

    def ibp(self, b):
        """Average of the lower and of the upper bounds (weights are non-negative)."""
        return self.forward(b[0]), self.forward(b[1])

    def _back(self, A):
        S, B = A.shape[:2]
        n = int(torch.Size(self.in_shape).numel())
        vals = A.flatten(2).unsqueeze(-1) * self.w  # [S, B, O, K]
        out = A.new_zeros(S, B, n + 1)
        out.index_add_(2, self.idx.flatten().to(A.device), vals.flatten(2))
        return out[..., :n].reshape(S, B, *self.in_shape)

    def backward(self, lA, uA, ctx: BackwardInputs):
        """``A_x[idx[o, k]] += A_o · w[o, k]``, no bias."""
        return [(None if lA is None else self._back(lA), None if uA is None else self._back(uA))], 0.0, 0.0

    def cast(self, dtype, device):
        """Weights in ``dtype``, both tables on ``device``."""
        return AveragePool(self.idx.to(device), self.w.to(device=device, dtype=dtype), self.in_shape,
                           self.out_shape)
