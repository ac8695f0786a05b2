"""H200 power probe for the twin's GPU model: read-only NVML sampling beside known workloads.

Run on a machine with one GPU (torch + CUDA, nvidia-ml-py, numpy)::

    PYTHONPATH=/tmp/site:src python3 benchmarks/power_twin_probe.py --out DIR

or on the CPU with the repo's fake NVML and tiny sizes (same code path, readings meaningless)::

    PYTHONPATH=src python3 benchmarks/power_twin_probe.py --dry-run-cpu --out DIR

Nothing is set: NVML goes through :class:`gpufield.power.twin.probe.ProbeNvml` (an allow-list of
read calls plus GPM reads); clocks, limits, persistence, MIG and compute mode are measured as found.
The whole run stops within ``--limit-s`` (default 230 s): a case is not started when it would not
finish in time (recorded as skipped), the JSON is rewritten after every case, and a watchdog thread
writes what there is and exits 124 at the limit.

Cases, in run order, each with ``--warm-s`` (2 s) warm-up then ``--steady-s`` (10 s) measured;
FLOP and byte counts are ours, from the shapes (bf16 = 2 bytes; GEMM bytes are the lower bound
"each operand read once, the output written once"; decode/launch bytes are the weights read once per
use plus activations in and out, weights sized far above the 50 MB L2 so every use comes from HBM):

=================  =====================================================================  ========
case               workload                                                               split
=================  =====================================================================  ========
idle_pre           idle, before this process creates a CUDA context (8 s)                  fit
idle_ctx           idle with a live CUDA context, nothing queued (8 s)                     fit
gemm_2048          bf16 ``torch.mm`` M=N=K=2048, out= preallocated                          fit
gemm_4096          bf16 M=N=K=4096                                                          HELD-OUT
gemm_8192          bf16 M=N=K=8192                                                          fit
gemm_tall          bf16 M=16384, N=8192, K=1024 (tall-skinny, output-write heavy)           fit
idle_mid           idle with context right after the GEMMs (8 s)                            HELD-OUT
decode_b1          y = x W_i^T, x (b, 8192), W_i (16384, 8192) rotated over 32 matrices     fit
                   (8 GiB of weights); b = 1 is cuBLAS GEMV
decode_b4          same, b = 4                                                              fit
decode_b16         same, b = 16                                                             HELD-OUT
decode_b64         same, b = 64                                                             fit
decode_b256        same, b = 256 (near the ridge point)                                     HELD-OUT
launch_d1024       batch-1 decode of 48 layers h = tanh(h W_l), d = 1024 (96 MiB weights),  fit
                   2 kernels per layer, per-kernel launches (no graphs), synchronize per token
launch_d2048       same, d = 2048, 24 layers (192 MiB)                                      HELD-OUT
copy               ``dst.copy_(src)``, 2 GiB each (bytes = read + write)                    fit
idle_post          idle with context after all load (8 s)                                   fit
=================  =====================================================================  ========

The split was fixed in this docstring before any of this probe's data existed: one held-out point
per regime (prefill GEMM, HBM-bound decode twice: a small and the largest batch, launch-bound,
idle), so the error on the held-out cases is an honest estimate of the twin's error per regime.

Crash isolation: run 72 of this probe died with SIGSEGV inside the first 8 s, before any output
(the NVML sampler thread was the only code running: GPM was new to that machine). Now, before
anything else, the exact sampler code runs for ~1.5 s in a canary subprocess: first with GPM and the
instant-power field, then (if that crashed) without GPM, then without the field; the probe uses only
what a canary survived, records the canaries in ``meta.canaries``, and ``faulthandler`` prints the
stacks of a crash. Run 72b (the lead's re-run with GPM and three other calls stubbed out) showed the
crash inside ``nvmlGpmMetricsGet`` called from the sampler thread, so GPM metrics are now computed
only in the main thread, over each case's whole window. The JSON is written before the first case
and after every case.

Checks (METHOD.md): random data (never zeros); outputs filled with NaN before a case and checked
finite everywhere after; GEMM / decode / one launch-bound layer compared with a float64 reference on a
block; the copy compared element for element. Writes ``DIR/power_twin_probe.json``; prints a table last.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import math
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

T_START = time.monotonic()
faulthandler.enable()  # a crash inside a C library (NVML, CUDA) prints every thread's Python stack

from gpufield.power.twin.probe import ProbeNvml, ProbeSampler, aggregate_window  # noqa: E402

SPLIT = {"idle_pre": "fit", "idle_ctx": "fit", "gemm_2048": "fit", "gemm_4096": "held_out",
         "gemm_8192": "fit", "gemm_tall": "fit", "idle_mid": "held_out", "decode_b1": "fit",
         "decode_b4": "fit", "decode_b16": "held_out", "decode_b64": "fit", "decode_b256": "held_out",
         "launch_d1024": "fit", "launch_d2048": "held_out", "copy": "fit", "idle_post": "fit"}


class Probe:
    """State of one probe run (device, sampler, results) and the workload cases."""

    def __init__(self, args: argparse.Namespace, nvml, handle, fake) -> None:
        self.args, self.nvml, self.handle, self.fake = args, nvml, handle, fake
        self.cpu = args.dry_run_cpu
        self.deadline = T_START + args.limit_s
        self.cases: list[dict] = []
        self.meta: dict = {"argv": sys.argv, "limit_s": args.limit_s, "warm_s": args.warm_s,
                           "steady_s": args.steady_s, "interval_s": args.interval_s, "split": SPLIT,
                           "dry_run_cpu": self.cpu}
        self.sampler: ProbeSampler | None = None
        self.torch = None
        self.lock = threading.Lock()
        self.finished = threading.Event()  # set when main() returns: the watchdog then stands down

    # --- output --------------------------------------------------------------------------
    def write(self, note: str = "") -> None:
        with self.lock:
            doc = {"meta": {**self.meta, "note": note, "wall_s": time.monotonic() - T_START},
                   "cases": list(self.cases),
                   "samples": self.sampler.snapshot() if self.sampler else [],
                   "sampler_errors": dict(self.sampler.errors) if self.sampler else {},
                   "gpm_supported": bool(self.sampler and self.sampler.gpm_supported)}
            out = Path(self.args.out) / "power_twin_probe.json"
            tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
            tmp.write_text(json.dumps(doc, default=str))
            os.replace(tmp, out)

    def watchdog(self) -> None:
        left = self.deadline - time.monotonic() - 2.0
        if self.finished.wait(max(0.0, left)):  # the run ended in time (also: main() called in-process by a test)
            return
        try:
            self.write(note="watchdog: wall limit reached, run cut short")
        finally:
            print(f"power_twin_probe: wall limit {self.args.limit_s} s reached; partial JSON written", flush=True)
            os._exit(124)

    # --- timing ---------------------------------------------------------------------------
    def sync(self) -> None:
        if not self.cpu:
            self.torch.cuda.synchronize()

    def _now(self) -> float:
        return self.sampler.clock()

    def _load(self, x: float) -> None:
        if self.fake is not None:
            self.fake.set_load(0, x)

    def idle(self, name: str, dur_s: float) -> None:
        """An idle case: nothing queued for ``dur_s``."""
        if not self._room(dur_s + 0.5, name):
            return
        self._load(0.0)
        g0, t0 = self.sampler.gpm_snapshot(), self._now()
        time.sleep(dur_s)
        t1, g1 = self._now(), self.sampler.gpm_snapshot()
        self._record({"name": name, "kind": "idle", "params": {}, "flop": 0.0, "bytes": 0.0, "launches": 0,
                      "steady_wall_s": t1 - t0, "gpu_time_s": 0.0, "check": {"ok": True, "what": "idle"}},
                     t0, t1, (g0, g1))

    def _room(self, need_s: float, name: str) -> bool:
        reserve = 0.0 if name == "idle_post" else self.args.steady_s * 0.8 + 2.0
        if time.monotonic() + need_s > self.deadline - reserve - 3.0:
            self.cases.append({"name": name, "split": SPLIT[name], "skipped": "deadline"})
            self.write()
            return False
        return True

    def _record(self, case: dict, t0: float, t1: float, gpm: tuple) -> None:
        case["split"] = SPLIT[case["name"]]
        case["gpm_window"] = self.sampler.gpm_metrics(*gpm)  # GPM over the whole steady window
        for g in gpm:
            self.sampler.gpm_free(g)
        w = max(case["steady_wall_s"], 1e-9)
        case["flop_per_s"] = case["flop"] / w
        case["hbm_bytes_per_s"] = case["bytes"] / w
        case["launches_per_s"] = case["launches"] / w
        case["kernel_time_s_per_launch"] = case["gpu_time_s"] / case["launches"] if case["launches"] else None
        # settle 0.5 s into the window (NVML power usage averages over ~1 s on Hopper)
        case["nvml"] = aggregate_window(self.sampler.snapshot(), t0 + min(0.5, 0.1 * (t1 - t0)), t1)
        self.cases.append(case)
        self.write()

    def run(self, name: str, kind: str, params: dict, step, per_step: dict, check, load: float) -> None:
        """Warm up ``step`` (launches one unit of work), size chunks to ~50 ms, measure, check.

        ``per_step`` = counted ``flop``, ``bytes``, ``launches`` of one ``step()`` call.
        """
        a = self.args
        if not self._room(a.warm_s + a.steady_s + 2.0, name):
            return
        torch = self.torch
        self._load(load)
        tw = time.monotonic()
        n_warm, t_one = 0, None
        while time.monotonic() - tw < a.warm_s or n_warm < 2:
            t = time.perf_counter()
            step()
            self.sync()
            t_one = time.perf_counter() - t
            n_warm += 1
        reps = max(1, int(math.ceil(0.05 / max(t_one, 1e-6))))
        flop = byt = launches = 0.0
        gpu_s = 0.0
        g0, t0 = self.sampler.gpm_snapshot(), self._now()
        ts = time.monotonic()
        while time.monotonic() - ts < a.steady_s:
            if self.cpu:
                c0 = time.perf_counter()
            else:
                e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                e0.record()
            for _ in range(reps):
                step()
            if self.cpu:
                gpu_s += time.perf_counter() - c0
            else:
                e1.record()
                e1.synchronize()
                gpu_s += e0.elapsed_time(e1) / 1000.0
            flop += per_step["flop"] * reps
            byt += per_step["bytes"] * reps
            launches += per_step["launches"] * reps
        self.sync()
        t1, g1 = self._now(), self.sampler.gpm_snapshot()
        wall = time.monotonic() - ts
        self._load(0.0)
        try:
            chk = check()
        except Exception as e:  # a failed check is a result, not a crash
            chk = {"ok": False, "error": f"{type(e).__name__}: {e}"}
        self._record({"name": name, "kind": kind, "params": params, "flop": flop, "bytes": byt,
                      "launches": launches, "steady_wall_s": wall, "gpu_time_s": gpu_s, "reps_per_chunk": reps,
                      "per_step": per_step, "check": chk}, t0, t1, (g0, g1))

    # --- workloads ------------------------------------------------------------------------
    def _close(self, got, ref, what: str, tol: float) -> dict:
        err = float((got.double() - ref).abs().max() / ref.abs().max().clamp_min(1e-30))
        return {"ok": bool(err < tol), "what": what, "max_rel_err": err, "tol": tol}

    def gemm(self, name: str, m: int, n: int, k: int) -> None:
        t, dev, dt = self.torch, self.dev, self.dt
        if self.cpu:
            m, n, k = max(8, m // 64), max(8, n // 64), max(8, k // 64)
        a, b = t.randn(m, k, device=dev, dtype=dt), t.randn(k, n, device=dev, dtype=dt)
        c = t.full((m, n), float("nan"), device=dev, dtype=dt)

        def step() -> None:
            t.mm(a, b, out=c)

        def check() -> dict:
            self.sync()
            r = self._close(c[:64, :64], a[:64].double() @ b[:, :64].double(), "c[:64,:64] vs float64", 2e-2)
            r["all_finite"] = bool(t.isfinite(c).all())
            r["ok"] = r["ok"] and r["all_finite"]
            return r
        per = {"flop": 2.0 * m * n * k, "bytes": 2.0 * (m * k + k * n + m * n), "launches": 1}
        self.run(name, "gemm", {"m": m, "n": n, "k": k}, step, per, check, load=1.0)

    def decode(self, name: str, batch: int, pool) -> None:
        t, dev, dt = self.torch, self.dev, self.dt
        n_mat, n, k = pool.shape
        x = t.randn(batch, k, device=dev, dtype=dt) / math.sqrt(k)
        y = t.full((batch, n), float("nan"), device=dev, dtype=dt)

        def step() -> None:
            for i in range(n_mat):
                t.mm(x, pool[i].t(), out=y)

        def check() -> dict:
            self.sync()
            r = self._close(y[:, :64], x.double() @ pool[n_mat - 1, :64].double().t(), "y[:, :64] vs float64", 2e-2)
            r["all_finite"] = bool(t.isfinite(y).all())
            r["ok"] = r["ok"] and r["all_finite"]
            return r
        per = {"flop": 2.0 * batch * n * k * n_mat, "bytes": 2.0 * n_mat * (n * k + batch * k + batch * n),
               "launches": n_mat}
        self.run(name, "decode", {"batch": batch, "n": n, "k": k, "matrices": n_mat}, step, per, check,
                 load=0.6)

    def launch(self, name: str, d: int, layers: int) -> None:
        t, dev, dt = self.torch, self.dev, self.dt
        if self.cpu:
            d = max(16, d // 32)
        w = t.randn(layers, d, d, device=dev, dtype=dt) / math.sqrt(d)
        h0 = t.randn(1, d, device=dev, dtype=dt)
        state = {"h": h0}

        def step() -> None:
            h = h0
            for i in range(layers):
                h = t.tanh(h @ w[i])
            self.sync()  # a decode token: the host waits for the result before the next step
            state["h"] = h

        def check() -> dict:
            one = t.tanh(h0 @ w[0])
            r = self._close(one, t.tanh(h0.double() @ w[0].double()), "layer 0 vs float64", 2e-2)
            r["all_finite"] = bool(t.isfinite(state["h"]).all())
            r["ok"] = r["ok"] and r["all_finite"]
            return r
        per = {"flop": 2.0 * d * d * layers, "bytes": 2.0 * layers * (d * d + 2 * d), "launches": 2 * layers}
        self.run(name, "launch", {"d": d, "layers": layers, "batch": 1}, step, per, check, load=0.15)

    def copy(self, name: str, n_bytes: int) -> None:
        t, dev = self.torch, self.dev
        n = n_bytes // 2
        src = t.randn(n, device=dev, dtype=self.dt)
        dst = t.full((n,), float("nan"), device=dev, dtype=self.dt)

        def step() -> None:
            dst.copy_(src)

        def check() -> dict:
            self.sync()
            return {"ok": bool(t.equal(dst, src)), "what": "dst == src, every element"}
        self.run(name, "copy", {"bytes_each": 2 * n}, step, {"flop": 0.0, "bytes": 4.0 * n, "launches": 1}, check,
                 load=0.5)

    def main(self) -> None:
        a = self.args
        self.idle("idle_pre", a.idle_s)  # no CUDA context yet: torch is not even imported
        import torch

        self.torch = torch
        self.dev = "cpu" if self.cpu else "cuda"
        self.dt = torch.float32 if self.cpu else torch.bfloat16
        torch.manual_seed(0)
        if not self.cpu:
            torch.backends.cuda.matmul.allow_tf32 = False
            torch.zeros(1, device="cuda")
            torch.cuda.synchronize()
            p = torch.cuda.get_device_properties(0)
            self.meta.update(torch=torch.__version__, cuda=torch.version.cuda, device_name=p.name,
                             device_uuid=str(getattr(p, "uuid", "")), sm_count=p.multi_processor_count)
        self.idle("idle_ctx", a.idle_s)
        for name, (m, n, k) in (("gemm_2048", (2048,) * 3), ("gemm_4096", (4096,) * 3),
                                ("gemm_8192", (8192,) * 3), ("gemm_tall", (16384, 8192, 1024))):
            self.gemm(name, m, n, k)
        self.idle("idle_mid", a.idle_s)
        shape = (4, 64, 32) if self.cpu else (32, 16384, 8192)
        pool = torch.randn(*shape, device=self.dev, dtype=self.dt)
        self.meta["decode_pool_bytes"] = pool.numel() * pool.element_size()
        for b in (1, 4, 16, 64, 256):
            self.decode(f"decode_b{b}", b, pool)
        del pool
        self.launch("launch_d1024", 1024, 48)
        self.launch("launch_d2048", 2048, 24)
        self.copy("copy", (1 << 16) if self.cpu else (2 << 30))
        if not self.cpu:
            torch.cuda.synchronize()
        self.idle("idle_post", a.idle_s)


def _canary_child(stage: str, interval_s: float, fake: bool) -> int:
    """Run the sampler (and, for ``gpm``, main-thread GPM snapshots beside it) for ~1.5 s; print OK."""
    if fake:
        from gpufield.testing.fake_nvml import FakeNvml

        nvml = FakeNvml(clock=time.monotonic)
    else:
        import pynvml as nvml

    ro = ProbeNvml(nvml)
    ro.nvmlInit()
    h = ro.nvmlDeviceGetHandleByIndex(0)
    with ProbeSampler(nvml, h, interval_s=interval_s, use_gpm=stage == "gpm",
                      use_field_values=stage in ("gpm", "field")) as s:
        g0 = s.gpm_snapshot()
        time.sleep(1.5)
        g1 = s.gpm_snapshot()
        m = s.gpm_metrics(g0, g1)
        s.gpm_free(g0)
        s.gpm_free(g1)
    ro.nvmlShutdown()
    print(json.dumps({"stage": stage, "ok": True, "samples": len(s.samples), "gpm_supported": s.gpm_supported,
                      "gpm": m, "errors": s.errors, "last": s.samples[-1] if s.samples else None}, default=str))
    return 0


def _canaries(interval_s: float, fake: bool) -> tuple[bool, bool, list[dict]]:
    """``(use_gpm, use_field_values, records)`` from canary subprocesses (module docstring)."""
    recs = []
    for stage in ("gpm", "field", "plain"):
        cmd = [sys.executable, os.path.abspath(__file__), "--canary", stage, "--out", "-", "--interval-s",
               str(interval_s)] + (["--dry-run-cpu"] if fake else [])
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=15)
            rc, out, err = p.returncode, p.stdout, p.stderr
        except subprocess.TimeoutExpired as e:
            rc, out, err = "timeout", str(e.stdout or ""), str(e.stderr or "")
        recs.append({"stage": stage, "rc": rc, "stdout_tail": out[-2000:], "stderr_tail": err[-3000:]})
        if rc == 0:
            return stage == "gpm", stage in ("gpm", "field"), recs
    return False, False, recs


def _static(nvml, h) -> dict:
    """Settings read before and after (read-only attestation)."""
    out = {}
    for k, fn, args in (("name", "nvmlDeviceGetName", ()), ("uuid", "nvmlDeviceGetUUID", ()),
                        ("enforced_limit_mw", "nvmlDeviceGetEnforcedPowerLimit", ()),
                        ("limit_mw", "nvmlDeviceGetPowerManagementLimit", ()),
                        ("default_limit_mw", "nvmlDeviceGetPowerManagementDefaultLimit", ()),
                        ("max_sm_mhz", "nvmlDeviceGetMaxClockInfo", (nvml.NVML_CLOCK_SM,)),
                        ("app_sm_mhz", "nvmlDeviceGetApplicationsClock", (nvml.NVML_CLOCK_SM,)),
                        ("driver", "nvmlSystemGetDriverVersion", None)):
        try:
            v = getattr(nvml, fn)() if args is None else getattr(nvml, fn)(h, *args)
            out[k] = v.decode() if isinstance(v, bytes) else v
        except Exception as e:
            out[k] = f"absent: {type(e).__name__}"
    return out


def _table(cases: list[dict]) -> str:
    rows = [f"{'case':<13} {'split':<8} {'P_med W':>8} {'P_en W':>8} {'SM MHz':>7} {'TFLOP/s':>8} {'TB/s':>6} "
            f"{'kl/s':>8} {'SMact%':>6} {'DRAM%':>6} ok"]
    for c in cases:
        if "skipped" in c:
            rows.append(f"{c['name']:<13} {c['split']:<8} skipped ({c['skipped']})")
            continue
        v, g = c["nvml"], c["gpm_window"]

        def f(x, fmt):
            return format(x, fmt) if x is not None else "-"
        rows.append(f"{c['name']:<13} {c['split']:<8} {f(v['power_w_median'], '8.1f')} {f(v['power_w_energy'], '8.1f')} "
                    f"{f(v['sm_clock_mhz_median'], '7.0f')} {c['flop_per_s'] / 1e12:8.1f} {c['hbm_bytes_per_s'] / 1e12:6.2f} "
                    f"{c['launches_per_s']:8.0f} {f(g['sm_util_pct'], '6.1f')} {f(g['dram_bw_util_pct'], '6.1f')} "
                    f"{c['check']['ok']}")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="output directory (created)")
    ap.add_argument("--dry-run-cpu", action="store_true", help="fake NVML + tiny CPU sizes (tests the code path)")
    ap.add_argument("--limit-s", type=float, default=230.0, help="hard wall limit for the whole run (s)")
    ap.add_argument("--warm-s", type=float, default=2.0)
    ap.add_argument("--steady-s", type=float, default=10.0)
    ap.add_argument("--idle-s", type=float, default=8.0)
    ap.add_argument("--interval-s", type=float, default=0.05, help="NVML sampling period (s)")
    ap.add_argument("--canary", choices=("gpm", "field", "plain"), help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.canary:
        return _canary_child(a.canary, a.interval_s, a.dry_run_cpu)
    Path(a.out).mkdir(parents=True, exist_ok=True)
    fake = None
    if a.dry_run_cpu:
        from gpufield.testing.fake_nvml import FakeNvml

        fake = nvml = FakeNvml(clock=time.monotonic)
    else:
        import pynvml as nvml
    ro = ProbeNvml(nvml)
    try:
        ro.nvmlInit()
        h = ro.nvmlDeviceGetHandleByIndex(0)
    except Exception as e:
        print(f"power_twin_probe: NVML unavailable ({type(e).__name__}: {e}); use --dry-run-cpu on a machine "
              "without a GPU", file=sys.stderr)
        return 2
    if not a.dry_run_cpu:
        try:
            import torch

            if not torch.cuda.is_available():
                raise RuntimeError("torch.cuda.is_available() is False")
        except Exception as e:
            print(f"power_twin_probe: CUDA unavailable ({e}); use --dry-run-cpu", file=sys.stderr)
            return 2
    pr = Probe(a, nvml, h, fake)
    threading.Thread(target=pr.watchdog, daemon=True, name="watchdog").start()
    try:
        return _run(a, pr, ro, h, nvml)
    finally:
        pr.finished.set()


def _run(a, pr, ro, h, nvml) -> int:
    """The probe proper, after the checks of :func:`main` (its watchdog already running)."""
    use_gpm, use_fv, pr.meta["canaries"] = _canaries(a.interval_s, a.dry_run_cpu)
    print(f"canaries: {[(c['stage'], c['rc']) for c in pr.meta['canaries']]} -> gpm {use_gpm}, "
          f"instant-power field {use_fv}", flush=True)
    pr.meta["before"] = _static(ro, h)
    pr.write(note="started")
    with ProbeSampler(nvml, h, interval_s=a.interval_s, clock=time.monotonic, use_gpm=use_gpm,
                      use_field_values=use_fv) as s:
        pr.sampler = s
        pr.main()
    pr.meta["after"] = _static(ro, h)
    keys = ("enforced_limit_mw", "limit_mw", "app_sm_mhz", "max_sm_mhz")
    pr.meta["settings_unchanged"] = all(pr.meta["before"].get(k) == pr.meta["after"].get(k) for k in keys)
    pr.write(note="complete")
    ro.nvmlShutdown()
    print(f"wall {time.monotonic() - T_START:.1f} s; gpm_supported={s.gpm_supported}; sampler errors "
          f"{s.errors}; settings unchanged {pr.meta['settings_unchanged']}; {len(s.samples)} samples")
    print(_table(pr.cases))
    return 0 if pr.meta["settings_unchanged"] else 1


if __name__ == "__main__":
    sys.exit(main())
