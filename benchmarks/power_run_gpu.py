"""``gpufield power run --shadow`` beside a real GPU workload on one GPU (read-only).

Run on the H200 (torch + CUDA, nvidia-ml-py, prometheus-client, typer/httpx installed)::

    PYTHONPATH=src python3 benchmarks/power_run_gpu.py --out DIR --duration-s 180

or on CPU, with tiny sizes and the fake NVML (same code path, proves the plumbing)::

    PYTHONPATH=src python3 benchmarks/power_run_gpu.py --out DIR --duration-s 20 --dry-run-cpu

What happens (hard wall limit ``--wall-s``, default 260 s, start-up included):

1. The GPU's UUID and its settings are read through the read-only NVML proxy (:func:`attest`: power
   limit requested / enforced / default, application clocks, the locked-clock reason bit 0x2, plus
   the application-clock target and the raw clock-event reasons).
2. A workload subprocess (``--workload``) alternates prefill-like phases (bf16 GEMM chains: 4
   layers d=8192, FFN 28672 on 8192 tokens, ~44 TFLOP a step) and decode-like phases (batch-64 GEMVs
   streaming a 40 GiB random bf16 weight pool each step: memory-bound). It exports its step times as
   vLLM V1's own Prometheus histograms (``vllm:time_to_first_token_seconds`` per prefill step,
   ``vllm:inter_token_latency_seconds`` per decode step, vLLM's bucket lists, prometheus-client as vLLM
   itself uses) plus ``vllm:num_requests_waiting`` and ``vllm:kv_cache_usage_perc``, on 127.0.0.1.
3. ``gpufield power run --shadow`` runs as its own process beside it, with a lanes file naming the
   real UUID as a decode lane (vLLM engine, ITL p99 SLO 50 ms, TTFT 2 s, the twin-derived plan),
   period 1 s, metrics on a free port; the script scrapes that exporter a few times.
4. After ``--duration-s`` the controller gets SIGTERM; its CPU time comes from ``wait4``. The GPU's
   settings are read again and compared.

Writes ``DIR/power_run.json`` (summary), ``DIR/decisions.jsonl`` (the controller's log),
``DIR/lanes.toml``, ``DIR/workload.json``, ``DIR/controller.{out,err}``, ``DIR/exporter_scrapes.txt``.
Exit 1 if the settings changed, the controller failed, or its stop record is missing.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

T0 = time.monotonic()

# vLLM V1 bucket lists (vllm/v1/metrics/loggers.py; power.md 5.1)
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
                40.0, 80.0, 160.0, 640.0, 2560.0)
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0,
               80.0)


# --- the workload subprocess ---------------------------------------------------------------------
def workload(args: argparse.Namespace) -> int:
    """Alternate prefill-like and decode-like phases; export step times as vLLM histograms."""
    import torch
    from prometheus_client import CollectorRegistry, Gauge, Histogram, start_http_server

    cuda = not args.cpu
    dev = "cuda" if cuda else "cpu"
    dt = torch.bfloat16 if cuda else torch.float32
    torch.manual_seed(0)
    if not cuda:
        torch.set_num_threads(1)  # the CPU dry run shares two cores with everyone
    reg = CollectorRegistry()
    lab = {"model_name": "gpufield/synthetic", "engine": "0"}
    ttft = Histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
                     list(lab), buckets=TTFT_BUCKETS, registry=reg).labels(**lab)
    itl = Histogram("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
                    list(lab), buckets=ITL_BUCKETS, registry=reg).labels(**lab)
    Gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", list(lab),
          registry=reg).labels(**lab).set(0)
    kv = Gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", list(lab), registry=reg)
    kv.labels(**lab).set(0.3)
    running = Gauge("vllm:num_requests_running", "Number of requests in model execution batches.", list(lab),
                    registry=reg).labels(**lab)
    if cuda:
        d, ff, tokens, layers, batch, pool_mats, pool_cols = 8192, 28672, 8192, 4, 64, 160, 16384
    else:
        d, ff, tokens, layers, batch, pool_mats, pool_cols = 128, 256, 64, 2, 8, 8, 256
    pw = [(torch.randn(d, 3 * d, device=dev, dtype=dt) * 0.01, torch.randn(d, ff, device=dev, dtype=dt) * 0.01,
           torch.randn(ff, d, device=dev, dtype=dt) * 0.01) for _ in range(layers)]
    x0 = torch.randn(tokens, d, device=dev, dtype=dt)
    pool = [torch.randn(d, pool_cols, device=dev, dtype=dt) * 0.01 for _ in range(pool_mats)]  # 40 GiB on CUDA
    xb = torch.randn(batch, d, device=dev, dtype=dt)

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    def prefill_step() -> float:
        t = time.perf_counter()
        x = x0
        for wqkv, w1, w2 in pw:
            qkv = x @ wqkv
            x = x + torch.relu((qkv[:, :d] + x) @ w1) @ w2 * 0.01
        sync()
        if not bool(torch.isfinite(x[:4]).all()):
            raise RuntimeError("prefill produced non-finite values")
        return time.perf_counter() - t

    def decode_step(h):
        t = time.perf_counter()
        for w in pool:
            h = h + (h @ w)[:, :d] * 1e-3
        sync()
        return time.perf_counter() - t, h

    prefill_step()
    _, hb = decode_step(xb)  # warm-up (kernels, allocator)
    port = args.port
    if port == 0:  # a free port chosen here (older prometheus-client returns no server object)
        import socket

        with socket.socket() as so:
            so.bind(("127.0.0.1", 0))
            port = so.getsockname()[1]
    started = start_http_server(port, addr="127.0.0.1", registry=reg)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *a: stop.set())
    print("READY " + json.dumps({"port": port, "pool_bytes": sum(w.numel() * w.element_size() for w in pool)}),
          flush=True)
    phases, steps = [], {"prefill": [], "decode": []}
    end = time.monotonic() + args.duration_s
    while not stop.is_set() and time.monotonic() < end:
        for name, span in (("prefill", args.prefill_s), ("decode", args.decode_s)):
            t_start = time.time()
            until = time.monotonic() + span
            running.set(batch if name == "decode" else 1)
            while time.monotonic() < until and not stop.is_set() and time.monotonic() < end:
                if name == "prefill":
                    s = prefill_step()
                    ttft.observe(s)
                else:
                    s, hb = decode_step(hb)
                    itl.observe(s)
                steps[name].append(s)
                if not cuda:
                    time.sleep(0.005)  # the CPU dry run shares two cores with everyone
            phases.append({"phase": name, "t_start": t_start, "t_end": time.time()})
    ok = bool(torch.isfinite(hb).all())
    if isinstance(started, tuple):
        started[0].shutdown()

    def pct(v, q):
        v = sorted(v)
        return v[min(len(v) - 1, int(q * len(v)))] if v else None
    Path(args.workload_out).write_text(json.dumps({
        "device": torch.cuda.get_device_name(0) if cuda else "cpu", "finite": ok, "phases": phases,
        "sizes": {"d": d, "ff": ff, "tokens": tokens, "layers": layers, "batch": batch, "pool_mats": pool_mats,
                  "pool_cols": pool_cols},
        "prefill_flop_per_step": layers * (2 * tokens * d * 3 * d + 2 * 2 * tokens * d * ff),
        "decode_bytes_per_step": pool_mats * d * pool_cols * (2 if cuda else 4),
        **{f"{k}_steps": len(v) for k, v in steps.items()},
        **{f"{k}_p50_s": pct(v, 0.5) for k, v in steps.items()},
        **{f"{k}_p99_s": pct(v, 0.99) for k, v in steps.items()}}, indent=1))
    return 0 if ok else 1


# --- the driver ----------------------------------------------------------------------------------
def _extra_reads(nv, uuid: str) -> dict:
    """Read-only extras beside attest(): application-clock target/default via nvmlDeviceGetClock, reasons."""
    h = nv.nvmlDeviceGetHandleByUUID(uuid)
    out = {"clock_event_reasons": int(nv.nvmlDeviceGetCurrentClocksEventReasons(h))}
    for key, cid in (("app_clock_target_sm_mhz", 1), ("app_clock_default_sm_mhz", 2)):
        try:
            out[key] = int(nv.nvmlDeviceGetClock(h, nv.NVML_CLOCK_SM, cid))
        except nv.NVMLError as e:
            out[key] = f"unsupported ({type(e).__name__})"
    return out


def _lanes_toml(out: Path, uuid: str, port: int, fake: bool, period_s: float, plan: str) -> Path:
    p = out / "lanes.toml"
    nvml = '[nvml]\nbackend = "fake"\nfake_gpus = 1\nfake_load = 0.8\n' if fake else ""
    p.write_text(f"""\
# written by benchmarks/power_run_gpu.py
[controller]
period_s = {period_s}
state_dir = "state"
decision_log = "decisions.jsonl"
metrics_addr = "127.0.0.1"
metrics_port = 0

{nvml}
[lanes.decode]
role = "decode"
gpus = ["{uuid}"]
engine = "vllm"
metrics = ["http://127.0.0.1:{port}/metrics"]
itl_p99_slo_s = 0.05
ttft_p99_slo_s = 2.0
{plan}
""")
    return p


def _f(x, nd: int = 1) -> str:
    return f"{x:.{nd}f}" if isinstance(x, (int, float)) else "n/a"


def _by_phase(ticks: list[dict], out: Path) -> dict:
    """Power and would-have-saved per workload phase (a tick belongs to the phase its end time falls in)."""
    wj = out / "workload.json"
    if not wj.exists():
        return {}
    phases = json.loads(wj.read_text())["phases"]
    agg: dict = {}
    for r in ticks:
        ph = next((p["phase"] for p in phases if p["t_start"] <= r["t"] < p["t_end"]), "outside")
        a = agg.setdefault(ph, {"ticks": 0, "would_save_j": 0.0, "power_w": []})
        a["ticks"] += 1
        a["would_save_j"] += r["would_save_j"] or 0.0
        a["power_w"] += [g["power_w"] for g in r["gpus"].values() if "power_w" in g]
    for a in agg.values():
        v = sorted(a.pop("power_w"))
        a["power_w_median"] = v[len(v) // 2] if v else None
        a["power_w_min"], a["power_w_max"] = (v[0], v[-1]) if v else (None, None)
    return agg


def _records(path: Path) -> list[dict]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            break  # a line being written
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--duration-s", type=float, default=180.0)
    ap.add_argument("--wall-s", type=float, default=260.0, help="hard limit for the whole script, start-up included")
    ap.add_argument("--period-s", type=float, default=1.0)
    ap.add_argument("--prefill-s", type=float, default=6.0)
    ap.add_argument("--decode-s", type=float, default=9.0)
    ap.add_argument("--dry-run-cpu", action="store_true", help="CPU, tiny sizes, fake NVML")
    ap.add_argument("--workload", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--cpu", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--workload-out", default="", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.workload:
        return workload(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    deadline = T0 + args.wall_s
    from gpufield.power.actuators.dryrun import ReadOnlyNvml
    from gpufield.power.shadow import attest, attestation_unchanged
    from gpufield.power.types import Lane

    if args.dry_run_cpu:
        from gpufield.testing import FakeNvml, h200

        raw = FakeNvml([h200(0)], read_only=True, clock=time.monotonic)
    else:
        import pynvml

        raw = pynvml
    nv = ReadOnlyNvml(raw)
    nv.nvmlInit()
    uuids = list(attest(raw))
    uuid = uuids[0]
    before = attest(raw)
    extra_before = _extra_reads(nv, uuid)
    wl_cmd = [sys.executable, __file__, "--workload", "--out", str(out), "--workload-out", str(out / "workload.json"),
              "--prefill-s", str(args.prefill_s), "--decode-s", str(args.decode_s), "--duration-s", "0"]
    if args.dry_run_cpu:
        wl_cmd.append("--cpu")
    result: dict = {"dry_run_cpu": args.dry_run_cpu, "gpu_uuid": uuid, "gpu_name": before[uuid]["name"],
                    "attest_before": before, "extra_before": extra_before}
    # the workload runs until SIGTERM; its own --duration-s bounds it in case this script dies
    wl_cmd[wl_cmd.index("--duration-s") + 1] = str(max(10.0, deadline - time.monotonic() - 5))
    # children run elsewhere (cwd=out): make the source path absolute
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        os.path.abspath(x) for x in os.environ.get("PYTHONPATH", "").split(os.pathsep) if x)}
    wl = subprocess.Popen(wl_cmd, stdout=subprocess.PIPE, text=True, env=env)
    ctl = None
    procs = {"wl": wl}

    def watchdog() -> None:  # the hard wall limit: kill both children, keep what was written, exit 124
        for p in procs.values():
            if p is not None and p.returncode is None:
                p.kill()
        (out / "power_run.json").write_text(json.dumps({**result, "error": f"watchdog: wall limit {args.wall_s} s"},
                                                       indent=1, default=str))
        print(f"watchdog: wall limit {args.wall_s} s reached; children killed", file=sys.stderr, flush=True)
        os._exit(124)
    dog = threading.Timer(max(1.0, deadline - time.monotonic()), watchdog)
    dog.daemon = True
    dog.start()
    rc = 1
    try:
        import queue

        lines: queue.Queue = queue.Queue()
        threading.Thread(target=lambda: [lines.put(x) for x in wl.stdout], daemon=True).start()
        ready = None
        while ready is None and time.monotonic() < min(deadline - 60, T0 + 90) and wl.poll() is None:
            try:
                line = lines.get(timeout=1.0)
            except queue.Empty:
                continue
            if line.startswith("READY "):
                ready = json.loads(line[6:])
        if ready is None:
            raise RuntimeError(f"workload did not start (rc {wl.poll()})")
        result["workload_ready_s"] = time.monotonic() - T0
        result["workload_pool_bytes"] = ready["pool_bytes"]
        try:  # the twin-derived plan; if the twin cannot give one, Dynamo's safe default of ~70% TDP (power.md 2.12)
            from gpufield.power.shadow import shadow_plan
            from gpufield.power.twin.gpu import load_gpu_model

            result["twin_plan"] = shadow_plan(load_gpu_model(result["gpu_name"]))[Lane.DECODE].label
            plan = 'plan = "twin"'
        except Exception as e:  # noqa: BLE001 - recorded; the run still measures the loop
            result["twin_plan_error"] = f"{type(e).__name__}: {e}"
            plan = f'plan = "fixed"\npower_limit_w = {round(0.7 * before[uuid]["default_limit_w"])}'
        cfg = _lanes_toml(out, uuid, ready["port"], args.dry_run_cpu, args.period_s, plan)
        log = out / "decisions.jsonl"
        if log.exists():
            raise RuntimeError(f"{log} exists: use a fresh --out")
        cli = [sys.executable, "-m", "gpufield", "power", "run", "--config", str(cfg), "--shadow"]
        # the same library call without the typer layer: used only if the CLI cannot even import/parse
        # (run 73: typer 0.29 needed pydantic, which the GPU host's wheels lacked)
        lib = [sys.executable, "-c", "import sys; from gpufield.power.lanes_config import load_run_config; "
               "from gpufield.power.serve import run_lanes; s = run_lanes(load_run_config(sys.argv[1])); "
               "print(s.mode, s.ticks, 'ticks')", str(cfg)]
        result["controller_entry"] = "cli"
        for attempt, cmd in enumerate((cli, lib)):
            sfx = "" if attempt == 0 else ".lib"
            with open(out / f"controller{sfx}.out", "w") as fo, open(out / f"controller{sfx}.err", "w") as fe:
                ctl = subprocess.Popen(cmd, stdout=fo, stderr=fe, cwd=str(out), env=env)
            procs["ctl"] = ctl
            t_start = time.monotonic()
            start = None
            while time.monotonic() < t_start + 30 and ctl.poll() is None and start is None:
                start = next((r for r in _records(log) if r["event"] == "start"), None)
                time.sleep(0.1)
            if start is None and ctl.poll() is None:
                start = next((r for r in _records(log) if r["event"] == "start"), None)
            if start is not None:
                break
            err = (out / f"controller{sfx}.err").read_text()
            if attempt == 0 and ctl.returncode is not None and not log.exists() and (
                    "ModuleNotFoundError" in err or "ImportError" in err):
                result["controller_entry"] = "library (the CLI failed: " + err.strip().splitlines()[-1][:200] + ")"
                continue
            raise RuntimeError(f"controller did not start (rc {ctl.poll()}); see controller{sfx}.err")
        result["controller_start_s"] = time.monotonic() - t_start
        run_s = max(5.0, min(args.duration_s, deadline - time.monotonic() - 25))  # stop + read-back left
        result["controller_run_target_s"] = run_s
        import httpx

        scrapes = []
        t_run = time.monotonic()
        while time.monotonic() < t_run + run_s and ctl.poll() is None:
            time.sleep(min(30.0, max(0.0, t_run + run_s - time.monotonic())))
            try:
                r = httpx.get(f"http://127.0.0.1:{start['metrics_port']}/metrics", timeout=5)
                scrapes.append(f"# t={time.time():.3f}\n" + "\n".join(
                    x for x in r.text.splitlines() if x.startswith("gpufield_power_")))
            except httpx.HTTPError as e:
                scrapes.append(f"# t={time.time():.3f} scrape failed: {e}")
        (out / "exporter_scrapes.txt").write_text("\n".join(scrapes) + "\n")
        result["exporter_scrapes"] = len(scrapes)
        result["controller_wall_s"] = time.monotonic() - t_start
        t_sig = time.monotonic()
        status = ru = None
        if ctl.returncode is None:  # still running (poll() above has not reaped it)
            ctl.send_signal(signal.SIGTERM)
            while time.monotonic() < t_sig + 20:
                pid, status, ru = os.wait4(ctl.pid, os.WNOHANG)
                if pid:
                    break
                time.sleep(0.05)
            else:
                ctl.kill()
                _pid, status, ru = os.wait4(ctl.pid, 0)
            ctl.returncode = os.waitstatus_to_exitcode(status)
            result["controller_cpu_s"] = ru.ru_utime + ru.ru_stime
            result["controller_maxrss_mb"] = ru.ru_maxrss / 1024
        result["controller_stop_s"] = time.monotonic() - t_sig
        result["controller_rc"] = ctl.returncode
        recs = _records(log)
        stop = next((r for r in recs if r["event"] == "stop"), None)
        ticks = [r for r in recs if r["event"] == "tick"]
        result["stop_record"] = {k: v for k, v in (stop or {}).items() if not k.startswith("attest")}
        result["intent_records"] = [r for r in recs if r["event"] == "intent"]
        result["guard_states"] = sorted({r["guard"] for r in ticks})
        result["tick_errors"] = [r["error"] for r in ticks if r["error"]][:20]
        pw = [g["power_w"] for r in ticks for g in r["gpus"].values() if "power_w" in g]
        result["power_w_ticks"] = {"n": len(pw), "median": sorted(pw)[len(pw) // 2] if pw else None,
                                   "max": max(pw) if pw else None}
        rc = 0 if stop is not None and ctl.returncode == 0 else 1
    except Exception as e:  # noqa: BLE001 - reported in the output, the settings are still read back
        result["error"] = f"{type(e).__name__}: {e}"
        print(f"error: {result['error']}", file=sys.stderr)
        rc = 1
    finally:
        if ctl is not None and ctl.poll() is None and ctl.returncode is None:
            ctl.kill()
        wl.send_signal(signal.SIGTERM)
        try:
            wl.wait(timeout=max(5.0, deadline - time.monotonic() - 3))
        except subprocess.TimeoutExpired:
            wl.kill()
            wl.wait()
        result["workload_rc"] = wl.returncode
    wjson = out / "workload.json"
    result["workload"] = json.loads(wjson.read_text()) if wjson.exists() else None
    result["by_phase"] = _by_phase([r for r in _records(out / "decisions.jsonl") if r["event"] == "tick"], out)
    after = attest(raw)
    extra_after = _extra_reads(nv, uuid)
    ok, diffs = attestation_unchanged(before, after)
    same_extra = {k: (extra_before[k], extra_after[k]) for k in extra_before if k != "clock_event_reasons"}
    ok_extra = all(a == b for a, b in same_extra.values())
    locked_bits = [bool(r["gpus"][uuid].get("clocks_locked")) for r in _records(out / "decisions.jsonl")
                   if r["event"] == "tick" and uuid in r["gpus"]]
    nv.nvmlShutdown()
    result.update(attest_after=after, extra_after=extra_after, settings_unchanged=ok and ok_extra,
                  attestation_diffs=diffs, extra_compared=same_extra, locked_bit_seen_in_ticks=any(locked_bits),
                  elapsed_s=time.monotonic() - T0)
    dog.cancel()
    if not result["settings_unchanged"] or result.get("workload_rc") not in (0, -15):
        rc = 1
    (out / "power_run.json").write_text(json.dumps(result, indent=1, default=str))
    s = result.get("stop_record") or {}
    w = result.get("workload") or {}
    b, a = before[uuid], after[uuid]
    print(f"power run --shadow beside a workload on {result['gpu_name']} "
          f"({'CPU dry run, fake NVML' if args.dry_run_cpu else 'real NVML, read-only'}), {result['elapsed_s']:.0f} s, "
          f"controller entry: {result.get('controller_entry')}")
    if w:
        ms = {k: w[k] * 1e3 if isinstance(w.get(k), (int, float)) else None
              for k in ("prefill_p50_s", "decode_p50_s", "decode_p99_s")}
        print(f"  workload: prefill {w['prefill_steps']} steps p50 {_f(ms['prefill_p50_s'])} ms, decode "
              f"{w['decode_steps']} steps p50 {_f(ms['decode_p50_s'], 2)} ms p99 {_f(ms['decode_p99_s'], 2)} ms")
    if s:
        sv, en = sum(s["would_save_j"].values()), sum(s["energy_j"].values())
        print(f"  controller: {s['ticks']} ticks, period mean {s['period_mean_s']:.4f} s p50 {s['period_p50_s']:.4f} "
              f"max {s['period_max_s']:.4f} (target {args.period_s}); tick p50 {s['tick_p50_ms']:.2f} ms max "
              f"{s['tick_max_ms']:.2f} ms; CPU {result.get('controller_cpu_s', float('nan')):.2f} s over "
              f"{result.get('controller_wall_s', float('nan')):.0f} s")
        for ph, agg in sorted(result["by_phase"].items()):
            print(f"  phase {ph:8s}: {agg['ticks']} ticks, power median {_f(agg['power_w_median'])} W "
                  f"[{_f(agg['power_w_min'])}, {_f(agg['power_w_max'])}], would have saved "
                  f"{_f(agg['would_save_j'], 0)} J")
        print(f"  intents {s['intents']}, guard states {result['guard_states']}, would have saved {sv:.0f} J of "
              f"{en:.0f} J measured ({100 * sv / en if en else float('nan'):.1f}%), power median "
              f"{_f(result['power_w_ticks']['median'])} W")
    print(f"  settings: enforced {b['enforced_limit_w']:.0f} -> {a['enforced_limit_w']:.0f} W, limit "
          f"{b['power_limit_w']:.0f} -> {a['power_limit_w']:.0f} W, app clock {b['app_sm_clock_mhz']} -> "
          f"{a['app_sm_clock_mhz']}, locked bit {b['locked_clocks_bit']} -> {a['locked_clocks_bit']}, extras "
          f"{same_extra}; unchanged {result['settings_unchanged']} {diffs or ''}; rc {rc}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
