"""Ozaki scheme II: FP64 matrix products on INT8 / FP8 tensor cores through the CRT (internal package).

Public entry points are re-exported by :mod:`gpufield.fp64`. Internal modules, reusable by other fp64 code
(the emulated FFT builds on them):

* :mod:`.moduli`: INT8/FP8 moduli tables (``data/moduli.json``), :func:`~.moduli.moduli_table`, CRT constants,
  :func:`~.moduli.sym_mod`, :func:`~.moduli.crt_lift`.
* :mod:`.residues`: exact power-of-two scaling + truncation, symmetric residues (int64 and mantissa/exponent
  paths), FP8 two-digit planes and their recombination.
* :mod:`.crt`: exact CRT with the symmetric lift and a single correct rounding (Python-int oracle and
  vectorised 31-bit-limb version).
* :mod:`.scaling`: fast (Cauchy-Schwarz) and accurate (extra low-precision bound product) shifts.
* :mod:`.backends`: the GEMM backends (``cpu-exact``, ``int8``, ``fp8``) behind
  :class:`gpufield.fp64.protocols.ModularBackend`.
* :mod:`.gemm`: the driver (real, complex 3M, batched), special values and the a-priori error bound.
"""
