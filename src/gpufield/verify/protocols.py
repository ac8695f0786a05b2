"""Extension points of the verifier: the per-op contract :class:`BoundOp`.

Shape legend (letters local to this file):
    S: spec rows (neurons being bounded, or rows of the property matrix C)
    B: batch (input boxes / later branch-and-bound domains)
    *: the node's own shape without the batch dimension
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:  # pragma: no cover
    import torch

    Tensor = torch.Tensor


@dataclass(frozen=True, slots=True)
class BackwardInputs:
    """What one backward (CROWN) step of an op may read besides the A-matrices.

    Attributes:
        in_bounds: per perturbed input, ``(lower_B*, upper_B*)`` intermediate bounds or None
            where the op does not need them (only non-linear ops do).
        alpha_lower: ReLU lower-bound slopes used for the lower-bound pass, broadcastable to
            ``[S, B, *]``; None selects the adaptive CROWN slope.
        alpha_upper: the same for the upper-bound pass.
    """

    in_bounds: tuple[tuple[Tensor, Tensor] | None, ...]
    alpha_lower: Tensor | None = None
    alpha_upper: Tensor | None = None


@runtime_checkable
class BoundOp(Protocol):
    """One operator of the IR: exact forward, interval (IBP) and linear (CROWN) rules.

    Constants (weights, shifts, target shapes) live inside the op; only perturbed tensors are
    graph edges. Every tensor carries the batch as its leading dimension.
    """

    n_inputs: int
    """How many perturbed inputs the op takes (1, or 2 for tensor-tensor Add/Sub)."""

    nonlinear: bool
    """True when :meth:`backward` needs intermediate bounds of its inputs (ReLU, Sigmoid, ...).

    A non-linear op may also set ``relu_relaxation = False`` (optional attribute, default True):
    its relaxation is not ReLU's, so α-CROWN gives it no slopes (it is called with
    ``alpha_lower = alpha_upper = None``), and branch and bound and the MIP are not run on a
    graph containing it (:attr:`gpufield.verify.graph.Graph.relu_only`)."""

    def forward(self, *xs: Tensor) -> Tensor:
        """Exact forward. ``xs[i]``: ``[B, *in_i]``; returns ``[B, *out]``."""
        ...

    def ibp(self, *bounds: tuple[Tensor, Tensor]) -> tuple[Tensor, Tensor]:
        """Interval bounds of the output from interval bounds ``(lo, hi)`` of the inputs."""
        ...

    def backward(
        self, lA: Tensor | None, uA: Tensor | None, ctx: BackwardInputs
    ) -> tuple[list[tuple[Tensor | None, Tensor | None]], Tensor | float, Tensor | float]:
        """CROWN step: push ``lA_SB*``/``uA_SB*`` (coefficients of this op's output) to the inputs.

        Returns:
            ``([(lA_i, uA_i) per input], lbias_SB, ubias_SB)`` such that for all inputs within
            their bounds ``lA·out >= Σ lA_i·in_i + lbias`` and ``uA·out <= Σ uA_i·in_i + ubias``.
        """
        ...

    def cast(self, dtype: torch.dtype, device: torch.device | str) -> BoundOp:
        """A copy of the op with its constants in ``dtype`` on ``device``."""
        ...
