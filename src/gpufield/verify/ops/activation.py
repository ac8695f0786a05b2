"""ReLU and its linear relaxation (the only non-linear op of v1).

For pre-activation bounds ``l ≤ z ≤ u``: inactive (``u ≤ 0``) slope 0, active (``l ≥ 0``)
slope 1, unstable: upper line ``s_u (z − l)`` with ``s_u = u/(u−l)``, lower line ``α z`` with
``α ∈ [0, 1]``. CROWN's adaptive choice is ``α = 1`` iff ``u > −l`` (Zhang et al. 2018,
arXiv:1811.00866; auto_LiRPA ``_relu_lower_bound_init``); α-CROWN optimises α
(Xu et al. ICLR 2021, arXiv:2011.13824). Any α in [0, 1] gives a sound bound.

Shape legend: S spec rows, B batch, * node shape without batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from gpufield.verify.ops._util import dot_tail
from gpufield.verify.protocols import BackwardInputs


def relu_upper_line(low, u):
    """Upper relaxation ``a ≤ s·z + t`` of ReLU for ``l ≤ z ≤ u`` (``[B, *]`` each).

    Returns:
        ``(s, t)``: slope and intercept, ``[B, *]``; exact (0,0)/(1,0) for stable neurons.
    """
    unstable = (low < 0) & (u > 0)
    denom = torch.where(unstable, u - low, torch.ones_like(u))
    s = torch.where(unstable, u / denom, (low >= 0).to(u.dtype))
    t = torch.where(unstable, -low * s, torch.zeros_like(u))
    return s, t


def adaptive_lower_slope(low, u):
    """CROWN's adaptive lower slope: 1 if ``u > −l`` else 0 for unstable; exact for stable (``[B, *]``)."""
    unstable = (low < 0) & (u > 0)
    return torch.where(unstable, (u > -low).to(u.dtype), (low >= 0).to(u.dtype))


def lower_slope(low, u, alpha):
    """The lower slope in use: α for unstable neurons, the exact slope for stable ones.

    Args:
        l, u: bounds ``[B, *]``.
        alpha: ``[S, B, *]`` in [0, 1] or None (adaptive).

    Returns:
        slope broadcastable to ``[S, B, *]``.
    """
    if alpha is None:
        return adaptive_lower_slope(low, u)
    unstable = (low < 0) & (u > 0)
    return torch.where(unstable, alpha, (low >= 0).to(u.dtype))


@dataclass(frozen=True, slots=True)
class Relu:
    """``y = max(x, 0)`` elementwise."""

    n_inputs: int = 1
    nonlinear: bool = True

    def forward(self, x):
        """Exact ReLU."""
        return torch.relu(x)

    def ibp(self, b):
        """``[max(l, 0), max(u, 0)]``."""
        return torch.relu(b[0]), torch.relu(b[1])

    def backward(self, lA, uA, ctx: BackwardInputs):
        """Lower pass ``A⁺α + A⁻s_u`` with bias ``A⁻t_u``; upper pass ``A⁺s_u + A⁻α``, bias ``A⁺t_u``."""
        low, u = ctx.in_bounds[0]
        s, t = relu_upper_line(low, u)
        new_l = new_u = None
        lb = ub = 0.0
        if lA is not None:
            a = lower_slope(low, u, ctx.alpha_lower)
            pos, neg = lA.clamp(min=0), lA.clamp(max=0)
            new_l = pos * a + neg * s
            lb = dot_tail(neg, t)
        if uA is not None:
            a = lower_slope(low, u, ctx.alpha_upper)
            pos, neg = uA.clamp(min=0), uA.clamp(max=0)
            new_u = pos * s + neg * a
            ub = dot_tail(pos, t)
        return [(new_l, new_u)], lb, ub

    def linear_forward(self, Lw, Lb, Uw, Ub, bounds):
        """Forward-mode relaxation with input bounds ``bounds = (l, u)`` (``[B, *]``): ``a·L(x) ≤
        relu(z) ≤ s_u·U(x) + t_u`` with CROWN's adaptive lower slope ``a`` and the upper line
        ``(s_u, t_u)``; both slopes are ≥ 0, so the sides keep their roles."""
        low, u = bounds
        s, t = relu_upper_line(low, u)
        a = adaptive_lower_slope(low, u)
        return a[..., None] * Lw, a * Lb, s[..., None] * Uw, s * Ub + t

    def cast(self, dtype, device):
        """No constants."""
        return self
