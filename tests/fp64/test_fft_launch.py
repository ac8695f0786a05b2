"""Launch structure of the emulated FFT stages: all stage-2 groups in one residue/epilogue launch per chunk,
chunks that cut through groups, transposed ``out`` views, one finiteness check per transform, grouped
INT8 with every variant, and the memory model.

Every result is compared bit for bit with the exact Python-integer stage oracle or the exact CPU path, and
for accuracy with numpy.fft float64 / a long-double DFT. The Triton kernels run in the interpreter on CPU.

Shapes: complex128 arrays, at most 32 x 16 x 8 points.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

if not torch.cuda.is_available():  # before the first import of triton in this process
    os.environ.setdefault("TRITON_INTERPRET", "1")
pytest.importorskip("triton")

from gpufield.errors import NumericsError  # noqa: E402
from gpufield.fp64.fft import (  # noqa: E402
    EmulatedFftPlan,
    fftn_fp64_emulated,
    ifftn_fp64_emulated,
    sixstep,  # noqa: E402
)
from gpufield.fp64.fft.memory import (  # noqa: E402
    chunk_outputs_for,
    transform_peak_bytes,
    workspace_bytes_per_output,
)
from gpufield.fp64.fft.reference import dft_longdouble, rel_l2, stage_exact_python  # noqa: E402
from gpufield.fp64.fft.sixstep import _fused_idx  # noqa: E402
from gpufield.fp64.fft.stage import dft_stage  # noqa: E402

DEV = "cuda" if torch.cuda.is_available() else "cpu"


def _wide(shape, seed):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)) * np.exp(3 * rng.standard_normal(shape))


def _same(a, b) -> bool:
    """Same bits (-0.0 and +0.0 differ: array_equal on the float values would call them equal)."""
    return np.array_equal(np.ascontiguousarray(a).view(np.int64), np.ascontiguousarray(b).view(np.int64))


@pytest.mark.parametrize("backend,variant,epilogue,group,gemm", [
    ("cpu-exact", "crt", "torch", 1, "cublas"), ("int8", "kulisch", "triton", 8, "cublas"),
    ("int8", "crt", "triton", 1, "triton"), ("int8", "garner", "triton", 4, "fused"),
    ("int8", "kulisch", "triton", 8, "fused")])
def test_chunks_cutting_through_groups_match_the_oracle(backend, variant, epilogue, group, gemm):
    """G = 4 twiddle groups of R = 24 rows in chunks of 93 rows (1500 outputs / K = 16): chunks start and
    end inside groups; written through a transposed ``out`` view."""
    x = _wide((4, 24, 16), 1)
    x[1, 2] = 0  # zero row, tiny row with subnormals, spike near overflow, integers
    x[1, 3] *= 1e-300
    x[1, 3, :4] = 5e-324
    x[2, 4, :3] *= 1e300
    x[3, 5] = np.arange(-8, 8) * 2.0**40 + 1j
    idx = _fused_idx(256)[:4]  # four distinct fused twiddle matrices G_k1, [4, 16, 16]
    plan = EmulatedFftPlan(backend=backend, variant=variant, epilogue=epilogue, int8_group=group, int8_gemm=gemm,
                           chunk_outputs=1500)
    want = stage_exact_python(x, idx, plan.input_bits, plan.twiddle_bits)
    dev = "cpu" if backend == "cpu-exact" else DEV
    buf = torch.empty((16, 24, 4), dtype=torch.complex128, device=dev)
    xt = torch.from_numpy(x).to(dev)
    got = dft_stage(xt, idx, plan, out=buf.permute(2, 1, 0))
    assert got.data_ptr() == buf.data_ptr()
    assert _same(got.cpu().numpy(), want)
    assert _same(dft_stage(xt, idx, plan).cpu().numpy(), want)  # own buffer, same chunks


@pytest.mark.parametrize("gemm", ["cublas", "triton", "fused", "fused_epi"])
def test_inverse_division_in_the_last_rounding_same_bits_on_every_path(gemm):
    """The inverse's 1/N enters the last stage's one rounding on every kernel path, bit for bit as the exact
    CPU path: a length-32 inverse (one stage) whose output 16 sums to 4 x 1.7e308 and fits only after the
    division (numpy.fft.ifft gives inf there), a 2-D one with subnormal outputs (rounded once), a 2-D
    spike near DBL_MAX (the division on the last of two passes) and a 32 x 64 one whose last stage has 32 rows
    per twiddle group (on CUDA the others' last stages have fewer than 16 and run cuBLAS GEMMs)."""
    big = np.zeros(32, dtype=complex)
    big[:4] = [1.7e308, -1.7e308, 1.7e308, -1.7e308]
    tiny = _wide((4, 64), 3) * 1e-320
    spike = np.zeros((4, 64), dtype=complex)
    spike[1, 3] = -1.7e308 + 1e300j
    wide = _wide((32, 64), 4) * 1e-300  # the last stage has 32 rows per group: the fused kernel also on CUDA
    plan = EmulatedFftPlan(backend="int8", epilogue="triton", int8_gemm=gemm)
    for x in (big, tiny, spike, wide):
        want = ifftn_fp64_emulated(x)
        assert np.isfinite(want).all()
        got = ifftn_fp64_emulated(torch.from_numpy(x).to(DEV), plan).cpu().numpy()
        assert _same(got, want)
    assert want[1, 0] != 0 and ifftn_fp64_emulated(big)[16] == 1.7e308 / 8


@pytest.mark.skipif(DEV != "cuda", reason="the CUDA launch choice for stages with few rows per twiddle group")
@pytest.mark.parametrize("shape", [(32,), (1024,), (4, 64), (1024, 4)])
def test_stages_with_few_rows_per_group_on_cuda_match_the_cpu_bits(shape, monkeypatch):
    """Stages with fewer than 16 rows per twiddle group (1-D transforms, thin 2-D ones) take per-group cuBLAS
    GEMMs on CUDA instead of the fused kernel, whose unrolled per-group dots took Triton's compiler over 200 s
    for a length-32 inverse (H200 run 67); same bits as the exact CPU path, forward and inverse."""
    from gpufield.fp64.fft import gemm_fused_epi

    x = _wide(shape, 7)
    plan = EmulatedFftPlan(backend="int8", epilogue="triton")
    xt = torch.from_numpy(x).to(DEV)
    rows_per_group = []
    orig = gemm_fused_epi.fused_epi_stage_triton

    def spy(*a, **k):
        rows_per_group.append(a[7])  # R
        return orig(*a, **k)

    monkeypatch.setattr(gemm_fused_epi, "fused_epi_stage_triton", spy)
    assert _same(fftn_fp64_emulated(xt, plan).cpu().numpy(), fftn_fp64_emulated(x))
    assert _same(ifftn_fp64_emulated(xt, plan).cpu().numpy(), ifftn_fp64_emulated(x))
    assert all(r >= 16 for r in rows_per_group), rows_per_group  # R < 16 went to cuBLAS


def _counting(monkeypatch, module, name, counts):
    orig = getattr(module, name)

    def wrapped(*a, **k):
        counts[name] = counts.get(name, 0) + 1
        return orig(*a, **k)

    monkeypatch.setattr(module, name, wrapped)


@pytest.mark.parametrize("gemm", ["cublas", "triton", "fused"])
def test_one_residue_and_one_epilogue_launch_per_stage_and_one_check(monkeypatch, gemm):
    """(2, 256), INT8 g = 8: axis 0 is one stage, axis 1 two (stage 2 has 16 groups k1). One residue and one
    epilogue launch per stage (was 1 + 16 for stage 2); GEMMs: 6 ``_int_mm`` per group (3 components x 2
    moduli groups) on cuBLAS, one Triton launch per stage otherwise (fused: no residue launch either); one
    finiteness check per transform; bits equal the exact CPU path."""
    import gpufield.fp64.fft.gemm_triton as gt
    import gpufield.fp64.kernels.fft_epilogue as fe
    import gpufield.fp64.kernels.residue as rk
    from gpufield.fp64.ozaki.backends import Int8Backend

    x = _wide((2, 256), 2)
    want = fftn_fp64_emulated(x)
    counts: dict = {}
    _counting(monkeypatch, rk, "scale_residues_triton", counts)
    _counting(monkeypatch, fe, "epilogue_triton", counts)
    _counting(monkeypatch, gt, "stage_gemm_triton", counts)
    _counting(monkeypatch, gt, "fused_stage_gemm_triton", counts)
    _counting(monkeypatch, sixstep, "check_finite_flags", counts)
    orig_mm = Int8Backend._int_mm

    def mm(*a, **k):
        counts["_int_mm"] = counts.get("_int_mm", 0) + 1
        return orig_mm(*a, **k)

    monkeypatch.setattr(Int8Backend, "_int_mm", staticmethod(mm))
    plan = EmulatedFftPlan(backend="int8", variant="crt", epilogue="triton", int8_group=8, int8_gemm=gemm)
    y = fftn_fp64_emulated(torch.from_numpy(x).to(DEV), plan).cpu().numpy()
    assert _same(y, want)
    gemms = {"cublas": {"_int_mm": 6 * (1 + 1 + 16), "scale_residues_triton": 3},
             "triton": {"stage_gemm_triton": 3, "scale_residues_triton": 3},
             "fused": {"fused_stage_gemm_triton": 3}}[gemm]
    assert counts == {"epilogue_triton": 3, "check_finite_flags": 1, **gemms}


@pytest.mark.parametrize("variant,chunk,gemm", [("crt", 1500, "triton"), ("kulisch", 1024, "fused")])
def test_grouped_path_multi_chunk_equals_cpu_and_beats_numpy(variant, chunk, gemm):
    """(8, 2, 128): the last axis has a stage 2 of 16 groups x 16 rows in 1500-output chunks that cut groups,
    or 1024-output chunks of 8 whole groups (the cuBLAS GEMM path on such chunks:
    test_chunks_cutting_through_groups_match_the_oracle)."""
    x = _wide((8, 2, 128), 3)
    want = fftn_fp64_emulated(x)
    plan = EmulatedFftPlan(backend="int8", variant=variant, epilogue="triton", int8_group=8, int8_gemm=gemm,
                           chunk_outputs=chunk)
    y = fftn_fp64_emulated(torch.from_numpy(x).to(DEV), plan).cpu().numpy()
    assert _same(y, want)
    ref = dft_longdouble(x)
    assert rel_l2(y, ref) <= rel_l2(np.fft.fftn(x), ref)


def test_32x16x8_grouped_kulisch_accuracy_and_round_trip():
    x = _wide((32, 16, 8), 4)
    plan = EmulatedFftPlan(backend="int8", variant="kulisch", epilogue="triton", int8_group=8, int8_gemm="triton")
    y = fftn_fp64_emulated(torch.from_numpy(x).to(DEV), plan)
    assert _same(y.cpu().numpy(), fftn_fp64_emulated(x))
    ref = dft_longdouble(x)
    assert rel_l2(y.cpu().numpy(), ref) <= rel_l2(np.fft.fftn(x), ref)
    back = ifftn_fp64_emulated(y, plan).cpu().numpy()
    assert rel_l2(back, x) <= rel_l2(np.fft.ifftn(np.fft.fftn(x)), x)


# the interpreter casts the NaN/Inf rows to int64 as the GPU does, and numpy warns about it
@pytest.mark.filterwarnings("ignore:invalid value encountered in cast:RuntimeWarning")
def test_non_finite_and_overflow_detected_at_the_end():
    x = _wide((4, 8, 64), 5)
    x[3, 7, 63] = np.nan
    with pytest.raises(NumericsError):
        fftn_fp64_emulated(x)
    fused = EmulatedFftPlan(backend="int8", epilogue="triton", int8_group=8, int8_gemm="fused")
    with pytest.raises(NumericsError):  # NaN seen by the fused kernel's row maxima
        fftn_fp64_emulated(torch.from_numpy(np.ascontiguousarray(x[:, 6:8])).to(DEV), fused)
    with pytest.raises(NumericsError):  # finite input whose first stage overflows to Inf
        fftn_fp64_emulated(np.full((8, 8, 8), 1e308 + 0j))
    with pytest.raises(NumericsError):  # direct stage call checks its input itself
        dft_stage(torch.from_numpy(x[3, 6:8].reshape(1, 4, 32)), _fused_idx(1024)[:1], EmulatedFftPlan())


def test_memory_model_numbers():
    plan = EmulatedFftPlan(backend="int8", variant="kulisch", epilogue="triton", int8_group=8, int8_gemm="triton")
    assert workspace_bytes_per_output(plan) == 3 * 16 + 12 * 16 + 24 == 264
    cpu = torch.device("cpu")
    budget = EmulatedFftPlan(backend="int8", epilogue="triton", int8_group=8, int8_gemm="triton",
                             memory_budget_bytes=264 * 2**20 + 5)
    assert chunk_outputs_for(budget, (1024,) * 3, cpu) == 2**20
    capped = EmulatedFftPlan(backend="int8", epilogue="triton", int8_group=8, memory_budget_bytes=2**40,
                             chunk_outputs=4096)
    assert chunk_outputs_for(capped, (64,) * 3, cpu) == 4096
    assert chunk_outputs_for(EmulatedFftPlan(), (64,) * 3, cpu) == 2**20  # CPU default
    # 1024^3 on INT8 g8 with 2^27-output chunks: 3 x 16 GiB + 264 B x 2^27 = 81 GiB
    assert transform_peak_bytes((1024,) * 3, plan, 2**27) == 48 * 2**30 + 264 * 2**27
    assert transform_peak_bytes((32, 16, 8), plan, 2**27) == 3 * 16 * 4096 + 264 * 4096
    assert transform_peak_bytes((32,), plan, 2**27) == 2 * 16 * 32 + 264 * 32
    fused = EmulatedFftPlan(backend="int8", epilogue="triton", int8_gemm="fused_epi",
                            memory_budget_bytes=45 * 2**30)  # the 1024^3 budget on an H200: one chunk per stage
    assert workspace_bytes_per_output(fused) == 32 and chunk_outputs_for(fused, (1024,) * 3, cpu) == 2**30


@pytest.mark.parametrize("inverse", [False, True])
def test_pass_buffers_at_most_three_full_size_arrays(inverse, monkeypatch):
    """Memory model (fft/memory.py, peak 3 A + W): at every stage call of a 3-D transform at most three
    full-size complex128 storages are alive, the caller's input included (a pass's input is dropped once its
    stage 1 has read it; the output is allocated after that). The inverse too: it makes no conjugated copy."""
    import gc

    shape = (4, 4, 64)
    full = 16 * 4 * 4 * 64
    seen = []
    orig = sixstep.dft_stage

    def counting(x, idx, plan, **kw):
        gc.collect()
        ptrs = {t.untyped_storage().data_ptr() for t in gc.get_objects()
                if issubclass(type(t), torch.Tensor) and t.dtype == torch.complex128 and t.untyped_storage().nbytes() >= full}
        seen.append(len(ptrs))
        return orig(x, idx, plan, **kw)

    monkeypatch.setattr(sixstep, "dft_stage", counting)
    x = torch.from_numpy(_wide(shape, 6))
    if inverse:
        y = ifftn_fp64_emulated(x, EmulatedFftPlan())
        ref = np.conj(dft_longdouble(np.conj(x.numpy()))) / x.numel()
        assert rel_l2(y.numpy(), ref) <= rel_l2(np.fft.ifftn(x.numpy()), ref)
    else:
        y = fftn_fp64_emulated(x, EmulatedFftPlan())
        ref = dft_longdouble(x.numpy())
        assert rel_l2(y.numpy(), ref) <= rel_l2(np.fft.fftn(x.numpy()), ref)
    # the first stage: the caller's input and the stage's output only (a conjugated copy would be a third)
    assert len(seen) == 4 and seen[0] == 2 and max(seen) <= 3, seen


def test_stages_read_their_inputs_where_they_are(monkeypatch):
    """(4, 8, 64), fused stages: every stage kernel reads the transform's input or an earlier stage's output
    in place (no per-axis copy: each pass transforms the outermost axis of the current memory order); the
    result is the exact CPU path's, bit for bit, in the input's layout."""
    from gpufield.fp64.fft import gemm_fused_epi

    seen, outs = [], []
    orig = gemm_fused_epi.fused_epi_stage_triton

    def spy(x, *a, out=None, **k):
        seen.append(x.untyped_storage().data_ptr())
        outs.append(out)  # kept alive: a copy could not reuse an earlier output's address
        return orig(x, *a, out=out, **k)

    monkeypatch.setattr(gemm_fused_epi, "fused_epi_stage_triton", spy)
    x = _wide((4, 8, 64), 7)
    xt = torch.from_numpy(x).to(DEV)
    plan = EmulatedFftPlan(backend="int8", variant="crt", epilogue="triton", int8_gemm="fused_epi")
    y = fftn_fp64_emulated(xt, plan)
    assert len(seen) == 4 and seen[0] == xt.untyped_storage().data_ptr()
    out_ptrs = [o.untyped_storage().data_ptr() for o in outs]
    assert all(p in out_ptrs[:i] for i, p in enumerate(seen) if i), (seen, out_ptrs)
    assert y.is_contiguous() and _same(y.cpu().numpy(), fftn_fp64_emulated(x))


def test_graphed_fftn_refuses_a_device_without_cuda_graphs():
    from gpufield.errors import InputError
    from gpufield.fp64.fft import GraphedFftn

    with pytest.raises(InputError, match="CUDA"):
        GraphedFftn((8, 8), device="cpu")
    if not torch.cuda.is_available():
        with pytest.raises(InputError, match="CUDA is not available"):
            GraphedFftn((8, 8))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a CUDA GPU")
@pytest.mark.parametrize("inverse", [False, True])
def test_graphed_fftn_replays_the_eager_bits(inverse):
    """A captured (16, 16, 256) transform (forward and inverse) gives the eager call's bits on two inputs in
    turn (copied in, and written into ``input`` in place), and raises on a NaN input."""
    from gpufield.errors import NumericsError
    from gpufield.fp64.fft import GraphedFftn

    plan = EmulatedFftPlan(backend="int8", epilogue="triton")
    f = GraphedFftn((16, 16, 256), plan, inverse=inverse)
    eager = ifftn_fp64_emulated if inverse else fftn_fp64_emulated
    for seed in (8, 9):
        x = torch.from_numpy(_wide((16, 16, 256), seed)).to("cuda")
        y = f(x) if seed == 8 else (f.input.copy_(x), f())[1]
        assert y.data_ptr() == f.output.data_ptr()
        assert _same(y.cpu().numpy(), eager(x, plan).cpu().numpy())
    f.input[3, 4, 5] = float("nan")
    with pytest.raises(NumericsError):
        f()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a CUDA GPU")
def test_graphed_fftn_keeps_its_operands_when_the_cache_drops_them():
    """The twiddle-operand cache holds 32 sets; a captured graph replays the operand addresses it saw (the
    wres residues and the packed kernel operands built from them). After 40 other sets push its own out of
    the cache, every tensor of its own sets is still alive (held by the GraphedFftn, so the memory cannot be
    handed out again under the graph), and a replay gives the eager bits."""
    import gc
    import weakref

    from gpufield.fp64.fft import GraphedFftn, operands

    plan = EmulatedFftPlan(backend="int8", epilogue="triton")
    f = GraphedFftn((16, 16, 256), plan)
    refs = []
    for d in operands.cached_on(f.input.device):
        for v in d.values():
            refs += [weakref.ref(t) for t in (v if isinstance(v, list) else [v]) if isinstance(t, torch.Tensor)]
    assert len(refs) >= 3
    rng = np.random.default_rng(0)
    for _ in range(40):  # distinct twiddle sets, same device: the oldest entries are dropped
        operands.stage_operands(rng.integers(0, 1024, (1, 16, 16)), plan.twiddle_bits, (251, 241), torch.int8, 1,
                                f.input.device)
    gc.collect()
    assert all(r() is not None for r in refs)
    x = torch.from_numpy(_wide((16, 16, 256), 10)).to("cuda")
    assert _same(f(x).cpu().numpy(), fftn_fp64_emulated(x, plan).cpu().numpy())
