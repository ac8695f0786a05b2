"""Eager emulated FFT calls against the same transform replayed from a CUDA graph (:class:`GraphedFftn`), side
by side in one process on one GPU: wall time per synchronised call (median of ``--reps``), and whether the
bits agree.

    PYTHONPATH=src python3 benchmarks/fp64_fft_graph.py --out DIR [--sizes 256,512] [--reps 10]

Per cube side: an eager call (``fftn_fp64_emulated``, default INT8 plan), a graph replay of the input in
place (``f()``), and a replay with the input copied in (``f(x)``). Results to DIR/fp64_fft_graph.json.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch


def _median_ms(fn, reps: int) -> float:
    ts = []
    for _ in range(reps):
        torch.cuda.synchronize()
        t = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        ts.append(time.perf_counter() - t)
    ts.sort()
    return ts[len(ts) // 2] * 1e3


def _one(n: int, plan, reps: int) -> dict:
    from gpufield.fp64.fft import GraphedFftn, fftn_fp64_emulated

    g = torch.Generator(device="cuda").manual_seed(n)
    x = torch.randn((n, n, n), dtype=torch.complex128, device="cuda", generator=g)
    y = fftn_fp64_emulated(x, plan)
    f = GraphedFftn((n, n, n), plan)
    same = bool(torch.equal(torch.view_as_real(f(x)), torch.view_as_real(y)))
    del y
    return {"eager_ms": _median_ms(lambda: fftn_fp64_emulated(x, plan), reps),
            "graph_in_place_ms": _median_ms(f, reps),
            "graph_copy_in_ms": _median_ms(lambda: f(x), reps), "bit_identical": same}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--sizes", default="256,512")
    ap.add_argument("--reps", type=int, default=10)
    a = ap.parse_args()
    from gpufield.fp64.fft import EmulatedFftPlan

    a.out.mkdir(parents=True, exist_ok=True)
    plan = EmulatedFftPlan(backend="int8", epilogue="triton")
    res = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "sizes": {}}
    for n in (int(s) for s in a.sizes.split(",")):
        r = _one(n, plan, a.reps)
        res["sizes"][n] = r
        print(json.dumps({"n": n, **r}), flush=True)
        (a.out / "fp64_fft_graph.json").write_text(json.dumps(res, indent=1))
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
