"""Crossover table of FP64 products on one GPU: native float64 vs Ozaki-II (INT8 / FP8, moduli counts) vs
cuBLAS's own FP64 emulation for DGEMM shapes, and cuFFT complex128 vs the emulated FFT for 3-D FFT shapes.

Run from the source tree (H200: torch 2.11 + CUDA 13, Triton):

    PYTHONPATH=src python3 benchmarks/fp64_crossover_gpu.py --out DIR            # <= 200 s wall
    PYTHONPATH=src python3 benchmarks/fp64_crossover_gpu.py --out DIR --dry-run-cpu   # tiny sizes, CPU

Method: random data (Gaussian A, B; rank-1 FFT input of random 17-bit integers), one warm-up call per method
and shape (compilation included, reported as ``first_call_s``, excluded from the timings), then CUDA-event
timings, median of several calls. Every output is checked finite (every element written). Errors on sampled
entries against a reference computed in numpy longdouble (64-bit significand on x86): DGEMM 128 entries
(i, j), reported as ``err_norm`` = max |C_ij - R_ij| / (||a_i||_2 ||b_j||_2) (the measure of
:mod:`gpufield.fp64.emulate`'s bounds), ``err_rel`` = max |C - R| / max |R| and ``err_comp`` = max
|C_ij - R_ij| / (|A||B|)_ij; FFT rel. L2 on 2^14 sampled outputs against the exact DFT of the rank-1 input
(:func:`gpufield.fp64.fft.reference.dft_longdouble`).

cuBLAS emulation runs in a child process (this script with ``--child-cublas``), so that a failure there
cannot end the run: (a) the probe of torch's own handle (math mode 8 + EAGER strategy set on
``torch.cuda.current_blas_handle()``, then ``torch.matmul``: same bits and time as native = not reachable
from torch), (b) :class:`gpufield.fp64.cublas_emu.CublasEmulatedGemm` (own handle by ctypes) per shape.

Hard wall limit (``--budget-s``, default 200): no case starts when its estimated time passes the deadline, and a
watchdog thread writes the results and ends the process at the deadline. Results: DIR/fp64_crossover.json,
written after every case; the table is printed last.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

T0 = time.time()
CHECKOUT = Path(__file__).resolve().parents[1]
RESULTS: dict = {"cases": []}
_SAVE_LOCK = threading.Lock()
OUT: Path | None = None

SQUARE = [128, 256, 512, 1024, 2048, 4096, 8192]
RECT = [(4096, 256, 4096), (8192, 512, 8192), (256, 8192, 256), (2**20, 32, 32), (8192, 8192, 16)]
FFT = [256, 128, 64, 512]
"""Order of the FFT cases: 256^3 first (the shape asked about), 512^3 last (after the rectangular DGEMMs)."""
INT8_MODULI = [15, 14, 16, 12]
FP8_MODULI = [13]
PHASE_END = {"square": 0.45, "fft": 0.72, "cublas": 0.87, "rect": 0.97, "fft_last": 0.98}
"""Each phase starts nothing after this fraction of --budget-s (wall clock from the start), so that the square
DGEMMs' Triton compilations cannot take the FFT's time, and so on."""
FP8_MAX_WORK = 2048**3
"""FP8 Ozaki-II on Hopper is output-write bound by K chunks of 48 (2.1 s at 8192^3, run 3): only M N K <= this."""


def save() -> None:
    if OUT is None:
        return
    with _SAVE_LOCK:
        RESULTS["elapsed_s"] = time.time() - T0
        tmp = OUT / ".fp64_crossover.json.tmp"
        tmp.write_text(json.dumps(RESULTS, indent=1, default=str))
        tmp.replace(OUT / "fp64_crossover.json")


def watchdog(deadline_s: float) -> None:
    def fire():
        RESULTS["watchdog"] = f"wall limit {deadline_s:.0f} s reached; process ended by the watchdog"
        try:
            save()
        finally:
            print(f"WATCHDOG: {RESULTS['watchdog']}", flush=True)
            os._exit(3)

    t = threading.Timer(max(deadline_s - (time.time() - T0), 1.0), fire)
    t.daemon = True
    t.start()


def left(budget_s: float) -> float:
    return budget_s - (time.time() - T0)


def make_timer(torch, dev):
    def one(fn):
        if dev.type != "cuda":
            t = time.perf_counter()
            out = fn()
            return out, time.perf_counter() - t
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        out = fn()
        b.record()
        torch.cuda.synchronize()
        return out, a.elapsed_time(b) / 1e3

    def timed(fn, max_reps=15, target_s=0.25):
        """(first output, first-call seconds, median seconds, all seconds); warm-up call excluded."""
        if dev.type == "cuda":
            torch.cuda.synchronize()
        w0 = time.perf_counter()
        out, _ = one(fn)
        first = time.perf_counter() - w0
        _, t1 = one(fn)
        reps = int(min(max_reps, max(3, target_s / max(t1, 1e-6))))
        ts = [t1]
        for _ in range(reps - 1):
            r, t = one(fn)
            del r
            ts.append(t)
        ts.sort()
        return out, first, ts[len(ts) // 2], ts

    return timed


def gemm_samples(np, torch, A, B, n_samples=128, seed=0):
    """Sampled (i, j), longdouble reference values, |A||B| and ||a_i|| ||b_j|| at them."""
    M, K = A.shape
    N = B.shape[1]
    rng = np.random.default_rng(seed)
    ii = rng.integers(0, M, n_samples)
    jj = rng.integers(0, N, n_samples)
    a = A[torch.from_numpy(ii).to(A.device)].cpu().numpy().astype(np.longdouble)
    b = B[:, torch.from_numpy(jj).to(B.device)].cpu().numpy().T.astype(np.longdouble)
    prod = a * b
    ref = prod.sum(axis=1)
    absab = np.abs(prod).sum(axis=1)
    nrm = np.sqrt((a * a).sum(axis=1)) * np.sqrt((b * b).sum(axis=1))
    return ii, jj, ref, absab, nrm


def gemm_errors(np, C, samp):
    ii, jj, ref, absab, nrm = samp
    import torch

    c = C[torch.from_numpy(ii).to(C.device), torch.from_numpy(jj).to(C.device)].cpu().numpy().astype(np.longdouble)
    d = np.abs(c - ref)
    return {"err_norm": float(np.max(d / np.maximum(nrm, 1e-300))),
            "err_rel": float(np.max(d) / max(float(np.max(np.abs(ref))), 1e-300)),
            "err_comp": float(np.max(d / np.maximum(absab, 1e-300)))}


def record(case: dict) -> None:
    RESULTS["cases"].append(case)
    save()


def run_gemm_case(np, torch, dev, timed, M, K, N, budget_s, small):
    from gpufield.fp64 import ozaki_matmul

    g = torch.Generator(device=dev).manual_seed(M * 7 + K * 3 + N)
    A = torch.randn(M, K, dtype=torch.float64, device=dev, generator=g)
    B = torch.randn(K, N, dtype=torch.float64, device=dev, generator=g)
    samp = gemm_samples(np, torch, A, B)
    shape = {"op": "matmul", "M": M, "K": K, "N": N, "dtype": "float64"}
    methods = [("native", None, None, lambda: A @ B)]
    for L in INT8_MODULI:
        methods.append((f"ozaki_int8_{L}", "int8", L, lambda L=L: ozaki_matmul(A, B, num_moduli=L, backend="int8")))
    if M * K * N <= FP8_MAX_WORK or small:
        for L in FP8_MODULI:
            methods.append((f"ozaki_fp8_{L}", "fp8", L, lambda L=L: ozaki_matmul(A, B, num_moduli=L, backend="fp8")))
    native_t = None
    for path, backend, L, fn in methods:
        rec = dict(shape, path=path, backend=backend, num_moduli=L, mode="fast" if L else None)
        est = 3.0 if native_t is None else 0.5 + 40 * native_t * (L or 1) * (30 if backend == "fp8" else 1)
        if left(budget_s) < est + 8:
            rec["skipped"] = f"budget: {left(budget_s):.0f} s left, estimated {est:.0f} s"
            record(rec)
            continue
        try:
            C, first, t, ts = timed(fn)
            rec.update(time_s=t, first_call_s=first, times_s=ts, all_finite=bool(torch.isfinite(C).all()),
                       **gemm_errors(np, C, samp))
            if path == "native":
                native_t = t
            del C
        except Exception as e:  # noqa: BLE001 - a failing method is recorded, not hidden
            rec["error"] = repr(e)[:400]
        record(rec)
        print(f"  matmul {M}x{K}x{N:<6d} {path:16s} " + (f"{rec['time_s'] * 1e3:9.3f} ms  err_norm {rec['err_norm']:.2e}"
              if "time_s" in rec else rec.get("error", rec.get("skipped", ""))[:90]), flush=True)
        if dev.type == "cuda":
            torch.cuda.empty_cache()
    return A, B


def run_fft_case(np, torch, dev, timed, n, budget_s, plan):
    from gpufield.fp64 import fftn_fp64_emulated
    from gpufield.fp64.fft.reference import dft_longdouble

    rng = np.random.default_rng(n)
    vecs = [rng.integers(-(2**17), 2**17, n) + 1j * rng.integers(-(2**17), 2**17, n) for _ in range(3)]
    refs = [dft_longdouble(v) for v in vecs]
    kk = rng.integers(0, n, (3, 2**14))
    ref_s = refs[0][kk[0]] * refs[1][kk[1]] * refs[2][kk[2]]
    idx = torch.from_numpy(kk[0] * n * n + kk[1] * n + kk[2]).to(dev)
    u, v, w = (torch.from_numpy(a).to(dev) for a in vecs)
    x = u[:, None, None] * v[None, :, None] * w[None, None, :]

    def err(y):
        d = y.reshape(-1)[idx].cpu().numpy().astype(np.clongdouble) - ref_s
        return float(np.sqrt(np.sum(np.abs(d) ** 2) / np.sum(np.abs(ref_s) ** 2)))

    shape = {"op": "fftn", "shape": [n, n, n], "dtype": "complex128"}
    native_t = None
    for path, fn in [("native", lambda: torch.fft.fftn(x)), ("emulated_fft", lambda: fftn_fp64_emulated(x, plan))]:
        rec = dict(shape, path=path, plan=None if path == "native" else {
            k: getattr(plan, k) for k in ("backend", "variant", "epilogue", "int8_gemm", "input_bits", "twiddle_bits")}
            | {"num_moduli": plan.resolved_num_moduli})
        est = 3.0 if native_t is None else 40.0 + 30 * native_t * 12  # first call compiles (15-50 s cold)
        if left(budget_s) < est:
            rec["skipped"] = f"budget: {left(budget_s):.0f} s left, estimated {est:.0f} s"
            record(rec)
            continue
        try:
            y, first, t, ts = timed(fn, max_reps=9, target_s=0.3)
            rec.update(time_s=t, first_call_s=first, times_s=ts, all_finite=bool(torch.isfinite(torch.view_as_real(y)).all()),
                       err_rel_l2=err(y))
            if path == "native":
                native_t = t
            del y
        except Exception as e:  # noqa: BLE001
            rec["error"] = repr(e)[:400]
        record(rec)
        print(f"  fftn {n}^3 {path:14s} " + (f"{rec['time_s'] * 1e3:9.3f} ms  rel_l2 {rec['err_rel_l2']:.2e} "
              f"(first call {rec['first_call_s']:.1f} s)" if "time_s" in rec else rec.get("error", rec.get("skipped", ""))[:90]),
              flush=True)
        if dev.type == "cuda":
            torch.cuda.empty_cache()


CHILD_PROBE_SHAPES = "probe"


def child_cublas(shapes: list, out_path: Path) -> None:
    """cuBLAS emulation measurements (child process): torch-handle probe, then own-handle GEMMs per shape."""
    import ctypes

    import numpy as np
    import torch

    from gpufield.fp64.cublas_emu import (
        CUBLAS_EMULATION_STRATEGY_DEFAULT,
        CUBLAS_EMULATION_STRATEGY_EAGER,
        CUBLAS_FP64_EMULATED_FIXEDPOINT_MATH,
        cublas_emulated_gemm,
    )

    dev = torch.device("cuda")
    timed = make_timer(torch, dev)
    res: dict = {"cases": []}

    def dump():
        out_path.write_text(json.dumps(res, indent=1, default=str))

    emu = cublas_emulated_gemm(0)
    res.update(libcublas=emu.path, cublas_version=emu.version, math_mode_after_set=emu.math_mode)
    dump()
    # (a) torch's own handle
    n = 4096
    g = torch.Generator(device=dev).manual_seed(5)
    A = torch.randn(n, n, dtype=torch.float64, device=dev, generator=g)
    B = torch.randn(n, n, dtype=torch.float64, device=dev, generator=g)
    C0, _, t0, _ = timed(lambda A=A, B=B: A @ B)
    h = ctypes.c_void_p(torch.cuda.current_blas_handle())
    lib = emu.lib
    st = [lib.cublasSetMathMode(h, ctypes.c_int(CUBLAS_FP64_EMULATED_FIXEDPOINT_MATH)),
          lib.cublasSetEmulationStrategy(h, ctypes.c_int(CUBLAS_EMULATION_STRATEGY_EAGER))]
    C1, _, t1, _ = timed(lambda A=A, B=B: A @ B)
    mode = ctypes.c_int(-1)
    lib.cublasGetMathMode(ctypes.c_void_p(torch.cuda.current_blas_handle()), ctypes.byref(mode))
    lib.cublasSetEmulationStrategy(h, ctypes.c_int(CUBLAS_EMULATION_STRATEGY_DEFAULT))
    C2, _, t2, _ = timed(lambda A=A, B=B: emu(A, B))
    res["torch_handle_probe"] = {
        "n": n, "set_status": st, "math_mode_seen_after_torch_matmul": mode.value,
        "native_s": t0, "torch_handle_emulation_set_s": t1, "same_bits_as_native": bool(torch.equal(C0, C1)),
        "own_handle_s": t2, "own_handle_same_bits_as_native": bool(torch.equal(C0, C2)),
        "reading": "reachable from torch.matmul" if not torch.equal(C0, C1) else
                   "not reachable from torch.matmul (torch resets the handle's math mode; native bits)"}
    A = B = C0 = C1 = C2 = None
    dump()
    for M, K, N in shapes:
        g = torch.Generator(device=dev).manual_seed(M * 7 + K * 3 + N)
        A = torch.randn(M, K, dtype=torch.float64, device=dev, generator=g)
        B = torch.randn(K, N, dtype=torch.float64, device=dev, generator=g)
        samp = gemm_samples(np, torch, A, B)
        rec = {"op": "matmul", "M": M, "K": K, "N": N, "dtype": "float64", "path": "cublas_emu",
               "strategy": "eager", "mantissa_control": "dynamic (cuBLAS default)"}
        try:
            C, first, t, ts = timed(lambda A=A, B=B: emu(A, B))
            rec.update(time_s=t, first_call_s=first, times_s=ts, all_finite=bool(torch.isfinite(C).all()),
                       **gemm_errors(np, C, samp))
            del C
        except Exception as e:  # noqa: BLE001
            rec["error"] = repr(e)[:400]
        res["cases"].append(rec)
        dump()
        A = B = None
        torch.cuda.empty_cache()


def run_cublas_child(shapes, budget_s, out_dir: Path) -> None:
    path = out_dir / "cublas_child.json"
    timeout = min(50.0, left(budget_s))
    if timeout < 15:
        RESULTS["cublas_emu"] = {"skipped": f"budget: {left(budget_s):.0f} s left"}
        save()
        return
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child-cublas", str(path), "--child-shapes",
           json.dumps(shapes), "--out", str(out_dir)]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        info = {"returncode": p.returncode, "stderr_tail": p.stderr[-1500:]}
    except subprocess.TimeoutExpired:
        info = {"returncode": None, "timeout_s": timeout}
    if path.exists():
        d = json.loads(path.read_text())
        for c in d.pop("cases", []):
            RESULTS["cases"].append(c)
        info.update(d)
    RESULTS["cublas_emu"] = info
    save()
    probe = info.get("torch_handle_probe", {})
    print(f"  cuBLAS emulation child: rc {info.get('returncode')}, torch handle: {probe.get('reading', '?')}", flush=True)


def environment(torch, dev) -> dict:
    import numpy as np

    env = {"torch": torch.__version__, "cuda": torch.version.cuda, "numpy": np.__version__,
           "longdouble_mant_bits": int(np.finfo(np.longdouble).nmant), "python": sys.version.split()[0],
           "argv": sys.argv, "start_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(T0))}
    try:
        import triton

        env["triton"] = triton.__version__
    except ImportError:
        env["triton"] = None
    try:
        env["commit"] = subprocess.run(["git", "-C", str(CHECKOUT), "rev-parse", "HEAD"], capture_output=True,
                                       text=True, timeout=5).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        env["commit"] = None
    if dev.type == "cuda":
        env["device"] = torch.cuda.get_device_name()
        env["capability"] = list(torch.cuda.get_device_capability())
        env["memory_bytes"] = torch.cuda.get_device_properties(0).total_memory
        try:
            q = subprocess.run(["nvidia-smi", "--query-gpu=driver_version,clocks.sm,clocks.max.sm,power.limit",
                                "--format=csv,noheader"], capture_output=True, text=True, timeout=10)
            env["nvidia_smi"] = q.stdout.strip()
            env["driver"] = q.stdout.split(",")[0].strip() or None
        except (OSError, subprocess.SubprocessError) as e:
            env["driver"] = f"unknown ({e!r})"[:100]
    else:
        env["device"] = "cpu"
    return env


def print_table() -> None:
    rows: dict = {}
    for c in RESULTS["cases"]:
        key = (f"matmul {c['M']}x{c['K']}x{c['N']}" if c["op"] == "matmul" else f"fftn {'x'.join(map(str, c['shape']))}")
        rows.setdefault(key, {})[c["path"]] = c
    print("\n== crossover (median ms / error; fastest path whose error <= native's marked *)")
    for key, paths in rows.items():
        nat = paths.get("native", {})
        ne = nat.get("err_norm", nat.get("err_rel_l2"))
        ok = {p: r for p, r in paths.items() if "time_s" in r}
        best = None
        if ne is not None:
            cand = [(r["time_s"], p) for p, r in ok.items() if r.get("err_norm", r.get("err_rel_l2", 1)) <= ne]
            best = min(cand)[1] if cand else None
        cells = []
        for p, r in ok.items():
            e = r.get("err_norm", r.get("err_rel_l2"))
            cells.append(f"{p}{'*' if p == best else ''} {r['time_s'] * 1e3:.3g}/{e:.1e}")
        print(f"  {key:22s} " + "  ".join(cells))


def main(argv=None) -> int:
    global OUT
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--dry-run-cpu", action="store_true", help="tiny sizes on the CPU (proves the code path)")
    ap.add_argument("--budget-s", type=float, default=200.0, help="hard wall limit of the whole run")
    ap.add_argument("--child-cublas", type=Path, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--child-shapes", default="[]", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    if a.child_cublas is not None:
        child_cublas([tuple(s) for s in json.loads(a.child_shapes)], a.child_cublas)
        return 0
    OUT = a.out
    os.environ.setdefault("TRITON_CACHE_DIR", str(CHECKOUT / ".triton-cache"))
    watchdog(a.budget_s - 2.0)
    import numpy as np
    import torch

    if not a.dry_run_cpu and not torch.cuda.is_available():
        print("no CUDA device: use --dry-run-cpu for the CPU code path", file=sys.stderr)
        return 2
    dev = torch.device("cpu" if a.dry_run_cpu else "cuda")
    RESULTS["env"] = environment(torch, dev)
    RESULTS["budget_s"] = a.budget_s
    save()
    print(f"== {RESULTS['env']['device']} torch {torch.__version__} cuda {torch.version.cuda}", flush=True)
    from gpufield.fp64 import EmulatedFftPlan

    if a.dry_run_cpu:
        squares, rect, ffts = [32, 64], [(64, 16, 32), (512, 32, 32)], [8, 4, 16]
        plan = EmulatedFftPlan(backend="int8", epilogue="torch", variant="kulisch")
    else:
        from gpufield.fp64.ozaki import gemm as ozaki_gemm

        ozaki_gemm.OUT_BLOCK_BYTES = 2**33  # fewer, larger row blocks on a 141 GB GPU (as fp64_gemm_gpu.py)
        squares, rect, ffts = SQUARE, RECT, FFT
        plan = EmulatedFftPlan(backend="int8", epilogue="triton", variant="kulisch")
    timed = make_timer(torch, dev)
    end = {k: f * a.budget_s for k, f in PHASE_END.items()}
    RESULTS["phase_end_s"] = end
    print("== DGEMM, square", flush=True)
    for n in squares:
        run_gemm_case(np, torch, dev, timed, n, n, n, end["square"], a.dry_run_cpu)
    print("== 3-D FFT, complex128", flush=True)
    for n in ffts[:-1]:
        run_fft_case(np, torch, dev, timed, n, end["fft"], plan)
    if dev.type == "cuda":
        print("== cuBLAS FP64 emulation (child process)", flush=True)
        run_cublas_child([(n, n, n) for n in squares] + [list(s) for s in rect], end["cublas"], a.out)
    else:
        RESULTS["cublas_emu"] = {"skipped": "no CUDA"}
    print("== DGEMM, rectangular", flush=True)
    for M, K, N in rect:
        run_gemm_case(np, torch, dev, timed, M, K, N, end["rect"], a.dry_run_cpu)
    print("== 3-D FFT, largest", flush=True)
    run_fft_case(np, torch, dev, timed, ffts[-1], end["fft_last"], plan)
    RESULTS["finished"] = True
    save()
    print_table()
    print(f"== done in {time.time() - T0:.1f} s; results {a.out / 'fp64_crossover.json'}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
