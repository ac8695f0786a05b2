"""Run 39 probe: where the 256^3 host gaps come from. Eager wall vs enqueue-only vs CUDA-graph replay; cProfile."""
import cProfile, io, pstats, sys, time
import torch
import gpufield.fp64.fft.sixstep as ss
from gpufield.fp64.fft import EmulatedFftPlan, fftn_fp64_emulated
n = int(sys.argv[1]) if len(sys.argv) > 1 else 256
plan = EmulatedFftPlan(backend="int8", variant="crt", epilogue="triton", int8_group=8, int8_gemm="fused_epi")
g = torch.Generator(device="cuda").manual_seed(0)
x = torch.randn((n, n, n), dtype=torch.complex128, device="cuda", generator=g)
y0 = fftn_fp64_emulated(x, plan); torch.cuda.synchronize()
def wall(f, reps=10):
    ts = []
    for _ in range(reps):
        torch.cuda.synchronize(); t = time.perf_counter(); f(); torch.cuda.synchronize(); ts.append(time.perf_counter() - t)
    ts.sort(); return ts[len(ts) // 2] * 1e3
print(f"{n}^3 eager wall median {wall(lambda: fftn_fp64_emulated(x, plan)):.3f} ms", flush=True)
orig = ss.check_finite_flags
ss.check_finite_flags = lambda flags: None  # no host sync: measure enqueue time
ts = []
for _ in range(10):
    torch.cuda.synchronize(); t = time.perf_counter(); fftn_fp64_emulated(x, plan); ts.append(time.perf_counter() - t); torch.cuda.synchronize()
ts.sort(); print(f"enqueue only (no finiteness sync) median {ts[5] * 1e3:.3f} ms; wall without the check {wall(lambda: fftn_fp64_emulated(x, plan)):.3f} ms", flush=True)
# GPU time by events (back to back, 10 transforms queued)
e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
torch.cuda.synchronize(); e0.record()
for _ in range(10): fftn_fp64_emulated(x, plan)
e1.record(); torch.cuda.synchronize(); print(f"10 queued back to back: {e0.elapsed_time(e1) / 10:.3f} ms each", flush=True)
# CUDA graph of the whole transform (static input x)
try:
    s = torch.cuda.Stream(); s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2): fftn_fp64_emulated(x, plan)
    torch.cuda.current_stream().wait_stream(s)
    gr = torch.cuda.CUDAGraph()
    with torch.cuda.graph(gr):
        yg = fftn_fp64_emulated(x, plan)
    gr.replay(); torch.cuda.synchronize()
    print("graph output bit-identical:", bool(torch.equal(torch.view_as_real(yg), torch.view_as_real(y0))), flush=True)
    print(f"graph replay wall median {wall(gr.replay):.3f} ms", flush=True)
except Exception as ex:
    print("graph failed:", repr(ex)[:300], flush=True)
ss.check_finite_flags = orig
pr = cProfile.Profile(); torch.cuda.synchronize()
pr.enable()
for _ in range(5): fftn_fp64_emulated(x, plan)
pr.disable()
out = io.StringIO(); pstats.Stats(pr, stream=out).sort_stats("tottime").print_stats(25); print(out.getvalue()[:6000])
