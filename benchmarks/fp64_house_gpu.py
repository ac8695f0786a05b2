"""The kernel house on one GPU (issue 30): every KernelConfig variant gives the default's bits and its time.

    PYTHONPATH=src python3 benchmarks/fp64_house_gpu.py --out DIR            # H200, <= 90 s wall (enforced)
    PYTHONPATH=src python3 benchmarks/fp64_house_gpu.py --out DIR --dry-run-cpu   # CPU test of the same code path

What it runs (a worker process; the parent kills it at the deadline, ``--budget-s``, and every finished case is
already in DIR/fp64_house_gpu.json):

1. ``default`` at 256^3: ``EmulatedFftPlan(backend="int8", epilogue="triton")`` with ``KernelConfig()``, on the
   rank-1 input of benchmarks/fp64_fft_bits.py (17-bit integer vectors, ``default_rng(n)``; error = rel. L2 on
   2^18 sampled outputs, ``default_rng(1)``, against the long-double DFT), next to cuFFT; the stage path the
   dispatch table names for it;
2. each variant (``VARIANTS``: the former GPUFIELD_* settings as KernelConfig fields) at 256^3 on the same
   input: bitwise equal to the default's output (SHA-256 of the whole output) and its time;
3. ``old_digest``: the default plan at the 16 x 32 shape of tools/fp64_house_digests.py, its SHA-256 against the
   digest stored in tests/fp64/data/house_digests.json, taken with the old environment-variable code (main
   5d571fc, CPU interpreter): the old path's bits, on the GPU's kernels;
4. one GEMM shape: ``ozaki_matmul`` INT8 at 4096^3 (random Gaussian), bits against the torch-kernel backend
   (``Int8Backend(kernels="torch")``), time.

Order: default, cuFFT, old_digest, fold_int, impl_triton, the GEMM, then the launch knobs (pairs, register cap,
asm, launch shape). Times: CUDA-event medians of ``--reps`` calls after one warm-up call (the compile). Earlier measured times for the
same calls are printed beside them (EARLIER). A case not started before the deadline is recorded as skipped.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parents[1]

VARIANTS: dict[str, dict] = {  # former environment variable -> KernelConfig fields
    "fold_int": {"fold": "int"},  # GPUFIELD_FUSED_EPI_FOLD=int
    "impl_triton": {"implementation": "triton"},  # GPUFIELD_FUSED_EPI_IMPL=triton
    "pairs_0": {"residue_pairs": 0},  # GPUFIELD_FUSED_EPI_PAIRS=0
    "maxnreg_0": {"max_nreg": 0},  # GPUFIELD_FUSED_EPI_MAXNREG=0
    "asm_off": {"epilogue_asm": False},  # GPUFIELD_EPILOGUE_ASM=0
    "launch_64_4": {"launch": (64, 4)},  # GPUFIELD_FUSED_EPI_LAUNCH=64,4
}

EARLIER = {  # case -> (earlier measured time, where)
    "default": ("4.57-4.86 ms", "run 69, fp64_fft_bits.py, default INT8 plan (crt), aa72b22"),
    "cufft": ("0.45-0.47 ms", "run 69"),
    "gemm_int8_4096": ("6.76 ms (15 moduli)", "run 72 crossover, ozaki_int8_15 at 4096^3 (fast mode)"),
}


def _worker(a) -> None:
    import numpy as np
    import torch

    sys.path.insert(0, str(CHECKOUT / "benchmarks"))
    sys.path.insert(0, str(CHECKOUT / "tools"))
    from fp64_house_digests import SHAPE
    from fp64_house_digests import run as digest_run

    from gpufield.fp64 import ozaki_matmul
    from gpufield.fp64.fft import EmulatedFftPlan, fftn_fp64_emulated
    from gpufield.fp64.fft.kernel_config import KernelConfig
    from gpufield.fp64.fft.reference import dft_longdouble

    cpu = a.dry_run_cpu
    dev = "cpu" if cpu else "cuda"
    n = a.size
    out = Path(a.out)
    res = {"device": "cpu (dry run)" if cpu else torch.cuda.get_device_name(), "size": n, "cases": {},
           "torch": torch.__version__}
    if not cpu:
        res["capability"] = list(torch.cuda.get_device_capability())

    def save():
        tmp = out / "fp64_house_gpu.json.tmp"
        tmp.write_text(json.dumps(res, indent=1))
        tmp.replace(out / "fp64_house_gpu.json")

    def sync():
        if not cpu:
            torch.cuda.synchronize()

    def median_ms(fn, reps):
        ts = []
        for _ in range(reps):
            if cpu:
                t = time.perf_counter()
                fn()
                ts.append(1e3 * (time.perf_counter() - t))
            else:
                e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                e0.record()
                fn()
                e1.record()
                e1.synchronize()
                ts.append(e0.elapsed_time(e1))
        return float(np.median(ts)), [round(t, 4) for t in ts]

    def sha(y):
        return hashlib.sha256(np.ascontiguousarray(y.cpu().numpy()).tobytes()).hexdigest()

    rng = np.random.default_rng(n)
    vecs = [rng.integers(-(2**17), 2**17, n) + 1j * rng.integers(-(2**17), 2**17, n) for _ in range(3)]
    refs = [dft_longdouble(v) for v in vecs]
    kk = np.random.default_rng(1).integers(0, n, (3, 2**18 if not cpu else 2**10))
    ref = refs[0][kk[0]] * refs[1][kk[1]] * refs[2][kk[2]]
    idx = torch.from_numpy(kk[0] * n * n + kk[1] * n + kk[2]).to(dev)
    u, v, w = (torch.from_numpy(t).to(dev) for t in vecs)
    x = u[:, None, None] * v[None, :, None] * w[None, None, :]

    def err(y):
        d = y.reshape(-1)[idx].cpu().numpy().astype(np.clongdouble) - ref
        return float(np.sqrt(np.sum(np.abs(d) ** 2) / np.sum(np.abs(ref) ** 2)))

    cap = None if cpu else tuple(torch.cuda.get_device_capability())

    def fft_case(name, cfg):
        plan = EmulatedFftPlan(backend="int8", epilogue="triton", kernels=KernelConfig(**cfg))
        t0 = time.perf_counter()
        y = fftn_fp64_emulated(x, plan)
        sync()
        first = time.perf_counter() - t0
        rec = {"config": {k: list(v) if isinstance(v, tuple) else v for k, v in cfg.items()},
               "stage_path": plan.stage_path(cap), "first_call_s": round(first, 2),
               "sha256": sha(y), "rank1_rel_l2": err(y)}
        del y
        rec["median_ms"], rec["times_ms"] = median_ms(lambda: fftn_fp64_emulated(x, plan), a.reps)
        if name != "default":
            rec["bits_equal_default"] = rec["sha256"] == res["cases"]["default"]["sha256"]
        return rec

    def gemm_case():
        from gpufield.fp64.ozaki.backends import Int8Backend

        m = 4096 if not cpu else 64
        g = torch.Generator(device=dev).manual_seed(30)
        A = torch.randn(m, m, dtype=torch.float64, device=dev, generator=g)
        B = torch.randn(m, m, dtype=torch.float64, device=dev, generator=g)
        t0 = time.perf_counter()
        C = ozaki_matmul(A, B, backend="int8")
        sync()
        first = time.perf_counter() - t0
        Ct = ozaki_matmul(A, B, backend=Int8Backend(kernels="torch"))
        rec = {"shape": [m, m, m], "first_call_s": round(first, 2), "sha256": sha(C),
               "bits_equal_torch_kernels": bool(torch.equal(C, Ct)), "all_finite": bool(torch.isfinite(C).all())}
        del Ct
        rec["median_ms"], rec["times_ms"] = median_ms(lambda: ozaki_matmul(A, B, backend="int8"), a.reps)
        return rec

    stored = json.loads((CHECKOUT / "tests/fp64/data/house_digests.json").read_text())["digests"]
    cases = [("default", lambda: fft_case("default", {}))]
    cases.append(("cufft", lambda: {"median_ms": median_ms(lambda: torch.fft.fftn(x), a.reps)[0],
                                    "rank1_rel_l2": err(torch.fft.fftn(x))}))
    old = ("old_digest", lambda: {"shape": list(SHAPE), "digest": (d := digest_run("config", ["default"],
                                                                                  device=dev)["default"]),
                                  "stored_old_path": stored["default"], "equal": d == stored["default"]})
    var = [(k, (lambda k=k, c=c: fft_case(k, c))) for k, c in VARIANTS.items()]
    # priority order (a case not started before the deadline is skipped): the old path's digest first, the
    # two kernel choices, the GEMM, then the launch knobs
    cases += [old, *var[:2], ("gemm_int8_4096", gemm_case), *var[2:]]
    est_s = {"default": 25, "cufft": 2, "old_digest": 15, "gemm_int8_4096": 12, "impl_triton": 15}
    for name, fn in cases:
        left = a.deadline - time.time()
        if left < est_s.get(name, 12):
            res["cases"][name] = {"skipped": f"deadline: {left:.0f} s left, needs ~{est_s.get(name, 12)} s"}
            save()
            continue
        try:
            res["cases"][name] = fn()
        except Exception as e:  # one failing case is a result, not the end of the run
            res["cases"][name] = {"error": f"{type(e).__name__}: {e}"[:2000]}
        print(f"[house] {name}: {json.dumps(res['cases'][name])[:300]}", flush=True)
        save()
    res["finished"] = True
    save()


def _table(path: Path) -> None:
    if not path.exists():
        print("no results")
        return
    res = json.loads(path.read_text())
    print(f"\nfp64 kernel house on {res.get('device')} at {res.get('size')}^3 (finished: {res.get('finished', False)})")
    print(f"{'case':16s} {'median ms':>10s} {'bits':>12s} {'err':>9s}  earlier / path")
    for name, c in res.get("cases", {}).items():
        if "skipped" in c or "error" in c:
            print(f"{name:16s} {c.get('skipped') or c.get('error')}"[:150])
            continue
        bits = ("= default" if c.get("bits_equal_default") else "DIFFERENT") if "bits_equal_default" in c else (
            ("= old" if c["equal"] else "DIFFERENT") if "equal" in c else (
                ("= torch" if c["bits_equal_torch_kernels"] else "DIFFERENT") if "bits_equal_torch_kernels" in c
                else "-"))
        ms = f"{c['median_ms']:.3f}" if "median_ms" in c else "-"
        e = f"{c['rank1_rel_l2']:.2e}" if "rank1_rel_l2" in c else "-"
        note = EARLIER.get(name, ("", ""))[0] or c.get("stage_path", "")[:60]
        print(f"{name:16s} {ms:>10s} {bits:>12s} {e:>9s}  {note}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--budget-s", type=float, default=90.0, help="whole run, wall clock (s), enforced")
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--dry-run-cpu", action="store_true", help="CPU, Triton interpreter, 8^3, 1 rep")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--deadline", type=float, default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    if a.worker:
        _worker(a)
        return 0
    start = time.time()
    if not a.dry_run_cpu:
        import torch

        if not torch.cuda.is_available():
            print("CUDA is not available: run with --dry-run-cpu on a machine without a GPU")
            return 2
    env = dict(os.environ)
    if a.dry_run_cpu:
        env["TRITON_INTERPRET"] = "1"
        a.size, a.reps = 8, 1
    stop = start + a.budget_s - 6  # margin: the parent's table and the kill
    cmd = [sys.executable, str(Path(__file__).resolve()), "--out", str(a.out), "--worker", "--size", str(a.size),
           "--reps", str(a.reps), "--deadline", str(stop - 2)] + (["--dry-run-cpu"] if a.dry_run_cpu else [])
    log = (a.out / "fp64_house_gpu.log").open("w")
    p = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        p.wait(timeout=max(1.0, stop - time.time()))
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, 9)
        p.wait()
        print(f"worker killed at the deadline ({a.budget_s:.0f} s budget)")
    log.close()
    print(f"worker rc {p.returncode}, wall {time.time() - start:.1f} s")
    _table(a.out / "fp64_house_gpu.json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
