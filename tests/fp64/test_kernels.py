"""Triton kernels (run by the Triton interpreter on CPU) against the torch references and Python integers.

``gpufield.fp64.kernels`` sets TRITON_INTERPRET=1 itself when there is no CUDA device, so these tests run
in CI; on a GPU machine the same tests exercise the compiled kernels.

Shape legend: R rows, K inner, L moduli, M rows, N columns.
"""

from __future__ import annotations

import os
import random

import pytest
import torch

if not torch.cuda.is_available():  # before the first import of triton in this process
    os.environ.setdefault("TRITON_INTERPRET", "1")
triton = pytest.importorskip("triton")

from gpufield.fp64 import ozaki_matmul  # noqa: E402
from gpufield.fp64.kernels.crt import crt_triton, crt_triton_rows_cols  # noqa: E402
from gpufield.fp64.kernels.residue import scale_residues_triton  # noqa: E402
from gpufield.fp64.ozaki.backends import CpuExactBackend, Fp8Backend, Int8Backend  # noqa: E402
from gpufield.fp64.ozaki.crt import crt_exact_python  # noqa: E402
from gpufield.fp64.ozaki.moduli import moduli_table, sym_mod  # noqa: E402
from gpufield.fp64.ozaki.residues import residues_from_scaled, scale_trunc  # noqa: E402

DEV = "cuda" if torch.cuda.is_available() else "cpu"


def _operand(R, K, seed):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(R, K, dtype=torch.float64, generator=g) * torch.exp(4 * torch.randn(R, K, dtype=torch.float64, generator=g))
    X[0] = 5e-324 * torch.arange(K)
    X[1] = 1.7e308 * torch.linspace(-1, 1, K, dtype=torch.float64)
    X[2] = 0.0
    s = torch.randint(-60, 140, (R,), generator=g)
    s[0], s[1] = 1130, -960
    return X, s


@pytest.mark.parametrize("kind,n,dtype", [("int8", 9, torch.int8), ("int8", 18, torch.int8), ("fp8", 13, torch.int16)])
def test_residue_kernel_bit_identical(kind, n, dtype):
    X, s = _operand(37, 45, n)
    t = moduli_table(kind, n)
    got = scale_residues_triton(X.to(DEV), s.to(DEV), t, dtype).cpu()
    want = residues_from_scaled(scale_trunc(X, s), t.moduli, dtype)
    assert torch.equal(got, want)
    # independent oracle on a few entries: Python ints
    Y = scale_trunc(X, s)
    for i, k in [(0, 44), (1, 0), (5, 7), (36, 44)]:
        assert [int(got[mi, i, k]) for mi in range(n)] == [sym_mod(int(Y[i, k].item()), p) for p in t.moduli]


def test_residue_kernel_strided_input():
    X, s = _operand(20, 33, 5)
    t = moduli_table("int8", 12)
    XT = X.T  # non-contiguous view
    got = scale_residues_triton(XT.to(DEV), s[:1].repeat(33).to(DEV), t, torch.int8).cpu()
    want = residues_from_scaled(scale_trunc(XT.contiguous(), s[:1].repeat(33)), t.moduli, torch.int8)
    assert torch.equal(got, want)


@pytest.mark.parametrize("kind,n", [("int8", 2), ("int8", 15), ("int8", 20), ("fp8", 8), ("fp8", 20)])
def test_crt_kernel_bit_identical_to_python_oracle(kind, n):
    t = moduli_table(kind, n)
    rng = random.Random(n)
    lim = t.M // 2 - (t.M >> 11)
    Xs = [rng.randrange(-lim, lim) for _ in range(100)] + [0, 1, -1, 2**53 + 1, -(2**53) - 3]
    Xs += [rng.choice([1, -1]) * ((1 << rng.randrange(1, t.M.bit_length() - 2)) + rng.choice([0, 1, 3]))
           for _ in range(95)]
    res = torch.tensor([[sym_mod(X, p) + p * rng.randrange(-2, 3) for X in Xs] for p in t.moduli])
    sh = torch.tensor([rng.choice([0, 7, -30, 1074, 1080, 1130, 2100, -1000, rng.randrange(-1100, 2200)])
                       for _ in Xs])
    got = crt_triton(res.to(DEV), sh.to(DEV), t).cpu()
    assert torch.equal(got, crt_exact_python(res, sh, t))
    # separate row/column shifts, int32 input as _int_mm produces
    res32 = torch.tensor([[sym_mod(X, p) for X in Xs[:200]] for p in t.moduli], dtype=torch.int32).reshape(n, 10, 20)
    s_M = torch.tensor([rng.randrange(-500, 1200) for _ in range(10)])
    t_N = torch.tensor([rng.randrange(-500, 900) for _ in range(20)])
    got2 = crt_triton_rows_cols(res32.to(DEV), s_M.to(DEV), t_N.to(DEV), t).cpu()
    assert torch.equal(got2, crt_exact_python(res32, s_M[:, None] + t_N[None, :], t))


@pytest.mark.parametrize("complex_", [False, True])
def test_end_to_end_triton_paths_match_cpu_exact(complex_):
    g = torch.Generator().manual_seed(9)
    A = torch.randn(24, 60, dtype=torch.float64, generator=g) * torch.exp(2 * torch.randn(24, 60, dtype=torch.float64, generator=g))
    B = torch.randn(60, 16, dtype=torch.float64, generator=g)
    if complex_:
        A = torch.complex(A, torch.randn(24, 60, dtype=torch.float64, generator=g))
        B = torch.complex(B, torch.randn(60, 16, dtype=torch.float64, generator=g))
    for be, ref in [(Int8Backend(kernels="triton"), CpuExactBackend("int8")),
                    (Fp8Backend(kernels="triton"), CpuExactBackend("fp8"))]:
        for mode in (("fast", "accurate") if not complex_ else ("fast",)):
            got = ozaki_matmul(A.to(DEV), B.to(DEV), num_moduli=14, backend=be, mode=mode).cpu()
            assert torch.equal(got, ozaki_matmul(A, B, num_moduli=14, backend=ref, mode=mode))


@pytest.mark.parametrize("group,n", [(4, 14), (5, 15), (3, 7)])
def test_grouped_block_diagonal_path_matches_cpu_exact(group, n, monkeypatch):
    """Small-K path: grouped residues, block-diagonal _int_mm per group of moduli, grouped CRT."""
    from gpufield.fp64.ozaki import backends

    calls = []
    orig = backends.Int8Backend.modular_matmul_grouped
    monkeypatch.setattr(backends.Int8Backend, "modular_matmul_grouped",
                        lambda self, *a: calls.append(a[-1]) or orig(self, *a))
    g = torch.Generator().manual_seed(group)
    A = torch.randn(40, 32, dtype=torch.float64, generator=g) * torch.exp(3 * torch.randn(40, 32, dtype=torch.float64, generator=g))
    B = torch.randn(32, 24, dtype=torch.float64, generator=g)
    Ac = torch.complex(A, torch.randn(40, 32, dtype=torch.float64, generator=g))
    Bc = torch.complex(B, torch.randn(32, 24, dtype=torch.float64, generator=g))
    be = Int8Backend(kernels="triton", group=group)
    for P, Q in [(A, B), (Ac, Bc)]:
        got = ozaki_matmul(P.to(DEV), Q.to(DEV), num_moduli=n, backend=be).cpu()
        assert torch.equal(got, ozaki_matmul(P, Q, num_moduli=n, backend=CpuExactBackend("int8")))
    assert calls and set(calls) == {group}


def test_fast_shift_kernel_bit_identical():
    from gpufield.fp64.ozaki.scaling import fast_shifts

    g = torch.Generator().manual_seed(11)
    X = torch.randn(36, 80, dtype=torch.float64, generator=g) * torch.exp(5 * torch.randn(36, 80, dtype=torch.float64, generator=g))
    X[0] = 0.0
    X[1, :3], X[1, 3:] = 5e-324, 0.0  # subnormal row max
    X[2] = 1.7e308
    X[3] = 4e-310 * torch.rand(80, dtype=torch.float64, generator=g)
    Xc = torch.complex(X, torch.randn(36, 80, dtype=torch.float64, generator=g))
    t = moduli_table("int8", 15)
    for Y in (X, X.T, Xc, X[:, :5]):
        assert torch.equal(fast_shifts(Y.to(DEV), t, True).cpu(), fast_shifts(Y, t, False))
    t2 = moduli_table("int8", 2)
    assert torch.equal(fast_shifts(X.to(DEV), t2, True).cpu(), fast_shifts(X, t2, False))


def test_fp8_digit_planes_from_kernel_match_reference():
    from gpufield.fp64.ozaki.residues import fp8_digit_planes

    X, s = _operand(33, 20, 4)
    t = moduli_table("fp8", 14)  # 6 square + 8 Karatsuba moduli
    Xc = torch.complex(X, X.flip(0))
    d = scale_residues_triton(Xc.to(DEV), s.to(DEV), t, torch.int16, digits=True).cpu()
    assert d.dtype == torch.float8_e4m3fn and d.shape == (3, 14, 3, 33, 20)
    res = scale_residues_triton(Xc.to(DEV), s.to(DEV), t, torch.int16).cpu()  # [3L, R, K]
    for c in range(3):
        for mi in range(14):
            for k, plane in enumerate(fp8_digit_planes(res[c * 14 + mi], t, mi)):
                assert torch.equal(d[c, mi, k].float(), plane.float())


def test_bound_operand_kernel_bit_identical():
    from gpufield.fp64.ozaki.scaling import bound_operand

    g = torch.Generator().manual_seed(12)
    X = torch.randn(33, 70, dtype=torch.float64, generator=g) * torch.exp(5 * torch.randn(33, 70, dtype=torch.float64, generator=g))
    X[0] = 0.0
    X[1, :3], X[1, 3:] = 5e-324, 0.0
    X[2] = 1.7e308
    Xc = torch.complex(X, X.flip(1))
    for ufp in (6, 4):
        for Y in (X, X.T, Xc):
            h_ref, s_ref = bound_operand(Y, ufp, False)
            h, s = bound_operand(Y.to(DEV), ufp, True)
            assert torch.equal(h.cpu().long(), h_ref) and torch.equal(s.cpu(), s_ref)
            assert int(h_ref.max()) <= 2**ufp
