"""Emulated FP64 3-D FFT on one GPU: time, errors and bit-identity per configuration next to cuFFT, under budgets.

Run from the source tree on a machine with one H200 (torch >= 2.11 + CUDA, Triton, numpy):

    PYTHONPATH=src python3 benchmarks/fp64_fft_gpu.py --out DIR --budget-s 480 --cache-dir .triton-cache

Dry run (prints the phases, configurations and budgets; runs nothing):

    PYTHONPATH=src python3 benchmarks/fp64_fft_gpu.py --out DIR --dry-run

CPU test of the machinery (Triton interpreter, torch.fft as the native baseline; about 2-4 minutes on 2 cores):

    PYTHONPATH=src python3 benchmarks/fp64_fft_gpu.py --out DIR --device cpu --sizes 16 --check-shape 2,4,16

Why it is built this way (H200 runs 7 and 8): the first call of a configuration compiles its Triton kernels
(~48 s for the int8 crt g8 kernels, 6-7 s for each further specialisation, > 19 s for fused_epi), and run 7's
up-front self-check compiled ~20 specialisations and hit the 330 s cap before anything was timed. Here:

* every configuration runs in a worker process (this script with ``--worker``); the parent reads its progress
  events and kills it (its own process group) when a phase passes its budget: setup (``--setup-budget-s``:
  process start, imports, inputs), compile + first call (``--compile-budget-s``), timing + errors + profile
  (``--run-budget-s``), self-check (``--check-budget-s``). A configuration killed in compile is recorded as
  "skipped: compile budget"; the worker is restarted with the remaining configurations;
* nothing starts past the whole-run budget (``--budget-s``, wall clock from the start of this script): every
  phase deadline is capped by it;
* the bit-identity self-check runs per configuration, after its timing, on one small input (default
  16 x 16 x 256: every stage N = K = 16 as at 256^3, so it mostly reuses the compiled kernels) against the
  exact CPU reference (``backend="cpu-exact"``), in its own budget: a slow check cannot cost a timing;
* results are written to DIR/fp64_fft_gpu.json after every event (a killed run keeps everything done so far),
  and the workers' output to DIR/fp64_fft_gpu.log (2 files in DIR);
* TRITON_CACHE_DIR is ``--cache-dir`` (default ``.triton-cache`` in the checkout holding this script), so a
  second call on a still-warm machine loads the compiled kernels instead of compiling them again.

Order (``--sizes 256,512,1024``; any three sizes play these roles): at 256^3 cuFFT, then MAIN_CONFIGS (the run-5 best int8/crt/g8/tgemm with the
32-bit residue kernel, the same with the previous int64-lane residue kernel (run 5's; ``fp64_residue_int64.use_int64_residues``), /fused, /fusedepi), each
with one profiled call (phase split) and its self-check; then 512^3 cuFFT and the MAIN_CONFIGS that ran at 256^3
(/res64 last; no check, no profile); then 1024^3 cuFFT and the fastest 512^3 configuration if its projected time fits; then
EXTRA_CONFIGS at 256^3 while the budget lasts.

Errors per configuration: (a) rank-1 input x = u (x) v (x) w of 17-bit integers (exact in float64) whose exact
DFT is known: rel. L2 on 2^18 sampled outputs against a long-double reference (also for cuFFT); (b) random
Gaussian input: rel. L2 difference to cuFFT; (c) round trip ifft(fft(x)) - x (n <= 512).
"""

from __future__ import annotations

import argparse
import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parents[1]

MAIN_CONFIGS = [
    ("int8", "crt", "triton", 8, "triton", "int32"),
    ("int8", "crt", "triton", 8, "triton", "int64"),
    ("int8", "crt", "triton", 8, "fused", "int32"),
    ("int8", "crt", "triton", 8, "fused_epi", "int32"),
]
"""Timed at every size, in this order: (backend, variant, epilogue, int8 group, int8 GEMM, residue kernel). The
first is the run-5 best (34.1 ms at 256^3 with the int64 residue kernel) on the 32-bit residue kernel; the second
is exactly run 5's config (A/B of the residue kernel); /fused computes row shifts and residues inside the stage
GEMM launch; /fusedepi also the epilogue, on the dot accumulators in registers (no int32 product planes)."""
EXTRA_CONFIGS = [
    ("int8", "kulisch", "triton", 8, "fused_epi", "int32"),
    ("int8", "kulisch", "triton", 8, "triton", "int32"),
    ("int8", "crt", "triton", 8, "cublas", "int32"),
]
"""At 256^3 after everything else, while the budget lasts (kulisch was run 5's fastest at 512^3 / 1024^3)."""

GEMM_TAG = {"cublas": "", "triton": "/tgemm", "fused": "/fused", "fused_epi": "/fusedepi"}


def key_of(cfg) -> str:
    b, v, epi, grp, gemm, res = cfg
    return (f"{b}/{v}" + ("/torch-epilogue" if epi == "torch" else "") + (f"/g{grp}" if grp > 1 else "")
            + GEMM_TAG[gemm] + ("/res64" if res == "int64" else ""))


ALL_CONFIGS = {key_of(c): c for c in MAIN_CONFIGS + EXTRA_CONFIGS}


def _now() -> float:
    return time.perf_counter()


# --------------------------------------------------------------------------------------------- worker side


def _emit(key, phase: str, **data) -> None:
    print("@@" + json.dumps({"key": key, "phase": phase, **data}, default=str), flush=True)


def _worker(spec: dict) -> None:
    import numpy as np
    import torch

    dev = spec["device"]
    n = spec["n"]

    def sync():
        if dev == "cuda":
            torch.cuda.synchronize()

    def timed(fn):
        """(result, seconds) of one call: CUDA events on the GPU, wall clock on CPU."""
        sync()
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

    def median_time(fn, reps):
        ts = []
        for _ in range(reps):
            out, t = timed(fn)
            del out
            ts.append(t)
        return float(np.median(ts)), ts

    from gpufield.fp64.fft import EmulatedFftPlan, fftn_fp64_emulated, ifftn_fp64_emulated
    from gpufield.fp64.fft.reference import dft_longdouble, rel_l2

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from fp64_residue_int64 import set_int64_residues

    _emit(None, "start", torch=torch.__version__, n=n, pid=os.getpid(),
          device=torch.cuda.get_device_name() if dev == "cuda" else "cpu",
          triton_cache_dir=os.environ.get("TRITON_CACHE_DIR"))

    # rank-1 input of 17-bit integers, exact in float64 (|x| < 2^52); exact DFT = U (x) V (x) W
    rng = np.random.default_rng(n)
    vecs = [rng.integers(-(2**17), 2**17, n) + 1j * rng.integers(-(2**17), 2**17, n) for _ in range(3)]
    vecs[1], vecs[2] = vecs[1].real.astype(complex), vecs[2].real.astype(complex)
    refs = [dft_longdouble(a) for a in vecs]
    kk = np.random.default_rng(1).integers(0, n, (3, 2**18))
    ref_s = refs[0][kk[0]] * refs[1][kk[1]] * refs[2][kk[2]]
    idx = torch.from_numpy(kk[0] * n * n + kk[1] * n + kk[2]).to(dev)

    def make_x():
        u, v, w = (torch.from_numpy(a).to(dev) for a in vecs)
        return u[:, None, None] * v[None, :, None] * w[None, None, :]

    def make_xr():
        g = torch.Generator(device=dev).manual_seed(n)
        return torch.complex(torch.randn((n,) * 3, generator=g, device=dev, dtype=torch.float64),
                             torch.randn((n,) * 3, generator=g, device=dev, dtype=torch.float64))

    def rank1_err(y):
        d = y.reshape(-1)[idx].cpu().numpy().astype(np.clongdouble) - ref_s
        return float(np.sqrt(np.sum(np.abs(d) ** 2) / np.sum(np.abs(ref_s) ** 2)))

    def rel_diff(a, b):
        num = torch.zeros((), dtype=torch.float64, device=a.device)
        den = torch.zeros_like(num)
        step = max(1, a.shape[0] // 16)
        for i in range(0, a.shape[0], step):
            num += torch.linalg.vector_norm(a[i:i + step] - b[i:i + step]) ** 2
            den += torch.linalg.vector_norm(b[i:i + step]) ** 2
        return float(torch.sqrt(num / den))

    def model(t):
        try:
            from gpufield.fp64.model import fft_floor_model

            m = fft_floor_model("H200", n=n)
            return {"model_h200_s": list(m.emulated_s), "c_epi_implied": t * m.int32_instr_per_s / m.real_outputs}
        except Exception as e:  # noqa: BLE001 - the benchmark must not die on the model
            return {"model_error": repr(e)[:200]}

    reps = 5 if n <= 256 else 3 if n <= 512 else 1
    round_trip = n <= 512
    check_ref: dict = {}
    _emit(None, "ready")

    for key in spec["configs"]:
        _emit(key, "begin")
        try:
            if key == "cufft":
                x = make_x()
                y, t_first = timed(lambda x=x: torch.fft.fftn(x))
                _emit(key, "warm", first_call_s=t_first)
                t, ts = median_time(lambda x=x: torch.fft.fftn(x), max(reps, 3))
                r = {"time_s": t, "times_s": ts, "rank1_rel_l2": rank1_err(y)}
                del x, y
                if round_trip:
                    xr = make_xr()
                    r["round_trip_rel_l2"] = rel_diff(torch.fft.ifftn(torch.fft.fftn(xr)), xr)
                    del xr
                _emit(key, "timed", **r)
                _emit(key, "end")
                continue
            b, v, epi, grp, gemm, res = ALL_CONFIGS[key]
            plan = EmulatedFftPlan(backend=b, variant=v, epilogue=epi, int8_group=grp, int8_gemm=gemm)
            set_int64_residues(res == "int64")  # the previous residue kernel for this config's calls (same bits)
            x = make_x()
            if dev == "cuda":
                torch.cuda.empty_cache()
                torch.cuda.reset_peak_memory_stats()
                base = torch.cuda.memory_allocated()
            t0 = _now()
            y, t_ev = timed(lambda x=x, plan=plan: fftn_fp64_emulated(x, plan))  # compiles on a cold cache
            warm = {"first_call_s": _now() - t0, "first_call_event_s": t_ev}
            if dev == "cuda":
                warm["peak_bytes_above_inputs"] = torch.cuda.max_memory_allocated() - base
            _emit(key, "warm", **warm)
            r = {"rank1_rel_l2": rank1_err(y)}
            del y
            r["time_s"], r["times_s"] = median_time(lambda x=x, plan=plan: fftn_fp64_emulated(x, plan), reps)
            r.update(model(r["time_s"]))
            del x
            _emit(key, "timed", **r)
            xr = make_xr()
            yr = fftn_fp64_emulated(xr, plan)
            yc = torch.fft.fftn(xr)
            e = {"random_rel_l2_vs_cufft": rel_diff(yr, yc)}
            del yc
            if round_trip:
                back, e["inverse_time_s"] = timed(lambda yr=yr, plan=plan: ifftn_fp64_emulated(yr, plan))
                e["round_trip_rel_l2"] = rel_diff(back, xr)
                del back
            del yr
            _emit(key, "errors", **e)
            if spec.get("profile") and dev == "cuda":
                _emit(key, "phases", **_profile(lambda xr=xr, plan=plan: fftn_fp64_emulated(xr, plan)))
            del xr
            if dev == "cuda":
                torch.cuda.empty_cache()
            cs = spec.get("check_shape")
            if cs:
                _emit(key, "check_begin")
                cs = tuple(cs)
                if cs not in check_ref:  # wide exponent spread, as the interpreter tests
                    crng = np.random.default_rng(1)
                    xc = (crng.standard_normal(cs) + 1j * crng.standard_normal(cs)) * np.exp(3 * crng.standard_normal(cs))
                    t0 = _now()
                    check_ref[cs] = (xc, fftn_fp64_emulated(xc), _now() - t0)  # exact CPU path
                xc, ref, t_ref = check_ref[cs]
                t0 = _now()
                yc = fftn_fp64_emulated(torch.from_numpy(xc).to(dev), plan).cpu().numpy()
                ndiff = int((yc.view(np.float64) != ref.view(np.float64)).sum())
                _emit(key, "check", shape="x".join(map(str, cs)), bit_identical=ndiff == 0, values_differing=ndiff,
                      check_call_s=_now() - t0, cpu_reference_s=t_ref,
                      rel_l2_vs_cpu_exact=rel_l2(yc, ref) if ndiff else 0.0)
            _emit(key, "end")
        except Exception as e:  # noqa: BLE001 - reported; the parent restarts a worker for the rest
            _emit(key, "error", error=repr(e)[:600])
            if dev == "cuda" and not isinstance(e, torch.cuda.OutOfMemoryError):
                sys.exit(3)  # the CUDA context may be unusable: a fresh worker for the remaining configs
            if dev == "cuda":
                torch.cuda.empty_cache()


def _phase_of(name: str) -> str:
    name = name.lower()
    if "fused_epi" in name:
        return "fused stage: residues + GEMMs + epilogue (triton)"
    if "fused_stage" in name:
        return "fused stage: shifts + residues + GEMMs (triton)"
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


def _profile(fn) -> dict:
    """Kernel time per phase (torch.profiler) of one warm call, launches, GPU busy vs wall."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    t0 = _now()
    fn()
    torch.cuda.synchronize()
    wall = _now() - t0
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
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
    return {"phases_s": {k: round(v, 6) for k, v in sorted(phases.items())}, "launches": launches,
            "kernel_launches_total": sum(launches.values()), "gpu_busy_s": busy, "wall_s": wall,
            "idle_s": wall - busy, "kernels": {k: sorted(v, key=lambda e: -e[2])[:6] for k, v in names.items()}}


# --------------------------------------------------------------------------------------------- parent side


class Run:
    """Results (rewritten to DIR/fp64_fft_gpu.json after every event), the log and the budgets."""

    def __init__(self, a):
        self.a = a
        self.t0 = _now()
        self.out = a.out
        self.log = open(a.out / "fp64_fft_gpu.log", "a", buffering=1)  # noqa: SIM115 - closed in main
        self.res: dict = {"meta": {"argv": sys.argv, "budgets_s": {k: getattr(a, k) for k in (
            "budget_s", "setup_budget_s", "compile_budget_s", "run_budget_s", "check_budget_s")},
            "triton_cache_dir": str(a.cache_dir)}, "sizes": {}, "skipped": [], "events": []}

    def left(self) -> float:
        return self.a.budget_s - (_now() - self.t0)

    def save(self) -> None:
        self.res["meta"]["elapsed_s"] = round(_now() - self.t0, 2)
        tmp = self.out / "fp64_fft_gpu.json.tmp"
        tmp.write_text(json.dumps(self.res, indent=1, default=str))
        os.replace(tmp, self.out / "fp64_fft_gpu.json")

    def say(self, msg: str) -> None:
        line = f"[{_now() - self.t0:6.1f} s] {msg}"
        print(line, flush=True)
        self.log.write(line + "\n")


def _worker_env(a) -> dict:
    env = dict(os.environ)
    env["TRITON_CACHE_DIR"] = str(a.cache_dir)
    env["PYTHONUNBUFFERED"] = "1"
    src = str(CHECKOUT / "src")
    if src not in env.get("PYTHONPATH", "").split(os.pathsep):
        env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    if a.device == "cpu":
        env["TRITON_INTERPRET"] = "1"
    return env


def _budget_for(a, phase: str, n: int, est_call_s: float) -> float:
    """Seconds a worker may spend from the event ``phase`` to its next event."""
    if phase == "spawn":  # python + torch + CUDA start, rank-1 reference
        return a.setup_budget_s * (2 if n >= 1024 else 1)
    if phase in ("ready", "end"):  # to the next "begin"
        return 30.0
    if phase == "begin":  # Triton compile (cold cache) + the first call
        return a.compile_budget_s + 4 * est_call_s
    if phase in ("warm", "timed", "errors", "phases"):  # timing reps, random input, inverse, profile
        return a.run_budget_s + 12 * est_call_s
    if phase == "check_begin":
        return a.check_budget_s
    return 30.0


SKIP_REASON = {"spawn": "skipped: setup budget", "ready": "skipped: setup budget", "end": "skipped: setup budget",
               "begin": "skipped: compile budget", "warm": "killed: timing budget", "timed": "killed: error budget",
               "errors": "killed: profile budget", "phases": "killed: run budget",
               "check_begin": "check skipped: check budget"}


def run_size(run: Run, n: int, keys: list[str], check: bool, profile: bool, est: dict) -> None:
    """Run ``keys`` at n^3 in worker processes (restarted after a kill or crash) under the phase budgets."""
    a = run.a
    size = run.res["sizes"].setdefault(str(n), {"n": n})
    todo = list(keys)
    while todo:
        if run.left() < 15:
            for k in todo:
                run.res["skipped"].append(f"{n}^3 {k}: whole-run budget")
            run.save()
            return
        spec = {"device": a.device, "n": n, "configs": todo,
                "check_shape": a.check_shape if check else None, "profile": profile}
        run.say(f"{n}^3: worker for {todo}")
        proc = subprocess.Popen([sys.executable, "-u", str(Path(__file__).resolve()), "--worker", json.dumps(spec)],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=_worker_env(a),
                                start_new_session=True, cwd=str(CHECKOUT))
        fd = proc.stdout.fileno()
        buf = b""
        cur, phase, t_phase = None, "spawn", _now()
        deadline = min(_now() + _budget_for(a, "spawn", n, 0.0), run.t0 + a.budget_s)
        killed = None
        while True:
            wait = deadline - _now()
            if wait <= 0:
                killed = phase
                os.killpg(proc.pid, signal.SIGKILL)  # the worker's own process group (start_new_session)
                proc.wait()
                break
            r, _, _ = select.select([fd], [], [], min(wait, 5.0))
            if not r:
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                proc.wait()
                break
            buf += chunk
            while b"\n" in buf:
                raw, buf = buf.split(b"\n", 1)
                line = raw.decode(errors="replace")
                if not line.startswith("@@"):
                    run.log.write(f"    | {line}\n")
                    if line.strip():
                        print(f"    | {line}"[:400], flush=True)
                    continue
                ev = json.loads(line[2:])
                k, ph = ev.pop("key"), ev.pop("phase")
                dt = _now() - t_phase
                t_phase = _now()
                run.res["events"].append([round(_now() - run.t0, 1), n, k, ph, round(dt, 2)])
                if ph == "start":
                    run.res["meta"].setdefault("worker", {}).update(ev)
                elif ph == "ready":
                    size["setup_s"] = round(dt, 2)
                elif ph == "begin":
                    cur = k
                elif k is not None:
                    rec = size.setdefault(k, {})
                    if ph == "warm":
                        rec.update(ev)
                    elif ph == "timed":
                        rec.update(ev)
                        if k == "cufft":
                            size["cufft_time_s"] = ev["time_s"]
                        elif size.get("cufft_time_s"):
                            rec["x_cufft"] = ev["time_s"] / size["cufft_time_s"]
                        est[k] = (n, ev["time_s"])
                        run.say(f"{n}^3 {k}: {ev['time_s'] * 1e3:.2f} ms (first call {rec.get('first_call_s', 0):.1f} s), "
                                f"rank-1 err {ev['rank1_rel_l2']:.2e}" + (f", {rec['x_cufft']:.1f}x cuFFT" if "x_cufft" in rec else ""))
                    elif ph in ("errors",):
                        rec.update(ev)
                    elif ph == "phases":
                        rec["profile"] = ev
                        run.say(f"{n}^3 {k}: busy {ev['gpu_busy_s'] * 1e3:.1f} ms of wall {ev['wall_s'] * 1e3:.1f}, "
                                + ", ".join(f"{p} {t * 1e3:.1f}" for p, t in sorted(ev["phases_s"].items(), key=lambda kv: -kv[1])))
                    elif ph == "check":
                        rec["check"] = ev
                        run.say(f"{n}^3 {k}: self-check {ev['shape']}: "
                                + ("bit-identical" if ev["bit_identical"] else f"FAILED, {ev['values_differing']} values differ"))
                    elif ph == "error":
                        rec["error"] = ev["error"]
                        run.res["skipped"].append(f"{n}^3 {k}: error {ev['error'][:120]}")
                        run.say(f"{n}^3 {k}: ERROR {ev['error'][:300]}")
                if ph in ("end", "error") and k in todo:
                    todo.remove(k)
                    cur = None
                if ph != "start":
                    phase = "end" if ph == "error" else ph
                g = est.get(cur) or est.get(next(iter(todo), None)) or (0, 0.0)
                est_call = g[1] * (n / g[0]) ** 3 if g[0] else 0.0
                deadline = min(_now() + _budget_for(a, phase, n, est_call), run.t0 + a.budget_s)
                run.save()
        if killed is not None:
            reason = SKIP_REASON.get(killed, f"killed in {killed}")
            if run.t0 + a.budget_s - _now() <= 0.5:
                reason += " (whole-run budget)"
            target = cur or (todo[0] if todo and killed in ("ready", "end") else None)
            if target is not None:
                size.setdefault(target, {})["status"] = reason
                run.res["skipped"].append(f"{n}^3 {target}: {reason}")
                todo.remove(target)
            else:  # setup itself did not fit: nothing at this size will
                run.res["skipped"].append(f"{n}^3 worker: {reason}; not run: {todo}")
                todo.clear()
            run.say(f"{n}^3: worker killed ({reason}; {target})")
        elif proc.returncode != 0 and cur in todo:  # crashed inside a configuration
            todo.remove(cur)
            size.setdefault(cur, {})["status"] = f"worker exited with {proc.returncode}"
            run.res["skipped"].append(f"{n}^3 {cur}: worker exited with {proc.returncode}")
        elif todo and phase != "end":  # exited before its first configuration (e.g. import or CUDA error)
            run.res["skipped"].append(f"{n}^3 worker exited with {proc.returncode} in {phase}; not run: {todo}")
            run.say(f"{n}^3: worker exited with {proc.returncode} in {phase}; see the log")
            todo.clear()
        run.save()


def plan_text(a) -> list[str]:
    lines = [f"budget {a.budget_s:.0f} s in all; per config: setup <= {a.setup_budget_s:.0f} s (x2 at 1024^3), "
             f"compile + first call <= {a.compile_budget_s:.0f} s, timing/errors/profile <= {a.run_budget_s:.0f} s "
             f"(+12 calls), self-check <= {a.check_budget_s:.0f} s; TRITON_CACHE_DIR={a.cache_dir}"]
    s0 = a.sizes[0]
    lines.append(f"{s0}^3: cufft, " + ", ".join(key_of(c) for c in MAIN_CONFIGS)
                 + f" (each: profiled call, self-check on {'x'.join(map(str, a.check_shape))})")
    for i, s in enumerate(a.sizes[1:], 1):
        if i < 2:
            lines.append(f"{s}^3: cufft + the configs that ran at {s0}^3, /res64 last (no check, no profile)")
        else:
            lines.append(f"{s}^3: cufft + the fastest config of the previous size, if 5 x 8 x its time + 90 s fits")
    if a.extras:
        lines.append(f"{s0}^3 extras while the budget lasts: " + ", ".join(key_of(c) for c in EXTRA_CONFIGS))
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path)
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--sizes", default="256,512,1024", help="comma-separated cube sides, first = the checked size")
    ap.add_argument("--configs", default=None, help="comma-separated keys instead of MAIN_CONFIGS (see --dry-run)")
    ap.add_argument("--no-extras", dest="extras", action="store_false", help="do not run EXTRA_CONFIGS at the end")
    ap.add_argument("--budget-s", type=float, default=480.0, help="whole run, wall clock (s)")
    ap.add_argument("--setup-budget-s", type=float, default=60.0, help="worker start + inputs (s)")
    ap.add_argument("--compile-budget-s", type=float, default=110.0, help="compile + first call per config (s)")
    ap.add_argument("--run-budget-s", type=float, default=30.0, help="timing + errors + profile per config (s)")
    ap.add_argument("--check-budget-s", type=float, default=40.0, help="bit-identity self-check per config (s)")
    ap.add_argument("--check-shape", default="16,16,256", help="self-check input shape (every stage N = K = 16)")
    ap.add_argument("--cache-dir", type=Path, default=CHECKOUT / ".triton-cache", help="TRITON_CACHE_DIR")
    ap.add_argument("--dry-run", action="store_true", help="print the plan and exit")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker is not None:
        _worker(json.loads(a.worker))
        return
    a.sizes = [int(s) for s in a.sizes.split(",") if s.strip()]
    a.check_shape = [int(s) for s in a.check_shape.split(",") if s.strip()]
    a.cache_dir = a.cache_dir.resolve()
    main_keys = [key_of(c) for c in MAIN_CONFIGS]
    if a.configs:
        main_keys = [k.strip() for k in a.configs.split(",") if k.strip()]
        bad = [k for k in main_keys if k not in ALL_CONFIGS]
        if bad:
            sys.exit(f"unknown configs {bad}; known: {list(ALL_CONFIGS)}")
    if a.dry_run:
        print("\n".join(plan_text(a)))
        print("known configs:", ", ".join(ALL_CONFIGS))
        return
    if a.out is None:
        sys.exit("--out DIR is needed")
    a.out.mkdir(parents=True, exist_ok=True)
    a.cache_dir.mkdir(parents=True, exist_ok=True)
    run = Run(a)
    run.res["meta"]["plan"] = plan_text(a)
    for ln in plan_text(a):
        run.say(ln)
    run.save()
    est: dict = {}
    s0 = a.sizes[0]
    run_size(run, s0, ["cufft"] + main_keys, check=bool(a.check_shape), profile=True, est=est)
    ran = [k for k in main_keys if "time_s" in run.res["sizes"][str(s0)].get(k, {})]
    prev = s0
    for i, n in enumerate(a.sizes[1:], 1):
        if i >= 2:  # the third size (1024^3): the fastest configuration only
            cand = [k for k in ran if k in est and est[k][0] == prev]
            if not cand:
                run.res["skipped"].append(f"{n}^3: no configuration timed at {prev}^3")
                continue
            best = min(cand, key=lambda k: est[k][1])
            pred = est[best][1] * (n / est[best][0]) ** 3
            need = 5 * pred + 90
            run.res["sizes"].setdefault(str(n), {"n": n})["predicted"] = {"config": best, "time_s": pred, "need_s": need}
            if need > run.left():
                run.res["skipped"].append(f"{n}^3 {best}: needs ~{need:.0f} s, {run.left():.0f} s left")
                run.save()
                continue
            run_size(run, n, ["cufft", best], check=False, profile=False, est=est)
        else:  # the residue A/B (/res64) last: 256^3 answers it, and N = 32 stages need new compiles
            order = [k for k in ran if not k.endswith("/res64")] + [k for k in ran if k.endswith("/res64")]
            run_size(run, n, ["cufft"] + order, check=False, profile=False, est=est)
            ran = [k for k in ran if "time_s" in run.res["sizes"][str(n)].get(k, {})]
        prev = n
    if a.extras and run.left() > a.setup_budget_s + 30:
        run_size(run, s0, [key_of(c) for c in EXTRA_CONFIGS], check=bool(a.check_shape), profile=True, est=est)
    run.save()
    summary(run)
    run.log.close()


def summary(run: Run) -> None:
    r = run.res
    run.say(f"== emulated FP64 FFT on {r['meta'].get('worker', {}).get('device', '?')} "
            f"(torch {r['meta'].get('worker', {}).get('torch', '?')}) ==")
    for n, s in r["sizes"].items():
        cu = s.get("cufft", {})
        run.say(f"{n}^3: cuFFT {cu.get('time_s', float('nan')) * 1e3:.2f} ms, rank-1 err {cu.get('rank1_rel_l2', float('nan')):.2e}")
        for k, v in s.items():
            if k == "cufft" or not isinstance(v, dict) or k == "predicted":
                continue
            if "time_s" in v:
                chk = v.get("check", {})
                run.say(f"   {k:28s} {v['time_s'] * 1e3:9.2f} ms  x{v.get('x_cufft', 0):.1f}  first call "
                        f"{v.get('first_call_s', 0):5.1f} s  err {v.get('rank1_rel_l2', float('nan')):.2e}"
                        + (f"  check {'ok' if chk.get('bit_identical') else 'FAILED'}" if chk else "")
                        + (f"  [{v['status']}]" if "status" in v else ""))
            else:
                run.say(f"   {k:28s} {v.get('status') or v.get('error', '?')[:100]}")
    for s in r["skipped"]:
        run.say(f"skipped: {s}")
    run.say(f"elapsed {r['meta']['elapsed_s']:.0f} s; JSON in {run.out / 'fp64_fft_gpu.json'}")


if __name__ == "__main__":
    main()
