import time

import numpy as np
import torch

from gpufield.fp64.fft import EmulatedFftPlan, fftn_fp64_emulated

rng = np.random.default_rng(1)
shape = (8, 16, 64)
x = (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)) * np.exp(3 * rng.standard_normal(shape))
ref = fftn_fp64_emulated(x)
xt = torch.from_numpy(x).cuda()
cfgs = [("int8", "crt", "triton", 1, "cublas"), ("int8", "crt", "triton", 8, "cublas"), ("int8", "kulisch", "triton", 8, "cublas"),
        ("int8", "crt", "triton", 8, "triton"), ("int8", "crt", "triton", 8, "fused"), ("int8", "crt", "triton", 8, "fused_epi"),
        ("fp8", "crt", "triton", 1, "cublas"), ("int8", "garner", "triton", 1, "cublas"), ("fp8", "garner", "triton", 1, "cublas")]
for b, v, e, g, gm in cfgs:
    t = time.time()
    try:
        y = fftn_fp64_emulated(xt, EmulatedFftPlan(backend=b, variant=v, epilogue=e, int8_group=g, int8_gemm=gm)).cpu().numpy()
        t1 = time.time()
        y2 = fftn_fp64_emulated(xt, EmulatedFftPlan(backend=b, variant=v, epilogue=e, int8_group=g, int8_gemm=gm)).cpu().numpy()
        print(b, v, g, gm, f"first {t1 - t:.1f} s, second {time.time() - t1:.3f} s", "same", np.array_equal(y.view(np.float64), ref.view(np.float64)), flush=True)
    except Exception as ex:
        print(b, v, g, gm, "ERROR", repr(ex)[:300], flush=True)
