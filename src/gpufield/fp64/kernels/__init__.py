"""Fused Triton kernels of the fp64 wing (shared with the emulated FFT).

* :mod:`.residue`: ``scale_residues_triton``: exact power-of-two scaling, truncation and symmetric residues
  for every modulus in one pass (Ozaki-II steps 1-2), int64 and mantissa/exponent paths.
* :mod:`.crt`: ``crt_triton``: mod-p reduction of the raw products, exact CRT in 31-bit limbs, symmetric
  lift, undo-scaling and one correct rounding to float64 (Ozaki-II steps 4-5) in one pass.

Both are bit-identical to the torch references in :mod:`gpufield.fp64.ozaki.residues` and
:mod:`gpufield.fp64.ozaki.crt` (tests/fp64/test_kernels*.py, run on CPU with ``TRITON_INTERPRET=1``).
Importing this package on a machine without CUDA switches Triton to its interpreter (CPU tensors)
before any kernel is defined.
"""

from __future__ import annotations

import os


def _configure_interpreter() -> None:
    try:
        import torch

        has_cuda = torch.cuda.is_available()
    except Exception:  # pragma: no cover
        has_cuda = False
    if not has_cuda:
        os.environ.setdefault("TRITON_INTERPRET", "1")


_configure_interpreter()
