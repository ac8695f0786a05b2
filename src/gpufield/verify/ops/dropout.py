"""ONNX Dropout at inference: the identity (ONNX operator spec: with ``training_mode`` false,
the default, "the output Y will be an exact copy of X"; the optional mask output is all true).

A model that asks for training mode (a constant ``training_mode`` input that is true, or one that
depends on the input), or whose mask output is read by another node, is refused: its output
would be random.

Shape legend: S spec rows, B batch, * node shape without batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpufield.verify.protocols import BackwardInputs


@dataclass(frozen=True, slots=True)
class Dropout:
    """``y = x`` (inference-mode Dropout; ``ratio`` is recorded for messages only).

    Attributes:
        ratio: the model's drop probability (unused at inference).
    """

    ratio: float = 0.5
    n_inputs: int = 1
    nonlinear: bool = False

    @classmethod
    def from_onnx(cls, b, node, attrs, ins):
        """Build from an ONNX Dropout node (opsets 1-22) for the loader ``b``.

        Raises:
            ModelFormatError: training mode (constant true or input-dependent), or the mask output
                is consumed.
        """
        if int(attrs.get("is_test", 1)) == 0:  # opset < 7 attribute
            raise b.err("Dropout with is_test=0 (training mode) is random; export the model in eval mode", node)
        ins = list(node.input)  # positional: an omitted optional input is ""
        if len(ins) > 2 and ins[2]:
            tm = ins[2]
            if tm not in b.const:
                raise b.err("Dropout training_mode depends on the input", node)
            if bool(np.asarray(b.const[tm]).reshape(-1)[0]):
                raise b.err("Dropout with training_mode=true is random; export the model in eval mode", node)
        if len(node.output) > 1 and node.output[1] and b.uses.get(node.output[1], 0):
            raise b.err("the Dropout mask output is used by another node", node)
        ratio = float(np.asarray(b.const[ins[1]]).reshape(-1)[0]) if len(ins) > 1 and ins[1] in b.const \
            else float(attrs.get("ratio", 0.5))
        return cls(ratio), [ins[0]]

    def forward(self, x):
        """Identity."""
        return x

    def ibp(self, b):
        """The input bounds."""
        return b[0], b[1]

    def backward(self, lA, uA, ctx: BackwardInputs):
        """A passes through unchanged, no bias."""
        return [(lA, uA)], 0.0, 0.0

    def cast(self, dtype, device):
        """No constants."""
        return self
