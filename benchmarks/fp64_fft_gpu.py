"""Emulated FP64 3-D FFT on one GPU: self-check, then time/error per backend and variant next to cuFFT.

Run from the source tree on a machine with one H200 (torch >= 2.11 + CUDA, Triton, numpy, mpmath):

    PYTHONPATH=src python3 benchmarks/fp64_fft_gpu.py --out DIR --budget-s 400

Dry run on CPU (4^3 all configurations, 8^3 the g = 8 ones, 16^3 as the "big" size; Triton interpreter,
torch.fft as the native baseline; about 10 minutes on 2 cores):

    PYTHONPATH=src python3 benchmarks/fp64_fft_gpu.py --out DIR --device cpu --small

What it does, in order (JSON rewritten to DIR/fp64_fft_gpu.json after every step, so an interrupted
run keeps its partial results; a summary is printed at the end):

1. self-check: on (8, 16, 64) and (4, 1024) inputs ((2, 4, 64) with --small) with a wide exponent spread,
   every GPU backend (int8, fp8) x reconstruction variant (garner, crt, kulisch) with the fused Triton
   epilogue, int8/crt with the torch epilogue, and int8 g = 8 (crt and kulisch, also with small chunks
   that span stage-2 groups; cuBLAS, Triton (/tgemm), fused (/fused) and fully fused (/fusedepi: residues,
   GEMMs and epilogue in one launch) stage GEMMs) must equal the exact
   CPU reference (``backend="cpu"`` on CPU tensors) bit for bit; the CPU reference itself must be within
   numpy's error of a long-double DFT. Any mismatch exits with status 1 before anything is timed, except
   on the optional Triton stage GEMMs: those are then left out of the timing and the run exits with 1.
2. copy bandwidth (8 GiB on GPU) and the Triton epilogue alone on 2^24 complex outputs per variant
   (c_epi = t_epi * P_INT32 / real outputs, PTX count, launch-shape sweep).
3. 256^3: cuFFT Z2Z (torch.fft.fftn, complex128) and every configuration (g = 8 first), time (CUDA
   events, after warm-up) and errors; then the per-phase profile of int8 crt/kulisch g8 (cuBLAS), kulisch
   g8 /tgemm, /fused and /fusedepi, and crt g1.
4. 512^3: the g = 8 configurations; then 1024^3 for the fastest of them (predicted as 8x its 512^3
   time; skipped with the reason in the JSON if the budget or memory do not allow); then the other
   512^3 configurations while the budget lasts.
5. next to every measurement: the floor model's H200 prediction (spec bandwidth, c_epi 203-281) and the
   c_epi the measurement implies (time * P_INT32 / the model's real outputs, 12 n^3).

Errors: (a) a rank-1 input x = u (x) v (x) w of 17-bit integers (exact in float64) whose exact DFT
U (x) V (x) W is known: rel. L2 on 2^18 sampled outputs against a long-double reference, for ours and
cuFFT (also at 1024^3); (b) random Gaussian input: rel. L2 difference to cuFFT; (c) round trip
ifft(fft(x)) - x for ours and cuFFT. At 1024^3 there is no full float64 reference (numpy on the host
would take too long): (a) on sampled outputs, (b) and (c) are the accuracy evidence.
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
        configs = [(b, v, "triton", 1, "cublas", None) for b in BACKENDS for v in VARIANTS]
        configs += [("int8", "crt", "torch", 1, "cublas", None), ("int8", "crt", "triton", 8, "cublas", None),
                    ("int8", "kulisch", "triton", 8, "cublas", None), ("int8", "kulisch", "triton", 8, "cublas", 1500),
                    ("int8", "crt", "triton", 1, "cublas", 1500),  # 1500-output chunks: partial stage-2 groups
                    ("int8", "kulisch", "triton", 8, "triton", None), ("int8", "crt", "triton", 8, "triton", 1500),
                    ("int8", "crt", "triton", 1, "triton", None), ("int8", "kulisch", "triton", 8, "fused", None),
                    ("int8", "crt", "triton", 8, "fused", 1500), ("int8", "crt", "triton", 1, "fused", None),
                    ("int8", "kulisch", "triton", 8, "fused_epi", None), ("int8", "crt", "triton", 8, "fused_epi", 1500),
                    ("int8", "crt", "triton", 1, "fused_epi", None)]
        for b, v, epi, grp, gemm, chunk in configs:
            name = _key(b, v, epi, grp, gemm) + (f"/chunk{chunk}" if chunk else "")
            optional = gemm != "cublas"
            try:
                plan = EmulatedFftPlan(backend=b, variant=v, epilogue=epi, int8_group=grp, int8_gemm=gemm,
                                       chunk_outputs=chunk)
                y = fftn_fp64_emulated(xt, plan).cpu().numpy()
            except Exception as e:  # noqa: BLE001 - only the optional Triton GEMM may fail here
                if not optional:
                    raise
                run.res["self_check"][key][name] = f"error: {e!r}"[:300]
                FAILED_OPTIONAL.append(name)
                FAILED_GEMMS.add(gemm)
                continue
            same = bool(np.array_equal(y.view(np.float64), ref.view(np.float64)))
            run.res["self_check"][key][name] = same
            if not same:
                n = int((y.view(np.float64) != ref.view(np.float64)).sum())
                run.save()
                if optional:
                    FAILED_OPTIONAL.append(name)
                    FAILED_GEMMS.add(gemm)
                    print(f"SELF-CHECK FAILED (optional path, excluded from timing): {name}: {n} values on {key}")
                    continue
                sys.exit(f"SELF-CHECK FAILED: {name} differs from the exact CPU reference in {n} values on {key}")
        run.save()
    if FAILED_GEMMS:
        CONFIGS[:] = [c for c in CONFIGS if c[4] not in FAILED_GEMMS]
    print("self-check passed: GPU backends x variants bit-identical to the exact CPU reference"
          + (f" (optional paths FAILED, not timed: {FAILED_OPTIONAL})" if FAILED_OPTIONAL else ""))


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


CONFIGS = [("int8", "kulisch", "triton", 8, "fused_epi"), ("int8", "crt", "triton", 8, "fused_epi"),
           ("int8", "kulisch", "triton", 8, "fused"), ("int8", "crt", "triton", 8, "fused"),
           ("int8", "kulisch", "triton", 8, "triton"), ("int8", "kulisch", "triton", 8, "cublas"),
           ("int8", "crt", "triton", 8, "triton"), ("int8", "crt", "triton", 8, "cublas"),
           ("int8", "kulisch", "triton", 4, "cublas"), ("int8", "crt", "triton", 4, "cublas")] + \
    [("int8", v, "triton", 1, "cublas") for v in VARIANTS] + [("fp8", v, "triton", 1, "cublas") for v in VARIANTS]
"""Timed configurations (backend, variant, epilogue, int8 group, int8 GEMM), expected fastest first; the
``/tgemm`` ones run all twiddle groups of a stage chunk in one Triton GEMM launch, the ``/fused`` ones also
compute the row shifts and residues in that launch (fft/gemm_triton.py), the ``/fusedepi`` ones also the
epilogue, on the dot accumulators in registers (fft/gemm_fused_epi.py: no int32 product planes)."""
FAILED_OPTIONAL: list[str] = []
"""Optional paths (Triton stage GEMMs) that failed the self-check: excluded from timing, exit status 1."""
FAILED_GEMMS: set[str] = set()


def _key(b: str, v: str, epi: str, grp: int, gemm: str = "cublas") -> str:
    return (f"{b}/{v}" + ("/torch-epilogue" if epi == "torch" else "") + (f"/g{grp}" if grp > 1 else "")
            + {"cublas": "", "triton": "/tgemm", "fused": "/fused", "fused_epi": "/fusedepi"}[gemm])


def _plan(b, v, epi, grp, gemm="cublas"):
    from gpufield.fp64.fft import EmulatedFftPlan

    return EmulatedFftPlan(backend=b, variant=v, epilogue=epi, int8_group=grp, int8_gemm=gemm)


def _rel_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    """||a - b|| / ||b|| over slices of the first axis (no full-size temporary; one sync)."""
    num = torch.zeros((), dtype=torch.float64, device=a.device)
    den = torch.zeros_like(num)
    step = max(1, a.shape[0] // 16)
    for i in range(0, a.shape[0], step):
        num += torch.linalg.vector_norm(a[i:i + step] - b[i:i + step]) ** 2
        den += torch.linalg.vector_norm(b[i:i + step]) ** 2
    return float(torch.sqrt(num / den))


def _event_time(fn, dev: str):
    """(result, seconds) of one call timed with CUDA events (wall clock on CPU)."""
    _sync(dev)
    if dev != "cuda":
        t = _now()
        out = fn()
        return out, _now() - t
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    out = fn()
    b.record()
    torch.cuda.synchronize()
    return out, a.elapsed_time(b) / 1e3


def _model(run: Run, n: int, t: float) -> dict:
    """The floor model's H200 prediction for n^3 and the c_epi a measured time t implies."""
    try:
        from gpufield.fp64.model import fft_floor_model

        m = fft_floor_model("H200", n=n)
    except Exception as e:  # noqa: BLE001 - the benchmark must not die on the model
        return {"model_error": repr(e)[:200]}
    return {"model_h200_s": list(m.emulated_s), "model_c_epi": list(m.c_epi),
            "c_epi_implied": t * m.int32_instr_per_s / m.real_outputs}


def _fmt_model(r: dict) -> str:
    if "model_h200_s" not in r:
        return ""
    lo, hi = r["model_h200_s"][0] * 1e3, r["model_h200_s"][-1] * 1e3
    return f" | model H200 {lo:.1f}-{hi:.1f} ms (c_epi 203-281), implied c_epi {r['c_epi_implied']:.0f}"


def _one_config(cfg, x, xr, refs, n, round_trip, dev) -> dict:
    """Time and errors of one backend/variant/epilogue/group configuration (see size_bench)."""
    from gpufield.fp64.fft import fftn_fp64_emulated, ifftn_fp64_emulated

    plan = _plan(*cfg)
    t0 = _now()
    y = fftn_fp64_emulated(x, plan)
    _sync(dev)
    r = {"first_call_s": _now() - t0}
    r["rank1_rel_l2"] = sampled_rel_err(y, refs, n, 2**18, 1)
    del y
    r["time_s"] = _time(lambda plan=plan, x=x: fftn_fp64_emulated(x, plan), dev)
    yr = fftn_fp64_emulated(xr, plan)
    yc = torch.fft.fftn(xr)
    r["random_rel_l2_vs_cufft"] = _rel_diff(yr, yc)
    del yc
    if round_trip and cfg[1] == "crt":
        back = ifftn_fp64_emulated(yr, plan)
        r["round_trip_rel_l2"] = _rel_diff(back, xr)
        del back
    del yr
    return r


def _inputs(run: Run, dev: str, n: int, rec: dict, round_trip: bool):
    x, refs = rank1_input(n, dev, n)
    yc, _ = _event_time(lambda: torch.fft.fftn(x), dev)  # also the warm-up (cuFFT plan)
    rec["cufft_time_s"] = _time(lambda: torch.fft.fftn(x), dev, reps=3)
    rec["cufft_rank1_rel_l2"] = sampled_rel_err(yc, refs, n, 2**18, 1)
    del yc
    g = torch.Generator(device=dev).manual_seed(n)
    xr = torch.complex(torch.randn((n,) * 3, generator=g, device=dev, dtype=torch.float64),
                       torch.randn((n,) * 3, generator=g, device=dev, dtype=torch.float64))
    if round_trip:
        rec["cufft_round_trip_rel_l2"] = _rel_diff(torch.fft.ifftn(torch.fft.fftn(xr)), xr)
    run.save()
    return x, refs, xr


def size_bench(run: Run, dev: str, n: int, guard: dict, configs, reserve_s: float = 0.0) -> None:
    """Time and errors of ``configs`` at n^3 (skipping those projected past the budget minus reserve_s)."""
    rec: dict = run.res["sizes"].setdefault(str(n), {"n": n, "points": n**3})
    round_trip = n <= 512
    x, refs, xr = _inputs(run, dev, n, rec, round_trip)
    for cfg in configs:
        key = _key(*cfg)
        v = cfg[1]
        # first call + timed call + random-input call (+ inverse for the round trip), scaled from the
        # warm per-call time at the smaller size, 20% margin
        calls = 4 if round_trip and v == "crt" else 3
        prev = guard.get(key)
        est = calls * 1.2 * prev[1] * (n / prev[0]) ** 3 if prev else 0.0
        if est > run.left() - reserve_s:
            run.res["skipped"].append(f"{n}^3 {key}: projected {est:.0f} s > {run.left() - reserve_s:.0f} s left")
            continue
        try:
            r = _one_config(cfg, x, xr, refs, n, round_trip, dev)
        except Exception as e:  # noqa: BLE001 - record (e.g. out of memory) and go on
            rec[key] = {"error": repr(e)[:500]}
            run.res["skipped"].append(f"{n}^3 {key}: {type(e).__name__}")
            if dev == "cuda":
                torch.cuda.empty_cache()
            run.save()
            continue
        r["x_cufft"] = r["time_s"] / rec["cufft_time_s"]
        r.update(_model(run, n, r["time_s"]))
        rec[key] = r
        guard[key] = (n, r["time_s"])  # warm per-call time (the first call includes compilation)
        if dev == "cuda":
            torch.cuda.empty_cache()
        run.save()
        print(f"  {n}^3 {key}: {r['time_s'] * 1e3:.1f} ms ({r['x_cufft']:.1f}x cuFFT), "
              f"rank-1 err {r['rank1_rel_l2']:.2e} (cuFFT {rec['cufft_rank1_rel_l2']:.2e}){_fmt_model(r)}",
              flush=True)
    del x, xr


def big_bench(run: Run, dev: str, n: int, key: str, guard: dict) -> None:
    """n^3 (1024^3 on the GPU) for one configuration, memory-careful: rank-1 input (sampled exact error,
    first call), then random input (warm time; rel. difference to cuFFT) and its inverse (round trip)."""
    from gpufield.fp64.fft import fftn_fp64_emulated, ifftn_fp64_emulated
    from gpufield.fp64.fft.memory import chunk_outputs_for, transform_peak_bytes

    cfg = next(c for c in CONFIGS if _key(*c) == key)
    prev = guard.get(key)
    pred = prev[1] * (n / prev[0]) ** 3 if prev else 0.0
    rec: dict = run.res["sizes"].setdefault(str(n), {"n": n, "points": n**3})
    rec["predicted_time_s"] = {key: pred, "from": f"{prev[0]}^3 x {(n / prev[0]) ** 3:.0f}" if prev else None}
    need_s = 3 * 1.2 * pred + 20
    if need_s > run.left():
        run.res["skipped"].append(f"{n}^3 {key}: projected {need_s:.0f} s > {run.left():.0f} s left")
        run.save()
        return
    plan = _plan(*cfg)
    if dev == "cuda":
        torch.cuda.empty_cache()
    try:
        x, refs, xr = _inputs(run, dev, n, rec, True)
        del xr  # made again below, after the rank-1 input is gone
        chunk = chunk_outputs_for(plan, (n,) * 3, torch.device(dev))  # what the transform will choose
        rec["memory"] = {"chunk_outputs": chunk, "peak_bytes_model": transform_peak_bytes((n,) * 3, plan, chunk)}
        if dev == "cuda":
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
        t0 = _now()
        y, t_first = _event_time(lambda x=x: fftn_fp64_emulated(x, plan), dev)
        r = {"first_call_s": _now() - t0, "first_call_event_s": t_first}
        if dev == "cuda":
            r["peak_bytes_measured_above_inputs"] = torch.cuda.max_memory_allocated() - base
        r["rank1_rel_l2"] = sampled_rel_err(y, refs, n, 2**18, 1)
        rec[key] = r
        run.save()
        del x, y
        g = torch.Generator(device=dev).manual_seed(n)
        xr = torch.complex(torch.randn((n,) * 3, generator=g, device=dev, dtype=torch.float64),
                           torch.randn((n,) * 3, generator=g, device=dev, dtype=torch.float64))
        yr, r["time_s"] = _event_time(lambda xr=xr: fftn_fp64_emulated(xr, plan), dev)
        r["x_cufft"] = r["time_s"] / rec["cufft_time_s"]
        r.update(_model(run, n, r["time_s"]))
        run.save()
        print(f"  {n}^3 {key}: {r['time_s'] * 1e3:.1f} ms (predicted {pred * 1e3:.0f} ms; {r['x_cufft']:.1f}x cuFFT "
              f"{rec['cufft_time_s'] * 1e3:.2f} ms), rank-1 err {r['rank1_rel_l2']:.2e} "
              f"(cuFFT {rec['cufft_rank1_rel_l2']:.2e}){_fmt_model(r)}", flush=True)
        yc = torch.fft.fftn(xr)
        r["random_rel_l2_vs_cufft"] = _rel_diff(yr, yc)
        del yc
        run.save()
        back, r["inverse_time_s"] = _event_time(lambda yr=yr: ifftn_fp64_emulated(yr, plan), dev)
        r["round_trip_rel_l2"] = _rel_diff(back, xr)
        del back, yr, xr
        print(f"  {n}^3 {key}: vs cuFFT {r['random_rel_l2_vs_cufft']:.2e}, round trip {r['round_trip_rel_l2']:.2e} "
              f"(cuFFT {rec['cufft_round_trip_rel_l2']:.2e})", flush=True)
    except Exception as e:  # noqa: BLE001 - record (e.g. out of memory) and go on
        rec.setdefault(key, {})["error"] = repr(e)[:500]
        run.res["skipped"].append(f"{n}^3 {key}: {type(e).__name__}")
    if dev == "cuda":
        torch.cuda.empty_cache()
    run.save()


def _phase_of(name: str) -> str:
    name = name.lower()
    if "fused_epi" in name:
        return "fused stage: residues + GEMMs + epilogue (triton)"
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
    latency and host syncs (one finiteness check per transform). Kernel names per phase are kept in the
    JSON, and the epilogue's c_epi (its kernel time x P_INT32 / 12 n^3 real outputs).
    """
    from torch.profiler import ProfilerActivity, profile

    from gpufield.fp64.fft import EmulatedFftPlan, fftn_fp64_emulated

    g = torch.Generator(device=dev).manual_seed(3)
    x = torch.complex(torch.randn((n,) * 3, generator=g, device=dev, dtype=torch.float64),
                      torch.randn((n,) * 3, generator=g, device=dev, dtype=torch.float64))
    out = {}
    for b, v, grp, gemm in (("int8", "crt", 8, "cublas"), ("int8", "kulisch", 8, "cublas"),
                            ("int8", "kulisch", 8, "triton"), ("int8", "kulisch", 8, "fused"), ("int8", "kulisch", 8, "fused_epi"),
                            ("int8", "crt", 1, "cublas")):
        key = _key(b, v, "triton", grp, gemm)
        if gemm in FAILED_GEMMS:
            continue
        if run.left() < 30:
            run.res["skipped"].append(f"phases {n}^3 {key}: budget")
            continue
        plan = EmulatedFftPlan(backend=b, variant=v, epilogue="triton", int8_group=grp, int8_gemm=gemm)
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
        epi = phases.get("epilogue (triton)", 0.0)
        out[key] = {"c_epi_epilogue_kernel": epi * run.res["meta"]["p_int32_instr_per_s"] / (12 * n**3),
                    **_model(run, n, wall), "phases_s": {k: round(v, 6) for k, v in sorted(phases.items())},
                    "launches": launches, "kernel_launches_total": sum(launches.values()),
                    "gpu_busy_s": busy, "wall_s": wall, "idle_s": wall - busy,
                    "kernels": {k: sorted(v, key=lambda e: -e[2])[:8] for k, v in names.items()}}
        run.res["phases_s"] = {f"{n}^3": out}
        run.save()
        print(f"  phases {n}^3 {key}: wall {wall * 1e3:.1f} ms, GPU busy {busy * 1e3:.1f} ms, "
              f"{sum(launches.values())} kernel launches; epilogue c_epi {out[key]['c_epi_epilogue_kernel']:.0f}"
              f"{_fmt_model(out[key])}", flush=True)
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


def _fits(run: Run, dev: str, n: int, arrays: int) -> bool:
    """Whether ``arrays`` complex128 n^3 arrays fit in the free GPU memory (always on CPU)."""
    if dev != "cuda":
        return True
    torch.cuda.empty_cache()
    free, _ = torch.cuda.mem_get_info()
    need = 16 * n**3 * arrays
    if need > free:
        run.res["skipped"].append(f"{n}^3: needs ~{need / 2**30:.0f} GiB, {free / 2**30:.0f} GiB free")
        run.save()
    return need <= free


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--small", action="store_true", help="sizes 4^3, 8^3, 16^3 and a smaller self-check (dry run)")
    ap.add_argument("--budget-s", type=float, default=None,
                    help="wall-clock budget of the whole run, s (default 400 on CUDA, unlimited on CPU); "
                         "configurations projected past it are skipped, 1024^3 needs ~3.6x its predicted time + 20 s")
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    dev = a.device
    if dev == "cuda" and not torch.cuda.is_available():
        sys.exit("--device cuda but no CUDA device; use --device cpu --small for a dry run")
    if dev == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")
    run = Run(a.out, a.budget_s if a.budget_s is not None else (400.0 if dev == "cuda" else float("inf")))
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
    sizes = (4, 8, 16) if a.small else (256, 512, 1024)
    small, mid, big = sizes
    guard: dict = {}
    size_bench(run, dev, small, guard, CONFIGS + [("int8", "crt", "torch", 1, "cublas")])
    if dev == "cuda":
        try:
            phase_breakdown(run, dev, small)
        except Exception as e:  # noqa: BLE001 - diagnostics only
            run.res["phases_error"] = repr(e)
    g8 = [c for c in CONFIGS if c[3] == 8]
    if _fits(run, dev, mid, 7):
        size_bench(run, dev, mid, guard, g8)
    done = [(guard[_key(*c)][1], _key(*c)) for c in g8 if _key(*c) in guard]
    if done and _fits(run, dev, big, 6):
        big_bench(run, dev, big, min(done)[1], guard)
    elif not done:
        run.res["skipped"].append(f"{big}^3: no g8 configuration measured at a smaller size")
    if _fits(run, dev, mid, 7) and not a.small:
        size_bench(run, dev, mid, guard, [c for c in CONFIGS if c[3] != 8])
    model_predictions(run, sizes, copy_bw or 0.0)
    run.save()
    print_summary(run)
    if FAILED_OPTIONAL:
        sys.exit(f"optional paths failed the self-check: {FAILED_OPTIONAL}")


def print_summary(run: Run) -> None:
    r = run.res
    print(f"\n== emulated FP64 FFT on {r['meta']['device']} (torch {r['meta']['torch']}) ==")
    if r["meta"].get("copy_bw_bytes_per_s"):
        print(f"copy bandwidth {r['meta']['copy_bw_bytes_per_s'] / 1e12:.3f} TB/s")
    for k, e in r["epilogue"].items():
        print(f"epilogue {k}: {e['ns_per_real_output']:.3f} ns/real output -> c_epi {e['c_epi_measured']:.0f} "
              f"(memory-bound time {e['copy_bw_time_s'] or 0:.2e} s vs {e['time_s']:.2e} s)")
    for n, s in r["sizes"].items():
        if "cufft_time_s" not in s:
            continue
        print(f"{n}^3: cuFFT {s['cufft_time_s'] * 1e3:.2f} ms, rank-1 err {s['cufft_rank1_rel_l2']:.2e}"
              + (f", round trip {s['cufft_round_trip_rel_l2']:.2e}" if "cufft_round_trip_rel_l2" in s else ""))
        for k, v in s.items():
            if isinstance(v, dict) and "error" in v:
                print(f"   {k:14s} ERROR {v['error'][:120]}")
            elif isinstance(v, dict) and "time_s" in v:
                print(f"   {k:22s} {v['time_s'] * 1e3:9.1f} ms  x{v.get('x_cufft', 0):.1f}  err {v['rank1_rel_l2']:.2e}  "
                      f"vs cuFFT {v.get('random_rel_l2_vs_cufft', float('nan')):.2e}"
                      + (f"  round trip {v['round_trip_rel_l2']:.2e}" if "round_trip_rel_l2" in v else "")
                      + _fmt_model(v))
        if "predicted_time_s" in s:
            print(f"   predicted (before the run): {s['predicted_time_s']}; memory {s.get('memory')}")
        m = r.get("model_h200", {}).get(n)
        if m:
            sp = m["spec"]
            print(f"   model H200: roof {sp['roof_s'] * 1e3:.2f} ms, emulated {sp['emulated_s'][0] * 1e3:.1f}-"
                  f"{sp['emulated_s'][1] * 1e3:.1f} ms (c_epi 203-281)")
    for sz, ph in r.get("phases_s", {}).items():
        for k, v in ph.items():
            print(f"phases {sz} {k}: wall {v['wall_s'] * 1e3:.1f} ms, GPU busy {v['gpu_busy_s'] * 1e3:.1f} ms, "
                  f"{v['kernel_launches_total']} launches, epilogue c_epi {v.get('c_epi_epilogue_kernel', 0):.0f}; "
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
