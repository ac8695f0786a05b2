"""Per-stage GPU times of the emulated FFT at 256^3, 512^3 and 1024^3, and the SM clock they ran at (issue 30).

    PYTHONPATH=src python3 benchmarks/fp64_stage_split_gpu.py OUTDIR            # one H200, ~1-2 min
    PYTHONPATH=src python3 benchmarks/fp64_stage_split_gpu.py OUTDIR --sizes 16  # CPU smoke test (interpreter)

The question it answers: is the 1024^3 transform slower per point than the floor model says because of its
size (a memory regime: L2, TLB, the strides of a 16 GiB array), or because all six of its stages have length
32 (256^3: six N = 16 stages; 512^3: three of each)? For every size it runs the default plan
(``EmulatedFftPlan(backend="int8", epilogue="triton")``, as run 65) on a random complex128 input:

1. one warm-up call (compiles), then ``--reps`` eager calls timed by CUDA events (host work included);
2. one call under torch.profiler (CUDA activity): every kernel's duration; the six stage kernels
   (``_fused_epi_*``) in order, each with its stage length N and its kind (1: stage 1 of an axis pass, shared
   DFT matrix, row-contiguous destination; 2: fused twiddles per group, 16-byte transposed destination);
   busy time (sum of kernel durations) and span (first kernel start to last kernel end);
3. the SM and memory clocks, power and clock-event reasons (NVML, read-only) sampled every 5 ms during the
   timed calls, and during ``--sustain-s`` seconds of calls back to back (each timed): the clock under load.

If the per-point time of the same (N, kind) is the same at 512^3 and 1024^3, there is no size regime. Writes
OUTDIR/fp64_stage_split.json and prints one line per size. Changes no clock, power limit or GPU setting.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from pathlib import Path


def _clock_sampler(stop: threading.Event, out: list) -> None:
    try:
        import pynvml

        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
    except Exception as e:  # noqa: BLE001 - NVML is optional; say why it is missing
        out.append({"error": f"NVML unavailable: {e!r}"})
        return
    reasons = getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
        pynvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None)
    while not stop.is_set():
        try:
            rec = {"t": time.perf_counter(),
                   "sm_hz": pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM) * 1e6,
                   "mem_hz": pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM) * 1e6,
                   "power_w": pynvml.nvmlDeviceGetPowerUsage(h) / 1e3}
            try:
                rec["reasons"] = int(reasons(h)) if reasons else None  # bit mask (power cap 0x4, thermal 0x20/0x40)
            except Exception:  # noqa: BLE001
                rec["reasons"] = None
            out.append(rec)
        except Exception as e:  # noqa: BLE001
            out.append({"error": repr(e)})
            return
        time.sleep(0.005)


def _stage_kinds(n: int) -> list[tuple[int, int]]:
    """(N, kind) of the six stages of an n^3 transform, in launch order (sixstep._axis_pass)."""
    from gpufield.fp64.fft.sixstep import _split

    if n <= 32:
        return [(n, 1)] * 3
    n1, n2 = _split(n)
    return [(n1, 1), (n2, 2)] * 3


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--sizes", default="256,512,1024")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--sustain-s", type=float, default=1.0, help="seconds of back-to-back calls per size")
    a = ap.parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)

    import torch
    from torch.profiler import ProfilerActivity, profile

    from gpufield.fp64.fft import EmulatedFftPlan, fftn_fp64_emulated

    cuda = torch.cuda.is_available()
    dev = "cuda" if cuda else "cpu"
    plan = EmulatedFftPlan(backend="int8", epilogue="triton")
    res: dict = {"device": torch.cuda.get_device_name(0) if cuda else "cpu", "torch": torch.__version__,
                 "plan": repr(plan), "sizes": {}}
    t_start = time.perf_counter()
    for n in (int(v) for v in a.sizes.split(",")):
        g = torch.Generator(device=dev).manual_seed(n)
        x = torch.complex(torch.randn(n, n, n, generator=g, dtype=torch.float64, device=dev),
                          torch.randn(n, n, n, generator=g, dtype=torch.float64, device=dev))
        t0 = time.perf_counter()
        y = fftn_fp64_emulated(x, plan)
        del y
        if cuda:
            torch.cuda.synchronize()
        first = time.perf_counter() - t0
        samples: list = []
        stop = threading.Event()
        th = threading.Thread(target=_clock_sampler, args=(stop, samples), daemon=True)
        th.start()
        times = []
        for _ in range(a.reps if cuda else 1):
            if cuda:
                e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                e0.record()
                y = fftn_fp64_emulated(x, plan)
                e1.record()
                torch.cuda.synchronize()
                times.append(e0.elapsed_time(e1) * 1e-3)
            else:
                t0 = time.perf_counter()
                y = fftn_fp64_emulated(x, plan)
                times.append(time.perf_counter() - t0)
            del y
        n_timed = len(samples)
        # sustained: calls back to back for >= --sustain-s (the clock under a long load), each timed
        sustained = []
        t_end = time.perf_counter() + (a.sustain_s if cuda else 0)
        while cuda and time.perf_counter() < t_end:
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            y = fftn_fp64_emulated(x, plan)
            e1.record()
            torch.cuda.synchronize()
            sustained.append(e0.elapsed_time(e1) * 1e-3)
            del y
        stop.set()
        th.join()
        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
        with profile(activities=acts) as p:
            y = fftn_fp64_emulated(x, plan)
            if cuda:
                torch.cuda.synchronize()
        del y
        ev = sorted((e for e in p.events() if e.device_type == torch.autograd.DeviceType.CUDA),
                    key=lambda e: e.time_range.start)
        kernels = [{"name": e.name[:70], "dur_s": (e.time_range.end - e.time_range.start) * 1e-6} for e in ev]
        stage_durs = [k["dur_s"] for k in kernels if k["name"].startswith("_fused_epi")]
        kinds = _stage_kinds(n)
        stages = []
        for i, d in enumerate(stage_durs):
            N, kind = kinds[i] if i < len(kinds) else (None, None)
            stages.append({"index": i, "N": N, "kind": kind, "dur_s": d, "ps_per_point": d / n**3 * 1e12})
        clocks = [s for s in samples[:n_timed] if "sm_hz" in s]
        sus_clocks = [s for s in samples[n_timed:] if "sm_hz" in s]
        reasons = sorted({s.get("reasons") for s in samples if s.get("reasons") is not None})
        entry = {
            "n": n, "first_call_s": first, "eager_s": times, "eager_median_s": statistics.median(times),
            "busy_s": sum(k["dur_s"] for k in kernels),
            "span_s": (ev[-1].time_range.end - ev[0].time_range.start) * 1e-6 if ev else None,
            "stages": stages, "kernels": kernels,
            "sm_clock_median_hz": statistics.median(s["sm_hz"] for s in clocks) if clocks else None,
            "sm_clock_min_hz": min(s["sm_hz"] for s in clocks) if clocks else None,
            "mem_clock_median_hz": statistics.median(s["mem_hz"] for s in clocks) if clocks else None,
            "power_median_w": statistics.median(s["power_w"] for s in clocks) if clocks else None,
            "clock_samples": len(clocks), "sustained_s": sustained,
            "sustained_median_s": statistics.median(sustained) if sustained else None,
            "sustained_sm_clock_median_hz": statistics.median(s["sm_hz"] for s in sus_clocks) if sus_clocks else None,
            "sustained_power_median_w": statistics.median(s["power_w"] for s in sus_clocks) if sus_clocks else None,
            "sustained_clock_samples": len(sus_clocks), "clock_event_reasons_seen": reasons, "nvml_error": next((s["error"] for s in samples if "error" in s), None),
        }
        res["sizes"][str(n)] = entry
        print(n, json.dumps({k: v for k, v in entry.items() if k not in ("kernels", "eager_s", "sustained_s")}),
              flush=True)
        del x
        if cuda:
            torch.cuda.empty_cache()
        tmp = a.out / "fp64_stage_split.json.tmp"
        tmp.write_text(json.dumps(res, indent=1))
        tmp.replace(a.out / "fp64_stage_split.json")
    res["wall_s"] = time.perf_counter() - t_start
    tmp = a.out / "fp64_stage_split.json.tmp"
    tmp.write_text(json.dumps(res, indent=1))
    tmp.replace(a.out / "fp64_stage_split.json")
    print("wall", round(res["wall_s"], 1), "s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
