"""The Gluon fused stage kernel (:mod:`gpufield.fp64.fft.gemm_fused_gluon`, Hopper only).

Gluon kernels do not run in the Triton interpreter. On every machine: the kernel compiles for sm_90 with
one wgmma per modulus and no CTA barrier in the modulus loop (a compile in a subprocess, the interpreter
off), and a bad ``impl`` is refused. On a Hopper GPU: its outputs equal the exact Python-integer stage
oracle and the Triton kernel bit for bit (adversarial rows, N = 16 and 32, a transposed destination).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

if not torch.cuda.is_available():  # before the first import of triton in this process
    os.environ.setdefault("TRITON_INTERPRET", "1")
pytest.importorskip("triton")
TOOLS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "tools")
sys.path.insert(0, TOOLS)  # fp64_sass_count: a tool, out of src/ (issue 30)

from test_fft_fused_epi import _adversarial, _plan  # noqa: E402
from test_fft_launch import DEV, _same  # noqa: E402

from gpufield.fp64.fft.epilogue import epilogue_tables  # noqa: E402
from gpufield.fp64.fft.gemm_fused_epi import COMPILED, fused_epi_stage_triton  # noqa: E402
from gpufield.fp64.fft.operands import stage_operands  # noqa: E402
from gpufield.fp64.fft.reference import stage_exact_python  # noqa: E402
from gpufield.fp64.fft.sixstep import _fused_idx  # noqa: E402
from gpufield.fp64.ozaki.moduli import moduli_table  # noqa: E402

HOPPER = torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 9

_COUNT = """
import json
from fp64_sass_count import fused_static_count
out = {}
for n, warps in ((16, 8), (32, 16)):
    g = fused_static_count(n, 64, warps, gluon=True, max_registers=128)
    t = fused_static_count(n, 64, warps, max_registers=128)
    g64 = fused_static_count(n, 64, warps, gluon=True, max_registers=128, fold="f64")
    out[n] = {"gluon": g, "triton": t, "gluon_f64": g64}
out["passes"] = fused_static_count(32, 64, 8, gluon=True, max_registers=128, fold="f64", passes=2)
out["w4"] = fused_static_count(32, 64, 4, gluon=True, max_registers=128, fold="f64")  # 2 row blocks of 32
print(json.dumps(out))
"""


def test_gluon_kernel_compiles_with_one_wgmma_per_modulus_and_no_loop_barrier():
    """sm_90 SASS of the Gluon kernel (16 INT8 moduli, 128 registers): one wgmma per modulus and k-step of
    32 (re and im together), at most 5 CTA barriers in the whole kernel (3, and 2 around the exchange of the
    row tile loaded along the rows; the Triton kernel has two per modulus),
    and fewer instructions per real output than the Triton kernel at the same launch shape; with the FP64
    fold at least four DFMA per modulus and real output, >= 10 % fewer instructions, and its float64
    constants read from the constant bank (few UMOV)."""
    env = dict(os.environ, TRITON_INTERPRET="0", PYTHONPATH=os.pathsep.join([TOOLS, *sys.path]))
    res = subprocess.run([sys.executable, "-c", _COUNT], capture_output=True, text=True, env=env, timeout=600)
    assert res.returncode == 0, res.stderr[-2000:]
    counts = json.loads(res.stdout.strip().splitlines()[-1])
    for n in ("16", "32"):
        g, t = counts[n]["gluon"], counts[n]["triton"]
        wgmma = sum(v for k, v in g["ops"].items() if k.startswith("IGMMA"))
        assert wgmma == 16 * (2 * int(n) // 32), (n, wgmma)  # K = 2 N: one k-step of 32 per 16 inputs
        # 3, plus 2 around the exchange of the row tile loaded along the rows (the six-step layout)
        assert g["ops"].get("BAR.SYNC.DEFER_BLOCKING", 0) <= 5
        assert t["ops"].get("BAR.SYNC.DEFER_BLOCKING", 0) >= 32  # what the Gluon kernel avoids
        assert g["regs"] <= 128
        assert g["sass_per_real_output"] < t["sass_per_real_output"]
        g64 = counts[n]["gluon_f64"]  # the FP64 fold: fewer instructions, most of the fold on the FP64 pipe
        assert g64["regs"] <= 128 and g64["sass_per_real_output"] < 0.9 * g["sass_per_real_output"]
        per_thread = 2 * 64 * int(n) // (32 * (8 if n == "16" else 16))  # real outputs per thread (64 rows)
        assert g64["ops"].get("DFMA", 0) >= 4 * 16 * per_thread  # 4 DFMA per modulus and real output
        # the float64 constants are kernel arguments read from the constant bank: as constexprs ptxas built
        # them with UMOV pairs (199 at N = 16, 233 at N = 32 per thread); now 35 and 71
        assert g64["ops"].get("UMOV", 0) <= 80
    # N = 32 in two column passes of 8 warps (two programs per SM): twice the wgmmas per program, under the
    # 114 KB of shared memory two programs may share, the twiddle tiles of both passes by cp.async (one
    # 8-byte copy per thread, modulus and pass), three barriers more (after the copies' wait, around the
    # second pass's tiles)
    p = counts["passes"]
    assert sum(v for k, v in p["ops"].items() if k.startswith("IGMMA")) == 2 * 16 * 2
    assert sum(v for k, v in p["ops"].items() if k.startswith("LDGSTS")) == 2 * 16
    assert p["shared_bytes"] <= 114 * 1024 and p["ops"].get("BAR.SYNC.DEFER_BLOCKING", 0) <= 8
    # 4 warps at N = 32 in the six-step layout: row blocks of 32 rows (a warp's rows), so it compiles
    assert sum(v for k, v in counts["w4"]["ops"].items() if k.startswith("IGMMA")) == 16 * 2
    # the phase split puts at least the algorithm's own work in each phase (per real output): the input
    # residues at least 3 FP64 per float64 reduction (11 at N = 16 with 4 pairs, 15 at N = 32), the fold
    # 3 DFMA + 1 DADD for every modulus but the last, the finish the lift and three TwoSums (> 30)
    for c, reductions in ((counts["16"]["gluon_f64"], 11), (p, 15)):
        ph = c["phases_per_real_output"]
        assert ph["residues"] >= 3 * reductions and ph["fold"] >= 4 * 15 and ph["finish"] >= 30, ph
    assert "phases_per_real_output" not in counts["16"]["gluon"]  # integer fold: no split (see sass_phases)


def test_sass_phases_split_of_a_listing():
    """:func:`sass_phases` on a hand-written listing: 3 instructions before the first IGMMA, two column passes
    whose IGMMA runs a barrier separates (2 + 4 instructions from first to last IGMMA), and NOP/BRA not
    counted."""
    from fp64_sass_count import sass_phases

    ops = ["IMAD R1, R2, R3, RZ", "DFMA R4, R4, R6, R8", "NOP", "STS [R1], R2",  # residues: 3
           "IGMMA.64x16x32.S8.S8 R40, gdesc[UR4], RZ, !UPT", "IGMMA.64x16x32.S8.S8 R48, gdesc[UR8], RZ, !UPT",
           "WARPGROUP.DEPBAR.LE gsb0, 0x0", "DFMA R4, R40, R6, R8", "STG.E.128 [R2], R4",  # finish of pass 1
           "BAR.SYNC.DEFER_BLOCKING 0x0", "LDGSTS.E.64 [R1], [R2]", "BRA 0x100",
           "IGMMA.64x16x32.S8.S8 R40, gdesc[UR4], RZ, !UPT", "DFMA R4, R40, R6, R8", "IADD3 R1, R1, 0x1, RZ",
           "IGMMA.64x16x32.S8.S8 R48, gdesc[UR8], RZ, !UPT", "WARPGROUP.DEPBAR.LE gsb0, 0x0", "EXIT"]
    sass = "\n".join(f"        /*{16 * i:04x}*/                   {op} ;   /* 0x0 */" for i, op in enumerate(ops))
    assert sass_phases(sass) == {"residues": 3, "fold": 2 + 4, "finish": 5 + 2}
    with pytest.raises(ValueError, match="IGMMA"):
        sass_phases("        /*0000*/                   IMAD R1, R2, R3, RZ ;")


def _stage(n, rows_per_group, groups, seed):
    x = _adversarial((groups, rows_per_group, n), seed)
    idx = _fused_idx(n * n)[:groups]
    plan = _plan("crt")
    tab = epilogue_tables("int8", plan.resolved_num_moduli)
    ops = stage_operands(idx, plan.twiddle_bits, moduli_table("int8", tab.num_moduli).moduli, torch.int8, 8, DEV)
    return x, idx, plan, tab, ops


def test_unknown_kernel_is_refused():
    x, idx, plan, tab, ops = _stage(16, 24, 4, 3)
    xt = torch.from_numpy(x.reshape(96, 16)).to(DEV)
    with pytest.raises(ValueError, match="impl"):
        fused_epi_stage_triton(xt, plan.input_bits, plan.twiddle_bits, tab, "crt", ops, 0, 24, impl="cuda")
    with pytest.raises(ValueError, match="fold"):
        fused_epi_stage_triton(xt, plan.input_bits, plan.twiddle_bits, tab, "crt", ops, 0, 24, fold="fp32")


@pytest.mark.parametrize("variant", ["crt", "kulisch"])
def test_f64_fold_stage_equals_integer_fold_and_oracle(variant):
    """The Triton kernel with the FP64 fold (interpreter on CPU): the same bit patterns as the integer fold
    and the exact oracle, adversarial rows, N = 16 and 32."""
    for n in (16, 32):
        x, idx, plan, tab, ops = _stage(n, 24, 4, 5 + n)
        xt = torch.from_numpy(x.reshape(96, n)).to(DEV)
        args = (plan.input_bits, plan.twiddle_bits, tab, variant, ops, 0, 24)
        got, _, _ = fused_epi_stage_triton(xt, *args, impl="triton", fold="f64")
        ref, _, _ = fused_epi_stage_triton(xt, *args, impl="triton", fold="int")
        assert np.array_equal(torch.view_as_real(got).cpu().numpy().view(np.int64),
                              torch.view_as_real(ref).cpu().numpy().view(np.int64))
        assert _same(got.cpu().numpy().reshape(4, 24, n), stage_exact_python(x, idx, plan.input_bits,
                                                                               plan.twiddle_bits))


@pytest.mark.skipif(not HOPPER, reason="the Gluon kernel needs a Hopper GPU (wgmma)")
@pytest.mark.parametrize("n,fold", [(16, "int"), (32, "int"), (16, "f64"), (32, "f64")])
def test_gluon_stage_equals_oracle_and_triton_kernel(n, fold):
    """Four twiddle groups of 64 rows (aligned 64-row tiles, so the Gluon kernel runs), adversarial rows:
    Gluon (either fold) == Triton (integer fold) == exact oracle, bit patterns included (signed zeros),
    into a fresh buffer and through a transposed destination, and from rows in the six-step layout."""
    x, idx, plan, tab, ops = _stage(n, 64, 4, 11 + n)
    xt = torch.from_numpy(x.reshape(256, n)).to(DEV)
    args = (plan.input_bits, plan.twiddle_bits, tab, "crt", ops, 0, 64)
    want = stage_exact_python(x, idx, plan.input_bits, plan.twiddle_bits)
    got, s, _ = fused_epi_stage_triton(xt, *args, impl="gluon", fold=fold)
    ref, s_ref, _ = fused_epi_stage_triton(xt, *args, impl="triton", fold="int")
    assert _same(got.cpu().numpy().reshape(4, 64, n), want)
    assert np.array_equal(torch.view_as_real(got).cpu().numpy().view(np.int64),
                          torch.view_as_real(ref).cpu().numpy().view(np.int64)) and torch.equal(s, s_ref)
    dest = torch.zeros((n, 64, 4), dtype=torch.complex128, device=DEV)
    fused_epi_stage_triton(xt, *args, impl="gluon", fold=fold, out=dest.permute(2, 1, 0))
    assert _same(np.ascontiguousarray(dest.permute(2, 1, 0).cpu().numpy()), want)
    # the six-step stage-2 layout, read where it is (consecutive rows one element apart: loaded along rows),
    # a chunk of the last three groups
    grid = torch.from_numpy(np.ascontiguousarray(x.transpose(0, 2, 1))).to(DEV).transpose(1, 2)
    got, s, _ = fused_epi_stage_triton(grid, *args[:5], 64, 64, impl="gluon", fold=fold, rows=192)
    assert _same(got.cpu().numpy().reshape(3, 64, n), want[1:]) and torch.equal(s, s_ref[64:])


@pytest.mark.skipif(not HOPPER, reason="the Gluon kernel needs a Hopper GPU (wgmma)")
@pytest.mark.parametrize("n,warps,passes", [(32, 8, 2), (16, 4, 2), (16, 8, 2)])
def test_gluon_column_passes_and_row_blocks_give_the_same_bits(n, warps, passes):
    """Launch shapes with the output columns in two passes (and, with fewer warps, the residues in two row
    blocks, the row shifts reread from memory): the default launch's bits and the exact oracle, from rows
    in place and in the six-step layout (loaded along the rows), into a transposed destination."""
    x, idx, plan, tab, ops = _stage(n, 64, 4, 21 + n)
    xt = torch.from_numpy(x.reshape(256, n)).to(DEV)
    args = (plan.input_bits, plan.twiddle_bits, tab, "crt", ops, 0, 64)
    want = stage_exact_python(x, idx, plan.input_bits, plan.twiddle_bits)
    ref, s_ref, _ = fused_epi_stage_triton(xt, *args, impl="gluon")
    got, s, _ = fused_epi_stage_triton(xt, *args, impl="gluon", num_warps=warps, passes=passes,
                                       max_registers=128)
    k = COMPILED[("int8", tab.num_moduli, "crt")]  # the launch ran the Gluon kernel, not the Triton fallback
    assert k.name == "_fused_epi_gluon_kernel" and k.metadata.num_warps == warps
    assert _same(got.cpu().numpy().reshape(4, 64, n), want) and torch.equal(s, s_ref)
    assert np.array_equal(torch.view_as_real(got).cpu().numpy().view(np.int64),
                          torch.view_as_real(ref).cpu().numpy().view(np.int64))
    grid = torch.from_numpy(np.ascontiguousarray(x.transpose(0, 2, 1))).to(DEV).transpose(1, 2)
    dest = torch.zeros((n, 64, 4), dtype=torch.complex128, device=DEV)
    fused_epi_stage_triton(grid, *args, impl="gluon", num_warps=warps, passes=passes, max_registers=128,
                           out=dest.permute(2, 1, 0))
    assert _same(np.ascontiguousarray(dest.permute(2, 1, 0).cpu().numpy()), want)


def test_passes_out_of_range_are_refused():
    x, idx, plan, tab, ops = _stage(16, 24, 4, 3)
    xt = torch.from_numpy(x.reshape(96, 16)).to(DEV)
    with pytest.raises(ValueError, match="passes"):
        fused_epi_stage_triton(xt, plan.input_bits, plan.twiddle_bits, tab, "crt", ops, 0, 24, passes=3)


def test_passes_from_the_launch_are_checked():
    """The launch's 4th field (column passes) is checked like the argument, on CUDA naming the launch (the
    launch is used on CUDA only: in the interpreter it is ignored and the stage runs); the config refuses it
    before any work."""
    from gpufield.errors import InputError
    from gpufield.fp64.fft.kernel_config import KernelConfig

    x, idx, plan, tab, ops = _stage(16, 64, 4, 3)
    xt = torch.from_numpy(x.reshape(256, 16)).to(DEV)
    args = (plan.input_bits, plan.twiddle_bits, tab, "crt", ops, 0, 64)
    with pytest.raises(InputError, match="passes must be 1 or 2"):
        KernelConfig(launch=(64, 8, 16, 4))
    if DEV == "cuda":
        with pytest.raises(ValueError, match=r"launch=\(64, 8, 16, 4\).*passes must be 1 or 2"):
            fused_epi_stage_triton(xt, *args, launch=(64, 8, 16, 4))
    else:
        got, _, _ = fused_epi_stage_triton(xt, *args, launch=(64, 8, 16, 4))
        assert _same(got.cpu().numpy().reshape(4, 64, 16), stage_exact_python(x, idx, plan.input_bits,
                                                                               plan.twiddle_bits))


def test_launch_values_are_parsed_or_refused():
    from gpufield.errors import InputError
    from gpufield.fp64.fft.kernel_config import KernelConfig

    assert KernelConfig.parse_launch("64, 8,32,2") == (64, 8, 32, 2)
    assert KernelConfig(launch=[64, 8]).launch == (64, 8) and KernelConfig(max_nreg=0).max_nreg == 0
    for bad in ("64", "64,8,32,2,1", "64,eight", "64,-8", ""):
        with pytest.raises(InputError, match="comma-separated non-negative integers"):
            KernelConfig.parse_launch(bad)
    with pytest.raises(InputError, match="KernelConfig.max_nreg must be None or a non-negative integer"):
        KernelConfig(max_nreg="128k")
