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
import sys

from gpufield.errors import InputError

_PARTIAL_INTERPRETER = False
"""True when triton was imported before this package turned its interpreter on (no CUDA): triton.language's
own @jit functions (``tl.zeros``, ...) were then made for a GPU, and a kernel run on CPU fails inside."""


def _configure_interpreter() -> None:
    global _PARTIAL_INTERPRETER
    try:
        import torch

        has_cuda = torch.cuda.is_available()
    except Exception:  # pragma: no cover
        has_cuda = False
    if not has_cuda:
        _PARTIAL_INTERPRETER = "triton" in sys.modules and not interpreter_on()
        os.environ.setdefault("TRITON_INTERPRET", "1")


def interpreter_on() -> bool:
    """``TRITON_INTERPRET`` read as Triton reads it: a boolean, on for 1, true, on, yes or y in any case."""
    return os.environ.get("TRITON_INTERPRET", "").strip().lower() in ("1", "true", "on", "yes", "y")


def require_cpu_interpreter() -> None:
    """Check that the Triton kernels can run on CPU tensors here (Triton's interpreter, fully on).

    Raises:
        InputError: ``TRITON_INTERPRET`` is not ``1`` (the kernels would be compiled for a GPU that is not
            there), or triton was imported before gpufield on a machine without CUDA (its own functions
            are then not interpretable); the message says what to change.
    """
    if not interpreter_on():
        raise InputError("the Triton kernels run on CUDA tensors, or on CPU tensors in Triton's interpreter, "
                         f"which is off (TRITON_INTERPRET={os.environ.get('TRITON_INTERPRET')!r}; gpufield "
                         "turns it on where there is no CUDA, or set TRITON_INTERPRET=1 before Python starts); "
                         "or use the torch path (epilogue='torch', kernels='torch')")
    if _PARTIAL_INTERPRETER:
        raise InputError("triton was imported before gpufield on this machine without CUDA, so Triton's "
                         "interpreter is only partly on: import gpufield.fp64 before triton, or set "
                         "TRITON_INTERPRET=1 before Python starts")


_configure_interpreter()
