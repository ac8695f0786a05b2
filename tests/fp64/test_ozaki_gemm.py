"""ozaki_matmul against exact rational products, native float64, and the CPU-exact backend.

Independent oracles: Python fractions (exact products of the float64 inputs, rounded once) and numpy
float64. The int8/fp8 backends run their real GEMM paths (torch._int_mm / torch._scaled_mm also run on
CPU tensors in torch 2.13) and must be bit-identical to the cpu-exact backend.

Shape legend: M rows, K inner, N columns, "..." batch.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
import torch

from gpufield.errors import InputError
from gpufield.fp64 import ozaki_error_bound, ozaki_matmul
from gpufield.fp64.ozaki.backends import CpuExactBackend, Fp8Backend, Int8Backend


def ozaki_matrix(M, N, phi, seed):
    """Test generator of the Ozaki papers / GEMMul8: (rand - 0.5) * exp(phi * randn)."""
    rng = np.random.default_rng(seed)
    return torch.from_numpy((rng.random((M, N)) - 0.5) * np.exp(phi * rng.standard_normal((M, N))))


def exact_product(A_MK, B_KN):
    """Exact rational product of float64 (or complex128, as (re, im)) matrices."""
    if A_MK.is_complex():
        Ar, Ai, Br, Bi = (exact_product.__wrapped__(X) for X in (A_MK.real, A_MK.imag, B_KN.real, B_KN.imag))
        mm = exact_product.mm
        rr, ii, ri, ir = mm(Ar, Br), mm(Ai, Bi), mm(Ar, Bi), mm(Ai, Br)
        return [[(rr[i][j] - ii[i][j], ri[i][j] + ir[i][j]) for j in range(len(rr[0]))] for i in range(len(rr))]
    return exact_product.mm(exact_product.__wrapped__(A_MK), exact_product.__wrapped__(B_KN))


exact_product.__wrapped__ = lambda X: [[Fraction(v) for v in row] for row in X.tolist()]
exact_product.mm = lambda A, B: [[sum(a * b for a, b in zip(row, col, strict=False)) for col in zip(*B, strict=False)] for row in A]


def rounded(E):
    return torch.tensor([[float(x) for x in row] for row in E], dtype=torch.float64)


def abs_err(C_MN, E):
    return torch.tensor([[float(abs(Fraction(C_MN[i, j].item()) - E[i][j])) for j in range(len(E[0]))]
                         for i in range(len(E))], dtype=torch.float64)


SHAPES = [(1, 1, 1), (3, 70, 5), (19, 45, 23), (33, 16, 8)]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("mode", ["fast", "accurate"])
def test_int8_and_fp8_bit_identical_to_cpu_exact(shape, mode):
    M, K, N = shape
    A = ozaki_matrix(M, K, 2.0, 1)
    B = ozaki_matrix(K, N, 2.0, 2)
    for n in (8, 15):
        ref8 = ozaki_matmul(A, B, num_moduli=n, backend=CpuExactBackend("int8"), mode=mode)
        assert torch.equal(ozaki_matmul(A, B, num_moduli=n, backend=Int8Backend(kernels="torch"), mode=mode), ref8)
        reff = ozaki_matmul(A, B, num_moduli=n, backend=CpuExactBackend("fp8"), mode=mode)
        assert torch.equal(ozaki_matmul(A, B, num_moduli=n, backend=Fp8Backend(kernels="torch"), mode=mode), reff)


@pytest.mark.parametrize("backend", ["int8", "fp8"])
def test_complex_bit_identical_and_accurate(backend):
    g = torch.Generator().manual_seed(3)
    A = torch.complex(torch.randn(9, 21, dtype=torch.float64, generator=g),
                      torch.randn(9, 21, dtype=torch.float64, generator=g))
    B = torch.complex(torch.randn(21, 7, dtype=torch.float64, generator=g),
                      torch.randn(21, 7, dtype=torch.float64, generator=g))
    C = ozaki_matmul(A, B, num_moduli=12, backend=backend)
    ref = ozaki_matmul(A, B, num_moduli=12, backend=CpuExactBackend("int8" if backend == "int8" else "fp8"))
    assert torch.equal(C, ref)
    E = exact_product(A, B)
    err_re = abs_err(C.real, [[e[0] for e in row] for row in E])
    err_im = abs_err(C.imag, [[e[1] for e in row] for row in E])
    bound = ozaki_error_bound(A, B, num_moduli=12, backend=backend)
    assert (err_re <= bound).all() and (err_im <= bound).all()
    C20 = ozaki_matmul(A, B, num_moduli=20, backend=backend)  # enough bits: correctly rounded product
    assert torch.equal(C20.real, rounded([[e[0] for e in row] for row in E]))
    assert torch.equal(C20.imag, rounded([[e[1] for e in row] for row in E]))


@pytest.mark.parametrize("mode", ["fast", "accurate"])
def test_error_decreases_with_moduli_and_reaches_native(mode):
    A = ozaki_matrix(16, 64, 1.0, 4)
    B = ozaki_matrix(64, 16, 1.0, 5)
    E = exact_product(A, B)
    scale = max(abs(float(x)) for row in E for x in row)
    errs = {n: float(abs_err(ozaki_matmul(A, B, num_moduli=n, backend="int8", mode=mode), E).max()) / scale
            for n in (6, 8, 10, 12, 14, 16)}
    native = float(abs_err(A @ B, E).max()) / scale
    ns = sorted(errs)
    for a, b in zip(ns, ns[1:], strict=False):
        if errs[a] > 1e-14:  # above the final-rounding floor each 2 moduli add ~15 bits
            assert errs[b] <= errs[a] / 8, errs
    assert errs[6] > 1e-9  # few moduli are visibly inexact: the test can fail
    assert errs[16] <= native, (errs, native)


def test_bound_holds_and_is_not_vacuous():
    A = ozaki_matrix(12, 40, 3.0, 6)
    B = ozaki_matrix(40, 10, 3.0, 7)
    E = exact_product(A, B)
    for backend, mode, n in [("int8", "fast", 8), ("int8", "accurate", 10), ("fp8", "fast", 7), ("int8", "fast", 14)]:
        C = ozaki_matmul(A, B, num_moduli=n, backend=backend, mode=mode)
        err = abs_err(C, E)
        bound = ozaki_error_bound(A, B, num_moduli=n, backend=backend, mode=mode)
        assert (err <= bound).all()
        assert float((err / bound).max()) > 1e-4  # the bound is within a few decades of reality


@pytest.mark.parametrize("phi", [2.0, 4.0])
def test_accurate_mode_beats_fast_mode_on_wide_exponents(phi):
    # GEMMul8 GH200 table (fp64.md 2.6): accurate mode is worth up to about one modulus at large phi.
    A = ozaki_matrix(8, 64, phi, 1)
    B = ozaki_matrix(64, 8, phi, 2)
    E = exact_product(A, B)
    for n in (8, 10, 12):
        ef = float(abs_err(ozaki_matmul(A, B, num_moduli=n, mode="fast"), E).max())
        ea = float(abs_err(ozaki_matmul(A, B, num_moduli=n, mode="accurate"), E).max())
        assert ea < ef


def test_narrow_range_20_moduli_is_correctly_rounded():
    A = ozaki_matrix(10, 24, 0.5, 10)
    B = ozaki_matrix(24, 9, 0.5, 11)
    want = rounded(exact_product(A, B))
    for backend in ("int8", "fp8"):
        assert torch.equal(ozaki_matmul(A, B, num_moduli=20, backend=backend, mode="accurate"), want)


def test_special_values_follow_native():
    A = ozaki_matrix(6, 8, 1.0, 12)
    B = ozaki_matrix(8, 5, 1.0, 13)
    A[1, 2] = float("inf")
    A[2, 0] = float("nan")
    B[3, 1] = -float("inf")
    A[3] = 0.0
    C = ozaki_matmul(A, B, num_moduli=14)
    R = A @ B
    assert torch.equal(torch.isnan(C), torch.isnan(R))
    assert torch.equal(torch.isinf(C), torch.isinf(R))
    assert torch.equal(C[torch.isinf(R)], R[torch.isinf(R)])
    fin = torch.isfinite(R)
    assert torch.allclose(C[fin], R[fin], rtol=1e-13, atol=0)
    assert (C[3, [0, 2, 3, 4]] == 0).all()


def test_subnormal_and_huge_inputs_and_overflow():
    A = ozaki_matrix(5, 12, 1.0, 14)
    B = ozaki_matrix(12, 4, 1.0, 15)
    tiny_A, tiny_B = A * 2.0**-1060, B * 2.0**40  # subnormal inputs, normal output
    want = rounded(exact_product(tiny_A, tiny_B))
    assert torch.equal(ozaki_matmul(tiny_A, tiny_B, num_moduli=20), want)
    sub = ozaki_matmul(A * 2.0**-540, B * 2.0**-540, num_moduli=20)  # subnormal outputs, single rounding
    assert torch.equal(sub, rounded(exact_product(A * 2.0**-540, B * 2.0**-540)))
    # overflow of the exact product -> +-inf with the exact sign (native float64 gives NaN here:
    # its partial products overflow to +-inf and cancel)
    big = ozaki_matmul(A * 2.0**600, B * 2.0**600, num_moduli=14)
    E = exact_product(A, B)
    assert torch.isinf(big).all()
    assert all((big[i, j] > 0) == (E[i][j] > 0) for i in range(5) for j in range(4))


@pytest.mark.parametrize("mode", ["fast", "accurate"])
def test_power_of_two_scale_invariance(mode):
    A = ozaki_matrix(7, 30, 2.0, 16)
    B = ozaki_matrix(30, 6, 2.0, 17)
    C = ozaki_matmul(A, B, num_moduli=9, mode=mode)
    for sa, sb in [(-700, 3), (500, -200), (-1000, 950), (37, 0)]:
        Cs = ozaki_matmul(A * 2.0**sa, B * 2.0**sb, num_moduli=9, mode=mode)
        assert torch.equal(Cs, C * 2.0 ** (sa + sb))


def test_batched_and_broadcast():
    A = torch.stack([ozaki_matrix(6, 10, 1.0, s) for s in range(6)]).reshape(2, 3, 6, 10)
    B = torch.stack([ozaki_matrix(10, 4, 1.0, 10 + s) for s in range(3)])
    C = ozaki_matmul(A, B, num_moduli=10)
    assert C.shape == (2, 3, 6, 4)
    for i in range(2):
        for j in range(3):
            assert torch.equal(C[i, j], ozaki_matmul(A[i, j], B[j], num_moduli=10))


def test_fp8_chunking_and_unsafe_chunk_refused():
    A = ozaki_matrix(17, 130, 1.0, 20)  # 130 = 3 chunks of 48 (padded)
    B = ozaki_matrix(130, 9, 1.0, 21)
    assert torch.equal(ozaki_matmul(A, B, num_moduli=10, backend="fp8"),
                       ozaki_matmul(A, B, num_moduli=10, backend=CpuExactBackend("fp8")))
    with pytest.raises(InputError, match="2\\*\\*14"):
        Fp8Backend(k_chunk=64)
    Fp8Backend(k_chunk=64, allow_unsafe_chunk=True)


def test_input_errors():
    A = torch.randn(3, 4, dtype=torch.float64)
    with pytest.raises(InputError):
        ozaki_matmul(A.float(), A.T.float())
    with pytest.raises(InputError):
        ozaki_matmul(A, A)
    with pytest.raises(InputError):
        ozaki_matmul(A, A.T, mode="exact")
    with pytest.raises(InputError):
        ozaki_matmul(A, A.T, backend="int4")
    with pytest.raises(InputError):
        ozaki_matmul(A, A.T, num_moduli=30)
    with pytest.raises(InputError):
        ozaki_error_bound(A.clone().fill_(float("nan")), A.T)
    # batch shapes that do not broadcast (torch.matmul's rule): named, not a torch RuntimeError
    A2, B3 = torch.randn(2, 3, 4, dtype=torch.float64), torch.randn(3, 4, 3, dtype=torch.float64)
    with pytest.raises(InputError, match=r"batch shapes do not broadcast: A is \(2, 3, 4\), B is \(3, 4, 3\)"):
        ozaki_matmul(A2, B3)
    with pytest.raises(InputError, match="batch shapes"):
        ozaki_error_bound(A2, B3)


def test_ill_conditioned_cancellation_vs_exact():
    # rows [x, -x, tiny]: the exact dot products are tiny compared with sum |a||b| (condition ~1e16)
    K = 24
    base = ozaki_matrix(6, K // 2, 0.5, 30)
    A = torch.cat([base, -base], dim=1)
    A[:, -1] = 1e-12
    B = torch.cat([ozaki_matrix(K // 2, 5, 0.5, 31)] * 2, dim=0)
    E = exact_product(A, B)
    for n in (10, 16, 20):
        C = ozaki_matmul(A, B, num_moduli=n, mode="accurate")
        err = abs_err(C, E)
        assert (err <= ozaki_error_bound(A, B, num_moduli=n, mode="accurate")).all()
    assert torch.equal(ozaki_matmul(A, B, num_moduli=20, mode="accurate"), rounded(E))


def test_spike_plus_background_per_row_scaling_worst_case():
    # one huge entry per row: small entries lose bits (documented limitation of per-row scaling);
    # the result still obeys the a-priori bound and improves with more moduli.
    A = ozaki_matrix(5, 30, 0.5, 32)
    A[:, 3] = 1e12
    B = ozaki_matrix(30, 4, 0.5, 33)
    E = exact_product(A, B)
    errs = []
    for n in (8, 14, 20):
        C = ozaki_matmul(A, B, num_moduli=n)
        err = abs_err(C, E)
        assert (err <= ozaki_error_bound(A, B, num_moduli=n)).all()
        errs.append(float(err.max()))
    assert errs[0] > errs[1] > errs[2]


@pytest.mark.slow
@pytest.mark.parametrize("phi", [0.5, 2.0, 4.0])
def test_error_curve_vs_moduli_wide_exponents(phi):
    """fp64.md 2.6 CPU table shape: normwise error vs moduli on 32x256x32, reaching native by 16 moduli."""
    A = ozaki_matrix(32, 256, phi, 40)
    B = ozaki_matrix(256, 32, phi, 41)
    E = exact_product(A, B)
    scale = max(abs(float(x)) for row in E for x in row)
    native = float(abs_err(A @ B, E).max()) / scale
    errs = [float(abs_err(ozaki_matmul(A, B, num_moduli=n, backend="cpu-exact"), E).max()) / scale
            for n in (8, 12, 16, 18)]
    assert errs[0] > errs[1] > errs[2] >= errs[3]
    assert errs[3] <= native


@pytest.mark.parametrize(("a", "b"), [((3, 0), (0, 2)), ((0, 4), (4, 2)), ((3, 4), (4, 0)), ((0, 3, 4), (0, 4, 2)),
                                      ((2, 3, 0), (0, 2))])
def test_empty_operands_like_torch_matmul(a, b):
    """Empty M, K, N or batch: the product is torch.matmul's (zeros when K = 0) and its error bound is 0
    (the bound once failed to reshape 0 elements)."""
    A, B = torch.ones(a, dtype=torch.float64), torch.ones(b, dtype=torch.float64)
    want = torch.matmul(A, B)
    got = ozaki_matmul(A, B)
    assert got.shape == want.shape and torch.equal(got, want)
    bound = ozaki_error_bound(A, B)
    assert bound.shape == want.shape and not bound.any()
