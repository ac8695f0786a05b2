"""Modular 3M GEMM backends of the emulated FFT: exact CPU reference, INT8 and FP8 tensor cores.

Each backend computes, for one modulus p and a batch of G groups, the three residue-domain
Karatsuba (3M) products of a complex DFT-GEMM stage Y = X W^T (fp64.md 2.4 "Complex", 4.2):

    T1 = xr @ wr^T,   T2 = xi @ wi^T,   T3 = xs @ ws^T      (xs = (xr+xi) mod p, ws = (wr+wi) mod p)

exactly as integers (or congruent mod p, which is all the epilogue needs).

* ``cpu``: residues in float64, ``torch.matmul`` (BLAS). Exact: |sum| <= 32 * 544^2 < 2^53. The
  reference on any device.
* ``int8``: ``torch._int_mm`` (INT8 x INT8 -> INT32 tensor cores; CPU has an implementation too),
  B passed column-major (fp64.md 4.1: row-major B fails for M >= 2^20 on CUDA). INT8 moduli only.
  Sizes are zero-padded to _int_mm's constraints (M > 16, K >= 16 and a multiple of 8, N multiple of 8).
* ``fp8``: ``torch._scaled_mm`` on E4M3 digits |d| <= 16 with ``use_fast_accum=False``; each residue
  product is 3 FP8 GEMMs (square moduli s-split or 16-split Karatsuba, GEMMul8 ``make_f8``; digit
  planes and recombination from :mod:`gpufield.fp64.ozaki.residues`), so 9 FP8 GEMMs per modulus.
  Exact on Hopper because every partial sum of a k = 32 GEMM is <= 32 * 16 * 16 = 8192 < 2^14
  (fp64.md 3.3). FP8 moduli only.

Shape legend: G groups (distinct twiddle matrices), R rows per group, N inner length (n of the
stage), K outputs per row. Residue tensors are int64 [G, R, N] / [G, K, N]; outputs int64 [G, R, K].
"""

from __future__ import annotations

import torch

from gpufield.errors import InputError
from gpufield.fp64.ozaki.moduli import ModuliTable
from gpufield.fp64.ozaki.residues import fp8_combine, fp8_digit_planes

BACKENDS = ("cpu", "int8", "fp8")
"""Backend names."""

MODULI_KIND = {"cpu": None, "int8": "int8", "fp8": "fp8"}


def _pad_to(x: torch.Tensor, dim: int, size: int) -> torch.Tensor:
    if x.shape[dim] >= size:
        return x
    pad = list(x.shape)
    pad[dim] = size - x.shape[dim]
    return torch.cat([x, x.new_zeros(pad)], dim=dim)


def _mult(n: int, m: int, lo: int) -> int:
    return max(lo, -(-n // m) * m)


def _products_cpu(xs: list[torch.Tensor], ws: list[torch.Tensor]) -> list[torch.Tensor]:
    out = []
    for x, w in zip(xs, ws, strict=True):
        out.append(torch.matmul(x.to(torch.float64), w.to(torch.float64).transpose(1, 2)).to(torch.int64))
    return out


def _int_mm_group(a_RN: torch.Tensor, b_KN: torch.Tensor) -> torch.Tensor:
    """Exact int8 GEMM a @ b^T -> int32 [R, K] with the padding _int_mm needs."""
    R, N = a_RN.shape
    K = b_KN.shape[0]
    Rp, Np, Kp = _mult(R, 8, 32), _mult(N, 8, 16), _mult(K, 8, 16)
    a = _pad_to(_pad_to(a_RN, 1, Np), 0, Rp)
    b = _pad_to(_pad_to(b_KN, 1, Np), 0, Kp)  # [Kp, Np]; b.t() is a column-major [Np, Kp]
    return torch._int_mm(a.contiguous(), b.contiguous().t())[:R, :K]


def _products_int8(xs: list[torch.Tensor], ws: list[torch.Tensor]) -> list[torch.Tensor]:
    out = []
    for x, w in zip(xs, ws, strict=True):
        x8, w8 = x.to(torch.int8), w.to(torch.int8)
        out.append(torch.stack([_int_mm_group(x8[g], w8[g]) for g in range(x8.shape[0])]).to(torch.int64))
    return out


_E4M3 = torch.float8_e4m3fn


def _f8_mm_group(a_RN: torch.Tensor, b_KN: torch.Tensor) -> torch.Tensor:
    """Exact FP8 GEMM of integer digits |d| <= 16: a @ b^T -> float32 [R, K] (padding to multiples of 16)."""
    R, N = a_RN.shape
    K = b_KN.shape[0]
    Rp, Np, Kp = _mult(R, 16, 16), _mult(N, 16, 16), _mult(K, 16, 16)
    a = _pad_to(_pad_to(a_RN, 1, Np), 0, Rp).to(_E4M3).contiguous()
    b = _pad_to(_pad_to(b_KN, 1, Np), 0, Kp).to(_E4M3).contiguous()
    one = torch.ones((), dtype=torch.float32, device=a.device)
    c = torch._scaled_mm(a, b.t(), scale_a=one, scale_b=one, out_dtype=torch.float32, use_fast_accum=False)
    return c[:R, :K]


def _products_fp8(xs: list[torch.Tensor], ws: list[torch.Tensor], table: ModuliTable, l: int) -> list[torch.Tensor]:
    out = []
    sq = table.square_root(l) is not None
    for x, w in zip(xs, ws, strict=True):
        dx, dw = fp8_digit_planes(x, table, l), fp8_digit_planes(w, table, l)
        # square: [hi*lo', lo*hi', lo*lo']; Karatsuba: [hi*hi', lo*lo', s*s']
        pairs = [(0, 1), (1, 0), (1, 1)] if sq else [(0, 0), (1, 1), (2, 2)]
        C = []
        for i, j in pairs:
            C.append(torch.stack([_f8_mm_group(dx[i][g], dw[j][g]) for g in range(x.shape[0])]).to(torch.int64))
        out.append(fp8_combine(C, table, l))
    return out


def products_3m(
    backend: str,
    xr: torch.Tensor,
    xi: torch.Tensor,
    wr: torch.Tensor,
    wi: torch.Tensor,
    p: int,
    table: ModuliTable,
    l: int,
) -> torch.Tensor:
    """The three 3M residue products of one modulus.

    Args:
        backend: ``"cpu"``, ``"int8"`` or ``"fp8"``.
        xr, xi: int64 symmetric residues [G, R, N] of the scaled input (real, imag).
        wr, wi: int64 symmetric residues [G, K, N] of the scaled twiddles.
        p: the modulus p_l.
        table: the moduli table (needed for the FP8 digit split).
        l: index of p in ``table``.

    Returns:
        int64 [3, G, R, K]: T1, T2, T3 (each congruent mod p to the exact product).

    Raises:
        InputError: unknown backend, or moduli of the wrong kind for it.
    """
    from gpufield.fp64.fft.epilogue import sym_mod

    if backend not in BACKENDS:
        raise InputError(f"backend must be one of {BACKENDS}, got {backend!r}")
    kind = MODULI_KIND[backend]
    if kind is not None and table.kind != kind:
        raise InputError(f"backend {backend!r} needs {kind} moduli, got {table.kind}")
    xs = sym_mod(xr + xi, p)
    ws = sym_mod(wr + wi, p)
    X, W = [xr, xi, xs], [wr, wi, ws]
    if backend == "cpu":
        T = _products_cpu(X, W)
    elif backend == "int8":
        T = _products_int8(X, W)
    else:
        T = _products_fp8(X, W, table, l)
    return torch.stack(T)
