"""ONNX -> :class:`~gpufield.verify.graph.Graph` (the only module that imports ``onnx``).

Supported op types are the keys of :data:`gpufield.verify.ops.OPS`. Constant subgraphs
(initializers, ``Constant`` nodes and nodes whose inputs are all constant) are folded; eval-mode
BatchNormalization is folded into a preceding Conv/Gemm whose only consumer it is (abcrown's
``merge_bn``), otherwise it becomes a per-channel affine op. The ONNX input's first dimension is
the batch; every other dimension is the node shape.

Shape legend: B batch, * node shape without batch.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from gpufield._files import read_bytes
from gpufield.errors import InputError, ModelFormatError, require
from gpufield.verify.graph import Graph, Node
from gpufield.verify.ops import OPS, AddSub, Affine, Conv, Linear, Relu, Reshape, Transpose

_FOLDABLE = {
    "Identity": lambda a, at: a[0],
    "Dropout": lambda a, at: a[0],
    "Sigmoid": lambda a, at: 1 / (1 + np.exp(-a[0])),
    "Tanh": lambda a, at: np.tanh(a[0]),
    "Concat": lambda a, at: np.concatenate(a, axis=at.get("axis", 0)),
    "Add": lambda a, at: a[0] + a[1],
    "Sub": lambda a, at: a[0] - a[1],
    "Mul": lambda a, at: a[0] * a[1],
    "Div": lambda a, at: a[0] / a[1],
    "Relu": lambda a, at: np.maximum(a[0], 0),
    "MatMul": lambda a, at: a[0] @ a[1],
    "Transpose": lambda a, at: np.transpose(a[0], at.get("perm")),
    "Reshape": lambda a, at: a[0].reshape([d if d != 0 else a[0].shape[i] for i, d in enumerate(a[1])]),
    "Flatten": lambda a, at: a[0].reshape(int(np.prod(a[0].shape[: at.get("axis", 1)])), -1),
}


def _read_model(path: str | Path):
    onnx = require("onnx", "verify")
    p = Path(path)
    try:
        data = read_bytes(p)  # .gz gunzipped; truncated: InputError naming the file
        if not data.strip(b"\0"):  # protobuf parses nothing as an empty model
            raise ModelFormatError("empty file; expected an ONNX model (protobuf ModelProto)", path=str(path))
        return onnx.load_model_from_string(data)
    except InputError:  # names the file already (truncated .gz, a FIFO without writer, empty)
        raise
    except FileNotFoundError as e:
        raise ModelFormatError("model file not found", path=str(path)) from e
    except IsADirectoryError as e:
        raise ModelFormatError("is a directory; expected an ONNX model file", path=str(path)) from e
    except Exception as e:  # protobuf decode errors
        raise ModelFormatError(f"not a readable ONNX model ({e})", path=str(path)) from e


def load_onnx(path: str | Path) -> Graph:
    """Load an ONNX model into the verifier IR.

    Args:
        path: ``.onnx`` file (or ``.onnx.gz``).

    Returns:
        The graph with float32 constants on CPU (float64 for a model with a DOUBLE input).

    Raises:
        ModelFormatError: unreadable file, several inputs/outputs, an input that is neither FLOAT
            nor DOUBLE, or unsupported ops: one error listing every unsupported op type with its
            node names.
    """
    model = _read_model(path)
    return _Builder(model, str(path)).build()


class _Builder:
    def __init__(self, model, path: str):
        from onnx import helper, numpy_helper

        self.h, self.nh, self.path, self.g = helper, numpy_helper, path, model.graph
        self.const: dict[str, np.ndarray] = {
            t.name: numpy_helper.to_array(t) for t in self.g.initializer
        }
        self.nodes: list[Node] = []
        self.shapes: dict[str, tuple[int, ...]] = {}
        self.uses: dict[str, int] = {}
        for n in self.g.node:
            for i in n.input:
                self.uses[i] = self.uses.get(i, 0) + 1

    def err(self, msg: str, node=None) -> ModelFormatError:
        where = f"node {node.name or '<unnamed>'} ({node.op_type}): " if node is not None else ""
        return ModelFormatError(where + msg, path=self.path)

    def build(self) -> Graph:
        bad: dict[str, list[str]] = {}
        for n in self.g.node:
            if n.op_type not in OPS:
                bad.setdefault(n.op_type, []).append(n.name or "<unnamed>")
        if bad:
            listing = "; ".join(f"{op} (nodes: {', '.join(names)})" for op, names in sorted(bad.items()))
            raise self.err(f"unsupported ONNX op types: {listing}")
        inputs = [i for i in self.g.input if i.name not in self.const]
        if len(inputs) != 1 or len(self.g.output) != 1:
            raise self.err(f"expected 1 input and 1 output, found {len(inputs)} and {len(self.g.output)}")
        dims = [d.dim_value if d.HasField("dim_value") else -1 for d in inputs[0].type.tensor_type.shape.dim]
        if len(dims) < 2 or any(d <= 0 for d in dims[1:]):
            raise self.err(f"input {inputs[0].name!r} must be [batch, ...] with fixed non-batch dims, got {dims}")
        from onnx import TensorProto

        et = inputs[0].type.tensor_type.elem_type
        if et not in (TensorProto.FLOAT, TensorProto.DOUBLE):
            name = TensorProto.DataType.Name(et) if et in TensorProto.DataType.values() else str(et)
            raise self.err(f"input {inputs[0].name!r} has element type {name}; only FLOAT and DOUBLE "
                           "inputs are supported")
        # a DOUBLE model keeps its constants in float64 (rounding them to float32 would make the
        # float64 re-check bound a different network)
        self.ft = np.float64 if et == TensorProto.DOUBLE else np.float32
        self.in_name = inputs[0].name
        self.shapes[self.in_name] = tuple(dims[1:])
        for n in self.g.node:
            self.add(n)
        out = self.g.output[0].name
        if out not in self.shapes:
            raise self.err(f"output {out!r} does not depend on the input")
        return Graph(self.in_name, self.shapes[self.in_name], tuple(self.nodes), out, self.path)

    def attrs(self, n) -> dict:
        return {a.name: self.h.get_attribute_value(a) for a in n.attribute}

    def add(self, n) -> None:
        at = self.attrs(n)
        ins = [i for i in n.input if i]
        if n.op_type == "Constant":
            if "value" in at:
                self.const[n.output[0]] = self.nh.to_array(at["value"])
            else:
                key = next(iter(at))
                self.const[n.output[0]] = np.asarray(at[key], dtype=np.float32 if "float" in key else np.int64)
            return
        if all(i in self.const for i in ins):
            if n.op_type not in _FOLDABLE:
                raise self.err("cannot fold this op on constant inputs", n)
            self.const[n.output[0]] = np.asarray(_FOLDABLE[n.op_type]([self.const[i] for i in ins], at))
            return
        missing = [i for i in ins if i not in self.const and i not in self.shapes]
        if missing:
            raise self.err(f"inputs {missing} are not produced before this node", n)
        op, edge_inputs = self.make_op(n, at, ins)
        if op is None:
            return  # folded into the previous node
        if isinstance(op, list):  # one op per output (Split)
            for name, o in zip(n.output, op, strict=True):
                self.push(n, o, edge_inputs, name=name)
            return
        self.push(n, op, edge_inputs)

    def push(self, n, op, edge_inputs, name=None) -> None:
        dummies = [torch.zeros(1, *self.shapes[i], dtype=torch.float64 if self.ft == np.float64 else torch.float32)
                   for i in edge_inputs]
        try:
            y = op.forward(*dummies)
        except RuntimeError as e:
            raise self.err(f"shape error: {e}", n) from e
        name = name or n.output[0]
        self.shapes[name] = tuple(y.shape[1:])
        self.nodes.append(Node(name, op, tuple(edge_inputs), self.shapes[name], n.name))

    def t(self, a) -> torch.Tensor:
        return torch.as_tensor(np.asarray(a, dtype=self.ft).copy())

    def const_operand(self, c: np.ndarray, shape, n):
        """Strip a leading batch dim of 1 so the constant broadcasts against ``[B, *shape]``."""
        c = np.asarray(c, dtype=self.ft)
        if c.ndim == len(shape) + 1:
            if c.shape[0] != 1:
                raise self.err(f"constant operand of shape {c.shape} varies along the batch dim", n)
            c = c[0]
        if c.ndim > len(shape):
            raise self.err(f"constant operand of shape {c.shape} has more dims than the input", n)
        return self.t(c) if c.size > 1 else float(c.reshape(-1)[0])

    def make_op(self, n, at, ins):
        ty = n.op_type
        x = ins[0]
        shape = self.shapes.get(x)
        build = getattr(OPS[ty][0], "from_onnx", None) if OPS[ty] else None
        if build is not None:  # the op class builds itself (see gpufield.verify.ops.OPS)
            return build(self, n, at, ins)
        if ty == "Relu":
            return Relu(), [x]
        if ty == "Gemm":
            if at.get("transA", 0) or x in self.const or ins[1] not in self.const:
                raise self.err("only Gemm(x, constant B) with transA=0 is supported", n)
            B = self.const[ins[1]]
            W = (B if at.get("transB", 0) else B.T) * at.get("alpha", 1.0)
            b = None
            if len(ins) > 2:
                b = np.broadcast_to(self.const[ins[2]] * at.get("beta", 1.0), (W.shape[0],))
            return Linear(self.t(W), None if b is None else self.t(b)), [x]
        if ty == "MatMul":
            if x in self.const or ins[1] not in self.const or self.const[ins[1]].ndim != 2:
                raise self.err("only MatMul(x, constant 2-D matrix) is supported", n)
            return Linear(self.t(self.const[ins[1]].T), None), [x]
        if ty in ("Add", "Sub", "Mul", "Div"):
            return self.elementwise(n, ty, ins)
        if ty in ("Flatten", "Reshape", "Squeeze", "Unsqueeze", "Identity"):
            return Reshape(shape, self.reshape_target(n, at, ins, shape)), [x]
        if ty == "Transpose":
            perm = at.get("perm", list(range(len(shape) + 1))[::-1])
            if perm[0] != 0:
                raise self.err(f"Transpose perm {perm} moves the batch dimension", n)
            return Transpose(tuple(p - 1 for p in perm[1:])), [x]
        if ty == "Conv":
            return self.conv(n, at, ins, shape)
        if ty == "BatchNormalization":
            return self.batchnorm(n, at, ins, shape)
        raise self.err("unsupported op", n)  # pragma: no cover - OPS is checked first

    def elementwise(self, n, ty, ins):
        a, b = ins[0], ins[1]
        if a not in self.const and b not in self.const:
            if ty in ("Mul", "Div"):
                raise self.err(f"{ty} of two input-dependent tensors is not supported", n)
            return AddSub(1.0 if ty == "Add" else -1.0, (self.shapes[a], self.shapes[b])), [a, b]
        x, c = (a, self.const[b]) if b in self.const else (b, self.const[a])
        shape = self.shapes[x]
        cc = self.const_operand(c, shape, n)
        out = tuple(np.broadcast_shapes(shape, np.shape(cc) if torch.is_tensor(cc) else ()))
        if ty == "Add":
            return Affine(1.0, cc, shape, out), [x]
        if ty == "Sub":
            return (Affine(1.0, -cc, shape, out) if x == a else Affine(-1.0, cc, shape, out)), [x]
        if ty == "Mul":
            return Affine(cc, 0.0, shape, out), [x]
        if x != a:
            raise self.err("division by an input-dependent tensor is not supported", n)
        return Affine(1.0 / cc, 0.0, shape, out), [x]

    def reshape_target(self, n, at, ins, shape):
        ty, full = n.op_type, (1, *shape)
        if ty == "Identity":
            return shape
        if ty == "Flatten":
            if at.get("axis", 1) != 1:
                raise self.err(f"Flatten axis={at.get('axis')} would merge the batch dimension", n)
            return (int(np.prod(shape)),)
        if ty in ("Squeeze", "Unsqueeze"):
            axes = at.get("axes")
            if axes is None and len(ins) > 1:
                axes = self.const[ins[1]].tolist()
            rank = len(full) + (len(axes) if ty == "Unsqueeze" and axes else 0)
            axes = [a % rank for a in (axes or [i for i, d in enumerate(full) if d == 1 and i > 0])]
            if 0 in axes:
                raise self.err(f"{ty} axes {axes} touch the batch dimension", n)
            arr = np.zeros(full)
            arr = np.squeeze(arr, tuple(axes)) if ty == "Squeeze" else np.expand_dims(arr, tuple(axes))
            return tuple(arr.shape[1:])
        target = [int(d) for d in self.const[ins[1]]]
        if target[0] not in (-1, 0, 1):
            raise self.err(f"Reshape target {target} does not keep the batch as dim 0", n)
        rest = [shape[i] if d == 0 and i < len(shape) else d for i, d in enumerate(target[1:])]
        if target[0] == -1 and -1 in rest:
            raise self.err(f"Reshape target {target} leaves the batch size ambiguous", n)
        try:
            out = np.zeros(shape).reshape(rest).shape if rest else ()
        except ValueError as e:
            raise self.err(f"Reshape target {target} does not fit input shape {shape}", n) from e
        return tuple(out)

    def conv(self, n, at, ins, shape):
        K = self.const.get(ins[1])
        if K is None or K.ndim != 4 or len(shape) != 3:
            raise self.err("only 2-D Conv with a constant kernel is supported", n)
        pads = list(at.get("pads", [0, 0, 0, 0]))
        if at.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET") or pads[:2] != pads[2:]:
            raise self.err(f"only explicit symmetric padding is supported (pads={pads})", n)
        b = self.t(self.const[ins[2]]) if len(ins) > 2 else None
        op = Conv(self.t(K), b, tuple(at.get("strides", [1, 1])), tuple(pads[:2]),
                  tuple(at.get("dilations", [1, 1])), int(at.get("group", 1)), tuple(shape[1:]))
        return op, [ins[0]]

    def batchnorm(self, n, at, ins, shape):
        gamma, beta, mean, var = (np.asarray(self.const[i], dtype=np.float64) for i in ins[1:5])
        s = gamma / np.sqrt(var + at.get("epsilon", 1e-5))
        t = beta - s * mean
        x = ins[0]
        prev = self.nodes[-1] if self.nodes and self.nodes[-1].name == x else None
        if prev is not None and self.uses.get(x, 0) == 1 and x not in {o.name for o in self.g.output}:
            op = prev.op
            if isinstance(op, Conv):
                b = op.b.double().numpy() if op.b is not None else 0.0
                K = op.K.double().numpy() * s[:, None, None, None]
                folded = Conv(self.t(K), self.t(b * s + t), op.stride, op.padding, op.dilation,
                              op.groups, op.in_hw)
            elif isinstance(op, Linear) and len(shape) == 1:
                b = op.b_O.double().numpy() if op.b_O is not None else 0.0
                folded = Linear(self.t(op.W_OI.double().numpy() * s[:, None]), self.t(b * s + t))
            else:
                folded = None
            if folded is not None:
                self.nodes.pop()
                self.push(n, folded, list(prev.inputs), name=n.output[0])
                return None, None
        bshape = (len(s),) + (1,) * (len(shape) - 1)
        return Affine(self.t(s.reshape(bshape)), self.t(t.reshape(bshape)), shape, shape), [x]
