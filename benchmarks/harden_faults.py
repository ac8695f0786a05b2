"""Fault-injection benchmark of ``gpufield run`` (issue 25): real torchrun, gloo, CPU ranks of
``gpufield.testing.faultloop`` under :func:`gpufield.harden.supervise`.

Per fault: detected or not, seconds from the fault to the detection, rank blamed, decisions,
whether the retry succeeded (faults are transient through ``--fault-once-file``: they fire in the
first launch only, so a restart can succeed), restarts used against the budget; alarms on clean
runs; supervisor overhead (step time under ``gpufield run`` with the hook against plain torchrun,
alternating runs; the hook's cost per step in a tight loop; the supervisor's own CPU time).

Fault-to-detection: the blamed rank's silence at the detection (``silent_s``: time since its last
progress line; the faults fire at the start of the step after that line, so this over-states the
latency by up to one step). NaN: steps from the fault step to the detection. Rendezvous: seconds
from launch.

    PYTHONPATH=src python benchmarks/harden_faults.py --out benchmarks/results/harden_faults.json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gpufield.harden import PolicyConfig, SuperviseConfig, Thresholds, supervise

SRC = Path(__file__).resolve().parents[1] / "src"
STEP_S = re.compile(r"\|\s*([0-9.]+) s/step")


def _cmd(ranks: int, args: list[str], launcher: list[str] | None = None) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", *(launcher or ["--standalone"]),
            "--nproc-per-node", str(ranks), "-m", "gpufield.testing.faultloop", "--pg-timeout-s", "120", *args]


def scenarios(hang_floor_s: float, clean_runs: int) -> list[dict]:
    base = ["--step-sleep-s", "0.1"]
    s = [
        dict(name="hang SIGSTOP (hook)", ranks=2, fault_rank=1, expect="hang",
             args=[*base, "--steps", "40", "--fault", "sigstop", "--fault-step", "8", "--harden-monitor"]),
        dict(name="hang SIGSTOP (logs only)", ranks=2, fault_rank=1, expect="hang",
             args=[*base, "--steps", "40", "--fault", "sigstop", "--fault-step", "8"]),
        dict(name="hang SIGSTOP, 4 ranks (hook)", ranks=4, fault_rank=2, expect="hang",
             args=[*base, "--steps", "30", "--fault", "sigstop", "--fault-step", "6", "--harden-monitor"]),
        dict(name="crash SIGKILL (hook)", ranks=2, fault_rank=1, expect="crash",
             args=[*base, "--steps", "30", "--fault", "sigkill", "--fault-step", "6", "--harden-monitor"]),
        dict(name="crash SIGKILL repeating, budget 2 (hook)", ranks=2, fault_rank=1, expect="crash", repeat=True,
             nodes=(socket.gethostname(), "spare-1"),
             args=[*base, "--steps", "30", "--fault", "sigkill", "--fault-step", "3", "--harden-monitor"]),
        dict(name="straggler +30% (hook)", ranks=2, fault_rank=1, expect="straggler",
             args=["--step-sleep-s", "0.1", "--steps", "40", "--fault", "sleep", "--fault-step", "0",
                   "--fault-arg", "0.033", "--harden-monitor"]),
        dict(name="straggler +30% (logs only)", ranks=2, fault_rank=1, expect="straggler",
             args=["--step-sleep-s", "0.1", "--steps", "40", "--fault", "sleep", "--fault-step", "0",
                   "--fault-arg", "0.033"]),
        dict(name="straggler +30% (logs only, printed compute time)", ranks=2, fault_rank=1, expect="straggler",
             args=["--step-sleep-s", "0.1", "--steps", "40", "--fault", "sleep", "--fault-step", "0",
                   "--fault-arg", "0.033", "--print-compute-time"]),
        dict(name="exception at step 6", ranks=2, fault_rank=1, expect="crash",
             args=[*base, "--steps", "30", "--fault", "exception", "--fault-step", "6", "--harden-monitor"]),
        dict(name="NaN loss at step 6 (all ranks)", ranks=2, fault_rank=None, expect="nan",
             args=[*base, "--steps", "30", "--fault", "nan", "--fault-step", "6", "--fault-rank", "-1",
                   "--harden-monitor"]),
        dict(name="failed rendezvous (dead port)", ranks=2, fault_rank=None, expect="exit",
             launcher=["--nnodes", "1", "--rdzv-backend", "c10d", "--rdzv-endpoint", "localhost:29999",
                       "--rdzv-conf", "is_host=0,read_timeout=10"],
             args=["--steps", "10"]),
    ]
    for i in range(clean_runs):
        s.append(dict(name=f"clean {i + 1} (hook)", ranks=2, fault_rank=None, expect=None,
                      args=["--step-sleep-s", "0.05", "--steps", "40", "--harden-monitor"]))
    s.append(dict(name="clean 4 ranks (hook)", ranks=4, fault_rank=None, expect=None,
                  args=["--step-sleep-s", "0.05", "--steps", "30", "--harden-monitor"]))
    s.append(dict(name="clean (logs only)", ranks=2, fault_rank=None, expect=None,
                  args=["--step-sleep-s", "0.05", "--steps", "40"]))
    s.append(dict(name="clean (logs only, printed compute time)", ranks=2, fault_rank=None, expect=None,
                  args=["--step-sleep-s", "0.05", "--steps", "40", "--print-compute-time"]))
    return s


def run_one(sc: dict, work: Path, hang_floor_s: float, budget: int) -> dict:
    run_dir = work / re.sub(r"\W+", "_", sc["name"]).strip("_")
    args = list(sc["args"])
    if sc["fault_rank"] is not None and "--fault-rank" not in args:
        args += ["--fault-rank", str(sc["fault_rank"])]
    if sc["expect"] not in (None, "exit", "nan") and not sc.get("repeat"):
        args += ["--fault-once-file", str(run_dir / "fault.fired")]
    run_dir.mkdir(parents=True, exist_ok=True)
    cfg = SuperviseConfig(command=tuple(_cmd(sc["ranks"], args, sc.get("launcher"))), run_dir=run_dir,
                          thresholds=Thresholds(hang_floor_s=hang_floor_s, startup_timeout_s=300.0),
                          policy=PolicyConfig(max_retries=budget, backoff_s=1.0, min_progress_steps=5),
                          env={"PYTHONPATH": str(SRC)}, stack_wait_s=2.0, nodes=tuple(sc.get("nodes", ())))
    t0, ru0 = time.time(), resource.getrusage(resource.RUSAGE_SELF)
    res = supervise(cfg)
    ru1 = resource.getrusage(resource.RUSAGE_SELF)
    wall = time.time() - t0
    alarms = [d for d in res.detections if d.kind != "ok"]
    first = alarms[0] if alarms else None
    out = dict(name=sc["name"], ranks=sc["ranks"], expect=sc["expect"], wall_s=round(wall, 1),
               supervisor_cpu_s=round((ru1.ru_utime + ru1.ru_stime) - (ru0.ru_utime + ru0.ru_stime), 2),
               detected=first.kind if first else None, blamed=list(first.ranks) if first else [],
               fault_rank=sc["fault_rank"], why=first.why if first else "",
               decisions=[f"{d.action}" for d in res.decisions], attempts=res.attempts, ok=res.ok,
               retries_used=max((d.retries_used for d in res.decisions), default=0), budget=budget,
               triage=[t.get("cls") for t in res.triage], excluded=res.excluded)
    if first is not None:
        silent = first.details.get("silent_s") or {}
        r = sc["fault_rank"] if sc["fault_rank"] is not None and sc["fault_rank"] >= 0 else None
        if first.kind in ("hang", "crash") and r is not None:
            out["fault_to_detect_s"] = silent.get(r)
        if first.kind == "straggler":
            out["named_after_steps"] = first.details.get("round")
            out["slowdown"] = first.details.get("slowdown")
            out["host_gpu"] = f"{first.details.get('host')}/{first.details.get('gpu')}"
        if first.kind == "nan":
            steps = first.details.get("steps") or {}
            out["nan_detected_at_step"] = max((s for s in steps.values() if s is not None), default=None)
        if first.kind == "exit":
            out["launch_to_detect_s"] = round(first.t - t0, 1)
    out["retry_succeeded"] = res.ok and res.attempts > 1
    return out


def _median_step_s(console: Path) -> list[float]:
    return [float(m.group(1)) for m in STEP_S.finditer(console.read_text(errors="replace"))]


def overhead(work: Path, repeats: int, steps: int) -> dict:
    """Plain torchrun vs gpufield run + hook, alternating; median per-step time of both ranks (steps 5+)."""
    plain, sup, cpu_plain, cpu_sup, cpu_self = [], [], [], [], []

    def cpu(who: int) -> float:
        ru = resource.getrusage(who)
        return ru.ru_utime + ru.ru_stime

    for i in range(repeats):
        d = work / f"plain-{i}"
        d.mkdir(parents=True, exist_ok=True)
        c0 = cpu(resource.RUSAGE_CHILDREN)
        with open(d / "console.log", "w") as f:
            subprocess.run(_cmd(2, ["--steps", str(steps)]), stdout=f, stderr=subprocess.STDOUT, check=True,
                           env=dict(os.environ, PYTHONPATH=str(SRC)), timeout=600)
        cpu_plain.append(cpu(resource.RUSAGE_CHILDREN) - c0)
        plain.append(statistics.median(_median_step_s(d / "console.log")[10:]))
        cfg = SuperviseConfig(command=tuple(_cmd(2, ["--steps", str(steps), "--harden-monitor"])),
                              run_dir=work / f"sup-{i}", env={"PYTHONPATH": str(SRC)})
        c0, s0 = cpu(resource.RUSAGE_CHILDREN), cpu(resource.RUSAGE_SELF)
        res = supervise(cfg)
        cpu_sup.append(cpu(resource.RUSAGE_CHILDREN) - c0)
        cpu_self.append(cpu(resource.RUSAGE_SELF) - s0)
        assert res.ok, res.detections
        sup.append(statistics.median(_median_step_s(work / f"sup-{i}" / "attempt-0" / "console.log")[10:]))
        print(f"overhead run {i}: plain {plain[-1]:.4f} s/step {cpu_plain[-1]:.2f} CPU-s; supervised "
              f"{sup[-1]:.4f} s/step, job {cpu_sup[-1]:.2f} CPU-s + supervisor {cpu_self[-1]:.2f} CPU-s",
              file=sys.stderr, flush=True)
    code = ("import time\nfrom gpufield.harden import monitor\nn=20000\nt=time.perf_counter()\n"
            "for i in range(n):\n    with monitor.collective():\n        pass\n    monitor.step(i)\n"
            "print((time.perf_counter()-t)/n)")
    with tempfile.TemporaryDirectory() as td:
        per = float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                                   env=dict(os.environ, PYTHONPATH=str(SRC), GPUFIELD_MONITOR_DIR=td, RANK="0"),
                                   timeout=300).stdout)
    mp, ms = statistics.median(plain), statistics.median(sup)
    return dict(plain_step_s=plain, supervised_step_s=sup, median_plain_s=mp, median_supervised_s=ms,
                overhead_pct=round(100 * (ms - mp) / mp, 2), min_plain_s=min(plain), min_supervised_s=min(sup),
                overhead_pct_of_min=round(100 * (min(sup) - min(plain)) / min(plain), 2),
                load_avg_1m=os.getloadavg()[0], job_cpu_plain_s=cpu_plain, job_cpu_supervised_s=cpu_sup,
                supervisor_cpu_s=cpu_self,
                cpu_overhead_pct=round(100 * (statistics.median([a + b for a, b in zip(cpu_sup, cpu_self, strict=True)])
                                              - statistics.median(cpu_plain)) / statistics.median(cpu_plain), 2), hook_us_per_step=round(per * 1e6, 2),
                hook_pct_of_median_step=round(100 * per / mp, 4))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="benchmarks/results/harden_faults.json")
    ap.add_argument("--hang-floor-s", type=float, default=30.0)
    ap.add_argument("--budget", type=int, default=2)
    ap.add_argument("--clean-runs", type=int, default=5)
    ap.add_argument("--overhead-repeats", type=int, default=3)
    ap.add_argument("--overhead-steps", type=int, default=300)
    ap.add_argument("--only", default=None, help="regex: run only matching scenarios (no overhead part)")
    ap.add_argument("--overhead-only", action="store_true", help="skip the fault scenarios")
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="harden-bench-"))
    rows = []
    for sc in [] if a.overhead_only else scenarios(a.hang_floor_s, a.clean_runs):
        if a.only and not re.search(a.only, sc["name"]):
            continue
        row = run_one(sc, work, a.hang_floor_s, a.budget)
        rows.append(row)
        print(json.dumps(row), flush=True)
    ov = overhead(work / "overhead", a.overhead_repeats, a.overhead_steps) if not a.only else None
    if ov:
        print(json.dumps(ov), flush=True)
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps({"machine": "shared 2-core CPU VM, gloo", "hang_floor_s": a.hang_floor_s,
                                       "budget": a.budget, "rows": rows, "overhead": ov, "work_dir": str(work)},
                                      indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
