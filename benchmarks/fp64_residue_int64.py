"""Previous residue kernel (int64 lanes), kept outside the library for A/B timing against
:func:`gpufield.fp64.kernels.residue.scale_residues_triton` (benchmarks/fp64_fft_gpu.py's ``/res64``
configuration, :func:`use_int64_residues`; tools/fp64_residue_sass_count.py). Not reachable from the library.

Fused scaling -> truncation -> symmetric residues (Ozaki-II steps 1-2, fp64.md 2.1, 4.1), as before the
32-bit rewrite in :mod:`gpufield.fp64.kernels.residue`.

One read of the float64 operand, L narrow writes; no float64 or int64 intermediate ever reaches memory.
Per element: y = x * 2**s1 * 2**s2 (two exact power-of-two multiplications, s = s1 + s2 the row shift),
y -> int64 by truncation when |y| < 2**62, otherwise y = +-mant * 2**e and r = (mant mod p)(2**e mod p) mod p
from a [L, 2048] table of 2**e mod p. Bit-identical to
``residues_from_scaled(scale_trunc(X, shift), moduli)``.

Shape legend: R rows (of A, or of B^T), K inner dimension, L moduli.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch
import triton
import triton.language as tl

from gpufield.fp64.ozaki.moduli import ModuliTable

POW2_TABLE_LEN = 2048


@triton.jit
def _pow2(e):
    return ((e + 1023) << 52).to(tl.float64, bitcast=True)


@triton.jit
def _imax(a, b):
    # own combine function: tl.max is a @jit of triton.language.standard, which is not interpretable when
    # triton was imported before TRITON_INTERPRET was set (CPU runs); builtins and our own @jit are.
    return tl.maximum(a, b)


@triton.jit
def _split(x, s1, s2):
    y = x * _pow2(s1)[:, None]
    y = y * _pow2(s2)[:, None]
    small = tl.abs(y) < 4611686018427387904.0  # 2**62
    yi = tl.where(small, y, 0.0).to(tl.int64)  # fptosi truncates toward zero
    bits = y.to(tl.int64, bitcast=True)
    e = ((bits >> 52) & 0x7FF) - 1075
    e = tl.where(small, 0, e)
    e = tl.minimum(tl.maximum(e, 0), 2047)
    mant = (bits & 0xFFFFFFFFFFFFF) | 0x10000000000000
    return yi, y, e, mant, bits < 0, small


@triton.jit
def _mod_fast(v, vf, p, invp):
    """v mod p in [0, p) for an int64 v with |v| < 2**62 given also as an exact float64 vf.

    q = floor(vf / p) in float64 is off by at most ~8 for |v| < 2**62, so v - q p is a small int64 that an
    int32 remainder finishes: no 64-bit integer division on the GPU.
    """
    q = tl.floor(vf * invp).to(tl.int64)
    r = (v - q * p).to(tl.int32) % p.to(tl.int32)
    return tl.where(r < 0, r + p.to(tl.int32), r)


@triton.jit
def _residue(yi, y, e, mant, neg, small, any_big, p, invp, tab_row_ptr):
    r = _mod_fast(yi, tl.where(small, y, 0.0), p, invp)
    if any_big > 0:  # mantissa/exponent path only in tiles that hold |y| >= 2**62
        mm = _mod_fast(mant, mant.to(tl.float64), p, invp)
        rb = (mm * tl.load(tab_row_ptr + e).to(tl.int32)) % p.to(tl.int32)
        rb = tl.where(neg & (rb != 0), p.to(tl.int32) - rb, rb)
        r = tl.where(small, r, rb)
    return r  # int32 in [0, p)


@triton.jit
def _sym(r, p):
    p32 = p.to(tl.int32)
    return tl.where(r >= (p32 + 1) // 2, r - p32, r)


@triton.jit
def _scale_residue_kernel(
    x_ptr, x2_ptr, stride_r, stride_k, shift_ptr, mod_ptr, invp_ptr, tab_ptr, out_ptr, R, K,
    so_comp, so_grp, so_row, so_dig, sq_ptr, lut_ptr,
    L, COMPLEX: tl.constexpr, OUT_INT8: tl.constexpr, GROUP: tl.constexpr,
    DIGITS: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_K: tl.constexpr,
):
    pid_r = tl.program_id(0)
    pid_k = tl.program_id(1)
    rows = (pid_r * BLOCK_R + tl.arange(0, BLOCK_R)).to(tl.int64)
    cols = (pid_k * BLOCK_K + tl.arange(0, BLOCK_K)).to(tl.int64)
    rmask = rows < R
    mask = rmask[:, None] & (cols[None, :] < K)
    in_off = rows[:, None] * stride_r + cols[None, :] * stride_k
    s = tl.load(shift_ptr + rows, mask=rmask, other=0).to(tl.int64)
    s = tl.minimum(tl.maximum(s, -1022), 2046)
    s1 = tl.minimum(tl.maximum(s, -1022), 1023)
    s2 = s - s1
    yi, y, e, mant, neg, small = _split(tl.load(x_ptr + in_off, mask=mask, other=0.0), s1, s2)
    if COMPLEX:
        yi2, y2, e2, mant2, neg2, small2 = _split(tl.load(x2_ptr + in_off, mask=mask, other=0.0), s1, s2)
    any_big = tl.reduce(tl.reduce(tl.where(small, 0, 1), 1, _imax), 0, _imax)
    if COMPLEX:
        any_big = tl.maximum(any_big, tl.reduce(tl.reduce(tl.where(small2, 0, 1), 1, _imax), 0, _imax))
    # output element (comp, l, r, k) at comp*so_comp + (l // GROUP)*so_grp + r*so_row + (l % GROUP)*K + k
    out_off = rows[:, None] * tl.cast(so_row, tl.int64) + cols[None, :]
    c1 = tl.cast(so_comp, tl.int64)
    sg = tl.cast(so_grp, tl.int64)
    mi = 0  # runtime while-loop: one compiled kernel for every number of moduli (and interpretable)
    while mi < L:
        p = tl.load(mod_ptr + mi)
        invp = tl.load(invp_ptr + mi)
        base = out_ptr + (mi // GROUP) * sg + (mi % GROUP) * K + out_off
        r = _residue(yi, y, e, mant, neg, small, any_big, p, invp, tab_ptr + mi * 2048)
        if COMPLEX:  # components: re, im, re+im wrapped (the 3M operands)
            r2 = _residue(yi2, y2, e2, mant2, neg2, small2, any_big, p, invp, tab_ptr + mi * 2048)
            r3 = r + r2
            r3 = tl.where(r3 >= p.to(tl.int32), r3 - p.to(tl.int32), r3)
            if DIGITS:
                sq = tl.load(sq_ptr + mi)
                _store_digits(base + c1, _sym(r2, p), sq, so_dig, mask, lut_ptr)
                _store_digits(base + 2 * c1, _sym(r3, p), sq, so_dig, mask, lut_ptr)
            elif OUT_INT8:
                tl.store(base + c1, _sym(r2, p).to(tl.int8), mask=mask)
                tl.store(base + 2 * c1, _sym(r3, p).to(tl.int8), mask=mask)
            else:
                tl.store(base + c1, _sym(r2, p).to(tl.int16), mask=mask)
                tl.store(base + 2 * c1, _sym(r3, p).to(tl.int16), mask=mask)
        if DIGITS:
            _store_digits(base, _sym(r, p), tl.load(sq_ptr + mi), so_dig, mask, lut_ptr)
        elif OUT_INT8:
            tl.store(base, _sym(r, p).to(tl.int8), mask=mask)
        else:
            tl.store(base, _sym(r, p).to(tl.int16), mask=mask)
        mi += 1


@triton.jit
def _store_digits(ptr, a, sq, so_dig, mask, lut_ptr):
    """FP8 digit planes of symmetric residues a (fp64.md 2.4), as in ``residues.fp8_digit_planes``.

    sq > 0 (p = sq**2): hi = round_half_even(a / sq), lo = a - sq*hi; planes [hi, lo] (third unused).
    sq == 0 (Karatsuba, base 16): hi = sign(a) ceil(|a| / 16), lo = a - 16 hi; planes [hi, lo, hi + lo].
    Stored directly as E4M3 bit patterns (table of |d| <= 16 plus the sign bit): no conversion pass.
    """
    d = tl.cast(so_dig, tl.int64)
    a64 = a.to(tl.int64)
    sqd = tl.maximum(sq, 1).to(tl.float64)
    hs = _rint_small(a64.to(tl.float64) / sqd)
    aa = tl.abs(a64)
    hk = tl.where(a64 < 0, -((aa + 15) >> 4), (aa + 15) >> 4)
    hi = tl.where(sq > 0, hs, hk)
    lo = a64 - tl.where(sq > 0, sq, 16) * hi
    tl.store(ptr, _e4m3(hi, lut_ptr), mask=mask)
    tl.store(ptr + d, _e4m3(lo, lut_ptr), mask=mask)
    tl.store(ptr + 2 * d, _e4m3(hi + lo, lut_ptr), mask=mask)


@triton.jit
def _e4m3(v, lut_ptr):
    code = tl.load(lut_ptr + tl.minimum(tl.abs(v), 16))
    return (code | tl.where(v < 0, 128, 0)).to(tl.uint8)


@triton.jit
def _rint_small(x):
    """Round half to even (as torch.round) for |x| < 2**51, via the 2**52 trick."""
    big = 4503599627370496.0
    ax = tl.abs(x)
    r = (ax + big) - big
    return tl.where(x < 0, -r, r).to(tl.int64)


_TABLE_CACHE: dict = {}


def _tables(table: ModuliTable, device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    key = (table.kind, table.num_moduli, str(device))
    if key not in _TABLE_CACHE:
        mods = torch.tensor(table.moduli, dtype=torch.int64, device=device)
        invp = torch.tensor([1.0 / p for p in table.moduli], dtype=torch.float64, device=device)
        tab = torch.tensor([[pow(2, e, p) for e in range(POW2_TABLE_LEN)] for p in table.moduli],
                           dtype=torch.int64, device=device)
        _TABLE_CACHE[key] = (mods, invp, tab)
    return _TABLE_CACHE[key]


def scale_residues_triton_int64(
    X_RK: torch.Tensor, shift_R: torch.Tensor, table: ModuliTable, dtype=torch.int8, group: int = 1,
    digits: bool = False,
) -> torch.Tensor:
    """Launch the previous (int64-lane, runtime moduli loop) scaling/residue kernel, kept for A/B timing.

    Same arguments, layouts, return value and bits as
    :func:`gpufield.fp64.kernels.residue.scale_residues_triton` (whose docstring gives the shapes and
    dtypes), without its ``impl`` and ``block`` knobs.

    Raises:
        ValueError: ``digits=True`` without the fp8 table or with ``group != 1``.
    """
    R, K = X_RK.shape
    L = table.num_moduli
    cplx = X_RK.is_complex()
    C = 3 if cplx else 1
    mods, invp, tab = _tables(table, X_RK.device)
    sq = _sqrt_table(table, X_RK.device)
    if digits:
        if table.kind != "fp8" or group != 1:
            raise ValueError("digits=True needs the fp8 table and group=1")
        out = torch.empty((C, L, 3, R, K), dtype=torch.uint8, device=X_RK.device)  # every plane is written
        so_comp, so_grp, so_row, so_dig = L * 3 * R * K, 3 * R * K, K, R * K
    elif group == 1:
        out = torch.empty((C * L, R, K), dtype=dtype, device=X_RK.device)
        so_comp, so_grp, so_row, so_dig = L * R * K, R * K, K, 0
    else:
        G = -(-L // group)
        out = torch.empty((C, G, R, group * K), dtype=dtype, device=X_RK.device)
        so_comp, so_grp, so_row, so_dig = G * R * group * K, R * group * K, group * K, 0
    if R == 0 or K == 0:
        return out.view(torch.float8_e4m3fn) if digits else out
    x1, x2 = (X_RK.real, X_RK.imag) if cplx else (X_RK, X_RK)
    BR, BK = 32, 32
    grid = (triton.cdiv(R, BR), triton.cdiv(K, BK))
    _scale_residue_kernel[grid](
        x1, x2, x1.stride(0), x1.stride(1), shift_R.to(torch.int64).contiguous(), mods, invp, tab, out, R, K,
        so_comp, so_grp, so_row, so_dig, sq, _e4m3_lut(X_RK.device),
        L=L, COMPLEX=cplx, OUT_INT8=(dtype == torch.int8), GROUP=group, DIGITS=digits, BLOCK_R=BR, BLOCK_K=BK,
    )
    return out.view(torch.float8_e4m3fn) if digits else out


def _e4m3_lut(device) -> torch.Tensor:
    """E4M3 bit patterns of the integers 0..16, taken from torch's own float8_e4m3fn conversion."""
    key = ("e4m3", str(device))
    if key not in _TABLE_CACHE:
        codes = torch.arange(17).to(torch.float16).to(torch.float8_e4m3fn).view(torch.uint8)
        _TABLE_CACHE[key] = codes.to(torch.int32).to(device)
    return _TABLE_CACHE[key]


def _sqrt_table(table: ModuliTable, device) -> torch.Tensor:
    key = ("sqrt", table.kind, table.num_moduli, str(device))
    if key not in _TABLE_CACHE:
        _TABLE_CACHE[key] = torch.tensor([table.square_root(mi) or 0 for mi in range(table.num_moduli)],
                                         dtype=torch.int64, device=device)
    return _TABLE_CACHE[key]


_SAVED: list = []


def set_int64_residues(on: bool) -> None:
    """``on``: the FFT's standalone residue launches (``int8_gemm`` ``"cublas"`` / ``"triton"``,
    :func:`gpufield.fp64.fft.stage.dft_stage`) run this kernel instead of the 32-bit one (same bits) until
    called with False: the former ``KernelConfig(residue="int64")`` A/B switch, for benchmarks only."""
    from gpufield.fp64.kernels import residue

    if on and not _SAVED:
        _SAVED.append(residue.scale_residues_triton)

        def _int64(X_RK, shift_R, table, dtype=torch.int8, group=1, digits=False, block=None, bounded=False):
            return scale_residues_triton_int64(X_RK, shift_R, table, dtype, group=group, digits=digits)

        residue.scale_residues_triton = _int64
    elif not on and _SAVED:
        residue.scale_residues_triton = _SAVED.pop()


@contextmanager
def use_int64_residues():
    """:func:`set_int64_residues` on within the block."""
    set_int64_residues(True)
    try:
        yield
    finally:
        set_int64_residues(False)
