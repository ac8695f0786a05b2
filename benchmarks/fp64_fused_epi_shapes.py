"""Launch shapes of the fused DFT-GEMM stage kernel (``int8_gemm="fused_epi"``) on one GPU: time per stage,
registers/occupancy proxy (time only) and bit-identity against the default shape (and, through the
printed SHA-256 digest of the first shape's outputs, against another commit run on the same inputs).

Run from the source tree on a machine with a CUDA GPU (torch >= 2.11, Triton). On Hopper the launcher runs
the Gluon kernel where it fits; ``--implementation triton`` (``KernelConfig.implementation``) times the Triton
kernel instead (the digests of the two must agree):

    PYTHONPATH=src python3 benchmarks/fp64_fused_epi_shapes.py --out DIR --budget-s 150

Per stage length N (16: the 256^3 stages; 32: the 512^3 / 1024^3 stages): one chunk of 2^20 rows (2^24
complex outputs at N = 16, 2^25 at N = 32) of random complex128 rows with magnitudes over 2^-40..2^40, the
stage-2 twiddle groups of a 256 / 1024 point transform (R = 2^20 / G rows per group). For each shape
(rows per program, warps, outputs per program, register cap): the first call (compile) is timed, its outputs must equal the
default shape's bit for bit (else the shape is reported as WRONG), then the median of ``--reps`` calls timed
with CUDA events (``ms``: each call alone, so it includes the host's launch work while the GPU waits, ~0.1 ms)
and ``--reps`` calls queued back to back between two events (``ms_queued``: the GPU time per stage, as inside a
transform whose host enqueues ahead of the GPU). ``c_epi`` (from ``ms_queued``) is the time-equivalent
instructions per real output at 16.73 T INT32 instr/s (the floor model's definition, H200). ``--layout
sixstep`` stores the rows as a six-step pass reads them (consecutive rows one complex element apart: the
Gluon kernel loads along the rows) instead of one contiguous row after the other. Results go to DIR/fp64_fused_epi_shapes.json after every shape (an
interrupted run keeps the finished shapes); shapes not started before ``--budget-s`` are skipped.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import time
from pathlib import Path

import numpy as np
import torch

SHAPES = {16: [(64, 8, 16, 0), (64, 8, 16, 128), (128, 16, 16, 0), (64, 16, 16, 0), (128, 8, 16, 0), (32, 4, 16, 0)],
          32: [(64, 16, 32, 0), (64, 8, 32, 0), (64, 8, 16, 0), (64, 8, 16, 128), (32, 4, 16, 0), (128, 16, 32, 0),
               (64, 4, 16, 0)]}
"""Per N: (rows per program, warps, outputs per program, register cap or 0 for the launcher's default[, column
passes]); the first is the reference shape whose outputs every other shape must equal."""
P_INT = 16.73e12


def _stage(n: int, dev: torch.device, rows: int, seed: int = 0, layout: str = "rows"):
    from gpufield.fp64.fft import EmulatedFftPlan
    from gpufield.fp64.fft.epilogue import epilogue_tables
    from gpufield.fp64.fft.operands import stage_operands
    from gpufield.fp64.fft.sixstep import _fused_idx
    from gpufield.fp64.ozaki.moduli import moduli_table

    idx = _fused_idx(n * n)  # [G = n, K = n, N = n]
    plan = EmulatedFftPlan(backend="int8", variant="crt", epilogue="triton", int8_gemm="fused_epi")
    tab = epilogue_tables("int8", plan.resolved_num_moduli)
    ops = stage_operands(idx, plan.twiddle_bits, moduli_table("int8", tab.num_moduli).moduli, torch.int8, 8, dev)
    g = torch.Generator(device="cpu").manual_seed(seed)
    mag = torch.pow(2.0, torch.randint(-40, 41, (rows, n), generator=g).double())
    x = torch.complex(torch.randn(rows, n, generator=g, dtype=torch.float64) * mag,
                      torch.randn(rows, n, generator=g, dtype=torch.float64) * mag).to(dev)
    if layout == "sixstep":  # [rows, n] view with row stride 1 and element stride rows: the same values
        x = x.T.contiguous().T
    args = (plan.input_bits, plan.twiddle_bits, tab, "crt", ops, 0, rows // idx.shape[0])
    return x, args


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--budget-s", type=float, default=150.0)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--sizes", default="16,32")
    ap.add_argument("--rows-log2", type=int, default=20, help="chunk rows (2^k)")
    ap.add_argument("--shapes", default=None,
                    help="only these shapes, e.g. '16:64,8,16,128;32:64,8,32,128,2' (default: the SHAPES table)")
    ap.add_argument("--device", default="cuda", help="cuda, or cpu with TRITON_INTERPRET=1 (a test of the script)")
    ap.add_argument("--implementation", choices=("gluon", "triton"), default="gluon",
                    help="fused stage kernel (KernelConfig.implementation; the former GPUFIELD_FUSED_EPI_IMPL)")
    ap.add_argument("--layout", choices=("rows", "sixstep"), default="rows",
                    help="input rows contiguous, or consecutive rows one element apart (a six-step pass)")
    a = ap.parse_args()
    from gpufield.fp64.fft.gemm_fused_epi import fused_epi_stage_triton

    t_start = time.time()
    a.out.mkdir(parents=True, exist_ok=True)
    dev = torch.device(a.device)
    cuda = dev.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    res = {"device": torch.cuda.get_device_name(0) if cuda else "cpu", "torch": torch.__version__, "layout": a.layout,
           "shapes": []}
    shapes = SHAPES
    if a.shapes:
        shapes = {}
        for item in a.shapes.split(";"):
            n, shape = item.split(":")
            shapes.setdefault(int(n), []).append(tuple(int(v) for v in shape.split(",")))
    for n in (int(v) for v in a.sizes.split(",")):
        if n not in shapes:
            continue
        x, args = _stage(n, dev, 1 << a.rows_log2, layout=a.layout)
        ref = None
        for bm, warps, bk, reg, *kp in shapes[n]:
            row = {"N": n, "rows": bm, "warps": warps, "outputs": bk, "maxnreg": reg, "passes": kp[0] if kp else 1}
            if time.time() - t_start > a.budget_s:
                row["skipped"] = "budget"
                res["shapes"].append(row)
                continue
            call = functools.partial(fused_epi_stage_triton, x, *args, block_m=bm, num_warps=warps, block_k=bk,
                                     max_registers=reg or None, impl=a.implementation,
                                     **({"passes": kp[0]} if kp else {}))
            sync()
            t0 = time.time()
            y = call()[0]
            sync()
            row["first_call_s"] = round(time.time() - t0, 2)
            if ref is None:
                ref = y.clone()
                # bit pattern digest of the reference outputs: equal digests across commits = same bits
                row["sha256"] = hashlib.sha256(torch.view_as_real(ref).cpu().numpy().tobytes()).hexdigest()[:16]
            row["bit_identical"] = bool(torch.equal(torch.view_as_real(y), torch.view_as_real(ref)))
            times = []
            for _ in range(a.reps if cuda else 1):
                if cuda:
                    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    e0.record()
                    call()
                    e1.record()
                    sync()
                    times.append(e0.elapsed_time(e1))
                else:
                    t0 = time.time()
                    call()
                    times.append((time.time() - t0) * 1e3)
            t = float(np.median(times))
            row["ms"] = round(t, 4)
            if cuda:  # back to back: the host's launch work overlaps the previous call's kernel
                e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                e0.record()
                for _ in range(a.reps):
                    call()
                e1.record()
                sync()
                t = e0.elapsed_time(e1) / a.reps
                row["ms_queued"] = round(t, 4)
            row["c_epi"] = round(t * 1e-3 * P_INT / (2 * x.shape[0] * n), 1)
            res["shapes"].append(row)
            print(json.dumps(row), flush=True)
            (a.out / "fp64_fused_epi_shapes.json").write_text(json.dumps(res, indent=1))
        del x, ref
        if cuda:
            torch.cuda.empty_cache()
    (a.out / "fp64_fused_epi_shapes.json").write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
