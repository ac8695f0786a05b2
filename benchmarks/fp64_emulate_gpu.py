"""A float64 workload under gpufield.fp64.emulate() on one GPU: plain vs policy 'speed' vs policy 'accuracy'.

Run from the source tree (H200, torch 2.11 + CUDA 13, Triton; the GPU's committed crossover table
``src/gpufield/fp64/data/crossover_<gpu>.json`` or ``--table``):

    PYTHONPATH=src python3 benchmarks/fp64_emulate_gpu.py --out DIR            # <= 120 s wall
    PYTHONPATH=src python3 benchmarks/fp64_emulate_gpu.py --out DIR --dry-run-cpu --table T.json

Workloads, unchanged plain torch code (:mod:`gpufield.fp64.workloads`):

Modes: plain (no emulate()), policy 'speed', policy 'accuracy', policy 'speed' with tol 1e-14.

1. blocked Cholesky solve of an SPD system (n = 8192, nb = 512, kappa_2 = 1e3): 15 trailing-update DGEMMs
   (n - k - nb) x 512 x (n - k - nb) plus cuSOLVER/cuBLAS block factorisations and triangular solves;
2. Newton-Schulz inverse (n = 4096, 24 iterations: 48 square DGEMMs);
3. ``torch.fft.fftn`` of a 256^3 complex128 array.

Per workload and mode: one warm-up run (Triton compilation; excluded), then the median wall time of timed runs
(synchronized), the result's error (Cholesky: forward error against the known solution; Newton-Schulz:
max |X A - I|; FFT: relative L2 against the exact DFT of a rank-1 input on sampled outputs), and one more
run with ``measure_time=True, error_bound=True`` whose path log is written out. Every logged call is checked
against the table: the path :func:`gpufield.fp64.crossover.choose` gives for the call's shape and the policy,
recomputed here from the table file (``log_matches_table``), and its measured time next to the table's time
at that entry. Hard wall limit: ``--budget-s`` (default 120) with phase deadlines and a watchdog.
Results: DIR/fp64_emulate.json (after every step); a table printed last.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from dataclasses import asdict
from pathlib import Path

T0 = time.time()
CHECKOUT = Path(__file__).resolve().parents[1]
RESULTS: dict = {"runs": []}
OUT: Path | None = None
_LOCK = threading.Lock()
TOL = 1e-14
"""The fourth mode: policy 'speed' with this a-priori bound (excludes native DGEMM's gamma_K for K >= 91 and
cuBLAS emulation, which has no known bound)."""


def save() -> None:
    if OUT is None:
        return
    with _LOCK:
        RESULTS["elapsed_s"] = time.time() - T0
        tmp = OUT / ".fp64_emulate.json.tmp"
        tmp.write_text(json.dumps(RESULTS, indent=1, default=str))
        tmp.replace(OUT / "fp64_emulate.json")


def watchdog(at_s: float) -> None:
    def fire():
        RESULTS["watchdog"] = f"wall limit {at_s:.0f} s reached; ended by the watchdog"
        try:
            save()
        finally:
            print("WATCHDOG: " + RESULTS["watchdog"], flush=True)
            os._exit(3)

    t = threading.Timer(max(at_s - (time.time() - T0), 1.0), fire)
    t.daemon = True
    t.start()


def elapsed() -> float:
    return time.time() - T0


def run_mode(torch, dev, name, work, mode, table, reps, deadline_s, allow_cpu=False, tol=None):
    """Warm-up, timed runs and one logged run of ``work`` under policy ``mode`` (None = plain) and ``tol``."""
    from gpufield.fp64 import emulate
    from gpufield.fp64.crossover import choose

    rec = {"workload": name, "mode": (mode or "plain") + ("" if tol is None else f" tol {tol:g}"), "tol": tol}

    def once(**kw):
        if mode is None:
            return work(), None
        with emulate(mode, table=table, allow_cpu=allow_cpu, tol=tol, **kw) as em:
            out = work()
        return out, em

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize()

    if elapsed() > deadline_s:
        rec["skipped"] = f"phase deadline {deadline_s:.0f} s passed"
        RESULTS["runs"].append(rec)
        save()
        return rec
    try:
        sync()
        t = time.perf_counter()
        out, _ = once()
        sync()
        rec["first_run_s"] = time.perf_counter() - t
        ts = []
        for _ in range(reps):
            if elapsed() > deadline_s and ts:
                break
            sync()
            t = time.perf_counter()
            out, _ = once()
            sync()
            ts.append(time.perf_counter() - t)
        ts.sort()
        rec.update(time_s=ts[len(ts) // 2], times_s=ts)
        rec.update(work.error(out))
        if mode is not None:
            _, em = once(measure_time=True, error_bound=True)
            log = [asdict(r) for r in em.log]
            for r in log:
                if r["op"] == "matmul":
                    dims = [r["shapes"][0][-2], r["shapes"][0][-1], r["shapes"][1][-1]]
                else:
                    dims = list(r["shapes"][0])
                want = choose(table, r["op"], dims, policy=mode, tol=tol) if table is not None else None
                r["table_path"] = want.path if want is not None else None
                r["matches_table"] = want is not None and want.path == r["path"]
                if want is not None and want.entry is not None and r["path"] in want.entry["paths"]:
                    r["table_time_s"] = want.entry["paths"][r["path"]]["time_s"]
            rec["log"] = log
            rec["calls"] = len(log)
            rec["log_matches_table"] = sum(r["matches_table"] for r in log)
            paths: dict = {}
            for r in log:
                paths[r["path"]] = paths.get(r["path"], 0) + 1
            rec["paths"] = paths
    except Exception as e:  # noqa: BLE001 - recorded, the run goes on
        rec["error"] = repr(e)[:500]
    RESULTS["runs"].append(rec)
    save()
    msg = (f"{rec.get('time_s', float('nan')) * 1e3:9.2f} ms  " + "  ".join(
        f"{k} {v:.2e}" for k, v in rec.items() if k.startswith("err")) if "time_s" in rec else
        rec.get("error", rec.get("skipped", "")))
    print(f"  {name:22s} {rec['mode']:15s} {msg}  {rec.get('paths', '')}", flush=True)
    return rec


class Cholesky:
    """Blocked Cholesky solve with a known solution."""

    def __init__(self, torch, dev, n, nb, cond):
        from gpufield.fp64.workloads import spd_test_matrix

        self.torch, self.nb, self.norm2 = torch, nb, cond  # ||A||_2 = largest eigenvalue = cond by construction
        self.A = spd_test_matrix(n, cond, seed=1, device=dev)
        g = torch.Generator(device="cpu").manual_seed(2)
        self.x = torch.randn(n, dtype=torch.float64, generator=g).to(dev)
        self.b = self.A @ self.x  # outside emulate(): native

    def __call__(self):
        from gpufield.fp64.workloads import blocked_cholesky_solve

        return blocked_cholesky_solve(self.A, self.b, self.nb)

    def error(self, xh):
        t = self.torch
        r = self.b - self.A @ xh
        return {"err_forward": float(t.linalg.vector_norm(xh - self.x) / t.linalg.vector_norm(self.x)),
                "err_backward": float(t.linalg.vector_norm(r) / (self.norm2 * t.linalg.vector_norm(xh)))}


class NewtonSchulz:
    """Newton-Schulz inverse of a well-conditioned SPD matrix."""

    def __init__(self, torch, dev, n, iters, cond):
        from gpufield.fp64.workloads import spd_test_matrix

        self.torch, self.iters = torch, iters
        self.A = spd_test_matrix(n, cond, seed=3, device=dev)
        self.eye = torch.eye(n, dtype=torch.float64, device=dev)

    def __call__(self):
        from gpufield.fp64.workloads import newton_schulz_inverse

        return newton_schulz_inverse(self.A, self.iters)

    def error(self, X):
        return {"err_inverse_max": float((X @ self.A - self.eye).abs().max())}


class Fft:
    """3-D FFT of a rank-1 input of random 17-bit integers (exact DFT known)."""

    def __init__(self, torch, dev, n):
        import numpy as np

        from gpufield.fp64.fft.reference import dft_longdouble

        self.torch, self.np = torch, np
        rng = np.random.default_rng(n)
        v = [rng.integers(-(2**17), 2**17, n) + 1j * rng.integers(-(2**17), 2**17, n) for _ in range(3)]
        r = [dft_longdouble(a) for a in v]
        kk = rng.integers(0, n, (3, 2**14))
        self.ref = r[0][kk[0]] * r[1][kk[1]] * r[2][kk[2]]
        self.idx = torch.from_numpy(kk[0] * n * n + kk[1] * n + kk[2]).to(dev)
        u, w, z = (torch.from_numpy(a).to(dev) for a in v)
        self.x = u[:, None, None] * w[None, :, None] * z[None, None, :]

    def __call__(self):
        return self.torch.fft.fftn(self.x)

    def error(self, y):
        np = self.np
        d = y.reshape(-1)[self.idx].cpu().numpy().astype(np.clongdouble) - self.ref
        return {"err_rel_l2": float(np.sqrt(np.sum(np.abs(d) ** 2) / np.sum(np.abs(self.ref) ** 2)))}


def main(argv=None) -> int:
    global OUT
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--budget-s", type=float, default=120.0)
    ap.add_argument("--table", type=Path, default=None, help="crossover table (default: the GPU's committed one)")
    ap.add_argument("--dry-run-cpu", action="store_true", help="tiny sizes on the CPU (needs --table)")
    a = ap.parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    OUT = a.out
    os.environ.setdefault("TRITON_CACHE_DIR", str(CHECKOUT / ".triton-cache"))
    watchdog(a.budget_s - 2)
    import torch

    from gpufield.fp64 import load_crossover_table

    if not a.dry_run_cpu and not torch.cuda.is_available():
        print("no CUDA device: use --dry-run-cpu --table T.json", file=sys.stderr)
        return 2
    dev = torch.device("cpu" if a.dry_run_cpu else "cuda")
    name = torch.cuda.get_device_name() if dev.type == "cuda" else "cpu"
    table = load_crossover_table(path=a.table) if a.table else load_crossover_table(name)
    RESULTS["env"] = {"device": name, "torch": torch.__version__, "cuda": torch.version.cuda, "argv": sys.argv,
                      "table": str(a.table) if a.table else f"committed table of {name!r}",
                      "table_provenance": (table or {}).get("provenance"),
                      "start_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(T0))}
    save()
    if table is None:
        print(f"no crossover table for {name!r}: every call would run native; nothing to measure", file=sys.stderr)
        return 2
    if a.dry_run_cpu:
        chol, ns, fft = Cholesky(torch, dev, 96, 32, 1e3), NewtonSchulz(torch, dev, 32, 14, 2.0), Fft(torch, dev, 8)
        reps = 2
    else:
        chol = Cholesky(torch, dev, 8192, 512, 1e3)
        ns = NewtonSchulz(torch, dev, 4096, 24, 10.0)
        fft = Fft(torch, dev, 256)
        reps = 5
    print(f"== {name}, table {RESULTS['env']['table']}", flush=True)
    b = a.budget_s
    for work, wname, end in ((chol, "cholesky_solve", 0.45 * b), (ns, "newton_schulz_inverse", 0.7 * b),
                             (fft, "fftn_256^3" if not a.dry_run_cpu else "fftn_8^3", 0.95 * b)):
        for mode, tol in ((None, None), ("speed", None), ("accuracy", None), ("speed", TOL)):
            run_mode(torch, dev, wname, work, mode, table, reps, end, allow_cpu=a.dry_run_cpu, tol=tol)
    RESULTS["finished"] = True
    save()
    print("\n== summary (median wall ms; calls whose path = the table's choice; paths taken)")
    for r in RESULTS["runs"]:
        if "time_s" in r:
            m = f"{r['log_matches_table']}/{r['calls']}" if "calls" in r else "-"
            errs = " ".join(f"{k}={v:.2e}" for k, v in r.items() if k.startswith("err"))
            print(f"  {r['workload']:22s} {r['mode']:15s} {r['time_s'] * 1e3:9.2f} ms  match {m:7s} {errs}  {r.get('paths', '')}")
    print(f"== done in {elapsed():.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
