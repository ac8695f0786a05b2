"""The v3 ONNX ops (Dropout, Sigmoid, Tanh, MaxPool, AveragePool, Concat, Slice, Split, Pad,
ConvTranspose, Gather, Sign, LeakyRelu, Clip, ReduceSum, ReduceMean):
every check against an independent source.

(a) the loaded graph's forward equals onnxruntime on random inputs of a tiny onnx.helper model;
(b) soundness: onnxruntime outputs at seeded random points and corners of random boxes lie
    within the IBP and CROWN bounds (1e-6 relative tolerance for float32 onnxruntime);
(c) CROWN is at least as tight as IBP on average over boxes (a property, no stored numbers);
(d) end to end, ``verify_instance`` answers sat with a counterexample that satisfies the
    property as written (checked here with onnxruntime) on an easily falsifiable property, and
    unsat on a property with a margin above the IBP bound;
plus per-op CROWN steps with random A-matrices at box corners (as tests/verify/test_ops.py) and
a hypothesis property of the S-shaped lines on wide and narrow intervals.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from gpufield.errors import ModelFormatError
from gpufield.verify.io.onnx_load import load_onnx
from gpufield.verify.propagate import backward, crown_intermediate, ibp
from gpufield.verify.protocols import BackwardInputs
from gpufield.verify.runner import VerifyConfig, verify_instance

RNG = np.random.default_rng(26)


def _w(*s, scale=0.6):
    return (RNG.standard_normal(s) * scale).astype(np.float32)


def _model(nodes, inits, in_shape, out_dim, opset=17, batch="N"):
    g = helper.make_graph(
        nodes, "net",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, *in_shape])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, out_dim])],
        [numpy_helper.from_array(v, k) for k, v in inits.items()],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def _gemm(name, x, y, n_in, n_out, inits):
    inits[f"{name}_W"], inits[f"{name}_b"] = _w(n_out, n_in), _w(n_out, scale=0.3)
    return helper.make_node("Gemm", [x, f"{name}_W", f"{name}_b"], [y], transB=1, name=name)


def _mlp(act, **kw):
    """Gemm 5->8, the activation, Gemm 8->3."""
    inits = {}
    nodes = [_gemm("g0", "x", "z", 5, 8, inits), helper.make_node(act, ["z"], ["a"], name="act", **kw),
             _gemm("g1", "a", "y", 8, 3, inits)]
    return _model(nodes, inits, [5], 3)


def _conv_pool(pool, **kw):
    """Conv 2->3 3x3 pad 1 on 2x6x6, ReLU, the pooling op, Flatten, Gemm -> 3."""
    inits = {"K": _w(3, 2, 3, 3, scale=0.4), "kb": _w(3, scale=0.2)}
    nodes = [helper.make_node("Conv", ["x", "K", "kb"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node(pool, ["r"], ["p"], name="pool", **kw),
             helper.make_node("Flatten", ["p"], ["f"], axis=1, name="flat")]
    n = int(np.prod(_pool_out((3, 6, 6), kw)))
    nodes.append(_gemm("g", "f", "y", n, 3, inits))
    return _model(nodes, inits, [2, 6, 6], 3)


def _pool_out(shape, kw):
    k, s = kw["kernel_shape"], kw.get("strides", [1, 1])
    p = kw.get("pads", [0, 0, 0, 0])
    h = (shape[1] + p[0] + p[2] - k[0]) // s[0] + 1
    w = (shape[2] + p[1] + p[3] - k[1]) // s[1] + 1
    return (shape[0], h, w)


def _dropout():
    inits = {}
    nodes = [_gemm("g0", "x", "z", 5, 8, inits), helper.make_node("Relu", ["z"], ["a"], name="relu"),
             helper.make_node("Dropout", ["a"], ["d"], name="drop", ratio=0.5),
             _gemm("g1", "d", "y", 8, 3, inits)]
    return _model(nodes, inits, [5], 3, opset=11)


def _concat_split_slice():
    """Two Gemms from x, Concat with a constant, Split, Slice (step 2), Relu, Concat, Gemm."""
    inits = {"c": _w(1, 2), "split": np.array([4, 5], dtype=np.int64),
             "st": np.array([1], dtype=np.int64), "en": np.array([5], dtype=np.int64),
             "ax": np.array([1], dtype=np.int64), "sp": np.array([2], dtype=np.int64)}
    nodes = [_gemm("ga", "x", "a", 5, 4, inits), _gemm("gb", "x", "b", 5, 3, inits),
             helper.make_node("Concat", ["a", "c", "b"], ["cat"], axis=1, name="cat"),
             helper.make_node("Split", ["cat", "split"], ["s1", "s2"], axis=1, name="split"),
             helper.make_node("Slice", ["s2", "st", "en", "ax", "sp"], ["sl"], name="slice"),
             helper.make_node("Relu", ["s1"], ["r1"], name="r1"),
             helper.make_node("Relu", ["sl"], ["r2"], name="r2"),
             helper.make_node("Concat", ["r1", "r2"], ["cat2"], axis=-1, name="cat2"),
             _gemm("g", "cat2", "y", 6, 3, inits)]
    return _model(nodes, inits, [5], 3, batch=1)  # a constant Concat operand fixes the batch to 1


def _pad():
    """Conv, ReLU, Pad (value 0.5, asymmetric), Conv 2x2 stride 2, Flatten, Gemm."""
    inits = {"K": _w(3, 2, 3, 3, scale=0.4), "K2": _w(2, 3, 2, 2, scale=0.4),
             "pads": np.array([0, 0, 1, 0, 0, 0, 1, 2], dtype=np.int64), "v": np.array(0.5, dtype=np.float32)}
    nodes = [helper.make_node("Conv", ["x", "K"], ["c"], name="conv"),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("Pad", ["r", "pads", "v"], ["p"], mode="constant", name="pad"),
             helper.make_node("Conv", ["p", "K2"], ["c2"], strides=[2, 2], name="conv2"),
             helper.make_node("Flatten", ["c2"], ["f"], axis=1, name="flat")]
    nodes.append(_gemm("g", "f", "y", 2 * 3 * 3, 3, inits))  # 4x4 -> pad 6x6 -> 3x3
    return _model(nodes, inits, [2, 6, 6], 3)


def _clip():
    """Gemm 5->8, Clip(-0.5, 0.8) (opset 11+ constant inputs), Gemm 8->3."""
    inits = {"cmin": np.array(-0.5, dtype=np.float32), "cmax": np.array(0.8, dtype=np.float32)}
    nodes = [_gemm("g0", "x", "z", 5, 8, inits), helper.make_node("Clip", ["z", "cmin", "cmax"], ["a"], name="clip"),
             _gemm("g1", "a", "y", 8, 3, inits)]
    return _model(nodes, inits, [5], 3)


def _relu6():
    """Gemm 5->8, Clip(0, 1) from attributes (opset 9) (a Hardtanh/ReLU6 shape), Gemm 8->3."""
    inits = {}
    nodes = [_gemm("g0", "x", "z", 5, 8, inits), helper.make_node("Clip", ["z"], ["a"], min=0.0, max=1.0, name="clip"),
             _gemm("g1", "a", "y", 8, 3, inits)]
    return _model(nodes, inits, [5], 3, opset=9)


def _reduce():
    """Conv 2->3 3x3 on 2x6x6 (-> 3x4x4), ReLU, ReduceMean over W (keepdims 0), ReduceSum over
    the channels (axes input, keepdims 1), Flatten, Gemm 4->3."""
    inits = {"K": _w(3, 2, 3, 3, scale=0.4), "rax": np.array([1], dtype=np.int64)}
    nodes = [helper.make_node("Conv", ["x", "K"], ["c"], name="conv"),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("ReduceMean", ["r"], ["m"], axes=[-1], keepdims=0, name="mean"),
             helper.make_node("ReduceSum", ["m", "rax"], ["s"], keepdims=1, name="sum"),
             helper.make_node("Flatten", ["s"], ["f"], axis=1, name="flat"),
             _gemm("g", "f", "y", 4, 3, inits)]
    return _model(nodes, inits, [2, 6, 6], 3)


def _convtranspose():
    """ConvTranspose 2->3 3x3 stride 2 pad 1 output_padding 1 (4x4 -> 8x8), ReLU, Flatten, Gemm."""
    inits = {"K": _w(2, 3, 3, 3, scale=0.4), "kb": _w(3, scale=0.2)}
    nodes = [helper.make_node("ConvTranspose", ["x", "K", "kb"], ["c"], strides=[2, 2], pads=[1, 1, 1, 1],
                              output_padding=[1, 1], name="convt"),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("Flatten", ["r"], ["f"], axis=1, name="flat"),
             _gemm("g", "f", "y", 3 * 8 * 8, 3, inits)]
    return _model(nodes, inits, [2, 4, 4], 3)


def _gather():
    """Gemm 5->8, Gather of columns [[0, 3], [5, 5]] (a repeated index), Flatten, ReLU, Gemm."""
    inits = {"gi": np.array([[0, 3], [5, -3]], dtype=np.int64)}
    nodes = [_gemm("g0", "x", "z", 5, 8, inits),
             helper.make_node("Gather", ["z", "gi"], ["ga"], axis=1, name="gather"),
             helper.make_node("Flatten", ["ga"], ["f"], axis=1, name="flat"),
             helper.make_node("Relu", ["f"], ["r"], name="relu"),
             _gemm("g1", "r", "y", 4, 3, inits)]
    return _model(nodes, inits, [5], 3)


MODELS = {
    "sigmoid": _mlp("Sigmoid"),
    "tanh": _mlp("Tanh"),
    "maxpool": _conv_pool("MaxPool", kernel_shape=[2, 2], strides=[2, 2]),
    "maxpool_pad_overlap": _conv_pool("MaxPool", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
    "avgpool": _conv_pool("AveragePool", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 0, 1, 1]),
    "avgpool_incl_pad": _conv_pool("AveragePool", kernel_shape=[2, 2], strides=[1, 1], pads=[1, 1, 0, 0],
                                   count_include_pad=1),
    "dropout": _dropout(),
    "concat_split_slice": _concat_split_slice(),
    "pad": _pad(),
    "convtranspose": _convtranspose(),
    "gather": _gather(),
    "sign": _mlp("Sign"),
    "leakyrelu": _mlp("LeakyRelu", alpha=0.1),
    "clip": _clip(),
    "clip_attrs": _relu6(),
    "reduce": _reduce(),
}


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    d = tmp_path_factory.mktemp("ops_v3")
    out = {}
    for name, m in MODELS.items():
        p = d / f"{name}.onnx"
        onnx.save(m, p)
        sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
        out[name] = (p, load_onnx(p), sess)
    return out


def _run(sess, x):
    x = x.astype(np.float32)
    if sess.get_inputs()[0].shape[0] == 1:  # a model with a fixed batch of 1: one point at a time
        return np.concatenate([sess.run(None, {"x": x[i:i + 1]})[0] for i in range(len(x))]).astype(np.float64)
    return sess.run(None, {"x": x})[0].astype(np.float64)


def _bounds(g, lo, hi):
    g64 = g.cast(torch.float64)
    lo_t, hi_t = torch.as_tensor(lo), torch.as_tensor(hi)
    ib = ibp(g64, lo_t, hi_t)
    inter = crown_intermediate(g64, lo_t, hi_t, ref=ib)
    B, M = lo.shape[0], int(np.prod(g64.output_shape))
    C = torch.eye(M, dtype=torch.float64).reshape(M, 1, M).expand(M, B, M)
    lb, ub = backward(g64, g64.output_name, C, lo_t, hi_t, inter)
    return ib[g64.output_name], (lb.T.numpy(), ub.T.numpy())


def _box(shape, B, radius):
    c = RNG.standard_normal((B, *shape))
    r = RNG.uniform(0.0, radius, (B, *shape))
    return c - r, c + r


@pytest.mark.parametrize("name", list(MODELS))
def test_forward_matches_onnxruntime(loaded, name):
    _, g, sess = loaded[name]
    x = RNG.standard_normal((16, *g.input_shape)).astype(np.float32)
    ours = g.cast(torch.float64).forward(torch.as_tensor(x, dtype=torch.float64)).numpy()
    np.testing.assert_allclose(ours, _run(sess, x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", list(MODELS))
def test_ibp_and_crown_contain_onnxruntime_samples(loaded, name):
    _, g, sess = loaded[name]
    B, n = 3, 300
    lo, hi = _box(g.input_shape, B, 0.5)
    (il, iu), (cl, cu) = _bounds(g, lo, hi)
    il, iu = il.numpy(), iu.numpy()
    for b in range(B):
        t = RNG.uniform(size=(n, *g.input_shape))
        t[: n // 3] = t[: n // 3] > 0.5  # corners
        x = (lo[b] + (hi[b] - lo[b]) * t).astype(np.float32).astype(np.float64)
        x = np.clip(x, lo[b], hi[b])
        y = _run(sess, x)
        tol = 1e-6 * (1 + np.abs(y))
        assert (y >= il[b] - tol).all() and (y <= iu[b] + tol).all(), name
        assert (y >= cl[b] - tol).all() and (y <= cu[b] + tol).all(), name


@pytest.mark.parametrize("name", list(MODELS))
def test_crown_tighter_than_ibp_on_average(loaded, name):
    _, g, _ = loaded[name]
    lo, hi = _box(g.input_shape, 8, 0.3)
    (il, iu), (cl, cu) = _bounds(g, lo, hi)
    assert float((cu - cl).mean()) <= float((iu - il).numpy().mean()) + 1e-12


def _vnnlib(path, lo, hi, atoms, n_out=3):
    lines = [f"(declare-const X_{i} Real)" for i in range(len(lo))]
    lines += [f"(declare-const Y_{j} Real)" for j in range(n_out)]
    for i, (a, b) in enumerate(zip(lo, hi, strict=True)):
        lines += [f"(assert (>= X_{i} {float(a)!r}))", f"(assert (<= X_{i} {float(b)!r}))"]
    lines.append(f"(assert {atoms})")
    path.write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize("name", ["sigmoid", "maxpool", "dropout", "concat_split_slice", "leakyrelu"])
def test_verify_end_to_end(loaded, name, tmp_path):
    p, g, sess = loaded[name]
    n = int(np.prod(g.input_shape))
    c = RNG.uniform(-1, 1, n)
    lo, hi = c - 0.05, c + 0.05
    y0 = float(_run(sess, c.reshape(1, *g.input_shape))[0, 0])
    cfg = VerifyConfig(alpha=VerifyConfig().alpha.__class__(iterations=5))
    # falsifiable: the centre (and its neighbourhood) has Y_0 < y0 + 0.01
    prop = tmp_path / "sat.vnnlib"
    thr = y0 + 0.01
    _vnnlib(prop, lo, hi, f"(< Y_0 {thr!r})")
    r = verify_instance(p, prop, timeout_s=30, config=cfg)
    assert r.verdict == "sat", (name, r)
    x = r.counterexample.x_N
    assert ((x >= lo) & (x <= hi)).all()
    assert _run(sess, x.reshape(1, *g.input_shape))[0, 0] < thr
    # provable: above the IBP upper bound by a margin
    (_, iu), _ = _bounds(g, lo.reshape(1, *g.input_shape), hi.reshape(1, *g.input_shape))
    prop = tmp_path / "unsat.vnnlib"
    _vnnlib(prop, lo, hi, f"(>= Y_0 {float(iu[0, 0]) + 0.05!r})")
    r = verify_instance(p, prop, timeout_s=30, config=cfg)
    assert r.verdict == "unsat", (name, r)


def _step_check(op, boxes, lA, uA, xs_list):
    ctx = BackwardInputs(tuple(boxes) if op.nonlinear else (None,) * op.n_inputs)
    pushed, lbias, ubias = op.backward(lA, uA, ctx)
    for xs in xs_list:
        y = op.forward(*xs)
        lin_l = sum(((pl * x).flatten(2).sum(-1) for (pl, _), x in zip(pushed, xs, strict=True) if pl is not None),
                    torch.zeros(lA.shape[:2], dtype=torch.float64)) + lbias
        lin_u = sum(((pu * x).flatten(2).sum(-1) for (_, pu), x in zip(pushed, xs, strict=True) if pu is not None),
                    torch.zeros(uA.shape[:2], dtype=torch.float64)) + ubias
        assert ((lA * y).flatten(2).sum(-1) >= lin_l - 1e-9).all()
        assert ((uA * y).flatten(2).sum(-1) <= lin_u + 1e-9).all()


@pytest.mark.parametrize("name", ["sigmoid", "tanh", "maxpool", "maxpool_pad_overlap", "avgpool",
                                  "avgpool_incl_pad", "pad", "concat_split_slice", "convtranspose",
                                  "gather", "sign", "leakyrelu", "clip", "clip_attrs", "reduce"])
def test_crown_step_sound_at_corners(loaded, name):
    """Each v3 op's own CROWN step, random A, inputs at the corners and inside random boxes."""
    _, g, _ = loaded[name]
    g64 = g.cast(torch.float64)
    kinds = ("Sigmoid", "Tanh", "MaxPool", "AveragePool", "Pad", "Concat", "Slice", "ConvTranspose",
             "Gather", "Sign", "LeakyRelu", "Clip", "Reduce")
    for node in g64.nodes:
        if type(node.op).__name__ not in kinds:
            continue
        B, S = 2, 4
        boxes = []
        for i in node.inputs:
            c = torch.as_tensor(RNG.standard_normal((B, *g64.shape(i))) * 2)
            r = torch.as_tensor(RNG.uniform(0, 2, (B, *g64.shape(i))))
            boxes.append((c - r, c + r))
        lA = torch.as_tensor(RNG.standard_normal((S, B, *node.shape)))
        uA = torch.as_tensor(RNG.standard_normal((S, B, *node.shape)))
        pts = []
        for k in range(64):
            xs = []
            for lo, hi in boxes:
                t = torch.as_tensor(RNG.uniform(size=lo.shape))
                xs.append(lo + (hi - lo) * ((t > 0.5).double() if k % 2 else t))
            pts.append(xs)
        _step_check(node.op, boxes, lA, uA, pts)


@given(st.floats(-40, 40), st.floats(0, 40), st.sampled_from(["Sigmoid", "Tanh"]))
def test_s_shaped_lines_are_sound(c, w, act):
    from gpufield.verify.ops import Sigmoid, Tanh

    op = Sigmoid() if act == "Sigmoid" else Tanh()
    low = torch.tensor([c - w / 2], dtype=torch.float64)
    up = torch.tensor([c + w / 2], dtype=torch.float64)
    aL, bL, aU, bU = op.lines(low, up)
    z = torch.linspace(float(low), float(up), 401, dtype=torch.float64)
    y = op.forward(z)
    assert (aL * z + bL <= y + 1e-12).all() and (y <= aU * z + bU + 1e-12).all()


def test_dropout_training_mode_refused(tmp_path):
    inits = {"r": np.array(0.5, dtype=np.float32), "t": np.array(True)}
    nodes = [helper.make_node("Dropout", ["x", "r", "t"], ["d"], name="drop"),
             helper.make_node("Relu", ["d"], ["y"], name="relu")]
    g = helper.make_graph(nodes, "net", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])],
                          [numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    p = tmp_path / "drop.onnx"
    onnx.save(m, p)
    with pytest.raises(ModelFormatError, match="training_mode"):
        load_onnx(p)


@given(st.floats(-30, 30), st.floats(0, 30), st.floats(0, 1), st.floats(0, 1), st.sampled_from(["Sigmoid", "Tanh"]))
def test_s_shaped_lines_sound_for_every_alpha(c, w, a_low, a_up, act):
    from gpufield.verify.ops import Sigmoid, Tanh

    op = Sigmoid() if act == "Sigmoid" else Tanh()
    low = torch.tensor([c - w / 2], dtype=torch.float64)
    up = torch.tensor([c + w / 2], dtype=torch.float64)
    alpha = torch.tensor([a_low, a_up], dtype=torch.float64).reshape(1, 1, 2, 1)
    aL, bL, aU, bU = op.lines(low, up, alpha)
    z = torch.linspace(float(low), float(up), 401, dtype=torch.float64)
    y = op.forward(z)
    assert (aL * z + bL <= y + 1e-12).all() and (y <= aU * z + bU + 1e-12).all()
    # the initial α reproduces CROWN's lines
    init = op.alpha_init(low, up).unsqueeze(0)
    for got, want in zip(op.lines(low, up, init), op.lines(low, up), strict=True):
        torch.testing.assert_close(got.reshape(-1), want.reshape(-1), rtol=0, atol=1e-12)


@pytest.mark.parametrize("name", ["sigmoid", "tanh"])
def test_alpha_crown_sound_and_no_looser_than_crown(loaded, name):
    """α-CROWN over tangent points: the lower bounds of every output, with the optimised and with
    random α in [0, 1], stay below onnxruntime's sampled minimum, and the optimised ones are not
    below CROWN's."""
    from gpufield.verify.alpha import AlphaConfig, alpha_crown, bound_pass, init_params
    from gpufield.verify.spec import Spec

    _, g, sess = loaded[name]
    g64 = g.cast(torch.float64)
    lo, hi = _box(g.input_shape, 2, 1.0)
    lo_t, hi_t = torch.as_tensor(lo), torch.as_tensor(hi)
    spec = Spec(np.eye(3), np.zeros(3), np.arange(3), 3)  # clause j: lower bound of y_j
    ib = ibp(g64, lo_t, hi_t)
    inter = crown_intermediate(g64, lo_t, hi_t, ref=ib)
    ref = {**ib, **inter}
    res = alpha_crown(g64, spec, lo_t, hi_t, ref, inter, AlphaConfig(iterations=15))
    crown = bound_pass(g64, spec, lo_t, hi_t, ref, init_params(g64, spec, inter, 2, True))
    assert (res.best_KB >= crown - 1e-9).all()
    params = init_params(g64, spec, inter, 2, True)
    gen = torch.Generator().manual_seed(3)
    rand = {k: torch.rand(v.shape, generator=gen, dtype=torch.float64) for k, v in params.items()}
    with torch.no_grad():
        rnd = bound_pass(g64, spec, lo_t, hi_t, ref, rand)
    for b in range(2):
        x = lo[b] + (hi[b] - lo[b]) * RNG.uniform(size=(400, *g.input_shape))
        y_min = _run(sess, np.clip(x.astype(np.float32).astype(np.float64), lo[b], hi[b])).min(0)
        tol = 1e-6 * (1 + np.abs(y_min))
        assert (res.best_KB[:, b].numpy() <= y_min + tol).all()
        assert (rnd[:, b].numpy() <= y_min + tol).all()


def test_sat_with_a_pinned_coordinate_float32_cannot_represent(loaded, tmp_path):
    """collins_rul_cnn pins inputs at values like 0.1 (lo = hi, no float32 in between): the
    counterexample keeps the float64 value there and its output (onnxruntime at the float32
    rounding, as any checker evaluates X) satisfies the property."""
    p, g, sess = loaded["dropout"]
    c = np.array([0.1, -0.3, 0.7, 0.2, -0.9])
    lo, hi = c - 0.05, c + 0.05
    lo[0] = hi[0] = 0.1
    y0 = float(_run(sess, c.reshape(1, 5))[0, 0])
    prop = tmp_path / "pinned.vnnlib"
    _vnnlib(prop, lo, hi, f"(<= Y_0 {y0 + 0.01!r})")
    r = verify_instance(p, prop, timeout_s=30)
    assert r.verdict == "sat", r
    x = r.counterexample.x_N
    assert x[0] == 0.1 and ((x >= lo) & (x <= hi)).all()
    assert _run(sess, x.reshape(1, 5))[0, 0] <= y0 + 0.01


@pytest.mark.parametrize("name", ["sigmoid", "tanh"])
def test_input_split_bab_proves_what_crown_cannot(loaded, name, tmp_path):
    """With input splitting on (5 inputs), branch and bound (with its own α-CROWN) runs on a
    Sigmoid/Tanh net and proves a threshold halfway between the CROWN bound and onnxruntime's
    sampled minimum (dense samples of a 5-D box), which CROWN alone does not prove."""
    from gpufield.verify.alpha import AlphaConfig
    from gpufield.verify.refine import RefineConfig

    p, g, sess = loaded[name]
    c = np.array([0.3, -0.2, 0.5, 0.1, -0.4])
    lo, hi = c - 0.4, c + 0.4
    _, (cl, _) = _bounds(g, lo.reshape(1, 5), hi.reshape(1, 5))
    x = lo + (hi - lo) * RNG.uniform(size=(20000, 5))
    y_min = float(_run(sess, np.clip(x.astype(np.float32).astype(np.float64), lo, hi))[:, 0].min())
    thr = float(cl[0, 0]) + 0.5 * (y_min - float(cl[0, 0]))
    assert y_min - float(cl[0, 0]) > 1e-3  # CROWN alone leaves a gap
    prop = tmp_path / "split.vnnlib"
    _vnnlib(prop, lo, hi, f"(<= Y_0 {thr!r})")
    cfg = VerifyConfig(alpha=AlphaConfig(iterations=0), refine=RefineConfig(input_split_max_dims=8))
    r = verify_instance(p, prop, timeout_s=30, config=cfg)
    assert r.verdict == "unsat", r
    assert r.margins.get("bab_domains", 0) >= 1  # branch and bound ran (before: refused for this net)


@given(st.floats(-3, 3), st.floats(0, 6), st.sampled_from([(-0.5, 0.8), (0.0, None), (None, 1.0), (0.2, 0.2)]))
def test_clip_lines_are_sound(c, w, ab):
    from gpufield.verify.ops import Clip

    op = Clip(*ab)
    low = torch.tensor([c - w / 2], dtype=torch.float64)
    up = torch.tensor([c + w / 2], dtype=torch.float64)
    aL, bL, aU, bU = op.lines(low, up)
    z = torch.linspace(float(low), float(up), 401, dtype=torch.float64)
    y = op.forward(z)
    assert (aL * z + bL <= y + 1e-12).all() and (y <= aU * z + bU + 1e-12).all()


def test_omitted_optional_inputs_keep_their_positions(tmp_path):
    """Clip(x, "", max) and Slice(x, starts, ends, "", steps): an omitted optional input ("")
    must not shift the later ones (checked against onnxruntime)."""
    # axes omitted: the default axes are 0, 1 (the batch axis taken whole)
    inits = {"cmax": np.array(0.3, dtype=np.float32), "st": np.array([0, 1], dtype=np.int64),
             "en": np.array([2**63 - 1, 8], dtype=np.int64), "sp": np.array([1, 3], dtype=np.int64)}
    nodes = [_gemm("g0", "x", "z", 5, 8, inits),
             helper.make_node("Clip", ["z", "", "cmax"], ["c"], name="clip"),
             helper.make_node("Slice", ["c", "st", "en", "", "sp"], ["s"], name="slice"),
             _gemm("g1", "s", "y", 3, 3, inits)]
    m = _model(nodes, inits, [5], 3)
    p = tmp_path / "optional.onnx"
    onnx.save(m, p)
    g = load_onnx(p).cast(torch.float64)
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    x = RNG.standard_normal((16, 5)).astype(np.float32)
    np.testing.assert_allclose(g.forward(torch.as_tensor(x, dtype=torch.float64)).numpy(), _run(sess, x),
                               rtol=1e-5, atol=1e-5)
