"""Scaling, residues, FP8 digits and the limb CRT of Ozaki-II against Python integers and fractions.

Shape legend: M rows, K inner, L moduli.
"""

from __future__ import annotations

import math
import random
from fractions import Fraction

import pytest
import torch

from gpufield.fp64.ozaki.crt import crt_exact_python, crt_limbs_torch, round_scaled_exact
from gpufield.fp64.ozaki.moduli import moduli_table, sym_mod
from gpufield.fp64.ozaki.residues import (
    fp8_combine,
    fp8_digit_planes,
    residues_from_scaled,
    scale_trunc,
)


def _wide_matrix(M, K, seed):
    g = torch.Generator().manual_seed(seed)
    X_MK = torch.randn(M, K, dtype=torch.float64, generator=g) * torch.exp(
        6 * torch.randn(M, K, dtype=torch.float64, generator=g))
    X_MK[0] = 5e-324 * torch.arange(K)  # subnormals
    X_MK[1] = 1.7e308 * torch.linspace(-1, 1, K, dtype=torch.float64)
    X_MK[2] = 0.0
    return X_MK


def test_scale_trunc_is_exact_truncation():
    X_MK = _wide_matrix(8, 16, 0)
    s_M = torch.tensor([1100, -960, 5, 60, -40, 200, 0, 1000])
    Y = scale_trunc(X_MK, s_M)
    for i in range(8):
        for k in range(16):
            x = Fraction(X_MK[i, k].item()) * Fraction(2) ** int(s_M[i])
            want = math.trunc(x)
            assert Fraction(Y[i, k].item()) == want


@pytest.mark.parametrize("kind,n", [("int8", 14), ("int8", 20), ("fp8", 13), ("fp8", 20)])
def test_residues_match_python_ints_both_paths(kind, n):
    t = moduli_table(kind, n)
    g = torch.Generator().manual_seed(1)
    mant = torch.randint(-(2**53) + 1, 2**53, (300,), generator=g).to(torch.float64)
    ex = torch.randint(0, 80, (300,), generator=g)
    Xs = mant * torch.pow(2.0, ex.to(torch.float64))  # integers up to 2**133: int64 and mant/exp paths
    assert (Xs.abs() >= 2.0**62).any() and (Xs.abs() < 2.0**62).any()
    R = residues_from_scaled(Xs, t.moduli, torch.int16)
    for i in range(300):
        x = int(Xs[i].item())
        assert [int(R[mi, i]) for mi in range(n)] == [sym_mod(x, p) for p in t.moduli]


def test_fp8_digits_are_exact_and_small():
    t = moduli_table("fp8", 20)
    for mi, p in enumerate(t.moduli):
        a = torch.arange(-(p // 2), (p + 1) // 2)
        d = fp8_digit_planes(a, t, mi)
        assert all(int(x.abs().max()) <= 16 for x in d)
        s = t.square_root(mi)
        if s is not None:
            assert torch.equal(s * d[0].long() + d[1].long(), a)
        else:
            assert torch.equal(16 * d[0].long() + d[1].long(), a)
            assert torch.equal(d[0].long() + d[1].long(), d[2].long())
        # the recombined product is congruent to a*b mod p for every pair in a sample
        b = a[torch.randperm(a.numel(), generator=torch.Generator().manual_seed(mi))]
        e = fp8_digit_planes(b, t, mi)
        if s is not None:
            C = [d[0].long() * e[1].long(), d[1].long() * e[0].long(), d[1].long() * e[1].long()]
        else:
            C = [d[i].long() * e[i].long() for i in range(3)]
        assert torch.equal(torch.remainder(fp8_combine(C, t, mi), p), torch.remainder(a * b, p))


@pytest.mark.parametrize("kind", ["int8", "fp8"])
@pytest.mark.parametrize("n", [2, 9, 15, 16, 20])
def test_limb_crt_matches_python_oracle(kind, n):
    t = moduli_table(kind, n)
    rng = random.Random(n)
    lim = t.M // 2 - (t.M >> 11)
    Xs = [rng.randrange(-lim, lim) for _ in range(60)] + [0, 1, -1, 2**52 + 1, -(2**53) - 1]
    Xs += [rng.choice([1, -1]) * ((1 << rng.randrange(1, t.M.bit_length() - 2)) + rng.choice([0, 1, 3]))
           for _ in range(60)]
    res_LN = torch.tensor([[sym_mod(X, p) + p * rng.randrange(-2, 3) for X in Xs] for p in t.moduli])
    sh = torch.tensor([rng.choice([0, 7, -30, 1074, 1080, 1130, 2100, -1000, rng.randrange(-1100, 2200)])
                       for _ in Xs])
    got = crt_limbs_torch(res_LN, sh, t)
    want = crt_exact_python(res_LN, sh, t)
    assert torch.equal(got, want)
    for X, s, w in zip(Xs[:20], sh.tolist(), want.tolist(), strict=False):  # the oracle itself vs Fraction
        assert w == round_scaled_exact(X, s)


def test_round_scaled_exact_ties_subnormal_overflow():
    assert round_scaled_exact(2**53 + 1, 0) == 2.0**53  # tie to even
    assert round_scaled_exact(2**53 + 3, 0) == 2.0**53 + 4
    assert round_scaled_exact(3, 1076) == 5e-324  # 0.75 ulp -> 1 ulp
    assert round_scaled_exact(1, 1075) == 0.0  # exact half of the smallest subnormal: tie to even (0)
    assert round_scaled_exact(-(2**60), -1000) == -math.inf
