"""Emulated full-FP64 FFT: Bailey six-step per axis on modular DFT-GEMM stages (1-D, 2-D, 3-D).

Bailey four/six-step for a length N = n1 * n2 axis (fp64.md 1.5), with j = j1 n2 + j2 and
k = k1 + n1 k2:

    X[k1 + n1 k2] = sum_{j2} w_N^{j2 k1} w_{n2}^{j2 k2} sum_{j1} w_{n1}^{j1 k1} x[j1 n2 + j2]

* stage 1: n2 DFTs of length n1 over j1, a GEMM with the shared matrix F_{n1};
* stage 2: for each k1 one GEMM with the *fused* twiddle matrix
  G_{k1}[k2, j2] = w_N^{j2 k1} w_{n2}^{j2 k2} = w_N^{j2 (k1 + n1 k2)}: a single root of unity per
  entry, so it is one entry of the verified integer table and costs no extra rounding.

N <= 32 is one stage; 64 <= N <= 1024 splits as n1 = 2^ceil(m/2), n2 = 2^floor(m/2) (1024 = 32 x 32).
Each stage rounds once (its epilogue's final conversion); a 3-D transform has 6 stage roundings.
Multi-dimensional transforms apply the 1-D transform along each axis (one pass per axis). The inverse
uses ifft(x) = conj(fft(conj(x))) / N_total (conjugation and the power-of-two division are exact).

Shape legend: B batch of pencils, N axis length; arrays are complex128.
"""

from __future__ import annotations

import functools

import numpy as np
import torch

from gpufield.errors import InputError
from gpufield.fp64.fft.stage import EmulatedFftPlan, dft_stage
from gpufield.fp64.fft.twiddles import N_MAX, root_index


def _split(n: int) -> tuple[int, int]:
    m = n.bit_length() - 1
    return 1 << ((m + 1) // 2), 1 << (m // 2)


@functools.cache
def _dft_idx(n: int) -> np.ndarray:
    """[1, n, n] table indices of F_n[k, j] = w_n^{jk}."""
    j = np.arange(n)
    return root_index(n, np.outer(j, j))[None]


@functools.cache
def _fused_idx(n: int) -> np.ndarray:
    """[n1, n2, n2] table indices of G_{k1}[k2, j2] = w_N^{j2 (k1 + n1 k2)}."""
    n1, n2 = _split(n)
    k1 = np.arange(n1)[:, None, None]
    k2 = np.arange(n2)[None, :, None]
    j2 = np.arange(n2)[None, None, :]
    return root_index(n, j2 * (k1 + n1 * k2))


def fft_last_axis(x_BN: torch.Tensor, plan: EmulatedFftPlan) -> torch.Tensor:
    """Forward emulated DFT along the last axis of a [..., N] complex128 tensor (any strides).

    Args:
        x_BN: complex128 [..., N], N a power of two <= 1024; read once (the first stage's input
            copy is made straight from this view).
        plan: :class:`EmulatedFftPlan`.

    Returns:
        complex128 [B, N] with B = x_BN.numel() / N, X[b, k] = sum_j x[b, j] exp(-2 pi i j k / N).
    """
    N = x_BN.shape[-1]
    B = x_BN.numel() // N
    if N == 1:
        return x_BN.reshape(B, N).clone()
    if N <= 32:
        return dft_stage(x_BN.reshape(1, B, N), _dft_idx(N), plan)[0]
    n1, n2 = _split(N)
    a = x_BN.unflatten(-1, (n1, n2)).transpose(-1, -2).reshape(1, B * n2, n1)  # rows (b, j2), vector j1
    y = dft_stage(a, _dft_idx(n1), plan)  # [1, B*n2, k1]
    del a
    y = y.view(B, n2, n1).permute(2, 0, 1).contiguous()  # [k1, b, j2]
    z = dft_stage(y, _fused_idx(N), plan)  # [k1, b, k2]
    del y
    return z.permute(1, 2, 0).reshape(B, N)  # X[b, k1 + n1 k2]


def _check(x: torch.Tensor) -> None:
    if x.ndim < 1 or x.ndim > 3:
        raise InputError(f"emulated FFT takes 1-D, 2-D or 3-D arrays, got {x.ndim}-D")
    for n in x.shape:
        if n < 1 or n & (n - 1) or n > N_MAX:
            raise InputError(f"every side must be a power of two <= {N_MAX}, got shape {tuple(x.shape)}")


def _as_tensor(x) -> tuple[torch.Tensor, bool]:
    if isinstance(x, torch.Tensor):
        return x.to(torch.complex128), False
    a = np.asarray(x)
    if not (np.issubdtype(a.dtype, np.complexfloating) or np.issubdtype(a.dtype, np.floating)
            or np.issubdtype(a.dtype, np.integer)):
        raise InputError(f"emulated FFT needs numeric input, got dtype {a.dtype}")
    return torch.from_numpy(np.ascontiguousarray(a, dtype=np.complex128)), True


def _fftn(x: torch.Tensor, plan: EmulatedFftPlan) -> torch.Tensor:
    _check(x)
    for axis in range(x.ndim):
        moved = x.movedim(axis, -1)
        shape = moved.shape
        x = fft_last_axis(moved, plan).view(shape).movedim(-1, axis)
        del moved
    return x.contiguous()


def fftn_fp64_emulated(x, plan: EmulatedFftPlan | None = None, **plan_kwargs):
    """Full-FP64 n-D FFT (n = 1, 2, 3) with no FP64 arithmetic in the products (Ozaki-II + Bailey).

    Forward transform with numpy's sign and normalisation (``numpy.fft.fftn(x)``): the length-32
    DFTs are modular integer GEMMs with fused twiddles, complex products by residue-domain
    Karatsuba, exact CRT reconstruction and one rounding per stage (see the package docstring).

    Args:
        x: complex (or real) array of 1 to 3 power-of-two sides <= 1024: numpy array (returns
            numpy complex128) or torch tensor on CPU/CUDA (returns complex128 on that device).
        plan: :class:`EmulatedFftPlan`; default the exact CPU backend, CRT variant, 58-bit inputs,
            56-bit twiddles, auto moduli count (INT8 16, FP8 14).
        **plan_kwargs: fields of :class:`EmulatedFftPlan` when ``plan`` is None.

    Returns:
        complex128 array or tensor of the input's shape.

    Raises:
        InputError: bad dimensions, sizes, dtype or plan.
        NumericsError: Inf/NaN in the input.
    """
    plan = plan or EmulatedFftPlan(**plan_kwargs)
    t, was_np = _as_tensor(x)
    y = _fftn(t, plan)
    return y.cpu().numpy() if was_np else y


def ifftn_fp64_emulated(x, plan: EmulatedFftPlan | None = None, **plan_kwargs):
    """Inverse of :func:`fftn_fp64_emulated` (``numpy.fft.ifftn`` convention, 1/N normalisation).

    Computed as conj(fft(conj(x))) / N_total; the conjugations and the power-of-two division are exact.

    Args:
        x: as :func:`fftn_fp64_emulated`.
        plan: as :func:`fftn_fp64_emulated`.
        **plan_kwargs: as :func:`fftn_fp64_emulated`.

    Returns:
        complex128 array or tensor of the input's shape.

    Raises:
        InputError, NumericsError: as :func:`fftn_fp64_emulated`.
    """
    plan = plan or EmulatedFftPlan(**plan_kwargs)
    t, was_np = _as_tensor(x)
    y = torch.conj(_fftn(torch.conj(t).resolve_conj(), plan)).resolve_conj() / t.numel()
    return y.cpu().numpy() if was_np else y
