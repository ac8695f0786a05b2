"""Fewer moduli for fewer bits: the default INT8 plan (58-bit inputs, 56-bit twiddles, 16 moduli) against narrower
plans, side by side in one process on one GPU, calls alternating: wall time per synchronised eager call and the
error on a rank-1 input whose exact DFT is known, next to cuFFT Z2Z (``torch.fft.fftn``, median of ``--reps``
calls) in the same run.

    PYTHONPATH=src python3 benchmarks/fp64_fft_bits.py --out DIR [--sizes 256,512,1024] [--bits 58/56,57/52] [--reps 3]
        [--inverse]

``--inverse`` also times the inverse (``ifftn_fp64_emulated`` against ``torch.fft.ifftn``, same alternation) on the
same input, with its error against the exact inverse of the rank-1 input (conj(DFT(conj(a))) / n per axis).

Each plan ``b_x/b_w`` takes the fewest INT8 moduli whose product keeps its stages' CRT unique
(:func:`gpufield.fp64.fft.auto_num_moduli`; 57/52 needs 15). The rank-1 input (17-bit integers, exact in
float64) has the DFT U (x) V (x) W of three 1-D long-double DFTs; the error is the relative L2 on 2^18 sampled
outputs (as ``benchmarks/fp64_fft_gpu.py``). The error on random, smooth and wide-exponent inputs against a
long-double DFT at up to 32^3 points is a CPU measurement (tests/fp64/test_fft.py has the classes). Results go to
DIR/fp64_fft_bits.json after every size, so an interrupted run keeps the sizes it finished.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch


def _wall_s(fn) -> float:
    torch.cuda.synchronize()
    t = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return time.perf_counter() - t


def _rank1(n: int):
    """Rank-1 input on the GPU, the sampled output indices, and its exact DFT and inverse DFT at those 2^18
    outputs (long double)."""
    from gpufield.fp64.fft.reference import dft_longdouble

    rng = np.random.default_rng(n)
    vecs = [rng.integers(-(2**17), 2**17, n) + 1j * rng.integers(-(2**17), 2**17, n) for _ in range(3)]
    refs = [dft_longdouble(a) for a in vecs]
    irefs = [np.conj(dft_longdouble(np.conj(a))) / n for a in vecs]
    kk = np.random.default_rng(1).integers(0, n, (3, 2**18))
    ref = refs[0][kk[0]] * refs[1][kk[1]] * refs[2][kk[2]]
    iref = irefs[0][kk[0]] * irefs[1][kk[1]] * irefs[2][kk[2]]
    idx = torch.from_numpy(kk[0] * n * n + kk[1] * n + kk[2]).cuda()
    u, v, w = (torch.from_numpy(a).cuda() for a in vecs)
    return u[:, None, None] * v[None, :, None] * w[None, None, :], idx, ref, iref


def _err(y, idx, ref) -> float:
    d = y.reshape(-1)[idx].cpu().numpy().astype(np.clongdouble) - ref
    return float(np.sqrt(np.sum(np.abs(d) ** 2) / np.sum(np.abs(ref) ** 2)))


def _measure(r: dict, tag: str, plans: dict, x, idx, ref, native, ours, reps: int) -> dict[str, list[float]]:
    """cuFFT (``native``) and every plan (``ours``) on ``x``: errors against ``ref`` and wall times (ms), the plans
    alternating; written into ``r`` under keys with ``tag``. Returns the plans' times."""
    r[f"cufft{tag}_rank1_rel_l2"] = _err(native(x), idx, ref)
    r[f"cufft{tag}_ms"] = 1e3 * float(np.median([_wall_s(lambda: native(x)) for _ in range(reps)]))
    for b, p in plans.items():  # first call: compiles; its output gives the error
        y = ours(x, p)
        r[f"{b}{tag}_rank1_rel_l2"] = _err(y, idx, ref)
        del y
    ts: dict[str, list[float]] = {b: [] for b in plans}
    for _ in range(reps):
        for b, p in plans.items():
            ts[b].append(1e3 * _wall_s(lambda p=p: ours(x, p)))
    for b in plans:
        r[f"{b}{tag}_ms"] = ts[b]
    return ts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--sizes", default="256,512,1024")
    ap.add_argument("--bits", default="58/56,57/52", help="comma-separated input_bits/twiddle_bits; first = baseline")
    ap.add_argument("--reps", type=int, default=3, help="timed calls per plan (alternating)")
    ap.add_argument("--inverse", action="store_true", help="also time and check the inverse transform")
    a = ap.parse_args()
    from gpufield.fp64.fft import EmulatedFftPlan, fftn_fp64_emulated, ifftn_fp64_emulated

    plans = {}
    for b in a.bits.split(","):
        ib, tb = (int(v) for v in b.split("/"))
        plans[b] = EmulatedFftPlan(backend="int8", epilogue="triton", input_bits=ib, twiddle_bits=tb)
    a.out.mkdir(parents=True, exist_ok=True)
    res = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
           "moduli": {b: p.resolved_num_moduli for b, p in plans.items()}, "sizes": {}}
    for n in (int(s) for s in a.sizes.split(",")):
        x, idx, ref, iref = _rank1(n)
        r: dict = {}
        ts = _measure(r, "", plans, x, idx, ref, torch.fft.fftn, fftn_fp64_emulated, a.reps)
        base = next(iter(plans))
        r["ratio_to_baseline"] = {b: float(np.median(ts[b]) / np.median(ts[base])) for b in plans}
        if a.inverse:
            _measure(r, "_inverse", plans, x, idx, iref, torch.fft.ifftn, ifftn_fp64_emulated, a.reps)
        res["sizes"][n] = r
        print(n, json.dumps(r), flush=True)
        (a.out / "fp64_fft_bits.json").write_text(json.dumps(res, indent=1))
        del x
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
