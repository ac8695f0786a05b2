"""Input-split branch and bound (engine v2) and forward-mode linear bounds, against independent
oracles: numpy float64 forward passes on samples and grids, onnxruntime, and the scipy/HiGHS MILP
of :func:`tests.verify.nets.milp_min`."""

from __future__ import annotations

import time

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

from gpufield.verify import OrtModel, load_onnx
from gpufield.verify.bab.input_split import InputSplitConfig, crown_boxes
from gpufield.verify.io.vnnlib import Case, Clause
from gpufield.verify.propagate import forward_linear, ibp
from gpufield.verify.refine import RefineConfig, refine
from gpufield.verify.spec import Spec

from . import nets


def _acas_like(rng, n_in, hidden, n_out, path):
    """ACAS Xu's layout: Sub (input normalisation) on ``[1, 1, n_in]``, Flatten, then MatMul + Add
    (+ Relu) layers. Returns (onnx path, float64 layers, float64 mean)."""
    sizes = [n_in, *hidden, n_out]
    N = helper.make_node
    mean = rng.normal(0, 0.3, (1, 1, n_in)).astype(np.float32)
    inits = {"mean": mean}
    nodes = [N("Sub", ["x", "mean"], ["n"]), N("Flatten", ["n"], ["f"], axis=1)]
    cur, layers = "f", []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:], strict=True)):
        W = rng.normal(0, 1 / np.sqrt(a), (a, b)).astype(np.float32)  # MatMul layout [in, out]
        c = rng.normal(0, 0.3, b).astype(np.float32)
        inits[f"W{i}"], inits[f"c{i}"] = W, c
        layers.append((W.T.astype(np.float64), c.astype(np.float64)))
        nodes += [N("MatMul", [cur, f"W{i}"], [f"m{i}"]), N("Add", [f"m{i}", f"c{i}"], [f"z{i}"])]
        cur = f"z{i}"
        if i < len(sizes) - 2:
            nodes.append(N("Relu", [cur], [f"a{i}"]))
            cur = f"a{i}"
    g = helper.make_graph(nodes, "acas_like", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, n_in])],
                          [helper.make_tensor_value_info(cur, TensorProto.FLOAT, [1, n_out])],
                          [numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return nets.save(m, path), layers, mean.astype(np.float64).reshape(-1)


def _pre_activations(layers, mean, x_PN):
    """numpy float64: the input of every ReLU and the output, for points ``[P, N]``."""
    h, pre = x_PN - mean, []
    for i, (W, c) in enumerate(layers):
        z = h @ W.T + c
        if i < len(layers) - 1:
            pre.append(z)
            h = np.maximum(z, 0)
    return pre, z


def _samples(rng, lo, hi, n):
    u = rng.uniform(size=(n, len(lo)))
    u[: 2 ** len(lo)] = np.array([[(k >> j) & 1 for j in range(len(lo))] for k in range(2 ** len(lo))])[:n]
    return lo + (hi - lo) * u


def test_forward_linear_bounds_contain_every_sampled_pre_activation(tmp_path):
    """Forward-mode bounds of each ReLU input hold at 2,000 sampled points (corners included) of
    each of 4 boxes of an ACAS-Xu-shaped net; a graph with an op lacking the rule gets None."""
    rng = np.random.default_rng(0)
    path, layers, mean = _acas_like(rng, 3, [8, 8, 8], 2, tmp_path / "a.onnx")
    g64 = load_onnx(path).cast(torch.float64)
    relu_inputs = [n.inputs[0] for n in g64.nodes if n.op.nonlinear]
    for _ in range(4):
        c = rng.uniform(-1, 1, 3)
        r = rng.uniform(0.05, 0.8, 3)
        lo, hi = c - r, c + r
        t_lo, t_hi = (torch.tensor(v).reshape(1, 1, 1, 3) for v in (lo, hi))
        fw = forward_linear(g64, t_lo[0], t_hi[0], ref=ibp(g64, t_lo[0], t_hi[0]))
        assert fw is not None and set(relu_inputs) <= set(fw)
        pre, _ = _pre_activations(layers, mean, _samples(rng, lo, hi, 2000))
        for name, z in zip(relu_inputs, pre, strict=True):
            lo_b, hi_b = (t.reshape(-1).numpy() for t in fw[name])
            assert (z >= lo_b - 1e-9).all() and (z <= hi_b + 1e-9).all(), name
    every = load_onnx(nets.save(nets.every_op_mlp(rng), tmp_path / "e.onnx")).cast(torch.float64)
    z = torch.zeros(1, *every.input_shape, dtype=torch.float64)
    assert forward_linear(every, z, z + 1) is None  # Transpose and a two-tensor Sub: no forward rule


@pytest.mark.parametrize("intermediate", ["backward", "forward"])
def test_batched_box_bounds_equal_one_box_at_a_time_and_hold_on_samples(tmp_path, intermediate):
    """crown_boxes on 6 sub-boxes in one call gives each sub-box the margins it gets alone
    (1e-10), and every margin is at most the sampled minimum of ``c·y − t`` (numpy float64)."""
    rng = np.random.default_rng(1)
    path, layers, mean = _acas_like(rng, 3, [10, 10], 3, tmp_path / "b.onnx")
    g64 = load_onnx(path).cast(torch.float64)
    C = rng.normal(0, 1, (2, 3))
    t = np.array([0.1, -0.2])
    spec = Spec(C, t, np.array([0, 1]), 2)
    lo = rng.uniform(-1, 0, (6, 3))
    hi = lo + rng.uniform(0.01, 1.0, (6, 3))
    shape = (6, *g64.input_shape)
    m_SB, A = crown_boxes(g64, spec, torch.tensor(lo).reshape(shape), torch.tensor(hi).reshape(shape),
                          intermediate=intermediate)
    assert A.shape == (2, 6, 3)
    for b in range(6):
        one, _ = crown_boxes(g64, spec, torch.tensor(lo[b]).reshape(1, 1, 1, 3), torch.tensor(hi[b]).reshape(1, 1, 1, 3),
                             intermediate=intermediate)
        assert torch.allclose(one[:, 0], m_SB[:, b], rtol=0, atol=1e-10)
        _, y = _pre_activations(layers, mean, _samples(rng, lo[b], hi[b], 3000))
        sampled = (y @ C.T - t).min(0)
        assert (m_SB[:, b].numpy() <= sampled + 1e-9).all()


def _grid_min(layers, lo, hi, c, n=121):
    """Dense-grid minimum of ``c·y`` (numpy float64) and the grid point reaching it, 2 inputs."""
    xs = np.stack(np.meshgrid(*(np.linspace(a, b, n) for a, b in zip(lo, hi, strict=True))), -1).reshape(-1, len(lo))
    h = xs
    for i, (W, bias) in enumerate(layers):
        h = h @ W.T + bias
        if i < len(layers) - 1:
            h = np.maximum(h, 0)
    v = h @ c
    return float(v.min()), xs[int(v.argmin())]


def _run(g, ort, case, n_out, cfg, deadline_s=20.0):
    n = len(case.lo_N)
    spec = Spec.from_case(case, n_out)
    box32 = [torch.tensor(v, dtype=torch.float32).reshape(1, n) for v in (case.lo_N, case.hi_N)]
    box64 = [torch.tensor(v).reshape(1, n) for v in (case.lo_N, case.hi_N)]
    return refine(g, g.cast(torch.float64), spec, *box32, *box64, None, None, cfg, margin_tol=1e-7,
                  deadline_s=time.monotonic() + deadline_s, case=case, ort_model=ort)


def test_two_clause_verdicts_equal_milp_and_sat_agrees_with_a_dense_grid(tmp_path):
    """Unsafe set {c₀·y ≤ t₀} ∪ {c₁·y ≤ t₁} on 2-8-8-2 nets. Truth from the MILP per clause; a sat
    instance must come back with a witness in the box whose float64 output (numpy) lies in a
    clause, and a 121×121 grid (numpy) must also reach below that clause's threshold there."""
    cfg = RefineConfig(input_split_max_dims=8, input_split=InputSplitConfig(batch=64, attack_every=2))
    wrong, unknown = [], []
    for seed in range(6):
        rng = np.random.default_rng(100 + seed)
        model, layers = nets.mlp(rng, [2, 8, 8, 2])
        path = nets.save(model, tmp_path / f"m{seed}.onnx")
        x0 = rng.uniform(-1, 1, 2)
        lo, hi = x0 - 0.8, x0 + 0.8
        cs = [rng.normal(0, 1, 2) for _ in range(2)]
        exact = [nets.milp_min(layers, lo, hi, c) for c in cs]
        delta = [0.03 * (1 + abs(e)) for e in exact]
        sat_k = seed % 3 - 1  # -1: unsat; 0 or 1: that clause is reachable
        ts = [e + d if k == sat_k else e - d for k, (e, d) in enumerate(zip(exact, delta, strict=True))]
        case = Case(lo, hi, tuple(Clause(c.reshape(1, -1), np.array([t])) for c, t in zip(cs, ts, strict=True)))
        r = _run(load_onnx(path), OrtModel(path), case, 2, cfg)
        verdict = "unsat" if r.proven else "sat" if r.counterexample is not None else "unknown"
        truth = "unsat" if sat_k < 0 else "sat"
        if verdict == "sat":
            x = r.counterexample.x_N
            assert (lo <= x).all() and (x <= hi).all()
            _, y = _pre_activations(layers, np.zeros(2), x.reshape(1, -1))
            assert any(float(y[0] @ c) <= t + 1e-5 for c, t in zip(cs, ts, strict=True))
            gmin, _ = _grid_min(layers, lo, hi, cs[sat_k])
            assert gmin <= ts[sat_k]
        if verdict == "unknown":
            unknown.append(seed)
        elif verdict != truth:
            wrong.append(seed)
    assert wrong == [] and unknown == []


def test_pinned_coordinate_and_a_strict_boundary_are_never_answered_wrongly(tmp_path):
    """(a) a box with one coordinate pinned (lo = hi, never split): the verdict equals the MILP
    truth for t = exact ∓ δ. (b) y = relu(x₀) on x₀ ∈ [−1, 1] with the unsafe set ``y < 0``
    (strict, touched but never entered): never sat; with ``y ≤ 0`` it is sat (x₀ ≤ 0)."""
    rng = np.random.default_rng(7)
    model, layers = nets.mlp(rng, [3, 6, 6, 1])
    path = nets.save(model, tmp_path / "p.onnx")
    lo, hi = np.array([-0.5, 0.25, -1.0]), np.array([0.7, 0.25, 0.3])
    c = np.array([1.0])
    exact = nets.milp_min(layers, lo, hi, c)
    cfg = RefineConfig(input_split_max_dims=8, input_split=InputSplitConfig(batch=64))
    for truth, t in (("unsat", exact - 0.03 * (1 + abs(exact))), ("sat", exact + 0.03 * (1 + abs(exact)))):
        r = _run(load_onnx(path), OrtModel(path), Case(lo, hi, (Clause(c.reshape(1, 1), np.array([t])),)), 1, cfg)
        assert ("unsat" if r.proven else "sat" if r.counterexample is not None else "unknown") == truth
        if truth == "sat":
            assert r.counterexample.x_N[1] == 0.25 and r.counterexample.y_M[0] <= t
    relu = nets.gemm_relu([(np.array([[1.0]], np.float32), np.array([0.0], np.float32)),
                           (np.array([[1.0]], np.float32), np.array([0.0], np.float32))], [1])[0]
    rpath = nets.save(relu, tmp_path / "relu.onnx")
    lo1, hi1 = np.array([-1.0]), np.array([1.0])
    small = RefineConfig(input_split_max_dims=8, max_domains=3000, input_split=InputSplitConfig(batch=256))
    strict = Case(lo1, hi1, (Clause(np.array([[1.0]]), np.array([0.0]), np.array([True])),))
    r = _run(load_onnx(rpath), OrtModel(rpath), strict, 1, small, deadline_s=5.0)
    assert r.counterexample is None and not r.proven  # true answer unsat; margin 0 proves nothing
    loose = Case(lo1, hi1, (Clause(np.array([[1.0]]), np.array([0.0])),))
    r = _run(load_onnx(rpath), OrtModel(rpath), loose, 1, small, deadline_s=5.0)
    assert r.counterexample is not None and r.counterexample.x_N[0] <= 0.0
