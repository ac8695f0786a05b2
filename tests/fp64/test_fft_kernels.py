"""The fused Triton FFT epilogue equals the torch reference bit for bit (all variants), and a whole
emulated FFT through it equals the exact CPU path.

On CPU the kernel runs in Triton's interpreter (``TRITON_INTERPRET=1``, set by gpufield.fp64.kernels
when no CUDA device is present); on a GPU machine the same tests run the compiled kernel on CUDA.
"""

from __future__ import annotations

import math
import os
import random

import numpy as np
import pytest
import torch

if not torch.cuda.is_available():  # before the first import of triton in this process
    os.environ.setdefault("TRITON_INTERPRET", "1")
pytest.importorskip("triton")

from gpufield.fp64.fft import EmulatedFftPlan, fftn_fp64_emulated  # noqa: E402
from gpufield.fp64.fft.epilogue import VARIANTS, epilogue_tables, epilogue_torch  # noqa: E402
from gpufield.fp64.kernels.fft_epilogue import epilogue_triton  # noqa: E402
from gpufield.fp64.ozaki.moduli import moduli_table  # noqa: E402

DEV = "cuda" if torch.cuda.is_available() else "cpu"


def _products(kind: str, r: int, n_out: int, seed: int):
    """Raw 3M products whose residues encode random integers up to 2^(log2 M - 3), and their values."""
    rnd = random.Random(seed)
    mt = moduli_table(kind, r)
    bits = [0, 1, 30, 62, 100, int(mt.log2_M) - 3]
    vals = [rnd.randint(-(1 << b), 1 << b) for b in (rnd.choice(bits) for _ in range(n_out))]
    vals[:3] = [0, 1, -1]
    T = torch.zeros((r, 3, n_out), dtype=torch.int32)
    for i, p in enumerate(mt.moduli):
        for k, v in enumerate(vals):
            a = rnd.randint(-5000, 5000)
            T[i, 0, k] = a
            T[i, 1, k] = a - (v % p) + p * rnd.randint(-3, 3)
            T[i, 2, k] = (-v % p) + a + int(T[i, 1, k])
    shift = torch.tensor([rnd.randint(-50, 1200) for _ in range(n_out)], dtype=torch.int64)
    return T, shift, vals


@pytest.mark.parametrize("kind,r", [("int8", 16), ("fp8", 13), ("int8", 20)])
@pytest.mark.parametrize("variant", VARIANTS)
def test_kernel_matches_torch_and_python(kind, r, variant):
    T, shift, vals = _products(kind, r, 64, r)
    tab = epilogue_tables(kind, r)
    ref = epilogue_torch(T, shift, tab, variant)
    for impl in ("int32", "int64") if variant == "crt" else ("int32",):  # int64: the previous kernel (A/B)
        y = epilogue_triton(T.to(DEV), shift.to(DEV), tab, variant, impl=impl).cpu()
        assert torch.equal(torch.view_as_real(y), torch.view_as_real(ref)), impl
        assert y.real.tolist() == [math.ldexp(float(v), -int(s)) for v, s in zip(vals, shift, strict=True)]


@pytest.mark.parametrize("variant,shape", [("crt", (4, 64)), ("garner", (2, 16)), ("kulisch", (2, 16))])
def test_fft_through_kernel_equals_cpu_path(variant, shape):
    rng = np.random.default_rng(5)
    x = (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)) * np.exp(3 * rng.standard_normal(shape))
    want = fftn_fp64_emulated(x)
    backend = "int8" if DEV == "cuda" else "cpu-exact"
    y = fftn_fp64_emulated(torch.from_numpy(x).to(DEV),
                           EmulatedFftPlan(backend=backend, variant=variant, epilogue="triton")).cpu().numpy()
    assert np.array_equal(y.view(np.int64), want.view(np.int64))


def test_grouped_int8_layout_through_kernel():
    """INT8 products grouped g moduli per block-diagonal GEMM, read in place by the kernel."""
    rng = np.random.default_rng(6)
    x = rng.standard_normal((2, 32)) + 1j * rng.standard_normal((2, 32))
    want = fftn_fp64_emulated(x)
    for g in (4, 16):
        plan = EmulatedFftPlan(backend="int8", variant="crt", epilogue="triton", int8_group=g, int8_gemm="cublas")
        y = fftn_fp64_emulated(torch.from_numpy(x).to(DEV), plan).cpu().numpy()
        assert np.array_equal(y.view(np.int64), want.view(np.int64)), g


@pytest.mark.parametrize("g,num_moduli,input_bits,epilogue", [
    (1, None, 58, "triton"), (1, None, 58, "torch"), (4, 15, 50, "triton"), (16, 15, 50, "triton")])
def test_int8_products_written_in_place_equal_cpu_path(g, num_moduli, input_bits, epilogue):
    """INT8 products written straight into the stage buffer (ungrouped planes T[l, c], or grouped residues
    from the residue kernel with unwritten pad slots when g does not divide r) give the CPU-exact bits."""
    rng = np.random.default_rng(7)
    x = (rng.standard_normal((2, 64)) + 1j * rng.standard_normal((2, 64))) * np.exp(2 * rng.standard_normal((2, 64)))
    kw = dict(variant="crt", num_moduli=num_moduli, input_bits=input_bits)
    want = fftn_fp64_emulated(x, EmulatedFftPlan(backend="cpu-exact", **kw))
    plan = EmulatedFftPlan(backend="int8", epilogue=epilogue, int8_group=g, int8_gemm="cublas", **kw)
    y = fftn_fp64_emulated(torch.from_numpy(x).to(DEV), plan).cpu().numpy()
    assert np.array_equal(y.view(np.int64), want.view(np.int64))


def test_default_int8_triton_plan_is_run10_fastest():
    """backend="int8" + Triton epilogue defaults to the fully fused stage kernel (H200 run 10 fastest:
    int8/crt/g8/fused_epi), with g = 8 for the non-fused paths; variant garner (no 32-bit epilogue) keeps
    run 5's one-launch Triton stage GEMM; every other plan keeps g = 1 / cuBLAS; an explicit value wins;
    the bits are the CPU path's."""
    fast = EmulatedFftPlan(backend="int8", epilogue="triton")
    assert (fast.int8_group, fast.int8_gemm) == (8, "fused_epi")
    assert fast == EmulatedFftPlan(backend="int8", epilogue="triton", int8_group=8, int8_gemm="fused_epi")
    kul = EmulatedFftPlan(backend="int8", variant="kulisch", epilogue="triton")
    assert (kul.int8_group, kul.int8_gemm) == (8, "fused_epi")
    garner = EmulatedFftPlan(backend="int8", variant="garner", epilogue="triton")
    assert (garner.int8_group, garner.int8_gemm) == (8, "triton")
    for other in (EmulatedFftPlan(), EmulatedFftPlan(backend="int8"), EmulatedFftPlan(backend="fp8", epilogue="triton")):
        assert (other.int8_group, other.int8_gemm) == (1, "cublas")
    explicit = EmulatedFftPlan(backend="int8", epilogue="triton", int8_group=4, int8_gemm="cublas")
    assert (explicit.int8_group, explicit.int8_gemm) == (4, "cublas")
    rng = np.random.default_rng(9)
    x = (rng.standard_normal((4, 64)) + 1j * rng.standard_normal((4, 64))) * np.exp(3 * rng.standard_normal((4, 64)))
    y = fftn_fp64_emulated(torch.from_numpy(x).to(DEV), fast).cpu().numpy()
    assert np.array_equal(y.view(np.int64), fftn_fp64_emulated(x).view(np.int64))
