"""Small ONNX test networks built with onnx.helper, plus a float64 MILP oracle (scipy/HiGHS).

Every op the loader supports appears in at least one net here.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17


def _model(nodes, inits, in_shape, out_name, out_shape, name="net"):
    g = helper.make_graph(
        nodes, name,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, in_shape)],
        [helper.make_tensor_value_info(out_name, TensorProto.FLOAT, out_shape)],
        [numpy_helper.from_array(np.asarray(v, dtype=np.float32 if v.dtype.kind == "f" else np.int64), k)
         for k, v in inits.items()],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def gemm_relu(weights, in_shape):
    """Gemm/Relu chain (Flatten first when ``in_shape`` has several axes) of float32 ``(W_OI, b_O)``
    pairs; returns (model, [(W_OI, b_O)] float64)."""
    nodes, inits, layers = [], {}, []
    cur = "x"
    if len(in_shape) > 1:
        nodes.append(helper.make_node("Flatten", [cur], ["flat"], axis=1, name="flatten"))
        cur = "flat"
    for i, (W, bias) in enumerate(weights):
        inits[f"W{i}"], inits[f"b{i}"] = W, bias
        layers.append((W.astype(np.float64), bias.astype(np.float64)))
        nodes.append(helper.make_node("Gemm", [cur, f"W{i}", f"b{i}"], [f"z{i}"], transB=1, name=f"gemm{i}"))
        cur = f"z{i}"
        if i < len(weights) - 1:
            nodes.append(helper.make_node("Relu", [cur], [f"a{i}"], name=f"relu{i}"))
            cur = f"a{i}"
    return _model(nodes, inits, [1, *in_shape], cur, [1, len(weights[-1][1])]), layers


def mlp(rng, sizes, in_shape=None):
    """Gemm/Relu MLP; returns (model, [(W_OI, b_O)]) with float32-exact weights as float64."""
    weights = [(rng.normal(0, 1 / np.sqrt(a), (b, a)).astype(np.float32), rng.normal(0, 0.3, b).astype(np.float32))
               for a, b in zip(sizes[:-1], sizes[1:], strict=True)]
    return gemm_relu(weights, in_shape or [sizes[0]])


def every_op_mlp(rng):
    """Input [1, 2, 3]: Sub/Div (normalisation), Transpose, Reshape, Unsqueeze/Squeeze, Identity,
    Constant, MatMul + Add, Mul, Relu, Gemm (transB=0, alpha, beta), Sub of two tensors."""
    inits = {
        "mean": rng.normal(0, 1, (1, 2, 3)), "std": rng.uniform(0.5, 2, (1, 1, 3)),
        "shape": np.array([1, 6], dtype=np.int64), "M": rng.normal(0, 0.5, (6, 5)),
        "c": rng.normal(0, 0.5, 5), "k": rng.uniform(-2, 2, 5), "G": rng.normal(0, 0.5, (5, 4)),
        "gb": rng.normal(0, 0.5, 4), "ax": np.array([1], dtype=np.int64),
        "M2": rng.normal(0, 0.5, (6, 4)),
    }
    inits = {k: (v.astype(np.float32) if v.dtype.kind == "f" else v) for k, v in inits.items()}
    N = helper.make_node
    nodes = [
        N("Sub", ["x", "mean"], ["n0"], name="sub_mean"),
        N("Div", ["n0", "std"], ["n1"], name="div_std"),
        N("Transpose", ["n1"], ["t"], perm=[0, 2, 1], name="transpose"),
        N("Constant", [], ["shape2"], value=numpy_helper.from_array(np.array([1, -1], dtype=np.int64)), name="cst"),
        N("Reshape", ["t", "shape2"], ["r"], name="reshape"),
        N("Unsqueeze", ["r", "ax"], ["u"], name="unsq"),
        N("Squeeze", ["u", "ax"], ["s"], name="sq"),
        N("Identity", ["s"], ["i"], name="ident"),
        N("MatMul", ["i", "M"], ["m"], name="matmul"),
        N("Add", ["m", "c"], ["m2"], name="add_c"),
        N("Mul", ["m2", "k"], ["m3"], name="mul_k"),
        N("Relu", ["m3"], ["a"], name="relu"),
        N("Gemm", ["a", "G", "gb"], ["g"], alpha=0.7, beta=1.3, name="gemm"),
        N("MatMul", ["i", "M2"], ["skip"], name="skip_matmul"),
        N("Relu", ["skip"], ["skip_r"], name="skip_relu"),
        N("Sub", ["g", "skip_r"], ["y"], name="sub_tensors"),
    ]
    return _model(nodes, inits, [1, 2, 3], "y", [1, 4], "every_op")


def conv_bn_net(rng):
    """Conv+BN (folded), Relu, Conv(stride 2, pad 1)+BN (folded), Relu, BN (standalone, after a
    Relu), residual Add of two tensors, Flatten, Gemm+BN (folded)."""
    def bn(prefix, c):
        return {f"{prefix}_g": rng.uniform(0.5, 1.5, c), f"{prefix}_b": rng.normal(0, 0.3, c),
                f"{prefix}_m": rng.normal(0, 0.3, c), f"{prefix}_v": rng.uniform(0.5, 2, c)}

    inits = {"K1": rng.normal(0, 0.4, (3, 2, 3, 3)), "c1": rng.normal(0, 0.2, 3),
             "K2": rng.normal(0, 0.3, (3, 3, 3, 3)), "c2": rng.normal(0, 0.2, 3),
             "K3": rng.normal(0, 0.3, (3, 3, 1, 1)),
             "W": rng.normal(0, 0.3, (4, 27)), "wb": rng.normal(0, 0.2, 4)}
    for p, c in (("bn1", 3), ("bn2", 3), ("bn3", 3), ("bn4", 4)):
        inits.update(bn(p, c))
    inits = {k: v.astype(np.float32) for k, v in inits.items()}
    N = helper.make_node

    def BN(x, y, p):
        return N("BatchNormalization", [x, f"{p}_g", f"{p}_b", f"{p}_m", f"{p}_v"], [y], epsilon=1e-3, name=p)

    nodes = [
        N("Conv", ["x", "K1", "c1"], ["h1"], pads=[1, 1, 1, 1], name="conv1"), BN("h1", "h1b", "bn1"),
        N("Relu", ["h1b"], ["a1"], name="relu1"),
        N("Conv", ["a1", "K2", "c2"], ["h2"], strides=[2, 2], pads=[1, 1, 1, 1], name="conv2"),
        BN("h2", "h2b", "bn2"), N("Relu", ["h2b"], ["a2"], name="relu2"),
        BN("a2", "a2b", "bn3"),
        N("Conv", ["a2", "K3"], ["h3"], name="conv3_1x1"),
        N("Add", ["a2b", "h3"], ["res"], name="residual_add"),
        N("Flatten", ["res"], ["f"], axis=1, name="flatten"),
        N("Gemm", ["f", "W", "wb"], ["o"], transB=1, name="fc"), BN("o", "y", "bn4"),
    ]
    return _model(nodes, inits, [1, 2, 6, 6], "y", [1, 4], "conv_bn")


def save(model, path):
    """Write a model and return the path as str."""
    onnx.save(model, str(path))
    return str(path)


def milp_min(layers, lo, hi, c):
    """Exact ``min c·f(x)`` over the box for a Gemm/ReLU MLP (float64, scipy HiGHS MILP, big-M
    with interval bounds). Returns the optimum value."""
    from scipy.optimize import LinearConstraint, milp

    n0 = len(lo)
    # variable layout: x, then per hidden layer: z (pre), a (post), d (binary); final z.
    lbs, ubs, integ = list(lo), list(hi), [0] * n0
    low, u = np.asarray(lo, float), np.asarray(hi, float)
    idx = list(range(n0))
    nvar = n0

    def new(k, lb, ub, integer=0):
        nonlocal nvar
        ids = list(range(nvar, nvar + k))
        nvar += k
        lbs.extend(lb)
        ubs.extend(ub)
        integ.extend([integer] * k)
        return ids

    rows = []
    for li, (W, b) in enumerate(layers):
        Wp, Wn = np.clip(W, 0, None), np.clip(W, None, 0)
        zl, zu = Wp @ low + Wn @ u + b, Wp @ u + Wn @ low + b
        z = new(len(b), zl, zu)
        for j in range(len(b)):  # z_j - W_j·prev = b_j
            rows.append(({z[j]: 1.0, **{idx[i]: -W[j, i] for i in range(len(idx))}}, b[j], b[j]))
        if li == len(layers) - 1:
            out = z
            break
        a = new(len(b), np.maximum(zl, 0), np.maximum(zu, 0))
        d = new(len(b), [0] * len(b), [1] * len(b), 1)
        for j in range(len(b)):
            rows.append(({a[j]: 1.0, z[j]: -1.0}, 0.0, np.inf))                        # a ≥ z
            rows.append(({a[j]: 1.0, z[j]: -1.0, d[j]: -zl[j]}, -np.inf, -zl[j]))      # a ≤ z − l(1−d)
            rows.append(({a[j]: 1.0, d[j]: -max(zu[j], 0.0)}, -np.inf, 0.0))            # a ≤ u d
        idx, low, u = a, np.maximum(zl, 0), np.maximum(zu, 0)
    A = np.zeros((len(rows), nvar))
    for r, (coef, _, _) in enumerate(rows):
        for k, v in coef.items():
            A[r, k] += v
    cost = np.zeros(nvar)
    cost[out] = c
    res = milp(cost, constraints=LinearConstraint(A, [r[1] for r in rows], [r[2] for r in rows]),
               integrality=np.array(integ), bounds=(np.array(lbs), np.array(ubs)),
               options={"mip_rel_gap": 1e-9})
    assert res.status == 0, res.message
    return float(res.fun)
