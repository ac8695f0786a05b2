"""IBP / CROWN / α-CROWN on tiny random ReLU nets against the exact optimum (scipy MILP, float64),
sampling-based soundness on the Conv/BN/residual and every-op nets, and spec chunking."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gpufield.verify import AlphaConfig, alpha_crown, backward, crown_intermediate, ibp, load_onnx
from gpufield.verify.io.vnnlib import Case, Clause
from gpufield.verify.spec import Spec

from . import nets


def _setup(tmp_path, seed, sizes=(3, 8, 8, 2)):
    rng = np.random.default_rng(seed)
    model, layers = nets.mlp(rng, list(sizes))
    g = load_onnx(nets.save(model, tmp_path / f"m{seed}.onnx")).cast(torch.float64)
    x0 = rng.uniform(-1, 1, sizes[0])
    lo, hi = x0 - 0.6, x0 + 0.6
    c = rng.normal(0, 1, sizes[-1])
    return g, layers, lo, hi, c


def _bounds(g, lo, hi, c, iterations=60):
    lo_t, hi_t = torch.tensor(lo).reshape(1, -1), torch.tensor(hi).reshape(1, -1)
    case = Case(lo, hi, (Clause(c.reshape(1, -1), np.zeros(1)),))
    spec = Spec.from_case(case, len(c))
    ib = ibp(g, lo_t, hi_t)
    low, u = ib[g.output_name]
    ibp_lb = float((np.clip(c, 0, None) @ low[0].numpy()) + (np.clip(c, None, 0) @ u[0].numpy()))
    C = spec.C_SB(g.output_shape, 1, lo_t)
    inter_plain = crown_intermediate(g, lo_t, hi_t)
    crown_lb = float(backward(g, g.output_name, C, lo_t, hi_t, inter_plain, upper=False)[0])
    inter = crown_intermediate(g, lo_t, hi_t, ref=ib)
    crown_ref_lb = float(backward(g, g.output_name, C, lo_t, hi_t, inter, upper=False)[0])
    res = alpha_crown(g, spec, lo_t, hi_t, {**ib, **inter}, inter, AlphaConfig(iterations=iterations))
    return ibp_lb, crown_lb, crown_ref_lb, float(res.best_KB.min())


@pytest.mark.parametrize("seed", range(6))
def test_bounds_below_exact_minimum(tmp_path, seed):
    g, layers, lo, hi, c = _setup(tmp_path, seed)
    exact = nets.milp_min(layers, lo, hi, c)
    ibp_lb, crown_lb, crown_ref_lb, alpha_lb = _bounds(g, lo, hi, c)
    tol = 1e-7
    assert ibp_lb <= exact + tol and crown_lb <= exact + tol and alpha_lb <= exact + tol
    assert crown_ref_lb >= crown_lb - 1e-9          # intersecting with IBP never loosens
    assert alpha_lb >= crown_ref_lb - 1e-9           # α-CROWN keeps the best (iteration 0 = CROWN)
    # points in the box attain values ≥ every lower bound (and the MILP value is attained)
    X = np.random.default_rng(seed).uniform(lo, hi, (256, len(lo)))
    with torch.no_grad():
        vals = g.forward(torch.tensor(X)).numpy() @ c
    assert vals.min() >= exact - 1e-7


def test_alpha_strictly_improves_on_some_net(tmp_path):
    """α-CROWN should actually optimise: on these seeds it must beat CROWN somewhere by > 1e-3."""
    gains = []
    for seed in range(6):
        g, layers, lo, hi, c = _setup(tmp_path, 100 + seed, sizes=(4, 10, 10, 3))
        _, _, crown_ref_lb, alpha_lb = _bounds(g, lo, hi, c)
        gains.append(alpha_lb - crown_ref_lb)
    assert max(gains) > 1e-3, gains


@pytest.mark.parametrize("which", ["conv_bn", "every_op"])
def test_crown_and_alpha_sound_on_structured_nets(tmp_path, which):
    rng = np.random.default_rng(7)
    model = nets.conv_bn_net(rng) if which == "conv_bn" else nets.every_op_mlp(rng)
    g = load_onnx(nets.save(model, tmp_path / "m.onnx")).cast(torch.float64)
    n = int(np.prod(g.input_shape))
    x0 = rng.uniform(-1, 1, n)
    lo, hi = x0 - 0.3, x0 + 0.3
    lo_t, hi_t = (torch.tensor(v).reshape(1, *g.input_shape) for v in (lo, hi))
    inter = crown_intermediate(g, lo_t, hi_t)
    X = torch.tensor(rng.uniform(lo, hi, (512, n))).reshape(512, *g.input_shape)
    for name, (low, u) in inter.items():  # every intermediate bound contains the sampled values
        with torch.no_grad():
            v = g.forward(X, upto=name) if name != g.input_name else X
        assert (v >= low - 1e-9).all() and (v <= u + 1e-9).all(), name
    C_rows = rng.normal(0, 1, (3, 4))
    case = Case(lo, hi, tuple(Clause(r.reshape(1, -1), np.zeros(1)) for r in C_rows))
    spec = Spec.from_case(case, 4)
    ib = ibp(g, lo_t, hi_t)
    res = alpha_crown(g, spec, lo_t, hi_t, {**ib, **inter}, inter, AlphaConfig(iterations=30))
    with torch.no_grad():
        Y = g.forward(X).numpy()
    assert (Y @ C_rows.T >= res.best_KB[:, 0].numpy() - 1e-9).all()


def test_spec_chunking_gives_same_bounds(tmp_path):
    g, _, lo, hi, _ = _setup(tmp_path, 11, sizes=(3, 16, 16, 2))
    lo_t, hi_t = torch.tensor(lo).reshape(1, -1), torch.tensor(hi).reshape(1, -1)
    full = crown_intermediate(g, lo_t, hi_t)
    tiny = crown_intermediate(g, lo_t, hi_t, memory_budget_bytes=1)  # one row per chunk
    for k in full:
        torch.testing.assert_close(full[k][0], tiny[k][0], rtol=0, atol=1e-12)
        torch.testing.assert_close(full[k][1], tiny[k][1], rtol=0, atol=1e-12)


def test_multi_row_clause_combination(tmp_path):
    """A clause {c1·y ≤ 0, c2·y ≤ 0}: the optimised combination is sound and ≥ each row alone."""
    g, layers, lo, hi, _ = _setup(tmp_path, 21, sizes=(3, 8, 2))
    c1, c2 = np.array([1.0, -1.0]), np.array([-0.5, 1.5])
    lo_t, hi_t = torch.tensor(lo).reshape(1, -1), torch.tensor(hi).reshape(1, -1)
    spec = Spec.from_case(Case(lo, hi, (Clause(np.stack([c1, c2]), np.zeros(2)),)), 2)
    ib = ibp(g, lo_t, hi_t)
    inter = crown_intermediate(g, lo_t, hi_t, ref=ib)
    res = alpha_crown(g, spec, lo_t, hi_t, {**ib, **inter}, inter, AlphaConfig(iterations=40))
    # infeasibility certificate must not exceed the exact min over the box of max(c1·y, c2·y)
    X = np.random.default_rng(0).uniform(lo, hi, (4096, 3))
    with torch.no_grad():
        Y = g.forward(torch.tensor(X)).numpy()
    assert float(res.best_KB[0, 0]) <= np.maximum(Y @ c1, Y @ c2).min() + 1e-9
