"""ONNX Slice (constant starts/ends/axes, positive steps) and Split (one Slice per output).

IBP slices both bounds; CROWN writes A into the sliced positions of a zero A over the input
(the adjoint of a selection; verify.md §2.2, shape ops).

Shape legend: S spec rows, B batch, * node shape without batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpufield.verify.protocols import BackwardInputs

_INT_MAX = 2**62


@dataclass(frozen=True, slots=True)
class Slice:
    """``y = x[:, start_d:stop_d:step_d, ...]`` over the node dims.

    Attributes:
        index: per node dim ``(start, stop, step)`` with ``0 <= start``, ``step >= 1``.
        in_shape: node shape of the input (no batch).
    """

    index: tuple[tuple[int, int, int], ...]
    in_shape: tuple[int, ...]
    n_inputs: int = 1
    nonlinear: bool = False

    @classmethod
    def from_onnx(cls, b, node, attrs, ins):
        """Build from ONNX Slice (opset 1: attributes; 10+: constant inputs) or Split (a list of
        Slices, one per output).

        Raises:
            ModelFormatError: input-dependent starts/ends/axes/steps/split, a negative step, a
                slice of the batch axis, or an empty result.
        """
        ins = list(node.input)  # positional: an omitted optional input is ""
        shape = tuple(b.shapes[ins[0]])
        if node.op_type == "Split":
            return cls._split(b, node, attrs, ins, shape), [ins[0]]

        def const(i, key, default):
            if len(ins) > i and ins[i]:
                if ins[i] not in b.const:
                    raise b.err(f"Slice {key} must be constant", node)
                return [int(v) for v in np.asarray(b.const[ins[i]]).reshape(-1)]
            return list(attrs[key]) if key in attrs else default

        starts, ends = const(1, "starts", None), const(2, "ends", None)
        if starts is None or ends is None:
            raise b.err("Slice needs starts and ends", node)
        axes = const(3, "axes", list(range(len(starts))))
        steps = const(4, "steps", [1] * len(starts))
        full = (1, *shape)
        index = [(0, n, 1) for n in shape]
        for a, s0, e0, st in zip(axes, starts, ends, steps, strict=True):
            a %= len(full)
            if st < 1:
                raise b.err(f"Slice step {st} is not supported (positive steps only)", node)
            n = full[a]
            start = max(0, min(n, s0 + n if s0 < 0 else s0))
            stop = max(0, min(n, e0 + n if e0 < 0 else e0))
            if a == 0:
                if (start, stop) != (0, 1):
                    raise b.err("Slice of the batch axis is not supported", node)
                continue
            if stop <= start:
                raise b.err(f"Slice on axis {a} is empty", node)
            index[a - 1] = (start, stop, st)
        return cls(tuple(index), shape), [ins[0]]

    @classmethod
    def _split(cls, b, node, attrs, ins, shape):
        rank = len(shape) + 1
        axis = int(attrs.get("axis", 0)) % rank
        if axis == 0:
            raise b.err("Split along the batch axis is not supported", node)
        n = shape[axis - 1]
        if len(ins) > 1 and ins[1]:
            if ins[1] not in b.const:
                raise b.err("Split sizes must be constant", node)
            sizes = [int(v) for v in np.asarray(b.const[ins[1]]).reshape(-1)]
        elif "split" in attrs:
            sizes = list(attrs["split"])
        else:
            k = int(attrs.get("num_outputs", len(node.output)))
            step = -(-n // k)
            sizes = [min(step, n - i * step) for i in range(k)]
        if sum(sizes) != n or len(sizes) != len(node.output) or min(sizes) < 1:
            raise b.err(f"Split sizes {sizes} do not cover axis {axis} of length {n} "
                        f"with {len(node.output)} outputs", node)
        ops, start = [], 0
        for s in sizes:
            index = [(0, m, 1) for m in shape]
            index[axis - 1] = (start, start + s, 1)
            ops.append(cls(tuple(index), shape))
            start += s
        return ops

    def _sl(self):
        return tuple(slice(a, z, s) for a, z, s in self.index)

    def forward(self, x):
        """Select the slice (the batch kept)."""
        return x[(slice(None), *self._sl())]

    def ibp(self, b):
        """Slice both bounds."""
        return self.forward(b[0]), self.forward(b[1])

    def backward(self, lA, uA, ctx: BackwardInputs):
        """A placed at the sliced positions of a zero A over the input."""
        def push(A):
            if A is None:
                return None
            out = A.new_zeros(*A.shape[:2], *self.in_shape)
            out[(slice(None), slice(None), *self._sl())] = A
            return out

        return [(push(lA), push(uA))], 0.0, 0.0

    def cast(self, dtype, device):
        """No constants."""
        return self
