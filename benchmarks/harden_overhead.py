"""Supervisor overhead, side by side (issue 25 target: under 1 % of step time).

The same 2-rank training loop (``benchmarks/_harden_overhead_loop.py``: gloo DDP on CPU, each step
``--sleep-s`` of waiting, the part of a GPU-bound step where the CPU waits, plus a small MLP's
forward/backward/all-reduce, one step line per rank per step) runs in three modes:

- ``plain``: ``torchrun --standalone --nproc-per-node 2 loop.py`` with its output to a file;
- ``run``: the same command under :func:`gpufield.harden.supervise` (what ``gpufield run`` does:
  ``--tee 3``, the supervisor reads the merged output pipe, parses every line, scans ``/proc``);
- ``run+hook``: as ``run``, the loop also calls ``monitor.collective()`` and ``monitor.step()``.

Rounds alternate the order (round r runs the modes rotated by r). Per run: the mean of rank 0's
per-step wall times (``perf_counter`` in the loop, steps after the first 20). Per round: the ratio of
each supervised run to that round's plain run. Reported: the median ratio over rounds and its
spread (min, max), the supervisor's own CPU seconds per run (``getrusage(RUSAGE_SELF)`` of this
process around ``supervise()``). ``--profile`` adds a cProfile of one supervised run.

    PYTHONPATH=src python benchmarks/harden_overhead.py --rounds 6 --steps 300 \\
        --out benchmarks/results/harden_overhead.json
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gpufield.harden import SuperviseConfig, Thresholds, supervise

SRC = Path(__file__).resolve().parents[1] / "src"
LOOP = Path(__file__).resolve().parent / "_harden_overhead_loop.py"
MODES = ("plain", "run", "run+hook")


def _cpu_self() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def one(mode: str, work: Path, steps: int, sleep_s: float, profile: bool = False) -> dict:
    work.mkdir(parents=True, exist_ok=True)
    out = work / "times.json"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", str(LOOP),
           "--steps", str(steps), "--sleep-s", str(sleep_s), "--out", str(out)]
    if mode == "run+hook":
        cmd.append("--hook")
    env = {"PYTHONPATH": str(SRC), "OMP_NUM_THREADS": "1"}
    t0, c0 = time.time(), _cpu_self()
    prof_text = None
    if mode == "plain":
        with open(work / "console.log", "w") as f:
            subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, check=True, env={**os.environ, **env}, timeout=900)
    else:
        cfg = SuperviseConfig(command=tuple(cmd), run_dir=work / "run", env=env, triage=False, gpu_telemetry=False,
                              thresholds=Thresholds(hang_floor_s=120.0, startup_timeout_s=300.0))
        if profile:
            prof = cProfile.Profile()
            res = prof.runcall(supervise, cfg)
            s = io.StringIO()
            pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(18)
            prof_text = s.getvalue()
        else:
            res = supervise(cfg)
        if not res.ok:
            raise RuntimeError(f"{mode}: supervised run failed: {[d.why for d in res.detections]}")
    times = json.loads(out.read_text())[20:]
    row = {"mode": mode, "mean_step_s": statistics.fmean(times), "median_step_s": statistics.median(times),
           "steps": len(times), "wall_s": round(time.time() - t0, 2),
           "supervisor_cpu_s": None if mode == "plain" else round(_cpu_self() - c0, 3),
           "load_1m": os.getloadavg()[0]}
    if prof_text:
        row["profile"] = prof_text
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--sleep-s", type=float, default=0.08)
    ap.add_argument("--profile", action="store_true", help="cProfile the supervisor in the last round's run+hook")
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="gpufield-overhead-") as d:
        for r in range(a.rounds):
            order = MODES[r % 3:] + MODES[: r % 3]
            for m in order:
                prof = a.profile and r == a.rounds - 1 and m == "run+hook"
                row = one(m, Path(d) / f"r{r}-{m}", a.steps, a.sleep_s, prof)
                row["round"] = r
                rows.append(row)
                print(json.dumps({k: v for k, v in row.items() if k != "profile"}), flush=True)
    summary = {}
    for m in MODES[1:]:
        ratios = []
        for r in range(a.rounds):
            p = next(x for x in rows if x["round"] == r and x["mode"] == "plain")["mean_step_s"]
            s = next(x for x in rows if x["round"] == r and x["mode"] == m)["mean_step_s"]
            ratios.append(s / p)
        summary[m] = {"ratio_median": round(statistics.median(ratios), 4), "ratio_min": round(min(ratios), 4),
                      "ratio_max": round(max(ratios), 4), "ratios": [round(x, 4) for x in ratios],
                      "supervisor_cpu_s": [x["supervisor_cpu_s"] for x in rows if x["mode"] == m]}
    summary["plain_mean_step_s"] = [round(x["mean_step_s"], 5) for x in rows if x["mode"] == "plain"]
    print(json.dumps(summary, indent=1))
    for x in rows:
        if "profile" in x:
            print(x["profile"])
    if a.out:
        a.out.write_text(json.dumps({"args": vars(a) | {"out": str(a.out)}, "summary": summary, "rows": rows},
                                    indent=1) + "\n")


if __name__ == "__main__":
    main()
