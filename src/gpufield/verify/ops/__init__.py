"""The op table: which IR op implements each supported ONNX ``op_type``.

``OPS`` maps an ONNX op type to the :class:`~gpufield.verify.protocols.BoundOp` class the
loader builds for it (one file per op family, auto_LiRPA/jax_verify style). The loader in
:mod:`gpufield.verify.io.onnx_load` turns attributes and constant operands into op fields;
an op type missing here makes the model unsupported.

An op class with a ``from_onnx(b, node, attrs, ins) -> (op, [input names])`` classmethod builds
itself (so adding such an op touches its own file and this table): ``b`` is the loader, with
``b.shapes`` (tensor name -> node shape without batch), ``b.const`` (name -> numpy constant),
``b.uses`` (name -> number of consuming nodes), ``b.t(array)`` (a tensor in the model's float
dtype) and ``b.err(msg, node)`` (a :class:`~gpufield.errors.ModelFormatError` naming file and node).
"""

from __future__ import annotations

from collections.abc import Mapping

from gpufield.verify.ops.activation import Relu
from gpufield.verify.ops.averagepool import AveragePool
from gpufield.verify.ops.clip import Clip
from gpufield.verify.ops.concat import Concat
from gpufield.verify.ops.convtranspose import ConvTranspose
from gpufield.verify.ops.dropout import Dropout
from gpufield.verify.ops.elementwise import AddSub, Affine
from gpufield.verify.ops.gather import Gather
from gpufield.verify.ops.leakyrelu import LeakyRelu
from gpufield.verify.ops.linear import Conv, Linear
from gpufield.verify.ops.maxpool import MaxPool
from gpufield.verify.ops.pad import Pad
from gpufield.verify.ops.reduce import Reduce
from gpufield.verify.ops.shape import Reshape, Transpose
from gpufield.verify.ops.sigmoid import Sigmoid
from gpufield.verify.ops.sign import Sign
from gpufield.verify.ops.slice import Slice
from gpufield.verify.ops.tanh import Tanh

OPS: Mapping[str, tuple[type, ...]] = {
    "Gemm": (Linear,),
    "MatMul": (Linear,),
    "Add": (Affine, AddSub),
    "Sub": (Affine, AddSub),
    "Mul": (Affine,),
    "Div": (Affine,),
    "Relu": (Relu,),
    "Flatten": (Reshape,),
    "Reshape": (Reshape,),
    "Squeeze": (Reshape,),
    "Unsqueeze": (Reshape,),
    "Identity": (Reshape,),
    "Transpose": (Transpose,),
    "Conv": (Conv,),
    "BatchNormalization": (Affine, Conv, Linear),
    "Dropout": (Dropout,),
    "Sigmoid": (Sigmoid,),
    "Tanh": (Tanh,),
    "MaxPool": (MaxPool,),
    "AveragePool": (AveragePool,),
    "Concat": (Concat,),
    "Slice": (Slice,),
    "Split": (Slice,),
    "Pad": (Pad,),
    "ConvTranspose": (ConvTranspose,),
    "Gather": (Gather,),
    "Sign": (Sign,),
    "LeakyRelu": (LeakyRelu,),
    "Clip": (Clip,),
    "ReduceSum": (Reduce,),
    "ReduceMean": (Reduce,),
    "Constant": (),
}
"""ONNX op_type -> the IR op classes it may become (``Constant`` is folded at load time;
``BatchNormalization`` folds into the preceding Conv/Gemm or becomes an :class:`Affine`)."""

__all__ = ["OPS", "AddSub", "Affine", "AveragePool", "Clip", "Concat", "Conv", "ConvTranspose", "Dropout",
           "Gather", "LeakyRelu", "Linear", "MaxPool", "Pad", "Reduce", "Relu", "Reshape", "Sigmoid", "Sign",
           "Slice", "Tanh", "Transpose"]
