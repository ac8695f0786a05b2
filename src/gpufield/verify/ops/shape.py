"""Shape-only ops: Flatten, Reshape, Squeeze, Unsqueeze, Identity (:class:`Reshape`) and
Transpose (:class:`Transpose`). They move coefficients without changing values.

Shape legend: S spec rows, B batch, * node shape without batch.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpufield.verify.protocols import BackwardInputs


@dataclass(frozen=True, slots=True)
class Reshape:
    """Row-major reshape of the non-batch dimensions: ``[B, *in] -> [B, *out]``.

    Attributes:
        in_shape: node shape of the input (no batch).
        out_shape: node shape of the output (no batch).
    """

    in_shape: tuple[int, ...]
    out_shape: tuple[int, ...]
    n_inputs: int = 1
    nonlinear: bool = False

    def forward(self, x):
        """Reshape keeping the batch."""
        return x.reshape(x.shape[0], *self.out_shape)

    def ibp(self, b):
        """Reshape both bounds."""
        return self.forward(b[0]), self.forward(b[1])

    def backward(self, lA, uA, ctx: BackwardInputs):
        """Reshape the trailing dims of A back to the input shape."""
        def push(A):
            return None if A is None else A.reshape(*A.shape[:2], *self.in_shape)

        return [(push(lA), push(uA))], 0.0, 0.0

    def linear_forward(self, Lw, Lb, Uw, Ub):
        """Forward-mode linear bounds: reshape values and coefficient rows (``[B, *, N]``)."""
        B, N = Lb.shape[0], Lw.shape[-1]
        return (Lw.reshape(B, *self.out_shape, N), Lb.reshape(B, *self.out_shape),
                Uw.reshape(B, *self.out_shape, N), Ub.reshape(B, *self.out_shape))

    def cast(self, dtype, device):
        """No constants."""
        return self


@dataclass(frozen=True, slots=True)
class Transpose:
    """Permutation of the non-batch dimensions (ONNX Transpose with ``perm[0] == 0``).

    Attributes:
        perm: permutation of the non-batch dims, 0-based over ``*`` (ONNX perm minus one, first dropped).
    """

    perm: tuple[int, ...]
    n_inputs: int = 1
    nonlinear: bool = False

    def forward(self, x):
        """``x.permute(0, *(p + 1))``."""
        return x.permute(0, *(p + 1 for p in self.perm))

    def ibp(self, b):
        """Permute both bounds."""
        return self.forward(b[0]), self.forward(b[1])

    def backward(self, lA, uA, ctx: BackwardInputs):
        """Apply the inverse permutation to A's trailing dims."""
        inv = [0] * len(self.perm)
        for i, p in enumerate(self.perm):
            inv[p] = i

        def push(A):
            return None if A is None else A.permute(0, 1, *(q + 2 for q in inv))

        return [(push(lA), push(uA))], 0.0, 0.0

    def cast(self, dtype, device):
        """No constants."""
        return self
