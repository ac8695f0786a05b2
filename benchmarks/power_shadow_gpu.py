"""Shadow run of the power controller on one GPU: read-only, intents logged, nothing written.

Run on a machine with one H200 (torch + CUDA, nvidia-ml-py, numpy; no simpy/duckdb needed)::

    PYTHONPATH=src python3 benchmarks/power_shadow_gpu.py --out DIR

or on CPU with the fake NVML::

    PYTHONPATH=src python3 benchmarks/power_shadow_gpu.py --fake-nvml --out DIR

Phases (each ``--phase-s`` seconds, default 45): a prefill-like workload (random-weight transformer
layers, d=8192, FFN 28672, on 8k-token batches: ~44 TFLOP of BF16 GEMMs per step) under the prefill
lane's controller, then a decode-like one (batch-32 steps gathering top-8 of 64 random experts from a
2.1 GB pool 12 times per step: ~10 GB of HBM traffic per step) under the decode lane's controller. The controller runs in shadow mode: DryRunActuator over a read-only NVML proxy
(any setter raises before it reaches the driver), guard signals from exact per-step latencies of the
workload, SLOs set from the first seconds of each phase. Recorded: NVML telemetry every 100 ms
(NvmlSampler), energy counter vs integrated power per phase, the intents, each tick's duration
(controller + actuator overhead) and the achieved loop period, and an attestation before and after
the run that the enforced/requested power limit, the locked-clocks reason bit and the application
clocks are untouched. Writes ``DIR/power_shadow.json`` and prints a summary. Exits 1 if the
attestation changed or a setter was reached.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path

import numpy as np

from gpufield.power.actuators.dryrun import ReadOnlyNvml
from gpufield.power.config import GuardConfig
from gpufield.power.controller import LaneLimits
from gpufield.power.shadow import (
    LatencyWindowSource,
    attest,
    attestation_unchanged,
    run_shadow,
    shadow_plan,
)
from gpufield.power.twin.gpu import load_gpu_model
from gpufield.power.types import Lane
from gpufield.telemetry.nvml import NvmlReader
from gpufield.telemetry.sampler import NvmlSampler, energy_cross_check


def _workload(phase: str, stop: threading.Event, src: LatencyWindowSource, fake, device: str) -> None:
    """Run ``phase`` until ``stop``; record each step's latency in ``src``."""
    import torch

    torch.manual_seed(0)
    cuda = device == "cuda"
    dt = torch.bfloat16 if cuda else torch.float32
    if phase == "prefill":
        d, ff, tokens, layers = (8192, 28672, 8192, 4) if cuda else (256, 512, 256, 2)
        w = [(torch.randn(d, 3 * d, device=device, dtype=dt) * 0.01, torch.randn(d, ff, device=device, dtype=dt) * 0.01,
              torch.randn(ff, d, device=device, dtype=dt) * 0.01) for _ in range(layers)]
        x0 = torch.randn(tokens, d, device=device, dtype=dt)
        if fake is not None:
            fake.set_load(0, 0.95)
        while not stop.is_set():
            t0 = time.perf_counter()
            x = x0
            for wqkv, w1, w2 in w:
                qkv = x @ wqkv
                x = x + torch.relu((qkv[:, :d] + x) @ w1) @ w2 * 0.01
            if cuda:
                torch.cuda.synchronize()
            src.record(Lane.PREFILL, time.perf_counter() - t0, 1)
    else:
        n_exp, d, ff, batch = (64, 4096, 2048, 32) if cuda else (16, 128, 256, 8)
        experts = torch.randn(n_exp, 2, d, ff, device=device, dtype=dt) * 0.01  # 2.1 GB for 64 experts
        reps = 12 if cuda else 1  # 12 "layers" gather from the pool each step
        x = torch.randn(batch, d, device=device, dtype=dt)
        if fake is not None:
            fake.set_load(0, 0.55)
        gen = torch.Generator(device="cpu").manual_seed(1)
        while not stop.is_set():
            t0 = time.perf_counter()
            h = x
            for _ in range(reps):
                idx = torch.randint(0, n_exp, (8,), generator=gen)  # top-8 experts of this step
                e = experts[idx.to(device)]
                h = h + torch.einsum("bd,edf->bf", h, e[:, 0]) @ e[:, 1].mean(0).T * 1e-3
            if cuda:
                torch.cuda.synchronize()
            src.record(Lane.DECODE, time.perf_counter() - t0, batch)
        del experts
    if fake is not None:
        fake.set_load(0, 0.0)


def _phase(nvml, lane: Lane, phase: str, args, fake, device, plan, out: Path) -> dict:
    src = LatencyWindowSource(fast_s=10.0, slow_s=60.0)
    stop = threading.Event()
    th = threading.Thread(target=_workload, args=(phase, stop, src, fake, device), daemon=True)
    ro = ReadOnlyNvml(nvml)
    with NvmlReader(nvml=ro) as reader, NvmlSampler(reader, interval_s=args.sample_s) as sampler:
        th.start()
        time.sleep(args.warmup_s)  # SLOs from the phase's own first seconds (shadow: no real SLO here)
        base = src.signals(lane)
        p99 = base.itl_p99_fast_s if lane is Lane.DECODE else base.ttft_p99_fast_s
        slo = float(p99 * args.slo_factor) if np.isfinite(p99) else 1.0
        guard = GuardConfig(itl_p99_slo_s=slo, ttft_p99_slo_s=slo, period_s=args.period_s, dwell_s=10.0,
                            relax_s=30.0, queue_s=5.0)
        gpu = plan["model"]
        lim = LaneLimits(default_limit_w=gpu.tdp_w, max_clock_mhz=gpu.sm_clock_max_mhz, step_w=25.0,
                         clock_step_mhz=90.0)
        t0 = time.perf_counter()
        t_loop_ns = time.time_ns()  # samples from here on are the steady part of the phase
        ticks, intents = run_shadow(nvml=ro, lane=lane, setting=plan[lane], guard=guard, limits=lim, source=src,
                                    duration_s=args.phase_s - args.warmup_s, period_s=args.period_s,
                                    log_path=str(out / f"intents_{phase}.jsonl"))
        wall = time.perf_counter() - t0
        stop.set()
        th.join(timeout=60)
        samples = sampler.samples
    starts = np.array([t.t_s for t in ticks])
    dur = np.array([t.duration_s for t in ticks])
    per = np.diff(starts) if len(starts) > 1 else np.array([np.nan])
    steps = [v for _t, v, _w in src._q[lane]]
    checks = []
    for idx in sorted({s.index for s in samples}):
        try:
            c = energy_cross_check(samples, index=idx)
            checks.append({"index": idx, "counter_j": c.counter_j, "integrated_j": c.integrated_j,
                           "rel_diff": c.rel_diff, "ok": c.ok, "duration_s": c.duration_s})
        except Exception as e:  # report, do not hide
            checks.append({"index": idx, "error": str(e)})
    tel = [{"t_s": s.ts_ns * 1e-9, "index": s.index, "power_w": s.power_w, "energy_j": s.energy_j,
            "sm_clock_mhz": None if s.sm_clock_hz is None else s.sm_clock_hz / 1e6,
            "mem_clock_mhz": None if s.mem_clock_hz is None else s.mem_clock_hz / 1e6,
            "reasons": list(s.clock_event_reason_names), "enforced_limit_w": s.enforced_power_limit_w,
            "violation_power_s": s.violation_power_s} for s in samples]
    pw = np.array([s["power_w"] for s in tel if s["power_w"] is not None] or [np.nan])
    sm = np.array([s["sm_clock_mhz"] for s in tel if s["sm_clock_mhz"] is not None] or [np.nan])
    # the sampler starts before the workload: its first samples still show the previous phase (the
    # H200 run's decode phase listed 'sw_power_cap' from 5 samples of prefill tail); report the
    # steady part (after the warm-up) separately
    steady = [s for s in tel if s["t_s"] >= t_loop_ns * 1e-9]
    reason_share = {r: sum(r in s["reasons"] for s in steady) / max(1, len(steady))
                    for r in sorted({r for s in steady for r in s["reasons"]})}
    pw_st = np.array([s["power_w"] for s in steady if s["power_w"] is not None] or [np.nan])
    sm_st = np.array([s["sm_clock_mhz"] for s in steady if s["sm_clock_mhz"] is not None] or [np.nan])
    return {
        "phase": phase, "lane": lane.value, "plan": plan[lane].label, "slo_s": slo,
        "steps": len(steps), "step_p50_s": float(np.median(steps)) if steps else None,
        "step_p99_s": float(np.percentile(steps, 99)) if steps else None,
        "ticks": len(ticks), "loop_wall_s": wall, "period_target_s": args.period_s,
        "period_mean_s": float(np.nanmean(per)), "period_max_s": float(np.nanmax(per)),
        "tick_overhead_p50_ms": float(np.median(dur) * 1e3), "tick_overhead_max_ms": float(dur.max() * 1e3),
        "intents": intents, "tick_settings": [t.settings for t in ticks], "tick_errors": [t.error for t in ticks if t.error],
        "power_w_median": float(np.nanmedian(pw)), "sm_clock_mhz_median": float(np.nanmedian(sm)),
        "reasons_seen": sorted({r for s in tel for r in s["reasons"]}), "energy_check": checks,
        "steady_samples": len(steady), "power_w_median_steady": float(np.nanmedian(pw_st)),
        "sm_clock_mhz_median_steady": float(np.nanmedian(sm_st)), "reason_share_steady": reason_share,
        "telemetry": tel,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="output directory (created)")
    ap.add_argument("--fake-nvml", action="store_true", help="CPU run against gpufield.testing.FakeNvml")
    ap.add_argument("--phase-s", type=float, default=45.0)
    ap.add_argument("--warmup-s", type=float, default=8.0)
    ap.add_argument("--period-s", type=float, default=1.0, help="control period (s)")
    ap.add_argument("--sample-s", type=float, default=0.1, help="NVML sampling period (s)")
    ap.add_argument("--slo-factor", type=float, default=1.3, help="SLO = factor x warm-up p99")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t_start = time.perf_counter()
    fake = None
    if args.fake_nvml:
        from gpufield.testing import FakeNvml, h200

        fake = FakeNvml([h200(0)], read_only=True, clock=time.monotonic)
        nvml, device = fake, "cpu"
    else:
        import pynvml
        import torch

        nvml = pynvml
        device = "cuda" if torch.cuda.is_available() else "cpu"
        if device != "cuda":
            print("no CUDA device: use --fake-nvml on CPU", file=sys.stderr)
            return 2
    nvml.nvmlInit()
    name = attest(nvml)
    gpu_name = next(iter(name.values()))["name"]
    try:
        model = load_gpu_model(gpu_name)
    except ValueError:
        model = load_gpu_model("H200")
    plan = {**shadow_plan(model), "model": model}
    before = attest(nvml)
    phases = [_phase(nvml, Lane.PREFILL, "prefill", args, fake, device, plan, out),
              _phase(nvml, Lane.DECODE, "decode", args, fake, device, plan, out)]
    after = attest(nvml)
    ok, diffs = attestation_unchanged(before, after)
    setters = [c for c in getattr(fake, "setter_calls", [])]
    nvml.nvmlShutdown()
    report = {"gpu": gpu_name, "fake_nvml": bool(fake), "device": device, "twin_model": model.name,
              "attest_before": before, "attest_after": after, "attestation_unchanged": ok,
              "attestation_diffs": diffs, "setter_calls": setters, "phases": phases,
              "elapsed_s": time.perf_counter() - t_start}
    (out / "power_shadow.json").write_text(json.dumps(report, indent=1, default=str))
    print(f"power shadow run on {gpu_name} ({'fake NVML' if fake else 'real NVML, read-only'}), "
          f"{report['elapsed_s']:.0f} s")
    for p in phases:
        e = next((c for c in p["energy_check"] if "rel_diff" in c), {})
        print(f"  {p['phase']:7s} plan {p['plan']}: {p['steps']} steps p50 {p['step_p50_s'] * 1e3:.1f} ms "
              f"p99 {p['step_p99_s'] * 1e3:.1f} ms | steady {p['power_w_median_steady']:.0f} W @ "
              f"{p['sm_clock_mhz_median_steady']:.0f} MHz reasons "
              f"{ {r: round(v, 2) for r, v in p['reason_share_steady'].items()} } | ticks {p['ticks']} period {p['period_mean_s']:.3f} s "
              f"(max {p['period_max_s']:.3f}) overhead p50 {p['tick_overhead_p50_ms']:.2f} ms "
              f"max {p['tick_overhead_max_ms']:.2f} ms | intents {len(p['intents'])} | energy counter vs "
              f"integral {e.get('rel_diff', float('nan')) * 100:+.1f}%")
    for uuid, b in before.items():
        a = after[uuid]
        print(f"  {uuid}: enforced {b['enforced_limit_w']:.0f} -> {a['enforced_limit_w']:.0f} W, "
              f"locked-clock bit {b['locked_clocks_bit']} -> {a['locked_clocks_bit']}, "
              f"app clock {b['app_sm_clock_mhz']} -> {a['app_sm_clock_mhz']}")
    print(f"  attestation unchanged: {ok} {diffs if diffs else ''}; setter calls: {len(setters)}")
    return 0 if ok and not setters else 1


if __name__ == "__main__":
    sys.exit(main())
