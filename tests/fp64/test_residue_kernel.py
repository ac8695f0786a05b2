"""32-bit residue kernel (gpufield.fp64.kernels.residue): constants, bounds and bit-identity on edge inputs.

Oracles: Python integers (``sym_mod`` of the exact scaled integer, the Barrett formula evaluated on the
proven domain's extremes) and the torch reference ``residues_from_scaled(scale_trunc(...))``. Runs in
the Triton interpreter on CPU (``TRITON_INTERPRET=1`` is set by ``gpufield.fp64.kernels``).

Shape legend: R rows, K inner, L moduli, C components, G groups.
"""

from __future__ import annotations

import os
import random

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
pytest.importorskip("triton")

from gpufield.fp64.kernels.residue import scale_residues_triton  # noqa: E402
from gpufield.fp64.kernels.residue_consts import YI_BITS, kernel_constants  # noqa: E402
from gpufield.fp64.ozaki.moduli import moduli_table, sym_mod  # noqa: E402
from gpufield.fp64.ozaki.residues import residues_from_scaled, scale_trunc  # noqa: E402

DEV = "cuda" if torch.cuda.is_available() else "cpu"


def _barrett_py(T: int, p: int, m: int, S: int, J: int, exact: bool) -> int:
    """The kernel's int32 reduction in Python ints (uint32 wrap-around of U, umulhi, shift)."""
    U = (T + p // 2 + J * p) & 0xFFFFFFFF
    q = ((U * m) >> 32) >> S
    return T - (q - J if exact else q) * p


@pytest.mark.parametrize("kind", ["int8", "fp8"])
def test_constants_exact_on_domain_extremes(kind):
    t = moduli_table(kind, 20)
    kc = kernel_constants(t.moduli)
    nch, cw = kc["NCH"], kc["CW"]
    rng = random.Random(3)
    for i, p in enumerate(t.moduli):
        if kc["PK"][i]:
            assert 1 << kc["PK"][i] == p
            continue
        cs = kc["CC"][i * (nch - 1):(i + 1) * (nch - 1)]
        assert all(c % p == pow(2, cw * (j + 1), p) and abs(c) <= p // 2 for j, c in enumerate(cs))
        top = YI_BITS - cw * (nch - 1)
        # chain extremes: every chunk at its bound with the sign of its constant
        lo = sum(min(0, c) * ((1 << cw) - 1) for c in cs[:-1]) + min(cs[-1] * -(1 << top), cs[-1] * ((1 << top) - 1))
        hi = (1 << cw) - 1 + sum(max(0, c) * ((1 << cw) - 1) for c in cs[:-1]) + max(cs[-1] * -(1 << top),
                                                                                      cs[-1] * ((1 << top) - 1))
        assert -(2**31) <= lo and hi < 2**31
        Ts = [lo, hi, 0, -1, 1, -(p // 2), p - 1 - p // 2, -(p - 1) * (p // 2), (p - 1) * (p // 2)]
        Ts += [rng.randrange(lo, hi + 1) for _ in range(300)]
        J, J3 = kc["BJ"][i], kc["BJ3"][i]
        assert J % 2**16 == 0 and J3 % 2**16 == 0  # r - J p keeps the low 16 bits of r
        for T in Ts:
            assert _barrett_py(T, p, kc["BM"][i], kc["BS"][i], J, True) == sym_mod(T, p), (p, T)
            assert _barrett_py(T, p, kc["BM"][i], kc["BS"][i], J, False) == sym_mod(T, p) - J * p, (p, T)
        rs = [-(p // 2) - J * p, p - 1 - p // 2 - J * p, -J * p, rng.randrange(-(p // 2), p - p // 2) - J * p]
        for T3 in [a + b for a in rs for b in rs] + [-2 * (p // 2), 2 * (p - 1 - p // 2)]:  # re+im sums
            assert _barrett_py(T3, p, kc["BM"][i], kc["BS"][i], J3, True) == sym_mod(T3, p), (p, T3)


def _edge_operand(R: int, K: int, seed: int):
    """float64 [R, K] and shifts [R]: random wide-range rows plus rows at the 2^58 / 2^62 bounds, sign and
    subnormal edges (after scaling)."""
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(R, K, dtype=torch.float64, generator=g) * torch.exp(6 * torch.randn(R, K, dtype=torch.float64,
                                                                                      generator=g))
    s = torch.randint(-40, 90, (R,), generator=g)
    edges = [2.0**58, -(2.0**58), 2.0**58 - 1, -(2.0**58) + 1, 2.0**62 - 2.0**9, -(2.0**62) + 2.0**9, 2.0**62,
             -(2.0**62), 2.0**63 + 2.0**11, -(2.0**70), 2.0**53 + 2, -(2.0**53) - 2, 0.0, -0.0, 1.0, -1.0, 0.5, -0.99,
             2.0**31, -(2.0**31), 2.0**42 - 1, -(2.0**42), 2.0**21, -(2.0**21) - 1]
    X[0, :] = torch.tensor((edges * K)[:K], dtype=torch.float64)
    X[1, :] = X[0, :].flip(0)
    s[0] = s[1] = 0
    X[2] = 5e-324 * torch.arange(1, K + 1)  # subnormals, scaled up into the integer range
    s[2] = 1130
    X[3] = 1.7e308 * torch.linspace(-1, 1, K, dtype=torch.float64)
    s[3] = -960
    X[4] = 0.0
    X[5] = -torch.rand(K, dtype=torch.float64, generator=g) * 2.0**57  # negative, just below 2^58 after s = 1
    s[5] = 1
    small = [v for v in edges if abs(v) < 2.0**62]  # a tile of its own (block rows 4-7): the fast path only
    X[6, :] = torch.tensor((small * K)[:K], dtype=torch.float64)
    X[7, :] = -X[6, :].roll(3)
    s[6] = s[7] = 0
    return X, s


def _want(X, s, t, dtype):
    if not X.is_complex():
        return residues_from_scaled(scale_trunc(X, s), t.moduli, dtype)
    re = residues_from_scaled(scale_trunc(X.real.contiguous(), s), t.moduli, torch.int64)
    im = residues_from_scaled(scale_trunc(X.imag.contiguous(), s), t.moduli, torch.int64)
    p = torch.tensor(t.moduli)[:, None, None]
    r3 = torch.remainder(re + im, p)
    r3 = torch.where(r3 >= (p + 1) // 2, r3 - p, r3)
    return torch.cat([re, im, r3]).to(dtype)


@pytest.mark.parametrize("kind,n,dtype", [("int8", 16, torch.int8), ("int8", 20, torch.int8),
                                          ("fp8", 20, torch.int16)])
def test_edge_inputs_bit_identical(kind, n, dtype):
    X, s = _edge_operand(12, 24, n)
    t = moduli_table(kind, n)
    got = scale_residues_triton(X.to(DEV), s.to(DEV), t, dtype, block=(4, 8, 4)).cpu()  # big and fast tiles
    assert torch.equal(got, _want(X, s, t, dtype))
    Y = scale_trunc(X, s)  # independent oracle: Python integers
    for i, k in [(0, 6), (0, 7), (0, 8), (1, 0), (0, 9), (5, 3), (2, 23), (6, 1), (7, 5)]:
        assert [int(got[mi, i, k]) for mi in range(n)] == [sym_mod(int(Y[i, k].item()), p) for p in t.moduli]
    Xc = torch.complex(X, X.flip(1))
    want = _want(Xc, s, t, dtype)
    assert torch.equal(scale_residues_triton(Xc.to(DEV), s.to(DEV), t, dtype).cpu(), want)


@pytest.mark.parametrize("g,n,K", [(8, 16, 16), (5, 13, 20)])
def test_grouped_layout_complex_bit_identical(g, n, K):
    """The FFT's shape: complex rows of K = 16, grouped [3, G, R, g*K] layout (slots past L unwritten)."""
    X, s = _edge_operand(24, K, 100 + g)
    Xc = torch.complex(X, -X.flip(1))
    t = moduli_table("int8", n)
    got = scale_residues_triton(Xc.to(DEV), s.to(DEV), t, torch.int8, group=g, block=(8, 16, 4)).cpu()
    want = _want(Xc, s, t, torch.int8).view(3, n, 24, K)
    G = -(-n // g)
    assert got.shape == (3, G, 24, g * K)
    for mi in range(n):
        q, w = divmod(mi, g)
        assert torch.equal(got[:, q, :, w * K:(w + 1) * K], want[:, mi])


def test_fp8_digits_on_edge_inputs():
    """FP8 digit planes of the edge operand (tiny, huge, subnormal, zero rows) equal the torch reference's:
    ``fp8_digit_planes`` of ``residues_from_scaled(scale_trunc(...))`` for every modulus (square and
    Karatsuba), and an unknown keyword is refused (the former ``impl`` switch is gone from the library)."""
    from gpufield.fp64.ozaki.residues import fp8_digit_planes

    X, s = _edge_operand(10, 20, 7)
    t = moduli_table("fp8", 14)
    d = scale_residues_triton(X.to(DEV), s.to(DEV), t, torch.int16, digits=True).cpu()
    assert d.dtype == torch.float8_e4m3fn and d.shape == (1, 14, 3, 10, 20)
    ref = residues_from_scaled(scale_trunc(X, s), t.moduli, torch.int64)  # [L, R, K]
    for mi in range(14):
        for k, plane in enumerate(fp8_digit_planes(ref[mi], t, mi)):
            assert torch.equal(d[0, mi, k].float(), plane.float())
    with pytest.raises(TypeError):
        scale_residues_triton(X, s, moduli_table("int8", 16), torch.int8, impl="int64")


def test_bounded_skips_big_pass_same_bits(monkeypatch):
    """FFT-stage shifts (b_x - e_row from the row maxima) keep |x 2^s| < 2^62: ``bounded=True`` launches only
    the fast pass (MODE 0; the big-value kernel is never compiled) and gives the unbounded call's bits on rows
    of tiny, huge, subnormal and zero values, ungrouped and grouped."""
    from gpufield.fp64.fft.stage import row_shifts
    from gpufield.fp64.kernels import residue

    rng = torch.Generator().manual_seed(11)
    X = torch.complex(torch.randn(32, 16, generator=rng, dtype=torch.float64),
                      torch.randn(32, 16, generator=rng, dtype=torch.float64))
    X *= torch.exp(6 * torch.randn(32, 1, generator=rng, dtype=torch.float64))  # rows over many binades
    X[1] *= 1e-300
    X[2] *= 1e300
    X[3] = 0
    X[4, :5] = 5e-324
    X[4, 5:] = 0
    s = row_shifts(X, 58)
    modes = []
    kern = residue._scale_residue_i32_kernel

    class _Spy:
        def __getitem__(self, grid):
            def launch(*args, MODE=0, **kw):
                modes.append(MODE)
                return kern[grid](*args, MODE=MODE, **kw)
            return launch

    monkeypatch.setattr(residue, "_scale_residue_i32_kernel", _Spy())
    t = moduli_table("int8", 16)
    for g in (1, 8):
        modes.clear()
        full = scale_residues_triton(X.to(DEV), s.to(DEV), t, torch.int8, group=g).cpu()
        assert modes == [0, 1]
        modes.clear()
        got = scale_residues_triton(X.to(DEV), s.to(DEV), t, torch.int8, group=g, bounded=True).cpu()
        assert modes == [0]
        assert torch.equal(got, full)
    assert torch.equal(got.view(3, 2, 32, 8, 16).transpose(2, 3).reshape(3, 16, 32, 16),
                       _want(X, s, t, torch.int8).view(3, 16, 32, 16))
