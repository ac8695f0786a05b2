"""Emulated FP64 FFT: bit-exact stages against a Python-integer oracle, accuracy against mpmath and
long-double DFTs (at or below numpy.fft's own error), round trip, inverse, and input errors.

Shapes: x arrays are complex128; sizes kept small (<= 32^3) for CPU CI.
"""

from __future__ import annotations

import math
import random

import mpmath
import numpy as np
import pytest
import torch

from gpufield.errors import InputError, NumericsError
from gpufield.fp64.fft import (
    EmulatedFftPlan,
    auto_num_moduli,
    fftn_fp64_emulated,
    ifftn_fp64_emulated,
)
from gpufield.fp64.fft.epilogue import VARIANTS, epilogue_tables, epilogue_torch
from gpufield.fp64.fft.reference import dft_longdouble, dft_mpmath, rel_l2, stage_exact_python
from gpufield.fp64.fft.sixstep import _dft_idx, _fused_idx
from gpufield.fp64.fft.stage import dft_stage
from gpufield.fp64.fft.twiddles import twiddle_table
from gpufield.fp64.ozaki.moduli import moduli_table

BACKENDS = ("cpu-exact", "int8", "fp8")


def _gen(kind: str, shape, rng) -> np.ndarray:
    if kind == "random":
        return rng.standard_normal(shape) + 1j * rng.standard_normal(shape)
    if kind == "smooth":
        g = np.meshgrid(*[np.linspace(0, 1, n, endpoint=False) for n in shape], indexing="ij")
        r = sum((gi - 0.5) ** 2 for gi in g)
        return np.exp(-r / 0.02) + 1j * np.exp(-r / 0.05) * np.sin(3 * g[0])
    if kind == "wide":  # exponent spread exp(4 randn): ~2^(+-17) within a vector
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)) * np.exp(4 * rng.standard_normal(shape))
    raise AssertionError(kind)


def _adversarial_rows(rng) -> np.ndarray:
    x = rng.standard_normal((2, 6, 32)) + 1j * rng.standard_normal((2, 6, 32))
    x[0, 1] *= np.exp(8 * rng.standard_normal(32))  # huge exponent spread in one row
    x[1, 2] = 0  # all-zero row
    x[1, 3] *= 1e-300  # scaling underflow side (outputs subnormal-adjacent)
    x[1, 4, :3] *= 1e300  # spike near overflow side
    x[0, 0, 5:] = 0  # mostly zeros
    x[0, 5] = (-1.0) ** np.arange(32)  # alternating +-1 (Nyquist)
    x[1, 5] = rng.integers(-(2**40), 2**40, 32) + 1j * rng.integers(-(2**40), 2**40, 32)  # integers
    return x


def test_twiddle_table_exact_values():
    c, s = twiddle_table(56)
    assert c[0] == 2**56 and s[0] == 0 and s[256] == 2**56 and c[512] == -(2**56)
    # cos(pi/4) * 2^56 = sqrt(2^111): nearest integer by integer square root (independent of mpmath)
    r = math.isqrt(2**111)
    nearest = r + 1 if (2 * r + 1) ** 2 < 4 * 2**111 else r
    assert c[128] == nearest and s[128] == nearest
    # cos(pi/2) = 0 exactly; a generic entry agrees with float64 cos to its ~2^-53 accuracy (2^3 units)
    assert c[256] == 0 and abs(int(c[341]) - round(math.cos(2 * math.pi * 341 / 1024) * 2**56)) <= 64


def test_stage_bit_exact_all_backends_and_variants():
    rng = np.random.default_rng(7)
    x = _adversarial_rows(rng)
    idx = np.stack([_dft_idx(32)[0], _fused_idx(1024)[5]])
    plan0 = EmulatedFftPlan()
    ref = stage_exact_python(x, idx, plan0.input_bits, plan0.twiddle_bits)
    for backend in BACKENDS:
        for variant in VARIANTS:
            y = dft_stage(torch.from_numpy(x), idx, EmulatedFftPlan(backend=backend, variant=variant)).numpy()
            bad = y.view(np.int64) != ref.view(np.int64)  # bits: -0.0 differs from +0.0
            assert not bad.any(), f"{backend}/{variant}: {bad.sum()} outputs differ from the exact oracle"


@pytest.mark.parametrize("kind,r", [("int8", 16), ("fp8", 13), ("int8", 20), ("fp8", 20)])
def test_epilogue_bit_exact_near_crt_bound(kind, r):
    rnd = random.Random(r)
    mt = moduli_table(kind, r)
    tab = epilogue_tables(kind, r)
    n_out = 400
    bits = [0, 1, 30, 62, 64, 100, int(mt.log2_M) - 3]
    vals = [rnd.randint(-(1 << b), 1 << b) for b in (rnd.choice(bits) for _ in range(n_out))]
    vals[:3] = [0, 1, -1]
    T = torch.zeros((r, 3, n_out), dtype=torch.int64)
    for i, p in enumerate(mt.moduli):  # T1 - T2 = v, T3 - T1 - T2 = -v (mod p), arbitrary offsets
        for k, v in enumerate(vals):
            a = rnd.randint(-5000, 5000)
            T[i, 0, k] = a
            T[i, 1, k] = a - (v % p) + p * rnd.randint(-3, 3)
            T[i, 2, k] = (-v % p) + a + int(T[i, 1, k])
    shift = torch.tensor([rnd.randint(-50, 1200) for _ in range(n_out)], dtype=torch.int64)
    want = [math.ldexp(float(v), -int(sh)) for v, sh in zip(vals, shift, strict=True)]
    for variant in VARIANTS:
        y = epilogue_torch(T, shift, tab, variant)
        assert y.real.tolist() == want, variant
        assert y.imag.tolist() == [-w for w in want], variant


@pytest.mark.parametrize("shape", [(16,), (64,), (8, 8), (4, 4, 4)])
@pytest.mark.parametrize("kind", ["random", "smooth", "wide"])
def test_accuracy_vs_mpmath(shape, kind):
    x = _gen(kind, shape, np.random.default_rng(sum(shape)))
    ref = dft_mpmath(x, 30)
    e_emu = rel_l2(fftn_fp64_emulated(x), ref)
    e_np = rel_l2(np.fft.fftn(x), ref)
    assert e_emu <= e_np and e_emu < 2**-53, (e_emu, e_np)


@pytest.mark.parametrize("shape", [(1024,), (32, 32), (16, 16, 16)])
@pytest.mark.parametrize("kind", ["random", "wide"])
def test_accuracy_vs_longdouble_and_round_trip(shape, kind):
    x = _gen(kind, shape, np.random.default_rng(len(shape)))
    ref = dft_longdouble(x)
    y = fftn_fp64_emulated(x)
    assert rel_l2(y, ref) <= rel_l2(np.fft.fftn(x), ref)
    back = ifftn_fp64_emulated(y)
    assert rel_l2(back, x) <= rel_l2(np.fft.ifftn(np.fft.fftn(x)), x)


def test_inverse_against_mpmath():
    x = _gen("random", (4, 8), np.random.default_rng(3))
    ref = np.conj(dft_mpmath(np.conj(x), 30)) / x.size
    y = ifftn_fp64_emulated(x)
    assert rel_l2(y, ref) <= max(rel_l2(np.fft.ifftn(x), ref), 2**-54)


@pytest.mark.parametrize("shape", [(32,), (64,), (8, 16), (4, 8, 16)])
@pytest.mark.parametrize("kind", ["random", "wide"])
def test_inverse_is_the_conjugated_forward_bit_for_bit(shape, kind):
    """The inverse runs the forward stages on the conjugate roots (table entries at the negated exponents):
    every entry is exactly the conjugate of the forward one, so in the normal range the result is bit for bit
    conj(fft(conj(x))) / N (the division is exact there), and the input is read in place but not modified."""
    c, s = twiddle_table()
    pairs = [(_dft_idx(n), _dft_idx(n, True)) for n in (2, 4, 8, 16, 32)]
    pairs += [(_fused_idx(n), _fused_idx(n, True)) for n in (64, 128, 256, 512, 1024)]
    for fwd, inv in pairs:
        assert np.array_equal(c[inv], c[fwd]) and np.array_equal(s[inv], -s[fwd])
    x = _gen(kind, shape, np.random.default_rng(sum(shape)))
    keep = x.copy()
    y = ifftn_fp64_emulated(x)
    want = np.conj(fftn_fp64_emulated(np.conj(x))) / x.size
    assert np.array_equal(y.view(np.int64), want.view(np.int64))  # bits (no zero parts in these outputs)
    assert np.array_equal(x.view(np.int64), keep.view(np.int64))
    t = torch.from_numpy(x).conj()  # a lazily conjugated view: transformed as its value
    assert np.array_equal(ifftn_fp64_emulated(t).numpy(), np.conj(fftn_fp64_emulated(x)) / x.size)


def test_inverse_zero_parts_are_positive_zero_like_numpy():
    """ifft of a real input: the zero-frequency and Nyquist imaginary parts are exactly zero, +0.0 as numpy's
    (the conjugation once left them -0.0)."""
    x = np.arange(8, dtype=np.float64) ** 2
    y = ifftn_fp64_emulated(x)
    want = np.fft.ifft(x)
    zero = want.imag == 0
    assert zero.sum() == 2 and np.array_equal(y.imag == 0, zero)
    assert np.array_equal(np.signbit(y.imag[zero]), np.signbit(want.imag[zero]))
    assert not np.signbit(y.imag[zero]).any()


def test_backends_and_variants_give_identical_bits_3d():
    x = _gen("wide", (4, 2, 16), np.random.default_rng(11))
    base = fftn_fp64_emulated(x)
    for backend in BACKENDS:
        for variant in VARIANTS:
            y = fftn_fp64_emulated(x, backend=backend, variant=variant)
            assert np.array_equal(y.view(np.int64), base.view(np.int64)), (backend, variant)


def test_impulse_gives_exact_ones_and_tensor_io():
    x = torch.zeros((8, 16, 32), dtype=torch.complex128)
    x[0, 0, 0] = 1
    y = fftn_fp64_emulated(x)
    assert isinstance(y, torch.Tensor) and y.dtype == torch.complex128
    assert torch.equal(y, torch.ones_like(y))
    real = np.arange(8.0)
    assert np.allclose(fftn_fp64_emulated(real), np.fft.fft(real), rtol=0, atol=1e-14)


def test_auto_moduli_counts_cover_the_crt_bound():
    # 58-bit inputs, 56-bit twiddles, k = 32: |Y'| <= 2 * 32 * 2^114 = 2^120; need M/2 > that with margin
    assert auto_num_moduli("int8") == 16 and moduli_table("int8", 15).log2_M < 122
    assert auto_num_moduli("fp8") == 14 and moduli_table("fp8", 13).log2_M < 122
    assert auto_num_moduli("int8", 53, 53) == 15
    with pytest.raises(InputError, match="moduli kind must be one of"):
        auto_num_moduli("int4")


@pytest.mark.parametrize(
    "bad",
    [np.zeros(12), np.zeros((2, 2, 2, 2)), np.zeros(2048), np.array(["a", "b"]), np.array(3.0),
     torch.zeros(8, dtype=torch.bool)],
)
def test_bad_input_shapes(bad):
    with pytest.raises(InputError):
        fftn_fp64_emulated(bad)


def test_plan_fields_are_integers_and_a_plan_excludes_keywords():
    """Plan fields of the wrong type are refused up front (a float moduli count used to pass once its table
    was cached and then fail deep inside); numpy integers become ints; a plan and plan keywords together, or a
    plan that is not an EmulatedFftPlan, are refused instead of silently ignoring the keywords."""
    for field, bad in (("num_moduli", 16.0), ("input_bits", 12.5), ("twiddle_bits", "56"), ("int8_group", True)):
        with pytest.raises(InputError, match=field):
            EmulatedFftPlan(**{field: bad})
    plan = EmulatedFftPlan(num_moduli=np.int64(16))
    assert type(plan.num_moduli) is int and plan.num_moduli == 16
    x = np.ones(8)
    with pytest.raises(InputError, match="not both"):
        fftn_fp64_emulated(x, EmulatedFftPlan(), backend="int8")
    with pytest.raises(InputError, match="EmulatedFftPlan"):
        fftn_fp64_emulated(x, "int8")


def test_overflow_of_the_final_output_is_inf_like_numpy():
    """A final output beyond DBL_MAX comes back as inf (as numpy.fft's); an overflow inside the transform (an
    intermediate stage) raises."""
    y = fftn_fp64_emulated(np.full(4, 1.7e308))
    assert np.isinf(y[0].real) and y[0].imag == 0 and np.all(y[1:] == 0)
    with pytest.raises(NumericsError, match="intermediate"):
        fftn_fp64_emulated(np.full((4, 4), 1e308))


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")
def test_inverse_divides_inside_the_one_rounding():
    """The inverse's 1/N is part of the last stage's rounding: an output that fits float64 does not overflow on
    the way (numpy.fft.ifft gives inf there), and a subnormal output is rounded once (numpy rounds twice).
    Exact values from Python fractions / mpmath."""
    z = ifftn_fp64_emulated(np.array([1.7e308, -1.7e308]))  # exactly [0, 1.7e308]
    assert np.array_equal(z, [0, 1.7e308]) and np.isinf(np.fft.ifft(np.array([1.7e308, -1.7e308]))[1])
    assert np.array_equal(ifftn_fp64_emulated(np.full(4, 1.7e308)), [1.7e308, 0, 0, 0])
    x = np.zeros(8, dtype=complex)
    x[1] = 6 * 5e-324  # outputs 6 * 2^-1074 w^k / 8: 0.75 or 0.53 of the smallest subnormal per part
    mpmath.mp.prec = 200
    want = []
    for k in range(8):
        v = mpmath.mpf(6) * mpmath.mpf(2) ** -1074 * mpmath.expjpi(mpmath.mpf(2 * k) / 8) / 8
        want.append(complex(float(v.real), float(v.imag)))  # mpmath's float(): round to nearest, once
    z = ifftn_fp64_emulated(x)
    assert np.array_equal(z, want), (z, want)


def test_non_finite_refused_and_bad_plans():
    x = np.ones(8, dtype=complex)
    x[3] = np.nan
    with pytest.raises(NumericsError):
        fftn_fp64_emulated(x)
    with pytest.raises(InputError):
        EmulatedFftPlan(num_moduli=12)  # log2 M = 94.8 < 122
    with pytest.raises(InputError):
        EmulatedFftPlan(backend="int8", moduli="fp8")
    with pytest.raises(InputError):
        EmulatedFftPlan(variant="fft")


def test_power_of_two_scale_invariance_and_spike():
    """Per-row scaling makes the transform exactly scale-invariant: fft(x 2^k) = fft(x) 2^k, bit for bit,
    far into both ends of the exponent range (2^-900, 2^+900); a spike over a tiny background stays
    at or below numpy's normwise error."""
    rng = np.random.default_rng(21)
    x = _gen("wide", (4, 8, 8), rng)
    y = fftn_fp64_emulated(x)
    def scale(z, k):
        return np.ldexp(z.real, k) + 1j * np.ldexp(z.imag, k)

    for k in (-900, 900):
        yk = fftn_fp64_emulated(scale(x, k))
        assert np.array_equal(yk.view(np.int64), scale(y, k).view(np.int64)), k
    s = 1e-8 * _gen("random", (4, 8, 8), rng)
    s[1, 2, 3] = 1e8
    ref = dft_longdouble(s)
    assert rel_l2(fftn_fp64_emulated(s), ref) <= rel_l2(np.fft.fftn(s), ref)


def test_lazily_conjugated_tensor_and_size_one_output_is_new():
    """A torch conjugate view is transformed as its value (it once failed in view_as_real), and a transform
    of all-size-1 sides returns a new array, never the caller's memory (numpy.fft returns a copy)."""
    t = torch.from_numpy(_gen("random", (8, 4), np.random.default_rng(5))).conj()
    assert t.is_conj()
    want = fftn_fp64_emulated(t.resolve_conj().numpy())
    assert np.array_equal(fftn_fp64_emulated(t).numpy(), want)
    assert np.array_equal(fftn_fp64_emulated(t.T).numpy(), fftn_fp64_emulated(t.resolve_conj().T.numpy()))
    for shape in ((1,), (1, 1, 1)):
        x = np.full(shape, 1 + 2j)
        y = fftn_fp64_emulated(x)
        assert not np.shares_memory(x, y) and np.array_equal(y, x)
        xt = torch.from_numpy(x.copy())
        assert fftn_fp64_emulated(xt).data_ptr() != xt.data_ptr()
        assert ifftn_fp64_emulated(xt).data_ptr() != xt.data_ptr()
