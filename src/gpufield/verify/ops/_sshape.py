"""Linear relaxation of S-shaped activations (Sigmoid, Tanh): shared by their op files (internal).

For ``f`` increasing, convex on ``(-inf, 0]`` and concave on ``[0, inf)`` and bounds
``l <= z <= u``, CROWN (Zhang et al., "Efficient Neural Network Robustness Certification with
General Activation Functions", NeurIPS 2018, arXiv:1811.00866, Sec. 3.2 and Table 1) bounds
``f`` by two lines ``a_L z + b_L <= f(z) <= a_U z + b_U``, in three cases:

* ``u <= 0`` (convex part): upper = the chord through ``(l, f(l))`` and ``(u, f(u))``; lower =
  the tangent at the midpoint.
* ``l >= 0`` (concave part): lower = the chord; upper = the tangent at the midpoint.
* ``l < 0 < u`` (crossing): lower = the chord when its slope ``k <= f'(l)``, else the tangent at
  ``d <= 0`` whose line passes through ``(u, f(u))``; upper = the chord when ``k <= f'(u)``, else
  the tangent at ``d >= 0`` through ``(l, f(l))`` (the same choices as auto_LiRPA's
  ``BoundTanh``/``BoundSigmoid``).

Why each line is sound (our derivation, checked by sampling in tests/verify/test_ops_v3.py):
a tangent on the convex part lies below ``f`` on all of ``(-inf, 0]``; on ``[0, u]``, ``f`` is
concave, so a line below ``f`` at ``0`` and ``u`` is below it in between. The tangent point is
found by bisection of ``g(d) = f(d) + f'(d)(u - d) - f(u)``, increasing on ``d < 0``
(``g' = f''(d)(u - d) > 0``), keeping the end where ``g <= 0``, i.e. where the line is still
below ``f(u)``; so the bisection's inexactness makes the line looser, never unsound. The upper
case is the mirror image. A width below ``1e-6`` (relative) uses the constants ``f(l)`` and
``f(u)`` (``f`` is increasing), and every intercept is moved outward by a few float epsilons to
cover rounding in the slope, intercept and the ``f`` evaluations.

Shape legend: S spec rows, B batch, * node shape without batch.
"""

from __future__ import annotations

import torch

from gpufield.verify.ops._util import dot_tail

_BISECT_STEPS = 40


def _bisect(g, lo, hi, keep_lo: bool, steps: int = _BISECT_STEPS):
    """Bisection on ``[lo, hi]`` for an increasing ``g`` with ``g(lo) <= 0 <= g(hi)``; returns the
    end of the final bracket on the requested side (``lo`` side: ``g <= 0`` there)."""
    for _ in range(steps):
        mid = (lo + hi) / 2
        neg = g(mid) <= 0
        lo = torch.where(neg, mid, lo)
        hi = torch.where(neg, hi, mid)
    return lo if keep_lo else hi


def _tangent(f, df, d):
    a = df(d)
    return a, f(d) - a * d


def relax(f, df, low, up, alpha=None):
    """Lower and upper lines of an S-shaped ``f`` for ``low <= z <= up`` (``[B, *]`` each).

    Args:
        f: the activation (torch function).
        df: its derivative.
        low, up: pre-activation bounds, ``low <= up``.
        alpha: optional tangent-point parameters ``[S, B, 2, *]`` in [0, 1] (α-CROWN; index 0
            for the lower line, 1 for the upper line); None gives CROWN's lines. Each α picks a
            tangent point inside the range where the tangent is a valid bound: convex part lower
            line ``d = l + α (u − l)``; concave part upper line the same; crossing lower line
            ``d = l + α (d_L − l)`` (``d <= d_L`` keeps the line below ``f(u)``), crossing upper
            line ``d = d_U + α (u − d_U)``. Chords (where valid) have no parameter.

    Returns:
        ``(aL, bL, aU, bU)`` with ``aL z + bL <= f(z) <= aU z + bU`` on the box: ``[B, *]``, or
        ``[S, B, *]`` with ``alpha``.
    """
    fl, fu = f(low), f(up)
    width = up - low
    tiny = width <= 1e-6 * (1 + torch.maximum(low.abs(), up.abs()))
    safe_w = torch.where(tiny, torch.ones_like(width), width)
    k = (fu - fl) / safe_w  # chord slope
    chord_b = fl - k * low
    zero = torch.zeros_like(low)
    # crossing: tangent points of the lines through (u, f(u)) (lower) and (l, f(l)) (upper)
    cross = (low < 0) & (up > 0)
    lo_l = torch.where(cross, low, zero)
    up_c = torch.where(cross, up, zero)
    d_low = _bisect(lambda d: f(d) + df(d) * (up_c - d) - f(up_c), lo_l, zero, keep_lo=True)
    d_up = _bisect(lambda d: f(d) + df(d) * (lo_l - d) - f(lo_l), zero, up_c, keep_lo=False)
    # the brackets hold (g(l) <= 0, h(u) >= 0) exactly where the chord is not valid, i.e. where
    # the tangent is used
    chord_low_ok = k <= df(low)  # crossing: the chord is below f
    chord_up_ok = k <= df(up)
    if alpha is None:  # CROWN: midpoint tangents on one-sided boxes, d_L / d_U when crossing
        m = (low + up) / 2
        pL = torch.where(cross, d_low, m)
        pU = torch.where(cross, d_up, m)
    else:
        aLp, aUp = alpha.select(2, 0), alpha.select(2, 1)
        pL = torch.where(cross, low + aLp * (d_low - low), low + aLp * width)
        pU = torch.where(cross, d_up + aUp * (up - d_up), low + aUp * width)
    tl_a, tl_b = _tangent(f, df, pL)
    tu_a, tu_b = _tangent(f, df, pU)
    use_chord_L = (low >= 0) | (cross & chord_low_ok)
    use_chord_U = (up <= 0) | (cross & chord_up_ok)
    aL = torch.where(use_chord_L, k, tl_a)
    bL = torch.where(use_chord_L, chord_b, tl_b)
    aU = torch.where(use_chord_U, k, tu_a)
    bU = torch.where(use_chord_U, chord_b, tu_b)
    aL = torch.where(tiny, zero, aL)
    aU = torch.where(tiny, zero, aU)
    bL = torch.where(tiny, fl, bL)
    bU = torch.where(tiny, fu, bU)
    eps = torch.finfo(low.dtype).eps
    mag = torch.maximum(low.abs(), up.abs())
    bL = bL - 8 * eps * (1 + aL.abs() * mag)
    bU = bU + 8 * eps * (1 + aU.abs() * mag)
    return aL, bL, aU, bU


def alpha_init(low, up):
    """The α that reproduces CROWN's lines (:func:`relax` without α): ``[B, 2, *]``, 0.5 (the
    midpoint) on one-sided boxes, 1 (lower) and 0 (upper) when crossing."""
    cross = (low < 0) & (up > 0)
    half = torch.full_like(low, 0.5)
    return torch.stack([torch.where(cross, torch.ones_like(low), half),
                        torch.where(cross, torch.zeros_like(low), half)], dim=1)


def backward_lines(lA, uA, aL, bL, aU, bU):
    """CROWN step through elementwise lines: the lower pass takes the lower line where the
    coefficient is positive and the upper line where it is negative; the upper pass the reverse.

    Args:
        lA, uA: ``[S, B, *]`` or None.
        aL, bL, aU, bU: ``[B, *]`` lines from :func:`relax`.

    Returns:
        ``([(lA_x, uA_x)], lbias_SB, ubias_SB)`` as :meth:`BoundOp.backward` returns.
    """
    new_l = new_u = None
    lb = ub = 0.0
    if lA is not None:
        pos, neg = lA.clamp(min=0), lA.clamp(max=0)
        new_l = pos * aL + neg * aU
        lb = dot_tail(pos, bL) + dot_tail(neg, bU)
    if uA is not None:
        pos, neg = uA.clamp(min=0), uA.clamp(max=0)
        new_u = pos * aU + neg * aL
        ub = dot_tail(pos, bU) + dot_tail(neg, bL)
    return [(new_l, new_u)], lb, ub


class SShapedOp:
    """The body of an S-shaped elementwise op (Sigmoid, Tanh); a subclass (a frozen dataclass with the
    op's fields) sets ``fn`` (the function) and ``dfn`` (its derivative), both ``Tensor -> Tensor``.

    IBP ``[f(l), f(u)]`` (``f`` increasing); CROWN lines from :func:`relax`; α-CROWN tangent points
    from :func:`alpha_init`.
    """

    __slots__ = ()

    @classmethod
    def from_onnx(cls, b, node, attrs, ins):
        """Build from the ONNX node (no attributes)."""
        return cls(), [ins[0]]

    def forward(self, x):
        """Exact ``f(x)``."""
        return self.fn(x)

    def ibp(self, b):
        """``[f(l), f(u)]``."""
        return self.fn(b[0]), self.fn(b[1])

    def lines(self, low, up, alpha=None):
        """``(aL, bL, aU, bU)``: ``aL z + bL <= f(z) <= aU z + bU`` for ``low <= z <= up``
        (``[B, *]``; ``[S, B, *]`` with tangent-point parameters ``alpha`` ``[S, B, 2, *]``, see
        :func:`relax`)."""
        return relax(self.fn, self.dfn, low, up, alpha)

    def alpha_init(self, low, up):
        """α-CROWN's starting tangent-point parameters ``[B, 2, *]`` (CROWN's lines)."""
        return alpha_init(low, up)

    def backward(self, lA, uA, ctx):
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
