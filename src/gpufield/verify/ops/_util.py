"""Small tensor helpers shared by the op families (internal).

Shape legend: S spec rows, B batch, * node shape without batch.
"""

from __future__ import annotations

import torch


def sum_to(A: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor:
    """Sum ``A_SB*`` over broadcast dimensions so its trailing dims equal ``shape`` (no batch).

    Args:
        A: ``[S, B, *out]`` coefficients of a broadcast output.
        shape: the input's node shape ``*in`` that was broadcast to ``*out``.

    Returns:
        ``[S, B, *in]``.
    """
    lead = A.dim() - 2 - len(shape)
    if lead > 0:
        A = A.sum(dim=tuple(range(2, 2 + lead)))
    dims = tuple(2 + i for i, n in enumerate(shape) if n == 1 and A.shape[2 + i] != 1)
    if dims:
        A = A.sum(dim=dims, keepdim=True)
    return A


def dot_tail(A: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """``Σ_* A[s, b, *] · v[b, *]`` with ``v`` broadcastable to ``A``'s trailing dims; returns ``[S, B]``."""
    return (A * v).flatten(2).sum(-1)


def interval_affine_diag(lo, hi, scale, shift):
    """IBP of ``x * scale + shift`` (elementwise, broadcast), exact for intervals."""
    c, r = (lo + hi) / 2, (hi - lo) / 2
    c2 = c * scale + shift
    r2 = r * scale.abs() if torch.is_tensor(scale) else r * abs(scale)
    return c2 - r2, c2 + r2
