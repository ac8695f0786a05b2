"""The CRT tables of the FFT stage epilogue: moduli products, CRT constants in 32-bit limbs, fixed-point
quotient fractions, Garner inverses and the tensor-core bulk limbs (:class:`EpilogueTables`,
:func:`epilogue_tables`).

Shared by the torch epilogue (:mod:`gpufield.fp64.fft.epilogue`, which re-exports these names) and the Triton
kernels (:mod:`gpufield.fp64.kernels`), so that the kernels need nothing from :mod:`gpufield.fp64.fft` (issue
30: no mutual import between the two packages). Split out of :mod:`gpufield.fp64.fft.epilogue` unchanged.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

from gpufield.errors import InputError
from gpufield.fp64.ozaki.moduli import moduli_table

VARIANTS = ("garner", "crt", "kulisch")
"""Reconstruction variants (see module docstring)."""

LIMB = 32
_MASK = (1 << LIMB) - 1
FRAC_BITS = 40  # fixed-point fraction of q_i/p_i for the "crt" quotient
BULK_LIMB = 9  # bits per limb of the tensor-core bulk GEMM (limbs <= 511 are exact in FP16/TF32)
BULK_FRAC_BITS = 36  # fraction bits of q_i/p_i in the bulk GEMM (4 limbs of 9 bits)


@dataclass(frozen=True)
class EpilogueTables:
    """Integer constants of one moduli set, as python ints (device tensors are made on demand).

    Attributes:
        kind, num_moduli: the moduli table (``gpufield.fp64.ozaki.moduli.moduli_table``).
        moduli: p_i.
        M: product of the moduli.
        n_limbs: L, 32-bit limbs holding S = sum c_i C_i with sign.
        C_limbs: [r][L] 32-bit limbs of C_i.
        M_limbs: [L] 32-bit limbs of M.
        frac: [r] round(q_i/p_i * 2^40).
        garner_inv: [r][r] inv[j][k] = p_j^-1 mod p_k (k > j), else 0.
        bulk: [r][C] the FP32 bulk-GEMM matrix: 9-bit limbs of C_i then 4 9-bit limbs of
            round(q_i/p_i * 2^36).
        n_bulk_limbs: number of 9-bit limbs of C_i (C - 4).
    """

    kind: str
    num_moduli: int
    moduli: tuple[int, ...]
    M: int
    n_limbs: int
    C_limbs: tuple[tuple[int, ...], ...]
    M_limbs: tuple[int, ...]
    frac: tuple[int, ...]
    garner_inv: tuple[tuple[int, ...], ...]
    bulk: tuple[tuple[int, ...], ...]
    n_bulk_limbs: int

    def tensors(self, device: str) -> dict[str, torch.Tensor]:
        """Device tensors of the tables (cached per tables and device string)."""
        return _device_tables(self, device)


@functools.cache
def _device_tables(tab: EpilogueTables, device: str) -> dict[str, torch.Tensor]:
    dev = torch.device(device)
    i64 = dict(dtype=torch.int64, device=dev)
    return {
        "p": torch.tensor(tab.moduli, **i64),
        "C": torch.tensor(tab.C_limbs, **i64),  # [R, L]
        "M": torch.tensor(tab.M_limbs, **i64),  # [L]
        "frac": torch.tensor(tab.frac, **i64),  # [R]
        "inv": torch.tensor(tab.garner_inv, **i64),  # [R, R]
        "bulk": torch.tensor(tab.bulk, dtype=torch.float32, device=dev),  # [R, C]
    }


@functools.cache
def epilogue_tables(kind: str, num_moduli: int) -> EpilogueTables:
    """Build the epilogue constants for the first ``num_moduli`` moduli of ``kind`` ("int8"/"fp8").

    Raises:
        InputError: bad kind or count (from :func:`gpufield.fp64.ozaki.moduli.moduli_table`).
    """
    t = moduli_table(kind, num_moduli)
    ps, M = t.moduli, t.M
    max_c = max(p // 2 for p in ps)
    s_bits = M.bit_length() + (num_moduli * max_c).bit_length() + 1
    n_limbs = -(-s_bits // LIMB) + 1

    def limbs(x: int, n: int, w: int) -> tuple[int, ...]:
        return tuple((x >> (w * i)) & ((1 << w) - 1) for i in range(n))

    frac = tuple((q * (1 << FRAC_BITS) + p // 2) // p for q, p in zip(t.crt_q, ps, strict=True))
    inv = tuple(
        tuple(pow(pj, -1, pk) if k > j else 0 for k, pk in enumerate(ps)) for j, pj in enumerate(ps)
    )
    nb = -(-M.bit_length() // BULK_LIMB)
    bulk = tuple(
        limbs(C, nb, BULK_LIMB)
        + limbs((q * (1 << BULK_FRAC_BITS) + p // 2) // p, BULK_FRAC_BITS // BULK_LIMB, BULK_LIMB)
        for C, q, p in zip(t.crt_C, t.crt_q, ps, strict=True)
    )
    # exactness of the FP32 bulk GEMM: every partial sum below 2^24
    if num_moduli * max_c * ((1 << BULK_LIMB) - 1) >= 1 << 24:
        raise InputError(f"{num_moduli} {kind} moduli overflow the exact FP32 bulk GEMM")
    return EpilogueTables(
        kind=kind, num_moduli=num_moduli, moduli=ps, M=M, n_limbs=n_limbs,
        C_limbs=tuple(limbs(C, n_limbs, LIMB) for C in t.crt_C), M_limbs=limbs(M, n_limbs, LIMB),
        frac=frac, garner_inv=inv, bulk=bulk, n_bulk_limbs=nb,
    )
