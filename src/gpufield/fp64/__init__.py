"""gpufield.fp64: FP64 products emulated on INT8/FP8 tensor cores (Ozaki scheme II), see README.

Public API:

* :func:`ozaki_matmul`: float64/complex128 (batched) matrix product through the CRT (backends ``int8``,
  ``fp8``, ``cpu-exact``; modes ``fast``, ``accurate``).
* :func:`ozaki_error_bound`: the a-priori entrywise error bound of that product.
* :class:`ModularBackend`: the backend Protocol (see :mod:`gpufield.fp64.protocols`).
* :func:`moduli_table` / :class:`ModuliTable`: the INT8/FP8 moduli and CRT constants.
"""

from gpufield.fp64.ozaki.gemm import ozaki_error_bound, ozaki_matmul
from gpufield.fp64.ozaki.moduli import ModuliTable, moduli_table
from gpufield.fp64.protocols import ModularBackend

__all__: list[str] = [
    "ModularBackend",
    "ModuliTable",
    "moduli_table",
    "ozaki_error_bound",
    "ozaki_matmul",
    # --- FFT (issue 7) exports go below this line ---
]
