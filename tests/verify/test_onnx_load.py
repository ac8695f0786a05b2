"""ONNX loader against onnxruntime for every test net; errors for unsupported models."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from onnx import TensorProto, helper

from gpufield.errors import ModelFormatError
from gpufield.verify import OrtModel, differential_check, load_onnx
from gpufield.verify.ops import Affine, Conv, Linear

from . import nets


def _max_diff(path, graph, shape, rng, n=16):
    ort = OrtModel(path)
    X = rng.uniform(-1, 1, (n, *shape)).astype(np.float32)
    with torch.no_grad():
        ours = graph.forward(torch.from_numpy(X)).reshape(n, -1).numpy()
    return max(float(np.abs(ours[i] - ort(X[i])).max()) for i in range(n))


@pytest.mark.parametrize("build", ["mlp", "every_op", "conv_bn"])
def test_forward_matches_onnxruntime(tmp_path, build):
    rng = np.random.default_rng(1)
    if build == "mlp":
        model, shape = nets.mlp(rng, [5, 7, 6, 3])[0], (5,)
    elif build == "every_op":
        model, shape = nets.every_op_mlp(rng), (2, 3)
    else:
        model, shape = nets.conv_bn_net(rng), (2, 6, 6)
    path = nets.save(model, tmp_path / "m.onnx")
    g = load_onnx(path)
    assert g.input_shape == shape
    assert _max_diff(path, g, shape, rng) < 1e-5
    lo, hi = -np.ones(int(np.prod(shape))), np.ones(int(np.prod(shape)))
    assert differential_check(g, OrtModel(path), lo, hi) < 1e-5


def test_batchnorm_folded_into_conv_and_gemm(tmp_path):
    g = load_onnx(nets.save(nets.conv_bn_net(np.random.default_rng(2)), tmp_path / "c.onnx"))
    kinds = [type(n.op).__name__ for n in g.nodes]
    # bn1, bn2 fold into conv1, conv2; bn4 into fc; bn3 follows a Relu and stays an Affine
    assert kinds.count("Conv") == 3 and kinds.count("Affine") == 1 and kinds.count("Linear") == 1
    assert not any(n.onnx_name.startswith("bn") and not isinstance(n.op, (Conv, Linear, Affine)) for n in g.nodes)
    assert g.nodes[-1].name == "y"


def test_unsupported_ops_listed_in_one_error(tmp_path):
    N = helper.make_node
    nodes = [N("Sin", ["x"], ["a"], name="sin1"), N("Erf", ["a"], ["b"], name="erf1"),
             N("Sin", ["b"], ["y"], name="sin2")]
    g = helper.make_graph(nodes, "bad", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    path = nets.save(m, tmp_path / "bad.onnx")
    with pytest.raises(ModelFormatError) as e:
        load_onnx(path)
    msg = str(e.value)
    assert "Sin (nodes: sin1, sin2)" in msg and "Erf (nodes: erf1)" in msg and "bad.onnx" in msg


def test_reshape_that_moves_batch_is_refused(tmp_path):
    N = helper.make_node
    shape = helper.make_tensor("s", TensorProto.INT64, [2], [2, 3])
    g = helper.make_graph([N("Reshape", ["x", "s"], ["y"], name="rs")], "r",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 6])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])], [shape])
    path = nets.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "r.onnx")
    with pytest.raises(ModelFormatError, match="rs.*batch"):
        load_onnx(path)


def test_differential_check_refuses_a_mismatching_model(tmp_path):
    rng = np.random.default_rng(3)
    model, layers = nets.mlp(rng, [4, 5, 2])
    path = nets.save(model, tmp_path / "m.onnx")
    g = load_onnx(path)
    other = load_onnx(nets.save(nets.mlp(np.random.default_rng(4), [4, 5, 2])[0], tmp_path / "o.onnx"))
    with pytest.raises(ModelFormatError, match="differs from onnxruntime by up to"):
        differential_check(other, OrtModel(path), -np.ones(4), np.ones(4))
    assert differential_check(g, OrtModel(path), -np.ones(4), np.ones(4)) < 1e-5


def test_missing_or_corrupt_model(tmp_path):
    with pytest.raises(ModelFormatError, match="not found"):
        load_onnx(tmp_path / "nope.onnx")
    (tmp_path / "junk.onnx").write_bytes(b"\x01\x02garbage")
    with pytest.raises(ModelFormatError):
        load_onnx(tmp_path / "junk.onnx")
