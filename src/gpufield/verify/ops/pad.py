"""ONNX Pad, ``mode=constant``, with constant non-negative pads and value, batch axis unpadded.

IBP pads both bounds with the value; CROWN crops A back to the input and adds the bias
``value · Σ A`` over the padded border (verify.md §2.2, shape ops).

Shape legend: S spec rows, B batch, * node shape without batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch.nn.functional as F

from gpufield.verify.protocols import BackwardInputs


@dataclass(frozen=True, slots=True)
class Pad:
    """``y = pad(x, pads, value)`` over the node dims.

    Attributes:
        pads: per node dim ``(before, after)``, non-negative.
        value: the constant written into the border.
    """

    pads: tuple[tuple[int, int], ...]
    value: float
    n_inputs: int = 1
    nonlinear: bool = False

    @classmethod
    def from_onnx(cls, b, node, attrs, ins):
        """Build from an ONNX Pad node (opset 2: attributes; 11+: constant inputs, ``axes`` 18+).

        Raises:
            ModelFormatError: a mode other than constant, input-dependent or negative pads,
                or padding of the batch axis.
        """
        mode = attrs.get("mode", b"constant")
        mode = mode.decode() if isinstance(mode, bytes) else mode
        if mode != "constant":
            raise b.err(f"Pad mode={mode} is not supported (constant only)", node)
        ins = list(node.input)  # positional: an omitted optional input is ""
        shape = b.shapes[ins[0]]
        rank = len(shape) + 1
        for i in ins[1:]:
            if i and i not in b.const:
                raise b.err("Pad pads, value and axes must be constant", node)
        pads = [int(v) for v in np.asarray(b.const[ins[1]]).reshape(-1)] if len(ins) > 1 and ins[1] \
            else list(attrs.get("pads", []))
        value = float(np.asarray(b.const[ins[2]]).reshape(-1)[0]) if len(ins) > 2 and ins[2] \
            else float(attrs.get("value", 0.0))
        axes = [int(a) % rank for a in np.asarray(b.const[ins[3]]).reshape(-1)] if len(ins) > 3 and ins[3] \
            else list(range(rank))
        if len(pads) != 2 * len(axes):
            raise b.err(f"Pad pads {pads} do not match {len(axes)} axes", node)
        per = {a: (pads[k], pads[k + len(axes)]) for k, a in enumerate(axes)}
        if any(v < 0 for v in pads):
            raise b.err(f"negative Pad pads {pads} are not supported", node)
        if per.get(0, (0, 0)) != (0, 0):
            raise b.err("Pad of the batch axis is not supported", node)
        return cls(tuple(per.get(a, (0, 0)) for a in range(1, rank)), value), [ins[0]]

    def _flat(self):
        out = []
        for before, after in reversed(self.pads):  # F.pad: last dim first
            out += [before, after]
        return out

    def forward(self, x):
        """Pad with ``value``."""
        return F.pad(x, self._flat(), value=self.value)

    def ibp(self, b):
        """Pad both bounds with ``value``."""
        return self.forward(b[0]), self.forward(b[1])

    def _crop(self, A):
        sl = tuple(slice(p0, A.shape[2 + i] - p1) for i, (p0, p1) in enumerate(self.pads))
        return A[(slice(None), slice(None), *sl)]

    def _bias(self, A):
        if self.value == 0.0:
            return 0.0
        return self.value * (A.flatten(2).sum(-1) - self._crop(A).flatten(2).sum(-1))

    def backward(self, lA, uA, ctx: BackwardInputs):
        """Crop A to the input; the border contributes ``value · Σ A`` to the bias."""
        out = [(None if lA is None else self._crop(lA), None if uA is None else self._crop(uA))]
        return out, (0.0 if lA is None else self._bias(lA)), (0.0 if uA is None else self._bias(uA))

    def cast(self, dtype, device):
        """No tensor constants."""
        return self
