"""Fused Triton kernels of the fp64 wing (shared with the emulated FFT).

* :mod:`.residue`: ``scale_residues_triton``: exact power-of-two scaling, truncation and symmetric residues
  for every modulus in one pass (Ozaki-II steps 1-2), int64 and mantissa/exponent paths.
* :mod:`.crt`: ``crt_triton``: mod-p reduction of the raw products, exact CRT in 31-bit limbs, symmetric
  lift, undo-scaling and one correct rounding to float64 (Ozaki-II steps 4-5) in one pass.

Both are bit-identical to the torch references in :mod:`gpufield.fp64.ozaki.residues` and
:mod:`gpufield.fp64.ozaki.crt` (tests/fp64/test_kernels*.py, run on CPU with ``TRITON_INTERPRET=1``).

Importing this package changes nothing in the process environment. The Triton kernels run on CPU tensors in
Triton's interpreter, which Triton fixes when it defines a function (``@triton.jit``), its own functions
included, i.e. when triton is first imported: :func:`enable_cpu_interpreter` sets ``TRITON_INTERPRET=1``
then, and the call sites that run a Triton kernel on a CPU tensor (:func:`require_cpu_interpreter`: the FFT
with ``epilogue="triton"``, the Ozaki backends with ``kernels="triton"``) call it before they import any
kernel module.
"""

from __future__ import annotations

import os
import sys

from gpufield.errors import InputError


def interpreter_on() -> bool:
    """``TRITON_INTERPRET`` read as Triton reads it: a boolean, on for 1, true, on, yes or y in any case."""
    return os.environ.get("TRITON_INTERPRET", "").strip().lower() in ("1", "true", "on", "yes", "y")


def _triton_made_for_gpu() -> bool:
    """True when triton is imported and its own @jit functions were made for a GPU (interpreter off then)."""
    std = sys.modules.get("triton.language.standard")
    if std is None:
        return False
    from triton.runtime.interpreter import InterpretedFunction

    return not isinstance(getattr(std, "zeros_like", None), InterpretedFunction)


def enable_cpu_interpreter() -> bool:
    """Turn Triton's interpreter on for this process, so that the Triton kernels run on CPU tensors.

    Sets ``TRITON_INTERPRET=1`` when the variable is unset and triton is not imported yet (afterwards
    Triton's own functions are already made for a GPU and setting it would turn the interpreter only partly
    on). A value the user set (e.g. ``0``) is kept. Call it before importing triton in a process that runs
    the Triton kernels on CPU; gpufield calls it itself at the first such call.

    Returns:
        True when the interpreter is fully on afterwards.
    """
    if "TRITON_INTERPRET" not in os.environ and "triton" not in sys.modules:
        os.environ["TRITON_INTERPRET"] = "1"
    return interpreter_on() and not _triton_made_for_gpu()


def require_cpu_interpreter() -> None:
    """Make sure the Triton kernels can run on CPU tensors here: :func:`enable_cpu_interpreter`, then check.

    Raises:
        InputError: ``TRITON_INTERPRET`` is set off (the kernels would be compiled for a GPU that is not
            there), or triton was imported with the interpreter off (its own functions are then not
            interpretable); the message says what to change.
    """
    if enable_cpu_interpreter():
        return
    if not interpreter_on() and "TRITON_INTERPRET" in os.environ:
        raise InputError("the Triton kernels run on CUDA tensors, or on CPU tensors in Triton's interpreter, "
                         f"which is off (TRITON_INTERPRET={os.environ.get('TRITON_INTERPRET')!r}; unset it or "
                         "set TRITON_INTERPRET=1 before Python starts); or use the torch path "
                         "(epilogue='torch', kernels='torch')")
    raise InputError("triton was imported before gpufield turned Triton's interpreter on, on this machine without "
                     "CUDA, so the interpreter is off or only partly on: call "
                     "gpufield.fp64.enable_cpu_interpreter() before importing triton, or set TRITON_INTERPRET=1 "
                     "before Python starts")
