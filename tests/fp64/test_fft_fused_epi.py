"""The fully fused stage (``int8_gemm="fused_epi"``: residues, INT8 dots and the 32-bit epilogue in one
Triton launch, :mod:`gpufield.fp64.fft.gemm_fused_epi`) equals the exact Python-integer stage oracle and
the exact CPU path bit for bit: whole 3-D transforms, adversarial rows (zero, subnormal, near overflow,
integers), chunks that cut stage-2 twiddle groups, crt and kulisch, several moduli group sizes.

On CPU the kernels run in the Triton interpreter. Shapes: complex128, at most 32 x 16 x 8 points.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

if not torch.cuda.is_available():  # before the first import of triton in this process
    os.environ.setdefault("TRITON_INTERPRET", "1")
pytest.importorskip("triton")

from test_fft_launch import DEV, _same, _wide  # noqa: E402  (shared inputs and bit-identity check)

from gpufield.errors import InputError, NumericsError  # noqa: E402
from gpufield.fp64.fft import EmulatedFftPlan, fftn_fp64_emulated  # noqa: E402
from gpufield.fp64.fft.reference import dft_longdouble, rel_l2, stage_exact_python  # noqa: E402
from gpufield.fp64.fft.sixstep import _dft_idx, _fused_idx  # noqa: E402
from gpufield.fp64.fft.stage import dft_stage  # noqa: E402


def _plan(variant, group=8, chunk=None):
    return EmulatedFftPlan(backend="int8", variant=variant, epilogue="triton", int8_group=group,
                           int8_gemm="fused_epi", chunk_outputs=chunk)


def _adversarial(shape, seed):
    x = _wide(shape, seed)
    x[1, 2] = 0  # zero row, tiny row with subnormals, spike near overflow, integers, mixed magnitudes
    x[1, 3] *= 1e-300
    x[1, 3, :4] = 5e-324
    x[2, 4, :3] *= 1e300
    x[3, 5] = np.arange(-(x.shape[2] // 2), x.shape[2] // 2) * 2.0**40 + 1j
    x[0, 1, ::2] *= 2.0**-50
    return x


@pytest.mark.parametrize("variant,group", [("crt", 8), ("kulisch", 4), ("crt", 1)])
def test_stage_with_chunks_cutting_groups_equals_the_oracle(variant, group):
    """G = 4 fused twiddle groups of R = 24 rows (N = K = 16) in chunks of 93 rows (1500 outputs): chunk
    starts inside groups, so tiles span two groups (masked dots); also written through a transposed view."""
    x = _adversarial((4, 24, 16), 1)
    idx = _fused_idx(256)[:4]
    plan = _plan(variant, group, chunk=1500)
    want = stage_exact_python(x, idx, plan.input_bits, plan.twiddle_bits)
    buf = torch.empty((16, 24, 4), dtype=torch.complex128)
    got = dft_stage(torch.from_numpy(x), idx, plan, out=buf.permute(2, 1, 0))
    assert got.data_ptr() == buf.data_ptr()
    assert _same(got.numpy(), want)
    whole = dft_stage(torch.from_numpy(x), idx, _plan(variant, group))  # one chunk, own buffer
    assert _same(whole.numpy(), want)


def test_stage_equals_unfused_paths_on_random_and_adversarial_rows():
    """N = K = 32 plain DFT rows (the widest stage) and N = K = 8; against the /fused stage GEMM + standalone
    epilogue path (int32 product planes in memory, block-diagonal dots) and the exact Python-integer oracle."""
    for n, seed in ((32, 2), (8, 3)):
        x = _adversarial((4, 6, n), seed)
        idx = np.stack([_dft_idx(n)[0]] * 4)
        for variant in ("crt", "kulisch"):
            got = dft_stage(torch.from_numpy(x), idx, _plan(variant)).numpy()
            for gemm in ("fused",):
                other = EmulatedFftPlan(backend="int8", variant=variant, epilogue="triton", int8_group=8,
                                        int8_gemm=gemm)
                assert _same(got, dft_stage(torch.from_numpy(x), idx, other).numpy()), (n, variant, gemm)
            assert _same(got, stage_exact_python(x, idx, 58, 56))


@pytest.mark.parametrize("shape,variant,chunk", [((8, 8, 8), "crt", None), ((16, 16, 16), "kulisch", None),
                                                 ((32, 16, 8), "crt", None), ((8, 2, 128), "kulisch", 1024)])
def test_transform_equals_exact_cpu_path_and_beats_numpy(shape, variant, chunk):
    x = _wide(shape, 4)
    y = fftn_fp64_emulated(torch.from_numpy(x).to(DEV), _plan(variant, chunk=chunk)).cpu().numpy()
    assert _same(y, fftn_fp64_emulated(x))
    ref = dft_longdouble(x)
    assert rel_l2(y, ref) <= rel_l2(np.fft.fftn(x), ref)


def test_non_finite_detected_and_garner_refused():
    x = _wide((4, 8, 8), 5)
    x[3, 7, 6] = np.nan
    with pytest.raises(NumericsError):
        fftn_fp64_emulated(torch.from_numpy(x), _plan("crt"))
    with pytest.raises(InputError, match="fused_epi"):
        _plan("garner")
