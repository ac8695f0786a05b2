"""CPU rate of the emulated FFT (seconds per complex point and stage), the numbers in
src/gpufield/fp64/data/cpu_rates.json that `gpufield fp64 fft` uses for its time estimate.

Usage: PYTHONPATH=src python benchmarks/fp64_cpu_rate.py BACKENDS SIZES   e.g.  int8,cpu,fp8 32,64
(one warm-up call at 8^3, then one timed forward transform of n^3 complex Gaussian data per backend and size).
"""
import sys
import time

import numpy as np
import torch

from gpufield.fp64.fft import EmulatedFftPlan, fftn_fp64_emulated
from gpufield.fp64.model import stage_lengths

torch.set_num_threads(2)
for backend in sys.argv[1].split(","):
    for n in map(int, sys.argv[2].split(",")):
        shape = (n, n, n)
        x = np.random.default_rng(0).standard_normal(shape) + 0j
        plan = EmulatedFftPlan(backend=backend, epilogue="torch")
        fftn_fp64_emulated(x[:8, :8, :8].copy(), plan)
        t = time.perf_counter()
        fftn_fp64_emulated(x, plan)
        dt = time.perf_counter() - t
        st = 3 * len(stage_lengths(n))
        print(backend, n, f"{dt:.3f} s", f"{dt / (n**3 * st) * 1e9:.1f} ns per point-stage", flush=True)
