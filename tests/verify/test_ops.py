"""Per-op soundness in float64: IBP contains the exact forward and the CROWN linear bounds hold
at box corners and random points (random A-matrices, random α for ReLU)."""

from __future__ import annotations

import pytest
import torch

from gpufield.verify.ops import AddSub, Affine, Conv, Linear, Relu, Reshape, Transpose
from gpufield.verify.protocols import BackwardInputs

G = torch.Generator().manual_seed(0)


def _r(*s):
    return torch.randn(*s, generator=G, dtype=torch.float64)


def _cases():
    yield "linear", Linear(_r(4, 6), _r(4)), [(6,)]
    yield "linear_3d", Linear(_r(3, 5), None), [(2, 5)]
    yield "conv", Conv(_r(3, 2, 3, 3), _r(3), (2, 2), (1, 1), (1, 1), 1, (5, 5)), [(2, 5, 5)]
    yield "conv_dil_groups", Conv(_r(4, 1, 2, 2), _r(4), (1, 1), (0, 0), (2, 2), 2, (4, 4)), [(2, 4, 4)]
    yield "affine_bcast", Affine(_r(3, 1), _r(1, 4), (3, 4), (3, 4)), [(3, 4)]
    yield "affine_expand", Affine(_r(5), 0.5, (1,), (5,)), [(1,)]
    yield "affine_neg_scalar", Affine(-2.5, _r(3), (3,), (3,)), [(3,)]
    yield "add", AddSub(1.0, ((2, 3), (2, 3))), [(2, 3), (2, 3)]
    yield "sub_bcast", AddSub(-1.0, ((2, 3), (1, 3))), [(2, 3), (1, 3)]
    yield "relu", Relu(), [(7,)]
    yield "reshape", Reshape((2, 3), (6,)), [(2, 3)]
    yield "transpose", Transpose((2, 0, 1)), [(2, 3, 4)]


CASES = list(_cases())


def _boxes(in_shapes, B=2):
    boxes = []
    for s in in_shapes:
        c, r = _r(B, *s), _r(B, *s).abs()
        boxes.append((c - r, c + r))
    return boxes


def _samples(boxes, n=64):
    """Random corners and random interior points of every input box: list of input tuples."""
    pts = []
    for k in range(n):
        xs = []
        for lo, hi in boxes:
            t = torch.rand(lo.shape, generator=G, dtype=torch.float64)
            if k % 2 == 0:
                t = (t > 0.5).to(torch.float64)
            xs.append(lo + (hi - lo) * t)
        pts.append(xs)
    return pts


@pytest.mark.parametrize("name,op,in_shapes", CASES, ids=[c[0] for c in CASES])
def test_ibp_contains_forward(name, op, in_shapes):
    boxes = _boxes(in_shapes)
    lo, hi = op.ibp(*boxes)
    for xs in _samples(boxes):
        y = op.forward(*xs)
        assert (y >= lo - 1e-12).all() and (y <= hi + 1e-12).all()


@pytest.mark.parametrize("name,op,in_shapes", CASES, ids=[c[0] for c in CASES])
def test_crown_step_is_sound(name, op, in_shapes):
    B, S = 2, 5
    boxes = _boxes(in_shapes, B)
    out_shape = op.forward(*(b[0] for b in boxes)).shape[1:]
    lA, uA = _r(S, B, *out_shape), _r(S, B, *out_shape)
    alpha = torch.rand(S, B, *out_shape, generator=G, dtype=torch.float64) if op.nonlinear else None
    ctx = BackwardInputs(tuple(boxes) if op.nonlinear else (None,) * op.n_inputs, alpha, alpha)
    pushed, lbias, ubias = op.backward(lA, uA, ctx)
    for xs in _samples(boxes):
        y = op.forward(*xs)
        lhs_l = (lA * y).flatten(2).sum(-1)
        lhs_u = (uA * y).flatten(2).sum(-1)
        rhs_l = sum((pl * x).flatten(2).sum(-1) for (pl, _), x in zip(pushed, xs, strict=True)) + lbias
        rhs_u = sum((pu * x).flatten(2).sum(-1) for (_, pu), x in zip(pushed, xs, strict=True)) + ubias
        assert (lhs_l >= rhs_l - 1e-9).all(), (lhs_l - rhs_l).min()
        assert (lhs_u <= rhs_u + 1e-9).all(), (rhs_u - lhs_u).min()


@pytest.mark.parametrize("name,op,in_shapes", [c for c in CASES if not c[1].nonlinear],
                         ids=[c[0] for c in CASES if not c[1].nonlinear])
def test_linear_ops_backward_is_exact(name, op, in_shapes):
    """For affine ops the CROWN step is an identity: lA·f(x) == Σ lA_i·x_i + bias (adjoint test)."""
    boxes = _boxes(in_shapes)
    out_shape = op.forward(*(b[0] for b in boxes)).shape[1:]
    lA = _r(3, 2, *out_shape)
    pushed, lbias, _ = op.backward(lA, None, BackwardInputs((None,) * op.n_inputs))
    xs = _samples(boxes, 1)[0]
    y = op.forward(*xs)
    lhs = (lA * y).flatten(2).sum(-1)
    rhs = sum((p * x).flatten(2).sum(-1) for (p, _), x in zip(pushed, xs, strict=True)) + lbias
    torch.testing.assert_close(lhs, rhs, rtol=1e-10, atol=1e-10)


def test_relu_adaptive_and_upper_line_hand_values():
    from gpufield.verify.ops.activation import adaptive_lower_slope, relu_upper_line

    low = torch.tensor([[-1.0, -3.0, 1.0, -2.0, -1.0]])
    u = torch.tensor([[3.0, 1.0, 2.0, -0.5, 1.0]])
    s, t = relu_upper_line(low, u)
    torch.testing.assert_close(s, torch.tensor([[0.75, 0.25, 1.0, 0.0, 0.5]]))
    torch.testing.assert_close(t, torch.tensor([[0.75, 0.75, 0.0, 0.0, 0.5]]))
    # α = 1 iff u > −l (auto_LiRPA's upper slope > 0.5); u == −l gives 0
    torch.testing.assert_close(adaptive_lower_slope(low, u), torch.tensor([[1.0, 0.0, 1.0, 0.0, 0.0]]))


def test_ibp_three_input_all_ones_layer():
    """Hand value (style guide §19): x ∈ [1,2]×[1,3]×[3,6], y = 1·x gives exactly [5, 11]."""
    op = Linear(torch.ones(1, 3), None)
    lo, hi = op.ibp((torch.tensor([[1.0, 1.0, 3.0]]), torch.tensor([[2.0, 3.0, 6.0]])))
    assert lo.item() == 5.0 and hi.item() == 11.0
