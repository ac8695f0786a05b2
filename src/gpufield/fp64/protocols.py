"""Extension points of the fp64 wing.

:class:`ModularBackend` (also known as ``GemmBackend``) is what differs between the CPU-exact, INT8 and FP8
implementations of Ozaki scheme II: the low-precision products of residue planes, the exact bound product
of accurate mode, and the CRT implementation. Scaling, residues and the driver are shared
(``gpufield.fp64.ozaki``).

Shape legend: L moduli, M rows of A, N columns of B, K inner dimension.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from gpufield.fp64.ozaki.moduli import ModuliTable


@runtime_checkable
class ModularBackend(Protocol):
    """One way to compute exact modular products of residue planes (Ozaki scheme II step 3, fp64.md 2.1).

    Attributes:
        name: registry key (``"cpu-exact"``, ``"int8"``, ``"fp8"``).
        moduli_kind: which moduli table it needs (``"int8"`` or ``"fp8"``).
        residue_dtype: dtype of the residue planes it consumes (int8 or int16).
        bound_ufp: accurate mode: entries of the bound operands are integers in [0, 2**bound_ufp].
    """

    name: str
    moduli_kind: str
    residue_dtype: torch.dtype
    bound_ufp: int

    def modular_matmul(
        self, resA_LMK: torch.Tensor, resB_LNK: torch.Tensor, table: ModuliTable
    ) -> torch.Tensor:
        """Products of residue planes, exact as integers.

        Args:
            resA_LMK: symmetric residues of A' per modulus, ``residue_dtype``.
            resB_LNK: symmetric residues of B'^T per modulus (B stored transposed = column-major).
            table: the moduli table.

        Returns:
            int32 or int64 [L, M, N], entry congruent to sum_k resA[l,m,k]*resB[l,n,k] mod p_l, |x| < 2**62.
        """
        ...

    def bound_matmul(self, hiA_MK: torch.Tensor, hiB_NK: torch.Tensor) -> torch.Tensor:
        """Exact product of small non-negative integer matrices (accurate-mode bound, fp64.md 2.3).

        Args:
            hiA_MK: int64 [M, K], entries in [0, 2**bound_ufp].
            hiB_NK: int64 [N, K], same range.

        Returns:
            int64 [M, N] = hiA @ hiB.T exactly.
        """
        ...

    def reconstruct(
        self, res_LMN: torch.Tensor, s_M: torch.Tensor, t_N: torch.Tensor, table: ModuliTable
    ) -> torch.Tensor:
        """CRT with the symmetric lift and one rounding of X * 2**-shift (fp64.md 2.1 steps 4-5).

        Args:
            res_LMN: integers congruent to the residues of the exact product [L, M, N].
            s_M: int64 [M] row shifts of A; t_N: int64 [N] column shifts of B (X_ij is scaled by 2**-(s_i+t_j)).
            table: the moduli table.

        Returns:
            float64 [M, N].
        """
        ...


GemmBackend = ModularBackend
"""Alias used in docs/style.md."""
