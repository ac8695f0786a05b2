"""CRT uniqueness |A'B'| < M/2 of the fast and accurate scalings, checked with exact Python integers.

Includes the known failure of GEMMul8's original fast-mode formula (fp64.md 2.3): it is not
scale-invariant, and for flat rows of small magnitude it breaks uniqueness; ours holds at every scale.

Shape legend: M rows, K inner, N columns.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufield.fp64.ozaki.backends import CpuExactBackend, Fp8Backend, Int8Backend
from gpufield.fp64.ozaki.gemm import _shifts
from gpufield.fp64.ozaki.moduli import moduli_table
from gpufield.fp64.ozaki.residues import scale_trunc
from gpufield.fp64.ozaki.scaling import fast_shifts, gemmul8_original_fast_shift


def max_abs_int_product(A_MK, s_M, B_KN, t_N) -> int:
    Ai = [[int(v) for v in row] for row in scale_trunc(A_MK, s_M).tolist()]
    Bi = [[int(v) for v in row] for row in scale_trunc(B_KN.T.contiguous(), t_N).tolist()]
    return max(abs(sum(a * b for a, b in zip(ra, rb, strict=False))) for ra in Ai for rb in Bi)


def test_gemmul8_original_fast_formula_breaks_uniqueness_and_ours_does_not():
    t = moduli_table("int8", 14)
    log2P = math.log2(t.M - 1) / 2 - 0.5
    K = 1024
    violated = []
    for sigma in range(-40, 21, 10):
        x = 1.5 * 2.0**sigma
        A = torch.full((1, K), x, dtype=torch.float64)
        B = torch.full((K, 1), x, dtype=torch.float64)
        s_orig = torch.tensor([gemmul8_original_fast_shift(A[0], log2P)])
        prod_orig = max_abs_int_product(A, s_orig, B, s_orig)
        if 2 * prod_orig >= t.M:
            violated.append(sigma)
        s_ours = fast_shifts(A, t)
        t_ours = fast_shifts(B.T, t)
        assert 2 * max_abs_int_product(A, s_ours, B, t_ours) < t.M
    # small flat rows (||a|| < 2, where max(1, log2||a||) clamps) violate; large ones do not
    assert -20 in violated and 20 not in violated


@pytest.mark.parametrize("mode", ["fast", "accurate"])
@pytest.mark.parametrize("backend", [Int8Backend(kernels="torch"), Fp8Backend(kernels="torch"), CpuExactBackend()])
def test_uniqueness_at_every_scale(mode, backend):
    rng = np.random.default_rng(3)
    base_A = (rng.random((6, 48)) - 0.5) * np.exp(3 * rng.standard_normal((6, 48)))
    base_B = (rng.random((48, 5)) - 0.5) * np.exp(3 * rng.standard_normal((48, 5)))
    base_A[0] = 1.0  # flat row: the worst case of Cauchy-Schwarz (equality with a flat column)
    base_B[:, 0] = -1.0
    for n in (3, 9, 16):
        t = moduli_table(backend.moduli_kind, n)
        for sigma in (-1040, -300, -7, 0, 13, 500, 900):
            A = torch.from_numpy(base_A * 2.0**sigma)
            B = torch.from_numpy(base_B * 2.0 ** (-sigma // 2))
            s, u = _shifts(A, B.T, t, backend, mode)
            assert 2 * max_abs_int_product(A, s, B, u) < t.M
        # the scalings are tight to within a few bits (not vacuous): flat row x flat column
        A = torch.from_numpy(base_A)
        B = torch.from_numpy(base_B)
        s, u = _shifts(A, B.T, t, backend, mode)
        assert 2 * max_abs_int_product(A, s, B, u) * 2**10 >= t.M


@settings(max_examples=25, deadline=None)
@given(
    M=st.integers(1, 5), K=st.integers(1, 40), N=st.integers(1, 5),
    phi=st.floats(0.0, 6.0), sa=st.integers(-1000, 900), sb=st.integers(-1000, 900),
    n=st.integers(2, 20), seed=st.integers(0, 2**31), accurate=st.booleans(),
)
def test_uniqueness_property(M, K, N, phi, sa, sb, n, seed, accurate):
    rng = np.random.default_rng(seed)
    A = torch.from_numpy((rng.random((M, K)) - 0.5) * np.exp(phi * rng.standard_normal((M, K))) * 2.0**sa)
    B = torch.from_numpy((rng.random((K, N)) - 0.5) * np.exp(phi * rng.standard_normal((K, N))) * 2.0**sb)
    be = Int8Backend(kernels="torch")
    t = moduli_table("int8", n)
    s, u = _shifts(A, B.T, t, be, "accurate" if accurate else "fast")
    assert 2 * max_abs_int_product(A, s, B, u) < t.M


def test_integer_log2_bound_is_exact_upper_bound():
    from gpufield.fp64.ozaki.scaling import bit_length, log2_upper_int

    rng = np.random.default_rng(0)
    vals = [1, 2, 3, 255, 256, 257, 2**53 - 1, 2**53, 2**53 + 1, 2**62, 2**63 - 1]
    vals += [int(v) for v in rng.integers(1, 2**63 - 1, 300, dtype=np.int64)]
    vals += [int(v) for v in rng.integers(1, 2**20, 300)]
    x = torch.tensor(vals, dtype=torch.int64)
    assert bit_length(x).tolist() == [v.bit_length() for v in vals]
    lu = log2_upper_int(x).tolist()
    for v, b in zip(vals, lu, strict=False):
        # 2**b >= v, checked exactly: b >= log2(v) <=> v <= 2**b
        assert v <= 2 ** math.floor(b) * 2 ** (b - math.floor(b)) * (1 + 1e-15)
        assert b - math.log2(v) < 0.012
