"""Emulated FP64 3-D FFT on one GPU: self-check, then time/error per backend and variant next to cuFFT.

Run from the source tree on a machine with one H200 (torch >= 2.11 + CUDA, Triton, numpy, mpmath):

    PYTHONPATH=src python3 benchmarks/fp64_fft_gpu.py --out DIR

Dry run on CPU (8^3 and 16^3, Triton interpreter, torch.fft as the native baseline; slow, minutes):

    PYTHONPATH=src python3 benchmarks/fp64_fft_gpu.py --out DIR --device cpu --small

What it does, in order (JSON rewritten to DIR/fp64_fft_gpu.json after every step, so an interrupted
run keeps its partial results; a summary is printed at the end):

1. self-check: on (8, 16, 64) and (4, 1024) inputs ((2, 4, 64) with --small) with a wide exponent spread, every GPU
   backend (int8, fp8) x reconstruction variant (garner, crt, kulisch) with the fused Triton
   epilogue, and int8/crt with the torch epilogue, must equal the exact CPU reference
   (``backend="cpu"`` on CPU tensors) bit for bit; the CPU reference itself must be within numpy's
   error of a long-double DFT. Any mismatch exits with status 1 before anything is timed.
2. copy bandwidth (8 GiB on GPU) and the Triton epilogue alone on 2^24 complex outputs per variant:
   the measured c_epi = t_epi * P_INT32 / real outputs (P_INT32 from the telemetry catalogue; an
   upper bound on instructions when the kernel is memory-bound, so the kernel's HBM bytes and
   their copy-bandwidth time are reported next to it), and a static PTX instruction count per
   output (the kernel has no dynamic loops, so static ~ dynamic; PTX, not SASS).
3. sizes 256^3, 512^3, 1024^3 (1024^3 skipped if GPU memory or the time budget do not allow; the
   JSON says why): cuFFT Z2Z (torch.fft.fftn, complex128) and our transform per backend x variant,
   time (CUDA events, after warm-up) and error; the INT8 backend also with g = 4 and 8 moduli per
   block-diagonal GEMM (``int8_group``; run first, being the expected fastest). Errors: (a) a rank-1 input x = u (x) v (x) w of
   17-bit integers (exact in float64) whose exact DFT U (x) V (x) W is known: rel. L2 on 2^18 sampled
   outputs against a long-double reference, for ours and cuFFT; (b) random Gaussian input: rel.
   L2 difference to cuFFT; round trip (256^3, 512^3) ifft(fft(x)) - x for ours and cuFFT.
4. the floor model's H200 prediction per size (spec bandwidth and the measured copy bandwidth,
   c_epi = 203/281 and the measured c_epi) next to the measured time.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

VARIANTS = ("garner", "crt", "kulisch")
BACKENDS = ("int8", "fp8")


def _now() -> float:
    return time.perf_counter()


class Run:
    """Collects results and rewrites the JSON after every step."""

    def __init__(self, out: Path, budget_s: float):
        self.out = out
        self.t0 = _now()
        self.budget_s = budget_s
        self.res: dict = {"meta": {}, "self_check": {}, "epilogue": {}, "sizes": {}, "skipped": []}

    def left(self) -> float:
        return self.budget_s - (_now() - self.t0)

    def save(self) -> None:
        self.res["meta"]["elapsed_s"] = _now() - self.t0
        (self.out / "fp64_fft_gpu.json").write_text(json.dumps(self.res, indent=1, default=str))


def _sync(dev: str) -> None:
    if dev == "cuda":
        torch.cuda.synchronize()


def _time(fn, dev: str, reps: int = 1) -> float:
    """Seconds per call (median of reps), after the caller's warm-up."""
    ts = []
    for _ in range(reps):
        _sync(dev)
        if dev == "cuda":
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            torch.cuda.synchronize()
            ts.append(a.elapsed_time(b) / 1e3)
        else:
            t = _now()
            fn()
            ts.append(_now() - t)
    return float(np.median(ts))


def self_check(run: Run, dev: str, small: bool) -> None:
    from gpufield.fp64.fft import EmulatedFftPlan, fftn_fp64_emulated
    from gpufield.fp64.fft.reference import dft_longdouble, rel_l2

    rng = np.random.default_rng(1)
    for shape in ((2, 4, 64),) if small else ((8, 16, 64), (4, 1024)):
        x = (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)) * np.exp(3 * rng.standard_normal(shape))
        ref = fftn_fp64_emulated(x)  # exact CPU path
        e_ref, e_np = rel_l2(ref, dft_longdouble(x)), rel_l2(np.fft.fftn(x), dft_longdouble(x))
        key = "x".join(map(str, shape))
        run.res["self_check"][key] = {"cpu_exact_rel_l2": e_ref, "numpy_rel_l2": e_np}
        if not e_ref <= e_np:
            sys.exit(f"SELF-CHECK FAILED: CPU exact path error {e_ref:.3e} > numpy {e_np:.3e} on {key}")
        xt = torch.from_numpy(x).to(dev)
        configs = [(b, v, "triton", 1) for b in BACKENDS for v in VARIANTS] + [("int8", "crt", "torch", 1),
                                                                            ("int8", "crt", "triton", 8)]
        for b, v, epi, grp in configs:
            plan = EmulatedFftPlan(backend=b, variant=v, epilogue=epi, int8_group=grp)
            y = fftn_fp64_emulated(xt, plan).cpu().numpy()
            same = bool(np.array_equal(y.view(np.float64), ref.view(np.float64)))
            name = f"{b}/{v}/{epi}" + (f"/g{grp}" if grp > 1 else "")
            run.res["self_check"][key][name] = same
            if not same:
                n = int((y.view(np.float64) != ref.view(np.float64)).sum())
                run.save()
                sys.exit(f"SELF-CHECK FAILED: {name} differs from the exact CPU reference in {n} values on {key}")
        run.save()
    print("self-check passed: GPU backends x variants bit-identical to the exact CPU reference")


def epilogue_bench(run: Run, dev: str, n_out: int, p_int: float, copy_bw: float) -> None:
    from gpufield.fp64.fft import auto_num_moduli
    from gpufield.fp64.fft.epilogue import epilogue_tables
    from gpufield.fp64.kernels.fft_epilogue import epilogue_triton

    for kind, r in (("int8", auto_num_moduli("int8")), ("fp8", auto_num_moduli("fp8"))):
        tab = epilogue_tables(kind, r)
        g = torch.Generator(device=dev).manual_seed(0)
        T = torch.randint(-(2**20), 2**20, (r, 3, n_out), dtype=torch.int32, device=dev, generator=g)
        shift = torch.full((n_out,), 100, dtype=torch.int64, device=dev)
        for v in VARIANTS:
            epilogue_triton(T, shift, tab, v)  # compile / warm
            t = _time(lambda v=v, T=T, shift=shift, tab=tab: epilogue_triton(T, shift, tab, v), dev,
                      reps=3 if dev == "cuda" else 1)
            nbytes = n_out * (r * 3 * 4 + 8 + 16)
            rec = {"outputs_complex": n_out, "time_s": t, "ns_per_real_output": t / (2 * n_out) * 1e9,
                   "c_epi_measured": t * p_int / (2 * n_out), "hbm_bytes": nbytes,
                   "copy_bw_time_s": nbytes / copy_bw if copy_bw else None}
            try:  # static PTX count of the compiled kernel (no dynamic loops in it: static ~ dynamic)
                from gpufield.fp64.kernels.fft_epilogue import COMPILED

                ck = COMPILED[(kind, r, v)]
                ptx = ck.asm.get("ptx", "") if hasattr(ck, "asm") else ""
                n_instr = sum(1 for ln in ptx.splitlines()
                              if ln.strip()[:1].isalpha() or ln.strip()[:1] == "@")
                warps = ck.metadata.num_warps
                rec["ptx_instr_per_thread"] = n_instr
                rec["c_epi_ptx_static"] = n_instr * 32 * warps / (2 * 128) if n_instr else None
            except Exception as e:  # noqa: BLE001 - diagnostics only
                rec["ptx_error"] = repr(e)
            if dev == "cuda" and kind == "int8" and v == "crt":
                # launch-shape sweep (BLOCK outputs per program, warps): same bits, tells whether the
                # default (128, 4) leaves the kernel latency/occupancy bound
                sweep = {}
                for blk, nw in ((64, 4), (128, 8), (256, 8), (32, 2)):
                    try:
                        def f(v=v, T=T, shift=shift, tab=tab, blk=blk, nw=nw):
                            return epilogue_triton(T, shift, tab, v, block=blk, num_warps=nw)

                        f()
                        sweep[f"block{blk}_warps{nw}"] = _time(f, dev, reps=3)
                    except Exception as e:  # noqa: BLE001 - diagnostics only (e.g. out of registers)
                        sweep[f"block{blk}_warps{nw}"] = repr(e)[:200]
                sweep["block128_warps4"] = t
                rec["launch_sweep_time_s"] = sweep
            run.res["epilogue"][f"{kind}{r}/{v}"] = rec
            run.save()
        del T


def rank1_input(n: int, dev: str, seed: int):
    rng = np.random.default_rng(seed)
    vecs = [rng.integers(-(2**17), 2**17, n) + 1j * rng.integers(-(2**17), 2**17, n) for _ in range(3)]
    # complex 17-bit integers: each real product component has < 2^53 magnitude only for 2 factors;
    # use real integers for two factors so x = u v w is exact in float64 (|x| < 2^52).
    vecs[1], vecs[2] = vecs[1].real.astype(complex), vecs[2].real.astype(complex)
    u, v, w = (torch.from_numpy(a).to(dev) for a in vecs)
    x = u[:, None, None] * v[None, :, None] * w[None, None, :]
    from gpufield.fp64.fft.reference import dft_longdouble

    return x, [dft_longdouble(a) for a in vecs]


def sampled_rel_err(y: torch.Tensor, refs, n: int, n_samples: int, seed: int) -> float:
    U, V, W = refs
    rng = np.random.default_rng(seed)
    k = rng.integers(0, n, (3, n_samples))
    idx = torch.from_numpy(k[0] * n * n + k[1] * n + k[2]).to(y.device)
    ys = y.reshape(-1)[idx].cpu().numpy().astype(np.clongdouble)
    ref = U[k[0]] * V[k[1]] * W[k[2]]
    d = ys - ref
    return float(np.sqrt(np.sum(np.abs(d) ** 2) / np.sum(np.abs(ref) ** 2)))


def _one_config(b, v, epi, grp, chunk, x, xr, refs, n, round_trip, dev) -> dict:
    """Time and errors of one backend/variant/epilogue/group configuration (see size_bench)."""
    from gpufield.fp64.fft import EmulatedFftPlan, fftn_fp64_emulated, ifftn_fp64_emulated

    plan = EmulatedFftPlan(backend=b, variant=v, epilogue=epi, int8_group=grp,
                           chunk_outputs=chunk if epi == "triton" else chunk // 4)
    t0 = _now()
    y = fftn_fp64_emulated(x, plan)
    _sync(dev)
    first = _now() - t0
    r = {"first_call_s": first}
    r["rank1_rel_l2"] = sampled_rel_err(y, refs, n, 2**18, 1)
    del y
    r["time_s"] = _time(lambda plan=plan, x=x: fftn_fp64_emulated(x, plan), dev) if n < 1024 else first
    yr = fftn_fp64_emulated(xr, plan)
    yc = torch.fft.fftn(xr)
    r["random_rel_l2_vs_cufft"] = float(torch.linalg.vector_norm(yr - yc) / torch.linalg.vector_norm(yc))
    del yc
    if round_trip and v == "crt":
        back = ifftn_fp64_emulated(yr, plan)
        r["round_trip_rel_l2"] = float(torch.linalg.vector_norm(back - xr) / torch.linalg.vector_norm(xr))
        del back
    del yr
    return r


def size_bench(run: Run, dev: str, n: int, budget_guard: dict) -> None:
    rec: dict = {"n": n, "points": n**3}
    run.res["sizes"][str(n)] = rec
    x, refs = rank1_input(n, dev, n)
    native = lambda x=x: torch.fft.fftn(x)  # noqa: E731
    yc = native()
    rec["cufft_time_s"] = _time(native, dev, reps=3)
    rec["cufft_rank1_rel_l2"] = sampled_rel_err(yc, refs, n, 2**18, 1)
    del yc
    g = torch.Generator(device=dev).manual_seed(n)
    xr = torch.complex(torch.randn((n,) * 3, generator=g, device=dev, dtype=torch.float64),
                       torch.randn((n,) * 3, generator=g, device=dev, dtype=torch.float64))
    round_trip = n <= 512
    if round_trip:
        rec["cufft_round_trip_rel_l2"] = float(torch.linalg.vector_norm(torch.fft.ifftn(torch.fft.fftn(xr)) - xr)
                                               / torch.linalg.vector_norm(xr))
    run.save()
    chunk = 1 << 25 if dev == "cuda" else 1 << 16
    configs = [("int8", "crt", "triton", 8), ("int8", "crt", "triton", 4)]
    configs += [(b, v, "triton", 1) for b in BACKENDS for v in VARIANTS]
    if n <= 256:
        configs.append(("int8", "crt", "torch", 1))
    for b, v, epi, grp in configs:
        key = f"{b}/{v}" + ("/torch-epilogue" if epi == "torch" else "") + (f"/g{grp}" if grp > 1 else "")
        # first call + timed call + random-input call (+ inverse for the round trip), scaled from the
        # warm per-call time at the previous size, 20% margin
        calls = 4 if round_trip and v == "crt" else 3
        est = calls * 1.2 * budget_guard.get(key, 0.0) * (n / budget_guard.get("n", n)) ** 3
        if est > run.left():
            run.res["skipped"].append(f"{n}^3 {key}: projected {est:.0f} s > {run.left():.0f} s left")
            continue
        try:
            r = _one_config(b, v, epi, grp, chunk, x, xr, refs, n, round_trip, dev)
        except Exception as e:  # noqa: BLE001 - record (e.g. out of memory) and go on
            rec[key] = {"error": repr(e)[:500]}
            run.res["skipped"].append(f"{n}^3 {key}: {type(e).__name__}")
            if dev == "cuda":
                torch.cuda.empty_cache()
            run.save()
            continue
        r["x_cufft"] = r["time_s"] / rec["cufft_time_s"]
        rec[key] = r
        budget_guard[key] = r["time_s"]  # warm per-call time (the first call includes compilation)
        budget_guard["n"] = n
        if dev == "cuda":
            torch.cuda.empty_cache()
        run.save()
        print(f"  {n}^3 {key}: {r['time_s'] * 1e3:.1f} ms ({r['x_cufft']:.1f}x cuFFT), "
              f"rank-1 err {r['rank1_rel_l2']:.2e} (cuFFT {rec['cufft_rank1_rel_l2']:.2e})")
    del x, xr


def _phase_of(name: str) -> str:
    name = name.lower()
    if "fft_epilogue" in name:
        return "epilogue (triton)"
    if "scale_residue" in name:
        return "scaling+residues (triton)"
    if any(w in name for w in ("gemm", "int_mm", "scaled_mm", "sm90", "cutlass", "xmma", "imma", "s8s32")):
        return "tensor-core GEMMs"
    if any(w in name for w in ("reduce", "amax", "abs", "frexp", "isfinite", "max")):
        return "row shifts + isfinite (torch reductions/elementwise)"
    if "copy" in name or "memcpy" in name or "transpose" in name or "cat" in name:
        return "copies/transposes"
    if "memset" in name or "fill" in name:
        return "memset/fill"
    return "other elementwise"


def phase_breakdown(run: Run, dev: str, n: int) -> None:
    """GPU time per phase (torch.profiler kernel times) of one n^3 transform, plus kernel launches and the
    wall time of the same call, for int8/crt (g = 1 and 8) and fp8/crt.

    wall - sum(kernel times) is the time the GPU sat idle: Python loops over groups/chunks/moduli, launch
    latency and host syncs (the stage's isfinite check). Kernel names per phase are kept in the JSON.
    """
    from torch.profiler import ProfilerActivity, profile

    from gpufield.fp64.fft import EmulatedFftPlan, fftn_fp64_emulated

    g = torch.Generator(device=dev).manual_seed(3)
    x = torch.complex(torch.randn((n,) * 3, generator=g, device=dev, dtype=torch.float64),
                      torch.randn((n,) * 3, generator=g, device=dev, dtype=torch.float64))
    out = {}
    for b, grp in (("int8", 1), ("int8", 8), ("fp8", 1)):
        key = f"{b}/crt" + (f"/g{grp}" if grp > 1 else "")
        plan = EmulatedFftPlan(backend=b, variant="crt", epilogue="triton", int8_group=grp, chunk_outputs=1 << 25)
        fftn_fp64_emulated(x, plan)
        torch.cuda.synchronize()
        t0 = _now()
        fftn_fp64_emulated(x, plan)
        torch.cuda.synchronize()
        wall = _now() - t0
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fftn_fp64_emulated(x, plan)
            torch.cuda.synchronize()
        phases: dict = {}
        launches: dict = {}
        names: dict = {}
        for ev in prof.key_averages():
            if str(getattr(ev, "device_type", "")).endswith("CPU"):
                continue
            t = getattr(ev, "self_device_time_total", None)
            if t is None:
                t = getattr(ev, "self_cuda_time_total", 0.0)
            if not t:
                continue
            ph = _phase_of(ev.key)
            phases[ph] = phases.get(ph, 0.0) + t / 1e6
            launches[ph] = launches.get(ph, 0) + int(ev.count)
            names.setdefault(ph, []).append([ev.key[:80], int(ev.count), round(t / 1e6, 6)])
        busy = sum(phases.values())
        out[key] = {"phases_s": {k: round(v, 6) for k, v in sorted(phases.items())},
                    "launches": launches, "kernel_launches_total": sum(launches.values()),
                    "gpu_busy_s": busy, "wall_s": wall, "idle_s": wall - busy,
                    "kernels": {k: sorted(v, key=lambda e: -e[2])[:8] for k, v in names.items()}}
        run.res["phases_s"] = {f"{n}^3": out}
        run.save()
        print(f"  phases {n}^3 {key}: wall {wall * 1e3:.1f} ms, GPU busy {busy * 1e3:.1f} ms, "
              f"{sum(launches.values())} kernel launches")
        for ph, t in sorted(phases.items(), key=lambda kv: -kv[1]):
            print(f"     {ph:52s} {t * 1e3:8.1f} ms  {launches[ph]:6d} launches")
    del x


def model_predictions(run: Run, sizes, copy_bw: float) -> None:
    try:
        from gpufield.fp64.model import fft_floor_model
    except Exception as e:  # noqa: BLE001
        run.res["model_error"] = repr(e)
        return
    cm = [rec["c_epi_measured"] for k, rec in run.res["epilogue"].items() if k.startswith("int8")]
    out = {}
    for n in sizes:
        m = fft_floor_model("H200", n=n)
        mm = fft_floor_model("H200", n=n, hbm_bandwidth_bytes_per_s=copy_bw, c_epi=[203, 281] + cm) if copy_bw else None
        out[str(n)] = {"spec": m.to_dict(), "measured_bw_and_c_epi": mm.to_dict() if mm else None}
    run.res["model_h200"] = out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--small", action="store_true", help="sizes 8^3, 16^3 and a smaller self-check (dry run)")
    ap.add_argument("--budget-s", type=float, default=None,
                    help="wall-clock budget of the whole run (default 200 s on CUDA, unlimited on CPU)")
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    dev = a.device
    if dev == "cuda" and not torch.cuda.is_available():
        sys.exit("--device cuda but no CUDA device; use --device cpu --small for a dry run")
    if dev == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")
    run = Run(a.out, a.budget_s if a.budget_s is not None else (200.0 if dev == "cuda" else float("inf")))
    from gpufield.telemetry import gpu_spec

    p_int = gpu_spec("H200").int32_ops_per_s
    run.res["meta"] = {"torch": torch.__version__, "device": torch.cuda.get_device_name() if dev == "cuda" else "cpu",
                       "p_int32_instr_per_s": p_int, "argv": sys.argv}
    run.save()
    self_check(run, dev, a.small)
    copy_bw = None
    if dev == "cuda":
        src = torch.empty(2**30, dtype=torch.float64, device=dev)
        dst = torch.empty_like(src)
        dst.copy_(src)
        t = _time(lambda: dst.copy_(src), dev, reps=5)
        copy_bw = 2 * src.numel() * 8 / t
        del src, dst
        run.res["meta"]["copy_bw_bytes_per_s"] = copy_bw
    epilogue_bench(run, dev, 1 << 24 if dev == "cuda" else 1 << 10, p_int, copy_bw or 0.0)
    sizes = (8, 16) if a.small else (256, 512, 1024)
    guard: dict = {}
    for n in sizes:
        if dev == "cuda":
            torch.cuda.empty_cache()
            free, _ = torch.cuda.mem_get_info()
            need = 16 * n**3 * 7  # input, random input, outputs, transposes + chunk workspace
            if need > free:
                run.res["skipped"].append(f"{n}^3: needs ~{need / 2**30:.0f} GiB, {free / 2**30:.0f} GiB free")
                continue
        size_bench(run, dev, n, guard)
        if dev == "cuda" and n == sizes[0]:
            try:
                phase_breakdown(run, dev, n)
            except Exception as e:  # noqa: BLE001 - diagnostics only
                run.res["phases_error"] = repr(e)
    model_predictions(run, sizes, copy_bw or 0.0)
    run.save()
    print_summary(run)


def print_summary(run: Run) -> None:
    r = run.res
    print(f"\n== emulated FP64 FFT on {r['meta']['device']} (torch {r['meta']['torch']}) ==")
    if r["meta"].get("copy_bw_bytes_per_s"):
        print(f"copy bandwidth {r['meta']['copy_bw_bytes_per_s'] / 1e12:.3f} TB/s")
    for k, e in r["epilogue"].items():
        print(f"epilogue {k}: {e['ns_per_real_output']:.3f} ns/real output -> c_epi {e['c_epi_measured']:.0f} "
              f"(memory-bound time {e['copy_bw_time_s'] or 0:.2e} s vs {e['time_s']:.2e} s)")
    for n, s in r["sizes"].items():
        print(f"{n}^3: cuFFT {s['cufft_time_s'] * 1e3:.2f} ms, rank-1 err {s['cufft_rank1_rel_l2']:.2e}")
        for k, v in s.items():
            if isinstance(v, dict) and "error" in v:
                print(f"   {k:14s} ERROR {v['error'][:120]}")
            elif isinstance(v, dict):
                print(f"   {k:14s} {v['time_s'] * 1e3:9.1f} ms  x{v['x_cufft']:.1f}  err {v['rank1_rel_l2']:.2e}  "
                      f"vs cuFFT {v['random_rel_l2_vs_cufft']:.2e}")
        m = r.get("model_h200", {}).get(n)
        if m:
            sp = m["spec"]
            print(f"   model H200: roof {sp['roof_s'] * 1e3:.2f} ms, emulated {sp['emulated_s'][0] * 1e3:.1f}-"
                  f"{sp['emulated_s'][1] * 1e3:.1f} ms (c_epi 203-281)")
    for sz, ph in r.get("phases_s", {}).items():
        for k, v in ph.items():
            print(f"phases {sz} {k}: wall {v['wall_s'] * 1e3:.1f} ms, GPU busy {v['gpu_busy_s'] * 1e3:.1f} ms, "
                  f"{v['kernel_launches_total']} launches; "
                  + ", ".join(f"{a} {b * 1e3:.1f} ms" for a, b in v["phases_s"].items()))
    for k, e in r["epilogue"].items():
        if "launch_sweep_time_s" in e:
            print(f"epilogue {k} launch sweep: " + ", ".join(
                f"{a} {b * 1e3:.2f} ms" if isinstance(b, float) else f"{a} {b[:40]}"
                for a, b in e["launch_sweep_time_s"].items()))
    if "phases_error" in r:
        print("phase breakdown failed:", r["phases_error"][:300])
    for s in r["skipped"]:
        print("skipped:", s)
    print(f"elapsed {r['meta']['elapsed_s']:.0f} s; JSON in {run.out / 'fp64_fft_gpu.json'}")


if __name__ == "__main__":
    main()
