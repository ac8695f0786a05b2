"""ONNX Sigmoid ``y = 1 / (1 + exp(-x))`` with CROWN's S-shaped relaxation.

IBP: ``[σ(l), σ(u)]`` (σ is increasing). CROWN: tangent/chord lines in the convex, concave and
crossing cases of Zhang et al. 2018 (arXiv:1811.00866, Sec. 3.2); see
:mod:`gpufield.verify.ops._sshape` for the cases and why each line is sound. No optimisable
slopes (α-CROWN leaves it at the CROWN lines), no branching.

Shape legend: S spec rows, B batch, * node shape without batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from gpufield.verify.ops._sshape import SShapedOp


def _dsigmoid(x):
    s = torch.sigmoid(x)
    return s * (1 - s)


@dataclass(frozen=True, slots=True)
class Sigmoid(SShapedOp):
    """``y = σ(x)`` elementwise (methods: :class:`gpufield.verify.ops._sshape.SShapedOp`)."""

    n_inputs: int = 1
    nonlinear: bool = True
    relu_relaxation: bool = False
    fn = staticmethod(torch.sigmoid)
    dfn = staticmethod(_dsigmoid)
