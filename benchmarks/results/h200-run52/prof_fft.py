# per-kernel GPU times and gaps inside one eager transform (torch.profiler / CUPTI), after a warm-up call
import sys, time, json, torch
from gpufield.fp64.fft import EmulatedFftPlan, fftn_fp64_emulated
from torch.profiler import profile, ProfilerActivity
plan = EmulatedFftPlan(backend="int8", variant="kulisch", epilogue="triton")
out = {}
for n in [int(v) for v in sys.argv[1].split(",")]:
    g = torch.Generator(device="cpu").manual_seed(1)
    x = torch.complex(torch.randn(n, n, n, generator=g, dtype=torch.float64), torch.randn(n, n, n, generator=g, dtype=torch.float64)).cuda()
    fftn_fp64_emulated(x, plan); torch.cuda.synchronize()
    t0 = time.perf_counter(); fftn_fp64_emulated(x, plan); torch.cuda.synchronize(); wall = time.perf_counter() - t0
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as p:
        t0 = time.perf_counter(); y = fftn_fp64_emulated(x, plan); torch.cuda.synchronize(); wall2 = time.perf_counter() - t0
    ev = [e for e in p.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    ev.sort(key=lambda e: e.time_range.start)
    cpu = [e for e in p.events() if e.device_type == torch.autograd.DeviceType.CPU]
    t_cpu0 = min(e.time_range.start for e in cpu)
    rows = []
    prev = None
    for e in ev:
        rows.append({"name": e.name[:60], "start_us": round(e.time_range.start - t_cpu0, 1), "dur_us": round(e.time_range.end - e.time_range.start, 1),
                     "gap_us": None if prev is None else round(e.time_range.start - prev, 1)})
        prev = e.time_range.end
    busy = sum(r["dur_us"] for r in rows)
    span = ev[-1].time_range.end - ev[0].time_range.start
    out[n] = {"wall_ms": round(wall * 1e3, 3), "wall_profiled_ms": round(wall2 * 1e3, 3), "busy_ms": round(busy / 1e3, 3), "span_ms": round(span / 1e3, 3),
              "first_kernel_after_us": rows[0]["start_us"], "kernels": rows}
    print(n, json.dumps({k: v for k, v in out[n].items() if k != "kernels"}))
    for r in rows: print("  ", r)
    del x, y; torch.cuda.empty_cache()
json.dump(out, open(sys.argv[2], "w"), indent=1)
# host side: where one eager 256^3 call spends its Python time
import cProfile, pstats, io
n = 256
g = torch.Generator(device="cpu").manual_seed(1)
x = torch.complex(torch.randn(n, n, n, generator=g, dtype=torch.float64), torch.randn(n, n, n, generator=g, dtype=torch.float64)).cuda()
fftn_fp64_emulated(x, plan); torch.cuda.synchronize()
pr = cProfile.Profile(); pr.enable()
for _ in range(5):
    fftn_fp64_emulated(x, plan)
torch.cuda.synchronize(); pr.disable()
s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(25); print(s.getvalue()[:6000])
s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats("cumulative").print_stats(30); print(s.getvalue()[:6000])
