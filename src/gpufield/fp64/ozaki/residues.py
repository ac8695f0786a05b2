"""Exact scaling to integers, symmetric residues and FP8 digit planes (torch reference; internal API).

These are the reference (CPU, and any device without Triton) implementations of step 1-2 of Ozaki scheme II
(fp64.md 2.1) and of the FP8 two-digit split (fp64.md 2.4). The fused Triton kernels in
``gpufield.fp64.kernels`` must agree with them bit for bit (tests/fp64/test_kernels*.py).

Internal API (reused by the FFT wing):

* :func:`pow2` ``(e_int64) -> float64``: exact 2**e for e in [-1022, 1023].
* :func:`scale_trunc` ``(X_MK, shift_M) -> Xs_MK``: trunc(X * 2**shift) per row, exact (no double rounding).
* :func:`residues_from_scaled` ``(Xs, moduli, dtype) -> res_L...``: symmetric residues of float64 integers,
  through int64 when |x| < 2**62 and through the mantissa/exponent form (mant mod p)(2**e mod p) mod p above.
* :func:`sym_mod_tensor` ``(x_int, p) -> int64``: symmetric residue of an integer tensor.
* :func:`fp8_digit_planes` ``(res, table, l) -> list[int8 tensors]``: 2 digits (square moduli) or 3 (Karatsuba).

Shape legend: M rows, K inner, L moduli; "..." any shape.
"""

from __future__ import annotations

import torch

from gpufield.fp64.ozaki.moduli import FP8_KARATSUBA_BASE, ModuliTable

_TWO62 = float(2**62)


def pow2(e: torch.Tensor) -> torch.Tensor:
    """Exact 2**e as float64 for an int64 tensor e in [-1022, 1023] (built from the exponent bits).

    Args:
        e: int64 tensor, any shape.

    Returns:
        float64 tensor of the same shape.
    """
    return ((e.to(torch.int64) + 1023) << 52).view(torch.float64)


def scale_trunc(X_MK: torch.Tensor, shift_M: torch.Tensor) -> torch.Tensor:
    """Exact trunc(X * 2**shift) with a per-row shift (GEMMul8 ``trunc_scalbn``), any magnitude of shift.

    The shift is applied in two exact power-of-two multiplications (2**s1 * 2**s2, s1 in [-1022, 1023],
    s2 >= 0) so subnormal inputs with large positive shifts lose nothing; a negative shift can only round
    a value that is already below 1, whose truncation is 0 either way.

    Args:
        X_MK: float64 [M, K] (finite).
        shift_M: int64 [M] row shifts (use ``X.T`` and column shifts for B).

    Returns:
        float64 [M, K] holding integers with |Xs| <= |X| * 2**shift.
    """
    s = shift_M.to(torch.int64).clamp(-1022, 2046)
    s1 = s.clamp(-1022, 1023)
    s2 = s - s1
    Y = X_MK * pow2(s1)[:, None]
    Y = Y * pow2(s2)[:, None]
    return torch.trunc(Y)


def sym_mod_tensor(x: torch.Tensor, p: int) -> torch.Tensor:
    """Symmetric residue of an integer tensor: r = x (mod p), -floor(p/2) <= r <= ceil(p/2) - 1.

    Args:
        x: integer tensor (int8..int64), any shape.
        p: modulus.

    Returns:
        int64 tensor of the same shape.
    """
    r = torch.remainder(x.to(torch.int64), p)
    return torch.where(r >= (p + 1) // 2, r - p, r)


def _pow2_mod_table(p: int, device) -> torch.Tensor:
    t = [pow(2, e, p) for e in range(2048)]
    return torch.tensor(t, dtype=torch.int64, device=device)


def residues_from_scaled(Xs: torch.Tensor, moduli: tuple[int, ...], dtype=torch.int16) -> torch.Tensor:
    """Symmetric residues of float64 integers for every modulus.

    |x| < 2**62 goes through int64; larger values (more than ~15 INT8 moduli with 53-bit inputs) use
    x = sign * mant * 2**e with mant < 2**53, e >= 10: r = sign * (mant mod p) * (2**e mod p) mod p
    (fp64.md 4.1).

    Args:
        Xs: float64 tensor of integers (output of :func:`scale_trunc`), any shape "...".
        moduli: the moduli p_l (length L).
        dtype: output integer dtype (int8 for the INT8 table, int16 for FP8's).

    Returns:
        [L, ...] tensor of symmetric residues.
    """
    small = Xs.abs() < _TWO62
    xi = torch.where(small, Xs, torch.zeros_like(Xs)).to(torch.int64)
    big = ~small
    any_big = bool(big.any())
    if any_big:
        bits = Xs.view(torch.int64)
        e = ((bits >> 52) & 0x7FF) - 1075
        mant = (bits & ((1 << 52) - 1)) | (1 << 52)
        neg = bits < 0
        e = torch.where(big, e, torch.zeros_like(e))
    out = torch.empty((len(moduli),) + tuple(Xs.shape), dtype=dtype, device=Xs.device)
    for mi, p in enumerate(moduli):
        r = torch.remainder(xi, p)
        if any_big:
            rb = torch.remainder(torch.remainder(mant, p) * _pow2_mod_table(p, Xs.device)[e], p)
            rb = torch.where(neg, torch.remainder(-rb, p), rb)
            r = torch.where(big, rb, r)
        out[mi] = torch.where(r >= (p + 1) // 2, r - p, r).to(dtype)
    return out


def fp8_digit_planes(res: torch.Tensor, table: ModuliTable, mi: int) -> list[torch.Tensor]:
    """Split symmetric residues mod p_l into FP8-exact digits |d| <= 16 (fp64.md 2.4, GEMMul8 ``make_f8``).

    Square modulus p = s^2: a = s*hi + lo with hi = round(a/s) (half to even), planes [hi, lo].
    Karatsuba modulus (odd p <= 511): a = 16*hi + lo, hi = sign(a)*ceil(|a|/16), planes [hi, lo, hi+lo].

    Args:
        res: integer tensor of residues mod p_l, |res| <= p_l/2, any shape.
        table: an ``fp8`` :class:`ModuliTable`.
        l: modulus index.

    Returns:
        list of 2 or 3 int8 tensors shaped like ``res``, every entry in [-16, 16].
    """
    a = res.to(torch.int64)
    s = table.square_root(mi)
    if s is not None:
        hi = torch.round(a.to(torch.float64) / s).to(torch.int64)
        lo = a - s * hi
        return [hi.to(torch.int8), lo.to(torch.int8)]
    base = FP8_KARATSUBA_BASE
    hi = torch.sign(a) * ((a.abs() + base - 1) // base)
    lo = a - base * hi
    return [hi.to(torch.int8), lo.to(torch.int8), (hi + lo).to(torch.int8)]


def fp8_combine(C_list: list[torch.Tensor], table: ModuliTable, mi: int) -> torch.Tensor:
    """Recombine the 3 digit products of modulus l into an integer congruent to the residue product.

    Square modulus: inputs [hi*lo', lo*hi', lo*lo'], t = s*(C0 + C1) + C2 (mod s^2 the hi*hi' term vanishes).
    Karatsuba: inputs [hi*hi', lo*lo', (hi+lo)(hi'+lo')], t = 256*C0 + 16*(C2 - C0 - C1) + C1.

    Args:
        C_list: three int64 tensors (exact digit products).
        table: an ``fp8`` :class:`ModuliTable`.
        l: modulus index.

    Returns:
        int64 tensor congruent to (A_l B_l) mod p_l.
    """
    s = table.square_root(mi)
    if s is not None:
        return s * (C_list[0] + C_list[1]) + C_list[2]
    b = FP8_KARATSUBA_BASE
    return b * b * C_list[0] + b * (C_list[2] - C_list[0] - C_list[1]) + C_list[1]
