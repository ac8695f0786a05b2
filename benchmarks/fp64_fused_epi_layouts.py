"""Destination layouts of the fused DFT-GEMM stage kernel on one GPU: the same chunk written contiguously, into
the six-step stage-1 destination (rows contiguous, outputs n1 apart by B n2 elements) and into the stage-2
destination (groups one element apart), the latter in plain and in group-interleaved program order.

    PYTHONPATH=src python3 benchmarks/fp64_fused_epi_layouts.py --n 1024 --out DIR

For a cube side n = n1 n2 (B = n^2 rows per axis pass, as :func:`gpufield.fp64.fft.sixstep._axis_pass`): a
chunk of 4 B rows (four stage-2 twiddle groups; stage 1 takes the same number of rows from row 0) of random
complex128 rows, destinations of the full pass size (n^3 complex, one buffer reused). Each layout: one call to
compile, outputs compared with the contiguous ones (the stage-1 and stage-2 layouts must equal the contiguous
result of the same stage bit for bit), then the median of ``--reps`` calls (CUDA events). Writes
DIR/fp64_fused_epi_layouts_<n>.json.
"""

from __future__ import annotations

import argparse
import functools
import json
import time
from pathlib import Path

import numpy as np
import torch


def _time(fn, reps: int, cuda: bool) -> float:
    ts = []
    for _ in range(reps):
        if not cuda:  # interpreter smoke test of the script
            t0 = time.time()
            fn()
            ts.append((time.time() - t0) * 1e3)
            continue
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        fn()
        e1.record()
        torch.cuda.synchronize()
        ts.append(e0.elapsed_time(e1))
    return float(np.median(ts))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=1024)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--device", default="cuda", help="cuda, or cpu with TRITON_INTERPRET=1 (a test of the script)")
    a = ap.parse_args()
    from gpufield.fp64.fft import EmulatedFftPlan
    from gpufield.fp64.fft.epilogue import epilogue_tables
    from gpufield.fp64.fft.gemm_fused_epi import fused_epi_stage_triton
    from gpufield.fp64.fft.operands import stage_operands
    from gpufield.fp64.fft.sixstep import _dft_idx, _fused_idx, _split
    from gpufield.fp64.ozaki.moduli import moduli_table

    dev = torch.device(a.device)
    cuda = dev.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    n1, n2 = _split(a.n)
    B = a.n * a.n
    plan = EmulatedFftPlan(backend="int8", variant="crt", epilogue="triton", int8_gemm="fused_epi")
    tab = epilogue_tables("int8", plan.resolved_num_moduli)
    mods = moduli_table("int8", tab.num_moduli).moduli
    dest = torch.empty(a.n ** 3, dtype=torch.complex128, device=dev)
    g = torch.Generator(device=a.device).manual_seed(0)
    res = {"n": a.n, "device": torch.cuda.get_device_name(0) if cuda else "cpu", "layouts": []}
    for stage, N, idx in (("stage1", n1, _dft_idx(n1)), ("stage2", n2, _fused_idx(a.n))):
        G, K = idx.shape[0], idx.shape[1]
        R = B * n2 if stage == "stage1" else B
        rows = min(4 * B, G * R)
        ops = stage_operands(idx, plan.twiddle_bits, mods, torch.int8, 8, dev)
        x = torch.complex(torch.randn(rows, N, generator=g, device=dev, dtype=torch.float64),
                          torch.randn(rows, N, generator=g, device=dev, dtype=torch.float64))
        args = (plan.input_bits, plan.twiddle_bits, tab, "crt", ops, 0, R)
        ref = fused_epi_stage_triton(x, *args)[0].clone()
        if stage == "stage1":  # [k1, b, j2] buffer seen as rows (b, j2) x k1
            view = dest.view(n1, B, n2).permute(1, 2, 0).reshape(1, B * n2, n1)
        else:  # X[b, k1 + n1 k2] seen as [k1, b, k2]
            view = dest.view(B, n2, n1).permute(2, 0, 1)
        cases = [("contiguous", None, None), (stage, view, False)]
        if stage == "stage2":
            cases.append((stage + " interleaved", view, True))
        for name, out, swz in cases:
            fn = functools.partial(fused_epi_stage_triton, x, *args, out=out, swizzle=swz)
            fn()
            sync()
            if out is None:
                same = True
            else:
                got = out.reshape(-1, K)[:rows] if stage == "stage1" else out[: rows // R].reshape(rows, K)
                same = bool(torch.equal(torch.view_as_real(got), torch.view_as_real(ref)))
            ms = _time(fn, a.reps if cuda else 1, cuda)
            row = {"stage": stage, "layout": name, "N": N, "rows": rows, "bit_identical": same, "ms": round(ms, 4),
                   "ps_per_output": round(ms * 1e9 / (rows * K), 2)}
            res["layouts"].append(row)
            print(json.dumps(row), flush=True)
        del x, ref, ops
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / f"fp64_fused_epi_layouts_{a.n}.json").write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
