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

import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from test_fft_launch import DEV, _same, _wide  # noqa: E402  (shared inputs and bit-identity check)

from gpufield.errors import InputError, NumericsError  # noqa: E402
from gpufield.fp64.fft import EmulatedFftPlan, fftn_fp64_emulated  # noqa: E402
from gpufield.fp64.fft.reference import dft_longdouble, rel_l2, stage_exact_python  # noqa: E402
from gpufield.fp64.fft.sixstep import _dft_idx, _fused_idx  # noqa: E402
from gpufield.fp64.fft.stage import dft_stage  # noqa: E402
from gpufield.fp64.fft.stage_residues import _low_word, _pair_res, _sym_res_rn  # noqa: E402
from gpufield.fp64.ozaki.moduli import moduli_table  # noqa: E402


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
    buf = torch.empty((16, 24, 4), dtype=torch.complex128, device=DEV)
    xt = torch.from_numpy(x).to(DEV)
    got = dft_stage(xt, idx, plan, out=buf.permute(2, 1, 0))
    assert got.data_ptr() == buf.data_ptr()
    assert _same(got.cpu().numpy(), want)
    whole = dft_stage(xt, idx, _plan(variant, group))  # one chunk, own buffer
    assert _same(whole.cpu().numpy(), want)


def test_stage_equals_unfused_paths_on_random_and_adversarial_rows():
    """N = K = 32 plain DFT rows (the widest stage) and N = K = 8; against the /fused stage GEMM + standalone
    epilogue path (int32 product planes in memory, block-diagonal dots) and the exact Python-integer oracle."""
    for n, seed in ((32, 2), (8, 3)):
        x = _adversarial((4, 6, n), seed)
        idx = np.stack([_dft_idx(n)[0]] * 4)
        for variant in ("crt", "kulisch"):
            got = dft_stage(torch.from_numpy(x).to(DEV), idx, _plan(variant)).cpu().numpy()
            for gemm in ("fused",):
                other = EmulatedFftPlan(backend="int8", variant=variant, epilogue="triton", int8_group=8,
                                        int8_gemm=gemm)
                ref = dft_stage(torch.from_numpy(x).to(DEV), idx, other).cpu().numpy()
                assert _same(got, ref), (n, variant, gemm)
            assert _same(got, stage_exact_python(x, idx, 58, 56))


@pytest.mark.parametrize("shape,variant,chunk", [((8, 8, 8), "crt", None), ((16, 16, 16), "kulisch", None),
                                                 ((32, 16, 8), "crt", None), ((8, 2, 128), "kulisch", 1024)])
def test_transform_equals_exact_cpu_path_and_beats_numpy(shape, variant, chunk):
    x = _wide(shape, 4)
    y = fftn_fp64_emulated(torch.from_numpy(x).to(DEV), _plan(variant, chunk=chunk)).cpu().numpy()
    assert _same(y, fftn_fp64_emulated(x))
    ref = dft_longdouble(x)
    assert rel_l2(y, ref) <= rel_l2(np.fft.fftn(x), ref)


# the interpreter casts the NaN/Inf rows to int64 as the GPU does, and numpy warns about it
@pytest.mark.filterwarnings("ignore:invalid value encountered in cast:RuntimeWarning")
def test_non_finite_detected_and_garner_refused():
    x = _wide((4, 8, 8), 5)
    x[3, 7, 6] = np.nan
    with pytest.raises(NumericsError):
        fftn_fp64_emulated(torch.from_numpy(x).to(DEV), _plan("crt"))
    with pytest.raises(InputError, match="fused_epi"):
        _plan("garner")


@triton.jit
def _res(v_ptr, out_ptr, tab_ptr, n, PI: tl.constexpr, BLOCK: tl.constexpr):
    o = tl.arange(0, BLOCK)
    v = tl.load(v_ptr + o, mask=o < n, other=0)
    hv = v >> 29
    r = _sym_res_rn(hv.to(tl.float64), (v - (hv << 29)).to(tl.float64) + 6755399441055744.0, tl.load(tab_ptr + 1),
                    tl.load(tab_ptr + 2), PI)  # float64 fl(1/p), 2^29 mod p (the stage kernels' constants)
    tl.store(out_ptr + o, r, mask=o < n)


def test_residue_without_rounding_instructions_on_every_half_integer_boundary():
    """``_sym_res_rn`` (rn quotient through 1.5 * 2^52, no floor or float-to-int conversion) against Python's
    exact symmetric residue, for every INT8 modulus: the values whose w / p lies closest to a half-integer
    (residues +-(p - 1) / 2 and, for p = 256, the tie +-128) at the largest magnitudes the stage produces
    (|v| just below 2^60, so |w| near 2^40), every residue of a few large v, and random v of every size."""
    rng = np.random.default_rng(7)
    top = (1 << 60) - 1
    for p in moduli_table("int8", 16).moduli:
        half = (p - 1) // 2
        base = [top - top % p - p * k for k in range(4)]
        vals = {b + d for b in base for d in (half, half + 1, p - half, 0, p - 1)}
        vals |= {base[0] - p + d for d in range(p)}  # every residue at |v| ~ 2^60
        vals |= {int(x) for x in rng.integers(-top, top, 200)} | {int(x) for x in rng.integers(-2**20, 2**20, 50)}
        vals |= {-x for x in vals}
        vals = sorted(x for x in vals if abs(x) <= top)
        v = torch.tensor(vals, dtype=torch.int64, device=DEV)
        out = torch.empty(len(vals), dtype=torch.int32, device=DEV)
        block = 1 << (len(vals) - 1).bit_length()
        tab = torch.tensor([p, 1.0 / p, (1 << 29) % p], dtype=torch.float64, device=DEV)
        _res[(1,)](v, out, tab, len(vals), PI=p, BLOCK=block)
        lo = -(p // 2)  # symmetric range [-(p - 1) / 2, (p - 1) / 2], for p = 256 [-128, 127]
        want = [(x - lo) % p + lo for x in vals]
        assert out.cpu().tolist() == want, p


@triton.jit
def _res_pair(v_ptr, out_ptr, tab_ptr, n, PA: tl.constexpr, PB: tl.constexpr, BLOCK: tl.constexpr):
    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    v = tl.load(v_ptr + o, mask=o < n, other=0)
    hv = v >> 29
    lfm = (v - (hv << 29)).to(tl.float64) + 6755399441055744.0
    ra, rb = _pair_res(hv.to(tl.float64), lfm, tl.load(tab_ptr), tl.load(tab_ptr + 1), PA, PB)
    tl.store(out_ptr + 3 * o, ra.to(tl.int8).to(tl.int32), mask=o < n)
    tl.store(out_ptr + 3 * o + 1, rb.to(tl.int8).to(tl.int32), mask=o < n)
    tl.store(out_ptr + 3 * o + 2, _low_word(lfm).to(tl.int8).to(tl.int32), mask=o < n)


def _sym(x, p):
    lo = -(p // 2)
    return (x - lo) % p + lo


def test_pair_residues_and_low_byte_on_every_half_integer_boundary():
    """The kernels' residue schedule (``residue_schedule``: p = 256 from the low byte, adjacent odd moduli in
    pairs from one float64 reduction mod P = p_a p_b, then a float32 rounding per modulus) against Python's
    exact symmetric residues: for every pair of the default schedule and the largest pair the table allows,
    the v whose w / P lies closest to a half-integer at |v| just below 2^60, every residue mod P of one large
    v, both signs, and random v of every size."""
    from struct import unpack

    from gpufield.fp64.kernels.fft_epilogue_consts import PAIR_FIRST, residue_schedule

    ps = moduli_table("int8", 16).moduli
    kinds, fb = residue_schedule(ps)
    pairs = [(i, ps[i], ps[i + 1]) for i, k in enumerate(kinds) if k == PAIR_FIRST]
    assert len(pairs) == 4 and ps[0] == 256
    rng = np.random.default_rng(11)
    top = (1 << 60) - 1
    for i, pa, pb in pairs:
        big = pa * pb
        half = (big - 1) // 2
        base = [top - top % big - big * k for k in range(3)]
        vals = {b + d for b in base for d in (half, half + 1, big - half, 0, big - 1)}
        vals |= {base[0] - big + d for d in range(big)}  # every residue mod P at |v| ~ 2^60
        vals |= {int(x) for x in rng.integers(-top, top, 300)} | {int(x) for x in rng.integers(-2**20, 2**20, 50)}
        vals |= {-x for x in vals}
        vals = sorted(x for x in vals if abs(x) <= top)
        v = torch.tensor(vals, dtype=torch.int64, device=DEV)
        out = torch.empty(3 * len(vals), dtype=torch.int32, device=DEV)
        tab = torch.tensor([unpack("<d", fb[2 * i].to_bytes(8, "little"))[0],
                            unpack("<d", fb[2 * i + 1].to_bytes(8, "little"))[0]], dtype=torch.float64, device=DEV)
        _res_pair[(triton.cdiv(len(vals), 1024),)](v, out, tab, len(vals), PA=pa, PB=pb, BLOCK=1024)
        got = out.view(-1, 3).cpu().numpy()
        assert got[:, 0].tolist() == [_sym(x, pa) for x in vals], (pa, pb)
        assert got[:, 1].tolist() == [_sym(x, pb) for x in vals], (pa, pb)
        assert got[:, 2].tolist() == [_sym(x, 256) for x in vals]


def test_residue_schedule_pairs_adjacent_odd_moduli():
    """``residue_schedule``: 256 from the low byte, the requested number of adjacent odd pairs with P < 2^16
    and (fl(1/P), 2^29 mod P) in the first slot, singles after; refusals."""
    from gpufield.fp64.kernels.fft_epilogue_consts import residue_constants, residue_schedule

    ps = moduli_table("int8", 16).moduli
    kinds, fb = residue_schedule(ps, 2)
    assert kinds == (3, 1, 2, 1, 2) + (0,) * 11
    single = residue_constants(ps)
    assert fb[10:] == single[10:] and fb[:2] == (0, 0) and fb[4:6] == (0, 0)
    assert np.array(fb[2:4], dtype=np.int64).view(np.float64).tolist() == [1.0 / (ps[1] * ps[2]),
                                                                           (1 << 29) % (ps[1] * ps[2])]
    assert residue_schedule(ps, 0)[1][2:] == single[2:]
    assert residue_schedule(ps, 7)[0] == (3,) + (1, 2) * 7 + (0,)
    with pytest.raises(InputError, match="pairs"):
        residue_schedule(ps, 8)
    assert residue_schedule(ps[:5], 4, strict=False)[0] == (3, 1, 2, 1, 2)  # as many as fit
    with pytest.raises(InputError, match="only 2 fit"):
        residue_schedule(ps[:5], 4)
    with pytest.raises(InputError, match="pairs"):
        residue_schedule(ps, -1)


def test_strided_rows_read_like_contiguous_ones():
    """Rows with an element stride (a column-sliced view) are read in place and give the same bits as the
    contiguous rows and the exact oracle."""
    from gpufield.fp64.fft.epilogue import epilogue_tables
    from gpufield.fp64.fft.gemm_fused_epi import fused_epi_stage_triton
    from gpufield.fp64.fft.operands import stage_operands

    x = _adversarial((4, 6, 32), 6).reshape(1, 24, 32)
    wide = torch.from_numpy(x[0]).to(DEV)
    strided = wide[:, ::2]  # [24, 16], element stride 2
    idx = np.stack([_dft_idx(16)[0]])
    plan = _plan("crt")
    tab = epilogue_tables("int8", plan.resolved_num_moduli)
    ops = stage_operands(idx, plan.twiddle_bits, moduli_table("int8", tab.num_moduli).moduli, torch.int8, 8, DEV)
    got, _, _ = fused_epi_stage_triton(strided, plan.input_bits, plan.twiddle_bits, tab, "crt", ops, 0, 24)
    ref, _, _ = fused_epi_stage_triton(strided.contiguous(), plan.input_bits, plan.twiddle_bits, tab, "crt", ops, 0, 24)
    assert _same(got.cpu().numpy(), ref.cpu().numpy())
    want = stage_exact_python(x[:, :, ::2], idx, plan.input_bits, plan.twiddle_bits)
    assert _same(got.cpu().numpy(), want[0])
    dest = torch.zeros((16, 24), dtype=torch.complex128, device=DEV)  # written through a transposed view
    ret, _, _ = fused_epi_stage_triton(strided, plan.input_bits, plan.twiddle_bits, tab, "crt", ops, 0, 24,
                                       out=dest.t().unsqueeze(0))
    assert ret.data_ptr() == dest.data_ptr() and _same(dest.t().cpu().numpy(), want[0])
    with pytest.raises(ValueError, match="out must be"):
        fused_epi_stage_triton(strided, plan.input_bits, plan.twiddle_bits, tab, "crt", ops, 0, 24, out=dest)


def test_residue_pairs_knob_and_moduli_bound():
    """``pairs`` (``KernelConfig.residue_pairs``): None means the default, any pair count gives the same bits,
    too many pairs are refused by name, a non-integer by the config; too few moduli for the bit widths are
    refused (the FP64 fold's quotient range)."""
    from gpufield.fp64.fft.epilogue import epilogue_tables
    from gpufield.fp64.fft.gemm_fused_epi import fused_epi_stage_triton
    from gpufield.fp64.fft.kernel_config import KernelConfig
    from gpufield.fp64.fft.operands import stage_operands

    x = _adversarial((4, 6, 16), 9).reshape(24, 16)
    xt = torch.from_numpy(x).to(DEV)
    idx = np.stack([_dft_idx(16)[0]])
    plan = _plan("crt")
    tab = epilogue_tables("int8", plan.resolved_num_moduli)
    ops = stage_operands(idx, plan.twiddle_bits, moduli_table("int8", tab.num_moduli).moduli, torch.int8, 8, DEV)
    want = stage_exact_python(x[None], idx, plan.input_bits, plan.twiddle_bits)[0]
    for pairs in (None, 0, 7):
        got, _, _ = fused_epi_stage_triton(xt, plan.input_bits, plan.twiddle_bits, tab, "crt", ops, 0, 24,
                                           pairs=pairs)
        assert _same(got.cpu().numpy(), want), pairs
    with pytest.raises(InputError, match="residue_pairs=8: 8 residue pairs"):  # more than 16 moduli allow
        fused_epi_stage_triton(xt, plan.input_bits, plan.twiddle_bits, tab, "crt", ops, 0, 24, pairs=8)
    with pytest.raises(InputError, match="KernelConfig.residue_pairs must be None or a non-negative integer"):
        KernelConfig(residue_pairs="four")
    with pytest.raises(ValueError, match="too few"):
        fused_epi_stage_triton(xt, 60, 60, tab, "crt", ops, 0, 24)
    with pytest.raises(ValueError, match=r"\[1, 60\]"):  # wider row integers would overflow int64 silently
        fused_epi_stage_triton(xt, 61, 8, tab, "crt", ops, 0, 24)


def test_wide_bit_widths_fall_back_to_the_integer_fold():
    """60-bit inputs and 60-bit twiddles need 17 moduli, for which the FP64 fold's sums would not be exact:
    the default fold falls back to the integer one (the transform equals the exact CPU path), an explicit
    FP64 fold is refused."""
    from gpufield.fp64.fft.epilogue import epilogue_tables
    from gpufield.fp64.fft.gemm_fused_epi import fused_epi_stage_triton
    from gpufield.fp64.fft.operands import stage_operands

    x = _adversarial((4, 8, 8), 13)
    plan = EmulatedFftPlan(backend="int8", variant="kulisch", epilogue="triton", int8_gemm="fused_epi",
                           input_bits=60, twiddle_bits=60)
    assert plan.resolved_num_moduli == 17
    got = fftn_fp64_emulated(torch.from_numpy(x).to(DEV), plan).cpu().numpy()
    want = fftn_fp64_emulated(x, EmulatedFftPlan(backend="cpu-exact", input_bits=60, twiddle_bits=60))
    assert _same(got, want)
    tab = epilogue_tables("int8", 17)
    idx = np.stack([_dft_idx(8)[0]])
    ops = stage_operands(idx, 60, moduli_table("int8", 17).moduli, torch.int8, 8, DEV)
    with pytest.raises(InputError, match="FP64 fold"):
        fused_epi_stage_triton(torch.from_numpy(x.reshape(32, 8)).to(DEV), 60, 60, tab, "kulisch", ops, 0, 32,
                               fold="f64")
    from gpufield.fp64.fft.gemm_fused_epi import _fold_constants

    assert _fold_constants(epilogue_tables("int8", 16), "kulisch", None, gluon=True)["FOLD"]  # the Hopper default
    assert not _fold_constants(tab, "kulisch", None, gluon=True)["FOLD"]  # ... falls back at 17 moduli
    with pytest.raises(InputError, match="fold='f64'.*FP64 fold"):  # asked for explicitly: refused
        _fold_constants(tab, "kulisch", "f64", gluon=True)


def test_few_moduli_for_narrow_bit_widths_run_with_the_pairs_that_fit():
    """12-bit inputs and twiddles need only 5 moduli (256 and two odd pairs): the default schedule's 4 pairs
    shrink to the 2 that fit, and the transform equals the exact CPU path with the same bit widths."""
    x = _adversarial((4, 8, 8), 12)
    plan = EmulatedFftPlan(backend="int8", variant="crt", epilogue="triton", int8_gemm="fused_epi", input_bits=12,
                           twiddle_bits=12)
    assert plan.resolved_num_moduli == 5
    got = fftn_fp64_emulated(torch.from_numpy(x).to(DEV), plan).cpu().numpy()
    want = fftn_fp64_emulated(x, EmulatedFftPlan(backend="cpu-exact", input_bits=12, twiddle_bits=12))
    assert _same(got, want)


def test_grid_rows_read_where_they_are():
    """The whole [G, R, N] grid as input, laid out as a six-step stage 2 reads it (y[k1, j2, b]: group
    stride n2 R, consecutive rows one element apart, element stride R), a chunk starting inside a group:
    the same bits as those rows copied to a contiguous [Rc, N] block and as the exact oracle. Bad grids
    are refused."""
    from gpufield.fp64.fft.epilogue import epilogue_tables
    from gpufield.fp64.fft.gemm_fused_epi import fused_epi_stage_triton
    from gpufield.fp64.fft.operands import stage_operands

    G, R, N = 4, 40, 16
    x = _adversarial((G, R, N), 9)
    mem = torch.from_numpy(np.ascontiguousarray(x.transpose(0, 2, 1))).to(DEV)  # [k1, j2, b]
    grid = mem.transpose(1, 2)  # [G, R, N], strides (N R, 1, R)
    idx = _fused_idx(256)[:G]
    plan = _plan("crt")
    tab = epilogue_tables("int8", plan.resolved_num_moduli)
    ops = stage_operands(idx, plan.twiddle_bits, moduli_table("int8", tab.num_moduli).moduli, torch.int8, 8, DEV)
    args = (plan.input_bits, plan.twiddle_bits, tab, "crt", ops)
    c0, Rc = 16, 120  # rows 16 .. 135: the end of group 0, groups 1 and 2, the start of group 3
    got, s_got, _ = fused_epi_stage_triton(grid, *args, c0, R, rows=Rc)
    rows = grid.reshape(G * R, N)[c0:c0 + Rc].contiguous()
    ref, s_ref, _ = fused_epi_stage_triton(rows, *args, c0, R)
    assert torch.equal(s_got, s_ref) and _same(got.cpu().numpy(), ref.cpu().numpy())
    want = stage_exact_python(x, idx, plan.input_bits, plan.twiddle_bits).reshape(G * R, N)[c0:c0 + Rc]
    assert _same(got.cpu().numpy(), want)
    whole, _, _ = fused_epi_stage_triton(grid, *args, 0, R)  # rows default: the whole grid
    assert _same(whole.cpu().numpy(), stage_exact_python(x, idx, plan.input_bits, plan.twiddle_bits).reshape(-1, N))
    with pytest.raises(ValueError, match="row grid"):
        fused_epi_stage_triton(grid[:, :20], *args, 0, R, rows=20)
    with pytest.raises(ValueError, match="chunk rows"):
        fused_epi_stage_triton(rows, *args, c0, R, rows=Rc)
    with pytest.raises(ValueError, match="outside"):
        fused_epi_stage_triton(grid, *args, c0, R, rows=G * R)


def test_outputs_split_over_programs_give_the_same_bits():
    """``block_k = 16`` on an N = K = 32 stage (each row's outputs in two programs, each recomputing the row's
    residues) equals one program per row and the exact oracle, also with rows of two twiddle groups."""
    from gpufield.fp64.fft.epilogue import epilogue_tables
    from gpufield.fp64.fft.gemm_fused_epi import fused_epi_stage_triton
    from gpufield.fp64.fft.operands import stage_operands

    x = _adversarial((4, 6, 32), 8).reshape(2, 12, 32)
    idx = _fused_idx(1024)[:2]
    plan = _plan("kulisch")
    tab = epilogue_tables("int8", plan.resolved_num_moduli)
    ops = stage_operands(idx, plan.twiddle_bits, moduli_table("int8", tab.num_moduli).moduli, torch.int8, 8, DEV)
    xt = torch.from_numpy(x.reshape(24, 32)).to(DEV)
    args = (plan.input_bits, plan.twiddle_bits, tab, "kulisch", ops, 0, 12)
    split, s1, _ = fused_epi_stage_triton(xt, *args, block_k=16)
    whole, s2, _ = fused_epi_stage_triton(xt, *args)
    assert torch.equal(s1, s2)
    assert _same(split.cpu().numpy(), whole.cpu().numpy())
    want = stage_exact_python(x, idx, plan.input_bits, plan.twiddle_bits)
    assert _same(split.cpu().numpy(), want.reshape(24, 32))


def test_barrett_constants_exact_at_the_range_ends_and_on_a_stride():
    """``barrett_constants`` (shift 0 for the fused stage's |x| <= 2^20, 4 for the standalone epilogue's
    3 * 2^25) against Python's floor division for every u of the range's ends and a dense stride of it."""
    from gpufield.fp64.kernels.fft_epilogue_consts import barrett_constants

    ps = moduli_table("int8", 16).moduli
    for bound, shift in ((1 << 20, 0), (3 << 25, 4)):
        c = barrett_constants(ps, bound)
        assert c["BSH"] == shift
        for p, m, b in zip(ps, c["BM"], c["BB"], strict=True):
            assert b % p == p // 2
            u = np.unique(np.concatenate([np.arange(0, 4096), np.arange(bound + b - 4096, bound + b + 1),
                                          np.arange(0, bound + b + 1, 997)])).astype(np.uint64)
            assert np.array_equal((u * np.uint64(m)) >> np.uint64(32 + shift), u // np.uint64(p)), p
    with pytest.raises(InputError):
        barrett_constants(ps, 1 << 31)


def test_group_interleaved_program_order_gives_the_same_bits():
    """``swizzle=True`` (program t takes row block t // 4 of group t % 4) writing through a destination whose
    group stride is one element, as six-step stage 2 does: same bits as the plain order and the oracle."""
    from gpufield.fp64.fft.epilogue import epilogue_tables
    from gpufield.fp64.fft.gemm_fused_epi import fused_epi_stage_triton
    from gpufield.fp64.fft.operands import stage_operands

    x = _adversarial((4, 32, 16), 9)
    idx = _fused_idx(256)[:4]
    plan = _plan("crt")
    tab = epilogue_tables("int8", plan.resolved_num_moduli)
    ops = stage_operands(idx, plan.twiddle_bits, moduli_table("int8", tab.num_moduli).moduli, torch.int8, 8, DEV)
    xt = torch.from_numpy(x.reshape(128, 16)).to(DEV)
    want = stage_exact_python(x, idx, plan.input_bits, plan.twiddle_bits)
    for swz in (True, False):
        buf = torch.zeros((16, 32, 4), dtype=torch.complex128, device=DEV)
        fused_epi_stage_triton(xt, plan.input_bits, plan.twiddle_bits, tab, "crt", ops, 0, 32, block_m=16,
                               out=buf.permute(2, 1, 0), swizzle=swz)
        assert _same(buf.permute(2, 1, 0).cpu().numpy(), want), swz


def test_out_of_grid_chunks_and_aliased_destinations_are_refused():
    """Chunk rows outside the [G, R] grid would be stored outside ``out``, and a destination sharing memory
    with the input rows lets programs overwrite rows that others still read: both raise ValueError, and
    nothing around ``out`` is touched (found by a fuzzing helper, session 6)."""
    from gpufield.fp64.fft.epilogue import epilogue_tables
    from gpufield.fp64.fft.gemm_fused_epi import fused_epi_stage_triton
    from gpufield.fp64.fft.operands import stage_operands

    idx = _fused_idx(256)[:2]
    plan = _plan("crt")
    tab = epilogue_tables("int8", plan.resolved_num_moduli)
    ops = stage_operands(idx, plan.twiddle_bits, moduli_table("int8", tab.num_moduli).moduli, torch.int8, 8, DEV)
    args = (plan.input_bits, plan.twiddle_bits, tab, "crt", ops)
    x = torch.randn(32, 16, dtype=torch.complex128, device=DEV)
    base = torch.full((5, 16, 16), 7 - 7j, dtype=torch.complex128, device=DEV)
    for c0, rows in ((20, 32), (-8, 8), (0, 33)):
        with pytest.raises(ValueError, match="outside"):
            fused_epi_stage_triton(x[:rows] if rows <= 32 else torch.randn(rows, 16, dtype=torch.complex128, device=DEV),
                                   *args, c0, 16, out=base[1:3])
    assert bool((base == 7 - 7j).all())
    buf = torch.randn(2, 16, 16, dtype=torch.complex128, device=DEV)
    for out in (buf, buf.transpose(1, 2), buf[1:].expand(2, 16, 16)):
        with pytest.raises(ValueError, match="share memory"):
            fused_epi_stage_triton(buf.view(32, 16), *args, 0, 16, out=out)
    other = torch.empty(2, 16, 16, dtype=torch.complex128, device=DEV)
    fused_epi_stage_triton(buf.view(32, 16), *args, 0, 16, out=other)  # separate memory: accepted


def test_in_place_stage_goes_through_a_buffer_and_bad_tiles_are_refused():
    """``dft_stage(x, ..., out=x)`` (same layout, N = K) still gives the oracle's bits: the fused kernel
    writes a buffer, then the rows are placed (the kernel itself refuses an aliased ``out``); tile sizes that
    are not powers of two >= 16 raise ValueError instead of a Triton error."""
    from gpufield.fp64.fft.epilogue import epilogue_tables
    from gpufield.fp64.fft.gemm_fused_epi import fused_epi_stage_triton
    from gpufield.fp64.fft.operands import stage_operands

    x = _adversarial((4, 6, 16), 10)
    idx = _fused_idx(256)[:4]
    want = stage_exact_python(x, idx, 58, 56)
    xt = torch.from_numpy(x).to(DEV)
    got = dft_stage(xt, idx, _plan("crt"), out=xt)
    assert got.data_ptr() == xt.data_ptr() and _same(xt.cpu().numpy(), want)
    tab = epilogue_tables("int8", 16)
    ops = stage_operands(idx, 56, moduli_table("int8", 16).moduli, torch.int8, 8, DEV)
    for kw in ({"block_m": 24}, {"block_k": 8}):
        with pytest.raises(ValueError, match="power of two"):
            fused_epi_stage_triton(xt.view(24, 16), 58, 56, tab, "crt", ops, 0, 6, **kw)
