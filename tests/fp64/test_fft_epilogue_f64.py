"""The FP64 CRT fold and rounding of the fused stage (:mod:`gpufield.fp64.kernels.fft_epilogue_f64`).

Independent reference: Python integers. For chosen integers Y with |Y| <= M (1/2 - 2^-24) (round-to-nearest ties
and their neighbours at every magnitude, the range ends, cancelling digit sums, zero) the per-modulus inputs
are Y mod p_i plus random multiples of p_i (the int32 products a dot would give, |x| <= 2^20); the fold
and rounding must give ``math.ldexp(float(Y), -shift)`` (Python's int -> float is correctly rounded to
nearest even) bit for bit, as the 32-bit integer fold does, also for subnormal, underflowing (signed
zero) and overflowing results.
Runs in the Triton interpreter on CPU (CI) and compiled on a GPU.
"""

from __future__ import annotations

import math
import os
import random
from fractions import Fraction

import numpy as np
import pytest
import torch

if not torch.cuda.is_available():  # before the first import of triton in this process
    os.environ.setdefault("TRITON_INTERPRET", "1")
pytest.importorskip("triton")

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from gpufield.errors import InputError  # noqa: E402
from gpufield.fp64.fft.epilogue import EpilogueTables, epilogue_tables  # noqa: E402
from gpufield.fp64.fft.gemm_fused_epi import DOT_BOUND  # noqa: E402
from gpufield.fp64.kernels.fft_epilogue import _finish, _fold_j, _init_like  # noqa: E402
from gpufield.fp64.kernels.fft_epilogue_consts import barrett_constants, kernel_constants  # noqa: E402
from gpufield.fp64.kernels.fft_epilogue_f64 import (  # noqa: E402
    _finish_f64,
    _fold_f64,
    _init_f64,
    f64_constants,
)

DEV = "cuda" if torch.cuda.is_available() else "cpu"


@triton.jit
def _recon(x_ptr, shift_ptr, out_ptr, n, R: tl.constexpr, PM: tl.constexpr, BM: tl.constexpr, BB: tl.constexpr,
           CL: tl.constexpr, SI: tl.constexpr, FL: tl.constexpr, FI: tl.constexpr, ML: tl.constexpr,
           W: tl.constexpr, L: tl.constexpr, FW: tl.constexpr, NF: tl.constexpr, QSH: tl.constexpr,
           NW: tl.constexpr, BSH: tl.constexpr, FD: tl.constexpr, FK: tl.constexpr,
           FM: tl.constexpr, FOLD: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x0 = tl.load(x_ptr + offs, mask=m, other=0)
    if FOLD:
        a = _init_f64(x0)
    else:
        s = _init_like(SI, L, x0)
        f = _init_like(FI, NF, x0)
    for i in tl.static_range(R):
        x = tl.load(x_ptr + i * n + offs, mask=m, other=0)
        if FOLD:
            a = _fold_f64(a, x, i, PM, BM, BB, BSH, FD, FK)
        else:
            s, f = _fold_j(s, f, x, i, PM, BM, BB, CL, FL, L, NF, BSH, False)
    shift = tl.load(shift_ptr + offs, mask=m, other=0)
    if FOLD:
        y = _finish_f64(a, shift, FM)
    else:
        y = _finish(s, f, shift, ML, W, L, FW, NF, QSH, NW)
    tl.store(out_ptr + offs, y, mask=m)


def _cases(M: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    half = M // 2 - (M >> 5)  # the FP64 fold's range (QUOT_RANGE; a stage keeps |Y| <= M / 4); the integer
    # fold's 36-bit (kulisch) quotient is exact up to M (1/2 - 2^-26)
    ys = [0, 1, -1, 2, -2, half, -half, half - 1, -half + 1, (1 << 53) + 1, -(1 << 53) - 1]
    for k in range(1, half.bit_length() - 53):  # ties and neighbours at every magnitude 2^(53 + k)
        for _ in range(3):
            mant = rng.randrange(1 << 52, 1 << 53)
            tie = (mant << k) + (1 << (k - 1))
            for y in (tie - 1, tie, tie + 1, (mant << k) + 1, (mant << k) - 1):
                if abs(y) <= half:
                    ys += [y, -y]
    for _ in range(400):
        ys.append(rng.randrange(-half, half + 1) >> rng.randrange(0, 120))
    return ys


def _run(tab: EpilogueTables, variant: str, ys: list[int], shifts: list[int], fold: int, seed: int):
    rng = np.random.default_rng(seed)
    ps = tab.moduli
    x = np.empty((len(ps), len(ys)), dtype=np.int64)
    for i, p in enumerate(ps):
        x[i] = [y % p for y in ys]
        lim = (DOT_BOUND - p) // p
        x[i] += p * rng.integers(-lim, lim + 1, len(ys))
    assert np.abs(x).max() <= DOT_BOUND
    consts = kernel_constants(tab, variant) | barrett_constants(tab.moduli, DOT_BOUND) | f64_constants(tab, variant)
    n = len(ys)
    xt = torch.from_numpy(x.astype(np.int32)).to(DEV)
    st = torch.tensor(shifts, dtype=torch.int32, device=DEV)
    out = torch.empty(n, dtype=torch.float64, device=DEV)
    _recon[(triton.cdiv(n, 256),)](xt, st, out, n, FOLD=fold, BLOCK=256, **consts)
    return out.cpu().numpy()


def _ldexp(y: int, shift: int) -> float:
    try:
        return math.ldexp(float(y), -shift)
    except OverflowError:
        return math.copysign(math.inf, y)


@pytest.mark.parametrize("variant", ["crt", "kulisch"])
def test_f64_fold_rounds_like_python_and_the_integer_fold(variant):
    tab = epilogue_tables("int8", 16)
    ys = _cases(tab.M, 1)
    rng = random.Random(2)
    shifts = [rng.choice([0, 0, 0, 60, -60, 1100, 1190, -890, 2300, -1100]) for _ in ys]
    want = np.array([_ldexp(y, s) for y, s in zip(ys, shifts, strict=True)])
    got = _run(tab, variant, ys, shifts, 1, 3)
    ref = _run(tab, variant, ys, shifts, 0, 4)
    assert np.array_equal(got.view(np.int64), want.view(np.int64))
    assert np.array_equal(ref.view(np.int64), want.view(np.int64))


@pytest.mark.parametrize("r", [5, 12])
def test_f64_fold_exact_for_smaller_moduli_sets(r):
    """Narrow plans pick fewer moduli (12 for 40-bit inputs and twiddles, 5 for 12-bit): the quotient from the
    digit sums is exact there too (the top digit sum alone was not: 12 moduli, session 11's review)."""
    tab = epilogue_tables("int8", r)
    ys = [y for y in _cases(tab.M, 7 + r) if abs(y) <= tab.M // 2 - (tab.M >> 5)]  # (2^53 + 1 > M at r = 5)
    rng = random.Random(8 + r)
    shifts = [rng.choice([0, 0, 60, -60, 1100]) for _ in ys]
    want = np.array([_ldexp(y, s) for y, s in zip(ys, shifts, strict=True)])
    got = _run(tab, "crt", ys, shifts, 1, 9 + r)
    assert np.array_equal(got.view(np.int64), want.view(np.int64))


def test_f64_constants_are_balanced_and_checked():
    tab = epilogue_tables("int8", 16)
    c = f64_constants(tab, "crt")
    assert len(c["FD"]) == 3 * 16 and len(c["FK"]) == 16 and len(c["FM"]) == 4
    digits = np.array(c["FD"], dtype=np.int64).view(np.float64).reshape(16, 3)
    from gpufield.fp64.ozaki.moduli import moduli_table

    t = moduli_table("int8", 16)
    for C, row in zip(t.crt_C, digits, strict=True):  # the digits sum to C_i or C_i - M exactly
        v = sum(int(d) for d in row)
        assert v in (C, C - tab.M) and abs(v) * 2 <= tab.M
    fm = np.array(c["FM"], dtype=np.int64).view(np.float64)
    assert -sum(int(d) for d in fm[:3]) == tab.M
    assert fm[3] == float(Fraction(1, tab.M))  # the quotient's factor fl(1 / M), correctly rounded
    big = EpilogueTables(kind="int8", num_moduli=16, moduli=tab.moduli, M=tab.M << 40, n_limbs=tab.n_limbs,
                         C_limbs=tab.C_limbs, M_limbs=tab.M_limbs, frac=tab.frac, garner_inv=tab.garner_inv,
                         bulk=tab.bulk, n_bulk_limbs=tab.n_bulk_limbs)
    with pytest.raises(InputError, match="not be exact"):
        f64_constants(big, "crt")
