"""Kernel-time profile of one emulated FP64 3-D FFT of a given size on one GPU (torch.profiler), per phase.

    PYTHONPATH=src python3 benchmarks/fp64_fft_profile.py --n 1024 --out DIR

Runs the default plan (``EmulatedFftPlan()``, INT8 fused stages on CUDA) once to compile and warm up, then
profiles one call: kernel time per phase and per kernel name, launches, GPU busy vs wall, and the number of
stage chunks (kernel launches of the fused stage). Writes DIR/fp64_fft_profile_<n>.json. The phase names are
those of benchmarks/fp64_fft_gpu.py (``_phase_of``); that script profiles only its first size.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
from pathlib import Path

import torch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=1024, help="cube side")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--variant", default="kulisch")
    a = ap.parse_args()
    spec = importlib.util.spec_from_file_location("fftbench", Path(__file__).with_name("fp64_fft_gpu.py"))
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    from gpufield.fp64.fft import EmulatedFftPlan, fftn_fp64_emulated

    plan = EmulatedFftPlan(backend="int8", variant=a.variant, epilogue="triton", int8_gemm="fused_epi")
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.complex(torch.randn((a.n,) * 3, generator=g, device="cuda", dtype=torch.float64),
                      torch.randn((a.n,) * 3, generator=g, device="cuda", dtype=torch.float64))
    fn = lambda: fftn_fp64_emulated(x, plan)  # noqa: E731
    fn()
    res = {"n": a.n, "variant": a.variant, "device": torch.cuda.get_device_name(0), **bench._profile(fn)}
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / f"fp64_fft_profile_{a.n}.json").write_text(json.dumps(res, indent=1))
    print(json.dumps({k: res[k] for k in ("phases_s", "launches", "gpu_busy_s", "wall_s")}), flush=True)
    for ph, ks in res["kernels"].items():
        print(ph, ks[:3], flush=True)


if __name__ == "__main__":
    main()
