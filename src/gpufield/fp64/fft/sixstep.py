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
Multi-dimensional transforms apply the 1-D transform along each axis (one pass per axis, the outermost
axis in memory first; each pass leaves its axis innermost, so no pass copies its input). The inverse
runs the same stages with the conjugate roots w^-e (table entries at the negated exponents, exact) and puts
the power-of-two division by N_total into the last stage's one rounding.

Shape legend: B batch of pencils, N axis length; arrays are complex128.
"""

from __future__ import annotations

import functools
import math

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
def _dft_idx(n: int, inverse: bool = False) -> np.ndarray:
    """[1, n, n] table indices of F_n[k, j] = w_n^{jk} (``inverse``: w_n^{-jk}, the conjugate)."""
    j = np.arange(n)
    e = np.outer(j, j)
    return root_index(n, -e if inverse else e)[None]


@functools.cache
def _fused_idx(n: int, inverse: bool = False) -> np.ndarray:
    """[n1, n2, n2] table indices of G_{k1}[k2, j2] = w_N^{j2 (k1 + n1 k2)} (``inverse``: the conjugate)."""
    n1, n2 = _split(n)
    k1 = np.arange(n1)[:, None, None]
    k2 = np.arange(n2)[None, :, None]
    j2 = np.arange(n2)[None, None, :]
    e = j2 * (k1 + n1 * k2)
    return root_index(n, -e if inverse else e)


def _axis_pass(box: list, plan: EmulatedFftPlan, flags: list | None, chunk: int | None,
               out_shift: int = 0, inverse: bool = False) -> torch.Tensor:
    """DFT (forward, or ``inverse``) along the first axis of ``box.pop()``: x_NB [N, B] complex128, any strides
    (fastest when rows b are consecutive elements, the outermost axis of a contiguous array) -> X_BN [B, N]
    contiguous.

    Every stage reads its rows where they are (the fused kernel's two-level row addressing): stage 1 takes
    rows (j2, b) at consecutive addresses with vector j1 (x_NB viewed as [n1, n2 B]: no copy), writes
    y[k1, j2, b]; stage 2 takes, per k1, rows b with vector j2 from y and writes X[b, k1 + n1 k2]. So a pass
    transposes the outermost axis to the innermost, and holds at most two full-size arrays of its own at a
    time (the input and y, then y and the output): the input is taken out of ``box`` so that the last
    reference to it (when the caller holds no other) dies once stage 1 has read it. ``out_shift``: the last
    stage's outputs are scaled by 2^-out_shift in its one rounding (N > 1). ``inverse``: the conjugate roots
    (the unnormalised inverse DFT along the axis).
    """
    x_NB = box.pop()
    N, B = x_NB.shape
    dev = x_NB.device
    if N == 1:
        return x_NB.T.contiguous()
    if N <= 32:
        z = torch.empty((B, N), dtype=torch.complex128, device=dev)  # X[b, k]
        dft_stage(x_NB.T.unsqueeze(0), _dft_idx(N, inverse), plan, out=z.unsqueeze(0), flags=flags,
                  chunk_outputs=chunk, out_shift=out_shift)
        return z
    n1, n2 = _split(N)
    a = x_NB.reshape(n1, n2 * B).T.unsqueeze(0)  # [1, (j2, b), j1]: a view when x_NB's rows are contiguous
    del x_NB
    y = torch.empty((n1, n2 * B), dtype=torch.complex128, device=dev)  # [k1, (j2, b)]
    dft_stage(a, _dft_idx(n1, inverse), plan, out=y.T.unsqueeze(0), flags=flags, chunk_outputs=chunk)
    del a
    z = torch.empty((B, N), dtype=torch.complex128, device=dev)  # X[b, k1 + n1 k2], after the input is gone
    dft_stage(y.view(n1, n2, B).transpose(1, 2), _fused_idx(N, inverse), plan,
              out=z.view(B, n2, n1).permute(2, 0, 1), flags=flags, chunk_outputs=chunk, out_shift=out_shift)
    return z


def fft_last_axis(x_BN: torch.Tensor, plan: EmulatedFftPlan) -> torch.Tensor:
    """Forward emulated DFT along the last axis of a [..., N] complex128 tensor (any strides).

    Args:
        x_BN: complex128 [..., N], N a power of two <= 1024, finite; not modified (its rows are
            consecutive in memory only for the outermost axis, so stage 1 of N > 32 reads a copy).
        plan: :class:`EmulatedFftPlan`.

    Returns:
        complex128 [B, N] with B = x_BN.numel() / N, X[b, k] = sum_j x[b, j] exp(-2 pi i j k / N).

    Raises:
        NumericsError: Inf/NaN in the input or an overflowing intermediate stage (an overflowing final
            output comes back as +-inf).
    """
    flags: list = []
    N = x_BN.shape[-1]
    out = _axis_pass([x_BN.reshape(-1, N).T], plan, flags, None)
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
        if x.dtype == torch.bool:
            raise InputError("emulated FFT needs numeric input, got dtype torch.bool")
        return x.to(torch.complex128).resolve_conj(), False  # a lazily conjugated view is materialised
    a = np.asarray(x)
    if not (np.issubdtype(a.dtype, np.complexfloating) or np.issubdtype(a.dtype, np.floating)
            or np.issubdtype(a.dtype, np.integer)):
        raise InputError(f"emulated FFT needs numeric input, got dtype {a.dtype}")
    _check(a)  # before the copy below, which would make a 0-D array 1-D
    return torch.from_numpy(np.ascontiguousarray(a, dtype=np.complex128)), True


def _plan_of(plan, plan_kwargs: dict) -> EmulatedFftPlan:
    if plan is None:
        return EmulatedFftPlan(**plan_kwargs)
    if not isinstance(plan, EmulatedFftPlan):
        raise InputError(f"plan must be an EmulatedFftPlan (or None with plan fields as keywords), got {plan!r}")
    if plan_kwargs:
        raise InputError(f"give a plan or plan fields as keywords, not both (got plan and {sorted(plan_kwargs)})")
    return plan


def _fftn(box: list, plan: EmulatedFftPlan, flags: list | None = None, inverse: bool = False) -> torch.Tensor:
    """n-D transform of ``box.pop()`` (dropped once its first stage has read it, see
    :func:`_axis_pass`); ``inverse``: the inverse transform (``numpy.fft.ifftn``: conjugate roots, and the
    1/N_total in the last stage's one rounding).

    Each pass transforms the outermost axis of the current memory order and leaves it innermost
    (:func:`_axis_pass`), so after the n passes a contiguous input's layout is back and no pass copies its
    input. One finiteness check (one host sync) at the end: every stage records its rows' largest magnitude
    on the device, and nothing waits for the device before the transform is fully queued. With ``flags``
    given, the row maxima are appended there and the check is left to the caller (a CUDA graph capture).
    """
    x = box.pop()
    _check(x)
    if plan.epilogue == "triton" and x.device.type != "cuda":
        from gpufield.fp64.kernels import require_cpu_interpreter

        require_cpu_interpreter()
    shape = tuple(x.shape)
    chunk = chunk_outputs_for(plan, shape, x.device)
    check = flags is None
    flags = [] if flags is None else flags
    order = list(range(x.ndim))  # axes in memory order, outermost first
    pass_in = [x.reshape(shape[0], -1)]  # the list holds the only reference: dropped inside _axis_pass
    del x
    # pass i transforms axis i (the outermost of the memory order then): the last one with a stage rounds last
    last = max((i for i, n in enumerate(shape) if n > 1), default=-1)
    out_shift = math.prod(shape).bit_length() - 1 if inverse else 0  # 1/N_total = 2^-out_shift, exact
    if last < 0:  # every side 1: the transform is the identity; a new array, never the caller's memory
        return pass_in.pop().clone(memory_format=torch.contiguous_format).view(shape)
    for i in range(len(shape)):
        # [B, N]: the axis is now innermost
        z = _axis_pass(pass_in, plan, flags, chunk, out_shift if i == last else 0, inverse)
        order = order[1:] + order[:1]
        pass_in = [z.view(shape[order[0]], -1)]
        del z
    if check:
        check_finite_flags(flags)
    return pass_in.pop().view(shape)


def fftn_fp64_emulated(x, plan: EmulatedFftPlan | None = None, **plan_kwargs):
    """Full-FP64 n-D FFT (n = 1, 2, 3) with no FP64 arithmetic in the products (Ozaki-II + Bailey).

    Forward transform with numpy's sign and normalisation (``numpy.fft.fftn(x)``): the length-32
    DFTs are modular integer GEMMs with fused twiddles, complex products by residue-domain
    Karatsuba, exact CRT reconstruction and one rounding per stage (see the package docstring).

    Accuracy is normwise per row, as for any FFT that scales each row by one power of two (block floating
    point): a stage's input row (the real and imaginary parts of its N values together) is truncated to
    ``input_bits`` (58) bits below its largest magnitude, so a part more than ~2^-58 times smaller than
    its row's largest part is lost (numpy.fft([1 + 1e-20j, 0, 0, 0]) keeps the 1e-20; this gives 1 + 0j).
    Measured relative L2 error: at or below numpy.fft's on random, smooth and wide-exponent inputs
    (tests/fp64/test_fft.py; 1.1e-16 against cuFFT's 3.9-4.8e-16 at 256^3-1024^3 on an H200).

    Args:
        x: complex (or real) array of 1 to 3 power-of-two sides <= 1024: numpy array (returns
            numpy complex128) or torch tensor on CPU/CUDA (returns complex128 on that device).
        plan: :class:`EmulatedFftPlan`; default the exact CPU backend, CRT variant, 58-bit inputs,
            56-bit twiddles, auto moduli count (INT8 16, FP8 14).
        **plan_kwargs: fields of :class:`EmulatedFftPlan` when ``plan`` is None.

    Returns:
        complex128 array or tensor of the input's shape.

    Raises:
        InputError: bad dimensions, sizes, dtype or plan (a plan and plan fields as keywords together, too).
        NumericsError: Inf/NaN in the input, or a value beyond the float64 range inside the transform (an
            intermediate stage's output, which the next stage cannot take). A final output beyond the float64
            range comes back as +-inf, as numpy.fft's does.
    """
    plan = _plan_of(plan, plan_kwargs)
    t, was_np = _as_tensor(x)
    box = [t]
    del t
    y = _fftn(box, plan)
    return y.cpu().numpy() if was_np else y


def ifftn_fp64_emulated(x, plan: EmulatedFftPlan | None = None, **plan_kwargs):
    """Inverse of :func:`fftn_fp64_emulated` (``numpy.fft.ifftn`` convention, 1/N normalisation).

    The forward transform's stages with the conjugate roots w^-e (the twiddle table's entries at the negated
    exponents, exactly the conjugates: in the normal range the values are those of conj(fft(conj(x))) /
    N_total) and the division inside the last stage's one rounding: each output is the exactly reconstructed
    stage result times 2^-log2(N_total), rounded once (also where it is subnormal), and an output that fits
    float64 never overflows on the way (numpy.fft.ifft divides after rounding: inf for inputs near DBL_MAX,
    and a second rounding for subnormal results). No conjugated copy of the input or output is made. Signs of zero: an
    output part that is exactly zero is +0.0 (as the forward transform's), a nonzero part that rounds to
    zero keeps its sign, and an all-size-1 transform returns a copy of its input, -0.0 included (each as
    numpy.fft.ifftn).

    Args:
        x: as :func:`fftn_fp64_emulated`.
        plan: as :func:`fftn_fp64_emulated`.
        **plan_kwargs: as :func:`fftn_fp64_emulated`.

    Returns:
        complex128 array or tensor of the input's shape.

    Raises:
        InputError, NumericsError: as :func:`fftn_fp64_emulated`.
    """
    plan = _plan_of(plan, plan_kwargs)
    t, was_np = _as_tensor(x)
    box = [t]
    del t
    y = _fftn(box, plan, inverse=True)
    return y.cpu().numpy() if was_np else y
