"""The 32-bit-lane FFT epilogue kernel (gpufield.fp64.kernels.fft_epilogue) against the exact CPU
reference ``epilogue_torch`` and against Python's exact integers (``math.ldexp(float(Y), -shift)``,
correctly rounded), bit for bit, on adversarial inputs: the CRT range limits, carries across limbs and
words, negative values with zero tails (the ~Y + 1 path and its 2^64 carry), rounding ties at 53 bits
and in the subnormal range, |T| at the 2^25 bound, masked tails and the grouped INT8 layout.

On CPU the kernel runs in Triton's interpreter (``TRITON_INTERPRET=1``).
"""

from __future__ import annotations

import math
import os
import random

import pytest
import torch

if not torch.cuda.is_available():  # before the first import of triton in this process
    os.environ.setdefault("TRITON_INTERPRET", "1")
pytest.importorskip("triton")

from gpufield.fp64.fft.epilogue import epilogue_tables, epilogue_torch  # noqa: E402
from gpufield.fp64.kernels.fft_epilogue import epilogue_triton, kernel_constants  # noqa: E402
from gpufield.fp64.ozaki.moduli import moduli_table  # noqa: E402

DEV = "cuda" if torch.cuda.is_available() else "cpu"
T_MAX = 1 << 25


def _near(b: int, a: int, p: int) -> int:
    """The integer congruent to a mod p closest to the bound b = +-2^25 on its inner side."""
    return b + (a - b) % p if b < 0 else b - (b - a) % p


def _encode(ps, re, im, rnd, extreme=False):
    """Raw 3M products T [r, 3, O] (int32, |T| <= 2^25) with T1 - T2 = re, T3 - T1 - T2 = im (mod p)."""
    T = torch.empty((len(ps), 3, len(re)), dtype=torch.int32)
    for i, p in enumerate(ps):
        rows = []
        for vr, vi in zip(re, im, strict=True):
            if extreme:  # |T| at 2^25: x = T1 - T2 near +-2^26, or T3 - T1 - T2 near -+3 * 2^25
                sg = rnd.choice((-1, 1))
                t1 = sg * T_MAX
                t2 = _near(-sg * T_MAX if rnd.random() < 0.5 else sg * T_MAX, t1 - vr, p)
                t3 = _near(-sg * T_MAX, vi + t1 + t2, p)
            else:
                t1 = rnd.randint(-T_MAX // 4, T_MAX // 4)
                t2 = t1 - vr % p + p * rnd.randint(-1000, 1000)
                t3 = vi % p + t1 + t2 + p * rnd.randint(-1000, 1000)
            assert max(abs(t1), abs(t2), abs(t3)) <= T_MAX
            assert (t1 - t2 - vr) % p == 0 and (t3 - t1 - t2 - vi) % p == 0
            rows.append((t1, t2, t3))
        T[i] = torch.tensor(rows, dtype=torch.int32).T
    return T


def _adversarial(M: int, rnd: random.Random, table=None) -> list[int]:
    """Integers covering the CRT range limits, limb/word carries, zero tails and rounding ties, and (with
    the moduli table) residue vectors at the symmetric extremes (every limb sum at its int32 bound)."""
    half = M // 2
    ext = []
    if table is not None:
        lo = [-(p // 2) for p in table.moduli]
        hi = [(p + 1) // 2 - 1 for p in table.moduli]
        for res in (lo, hi, [a if i % 2 else b for i, (a, b) in enumerate(zip(lo, hi, strict=True))],
                    [rnd.choice((a, b)) for a, b in zip(lo, hi, strict=True)]):
            v = sum(c * C for c, C in zip(res, table.crt_C, strict=True)) % M
            ext.append(v - M if v > half else v)
    lim = [half, half - 1, -half, -half + 1, (M - 1) // 2, -((M - 1) // 2), half - (1 << 20), -half + 12345]
    bits = M.bit_length() - 2
    pw = [s * ((1 << k) + d) for k in range(0, bits) for d in (-1, 0, 1) for s in (1, -1)]
    ties = []
    for k in (0, 1, 11, 33, 40, 64, 70, bits - 54):
        for m in ((1 << 53) + 1, (1 << 53) + 3, (1 << 54) - 1, (1 << 53) + (1 << 52) + 1):
            for s in (1, -1):
                ties += [s * (m << k), s * ((m << k) + 1), s * ((m << k) - 1)]
    wide = [rnd.choice((1, -1)) * rnd.getrandbits(rnd.randint(1, bits)) for _ in range(300)]
    crt = [rnd.randrange(M) - half for _ in range(100)]  # uniform residues: Y' uniform in the CRT range
    return [0, 1, -1, 2, -2] + lim + pw + ties + wide + crt + ext


def _check(kind, r, variant, re, im, shift, rnd, extreme=False, block=None, grouped_g=None):
    tab = epilogue_tables(kind, r)
    ps = moduli_table(kind, r).moduli
    T = _encode(ps, re, im, rnd, extreme)
    ref = epilogue_torch(T, shift, tab, variant)
    if grouped_g is None:
        y = epilogue_triton(T.to(DEV), shift.to(DEV), tab, variant, block=block).cpu()
    else:  # [r, 3, rows*K] -> grouped [3, Q, rows, g*K] (pad moduli slots filled with junk)
        g, K = grouped_g, 8
        Q, rows = -(-r // g), len(re) // K
        Tp = torch.randint(-99, 99, (Q * g, 3, rows, K), dtype=torch.int32)
        Tp[:r] = T.view(r, 3, rows, K)
        Tg = Tp.view(Q, g, 3, rows, K).permute(2, 0, 3, 1, 4).reshape(3, Q, rows, g * K).contiguous()
        y = epilogue_triton(Tg.to(DEV), shift.to(DEV), tab, variant, grouped=(g, rows, K)).cpu()
    assert torch.equal(torch.view_as_real(y), torch.view_as_real(ref))
    # independent: exact integers, correctly rounded, where the lift is unambiguous (|Y| < M/2 - M/2^20)
    M, safe = moduli_table(kind, r).M, 0
    for k, (vr, vi, s) in enumerate(zip(re, im, shift.tolist(), strict=True)):
        for v, got in ((vr, y[k].real), (vi, y[k].imag)):
            if abs(v) < M // 2 - (M >> 20):
                safe += 1
                assert float(got) == math.ldexp(float(v), -s), (kind, r, variant, v, s)
    return safe


CASES = [("int8", 16), ("int8", 20), ("int8", 12), ("fp8", 13), ("fp8", 14)]


@pytest.mark.parametrize("kind,r", CASES)
@pytest.mark.parametrize("variant", ["crt", "kulisch"])
def test_adversarial_values_bit_identical(kind, r, variant):
    rnd = random.Random(f"{kind}{r}{variant}")
    M = moduli_table(kind, r).M
    re = _adversarial(M, rnd, moduli_table(kind, r))
    im = list(reversed(re))
    rnd.shuffle(im)
    # shifts: normal results, and results near / in the subnormal range and past the bottom
    shift = torch.tensor([rnd.choice((0, rnd.randint(-60, 200), rnd.randint(1000, 1200), 1074 + (abs(v) or 1).bit_length()
                                      - rnd.randint(0, 60))) for v in re], dtype=torch.int64)
    assert _check(kind, r, variant, re, im, shift, rnd) > len(re)


@pytest.mark.parametrize("variant", ["crt", "kulisch"])
def test_extreme_products_masked_tail_and_grouped_layout(variant):
    rnd = random.Random(variant)
    M = moduli_table("int8", 16).M
    re = [rnd.randrange(M) - M // 2 for _ in range(200)]
    im = [rnd.choice((1, -1)) * rnd.getrandbits(rnd.randint(1, 120)) for _ in range(200)]
    shift = torch.tensor([rnd.randint(-20, 1150) for _ in re], dtype=torch.int64)
    _check("int8", 16, variant, re, im, shift, rnd, extreme=True, block=64)  # 200 = 3 * 64 + masked 8
    _check("int8", 16, variant, re, im, shift, rnd, grouped_g=6)  # 16 moduli in 3 groups of 6 (2 pad slots)


@pytest.mark.parametrize("variant", ["crt", "garner"])
def test_shift_per_row_equals_expanded(variant):
    """shift_row_len: one shift per row of K outputs gives the bits of the expanded per-output shifts."""
    rnd = random.Random(3)
    re = [rnd.choice((1, -1)) * rnd.getrandbits(rnd.randint(1, 110)) for _ in range(96)]
    shift_R = torch.tensor([rnd.randint(-10, 1130) for _ in range(6)], dtype=torch.int64)
    tab = epilogue_tables("int8", 16)
    T = _encode(moduli_table("int8", 16).moduli, re, re[::-1], rnd)
    ref = epilogue_torch(T, shift_R.repeat_interleave(16), tab, variant)
    y = epilogue_triton(T.to(DEV), shift_R.to(DEV), tab, variant, shift_row_len=16).cpu()
    assert torch.equal(torch.view_as_real(y), torch.view_as_real(ref))
    assert float(y[20].real) == math.ldexp(float(re[20]), -int(shift_R[1]))


def test_kernel_constants_are_int32_safe():
    """The compile-time constants the kernel bakes in: limb width, Barrett multipliers within 32 bits."""
    for kind, r in CASES:
        kc = kernel_constants(epilogue_tables(kind, r), "crt")
        M = moduli_table(kind, r).M
        assert kc["W"] * kc["L"] >= M.bit_length() and 32 * kc["NW"] > M.bit_length()
        assert all(0 < m < 1 << 32 for m in kc["BM"]) and all(-(1 << 31) <= x < 1 << 31 for x in kc["SI"] + kc["FI"])
        recon = sum(c << (kc["W"] * j) for j, c in enumerate(kc["CL"][: kc["L"]]))
        assert recon == moduli_table(kind, r).crt_C[0]
