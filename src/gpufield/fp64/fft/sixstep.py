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
from gpufield.fp64.fft.memory import chunk_outputs_for
from gpufield.fp64.fft.stage import EmulatedFftPlan, check_finite_flags, dft_stage
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


def _axis_pass(box: list, plan: EmulatedFftPlan, flags: list | None, chunk: int | None) -> torch.Tensor:
    """Forward DFT along the last axis of ``box.pop()`` ([..., N] complex128, any strides).

    The input is taken out of ``box`` so that the last reference to it (when the caller holds no other)
    dies as soon as the stage-1 input copy exists. Stage 1 writes straight into the stage-2 layout
    [k1, b, j2] and stage 2 straight into the output layout X[b, k1 + n1 k2] (transposed ``out`` views),
    so a pass holds at most three full-size arrays: its input (until copied), the stage-1 input, the
    stage-2 input, then the stage-2 input and the output.
    """
    x_BN = box.pop()
    N = x_BN.shape[-1]
    B = x_BN.numel() // N
    if N == 1:
        return x_BN.reshape(B, N).clone()
    if N <= 32:
        a = x_BN.reshape(1, B, N)
        del x_BN
        return dft_stage(a, _dft_idx(N), plan, flags=flags, chunk_outputs=chunk)[0]
    n1, n2 = _split(N)
    a = x_BN.unflatten(-1, (n1, n2)).transpose(-1, -2).reshape(1, B * n2, n1)  # rows (b, j2), vector j1
    dev = a.device
    del x_BN
    y = torch.empty((n1, B, n2), dtype=torch.complex128, device=dev)  # [k1, b, j2]
    dft_stage(a, _dft_idx(n1), plan, out=y.permute(1, 2, 0).view(1, B * n2, n1), flags=flags,
              chunk_outputs=chunk)
    del a
    z = torch.empty((B, N), dtype=torch.complex128, device=dev)  # X[b, k1 + n1 k2]
    dft_stage(y, _fused_idx(N), plan, out=z.view(B, n2, n1).permute(2, 0, 1), flags=flags, chunk_outputs=chunk)
    return z


def fft_last_axis(x_BN: torch.Tensor, plan: EmulatedFftPlan) -> torch.Tensor:
    """Forward emulated DFT along the last axis of a [..., N] complex128 tensor (any strides).

    Args:
        x_BN: complex128 [..., N], N a power of two <= 1024, finite; read once (the first stage's input
            copy is made straight from this view).
        plan: :class:`EmulatedFftPlan`.

    Returns:
        complex128 [B, N] with B = x_BN.numel() / N, X[b, k] = sum_j x[b, j] exp(-2 pi i j k / N).

    Raises:
        NumericsError: Inf/NaN in the input or an overflowing stage.
    """
    flags: list = []
    out = _axis_pass([x_BN], plan, flags, None)
    check_finite_flags(flags)
    return out


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


def _fftn(box: list, plan: EmulatedFftPlan) -> torch.Tensor:
    """n-D forward transform of ``box.pop()`` (dropped once its first copy exists, see :func:`_axis_pass`).

    One finiteness check (one host sync) at the end: every stage records its rows' largest magnitude
    on the device, and nothing waits for the device before the transform is fully queued.
    """
    x = box.pop()
    _check(x)
    chunk = chunk_outputs_for(plan, x.shape, x.device)
    flags: list = []
    for axis in range(x.ndim):
        pass_in = [x.movedim(axis, -1)]  # the list holds the only reference: dropped inside _axis_pass
        shape = pass_in[0].shape
        del x
        x = _axis_pass(pass_in, plan, flags, chunk).view(shape).movedim(-1, axis)
    check_finite_flags(flags)
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
    box = [t]
    del t
    y = _fftn(box, plan)
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
    n = t.numel()
    box = [torch.conj(t).resolve_conj()]
    del t
    y = _fftn(box, plan)
    y.imag.neg_()  # conj in place (exact), then the exact power-of-two division in place
    y.div_(n)
    return y.cpu().numpy() if was_np else y
