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
spread (min, max), the mean ratio with a 95 % bootstrap interval (rounds resampled with
replacement, 10,000 resamples, numpy; :func:`bootstrap_ratio`), the supervisor's own CPU seconds per
run (``getrusage(RUSAGE_SELF)`` of this process around ``supervise()``). ``--profile`` adds a cProfile
of one supervised run. ``--max-wall-s`` stops starting rounds once another would not fit (at least 2).

    PYTHONPATH=src python benchmarks/harden_overhead.py --rounds 6 --steps 300 \\
        --out benchmarks/results/harden_overhead.json

On an idle many-core host (the lead's device machine): ``benchmarks/harden_overhead_device.py OUTDIR``.
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


def one(mode: str, work: Path, steps: int, sleep_s: float, profile: bool = False, warmup: int = 20) -> dict:
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
    times = json.loads(out.read_text())[warmup:]
    row = {"mode": mode, "mean_step_s": statistics.fmean(times), "median_step_s": statistics.median(times),
           "steps": len(times), "wall_s": round(time.time() - t0, 2),
           "supervisor_cpu_s": None if mode == "plain" else round(_cpu_self() - c0, 3),
           "load_1m": os.getloadavg()[0]}
    if prof_text:
        row["profile"] = prof_text
    return row


def bootstrap_ratio(ratios: list[float], *, resamples: int = 10_000, seed: int = 0,
                    level: float = 0.95) -> dict[str, float]:
    """Mean of the per-round step-time ratios (supervised / plain) and its percentile bootstrap interval.

    Args:
        ratios: one ratio per round (dimensionless, > 0), at least 2.
        resamples: bootstrap resamples of the rounds (with replacement).
        seed: numpy generator seed (the interval is reproducible).
        level: coverage of the interval (0.95: the 2.5 % and 97.5 % percentiles).

    Returns:
        ``{"mean", "lo", "hi", "rounds"}``; ``lo``/``hi`` the interval's ends (same units as the ratios).

    Raises:
        ValueError: fewer than 2 ratios, or a ratio that is not a positive finite number.
    """
    import numpy as np

    r = np.asarray(ratios, dtype=np.float64)
    if r.size < 2 or not np.all(np.isfinite(r)) or not np.all(r > 0):
        raise ValueError(f"bootstrap_ratio needs >= 2 positive finite ratios, got {list(ratios)}")
    idx = np.random.default_rng(seed).integers(0, r.size, size=(resamples, r.size))
    means = r[idx].mean(axis=1)
    a = (1.0 - level) / 2.0
    return {"mean": float(r.mean()), "lo": float(np.quantile(means, a)), "hi": float(np.quantile(means, 1.0 - a)),
            "rounds": int(r.size)}


def run_rounds(rounds: int, steps: int, sleep_s: float, work: Path, *, profile: bool = False, warmup: int = 20,
               max_wall_s: float | None = None, log=None) -> list[dict]:
    """Rounds of the three modes, order rotated by the round; stops early when ``max_wall_s`` (seconds)
    would be passed by one more round (at least 2 rounds run). One row per run (see :func:`one`)."""
    rows: list[dict] = []
    t_start = time.monotonic()
    for r in range(rounds):
        if max_wall_s is not None and r >= 2:
            per_round = (time.monotonic() - t_start) / r
            if time.monotonic() - t_start + per_round > max_wall_s:
                break
        order = MODES[r % 3:] + MODES[: r % 3]
        for m in order:
            prof = profile and r == rounds - 1 and m == "run+hook"
            row = one(m, work / f"r{r}-{m}", steps, sleep_s, prof, warmup)
            row["round"] = r
            rows.append(row)
            line = json.dumps({k: v for k, v in row.items() if k != "profile"})
            print(line, flush=True)
            if log is not None:
                log.write(line + "\n")
                log.flush()
    return rows


def summarize(rows: list[dict]) -> dict:
    """Per supervised mode: ratios to the same round's plain run, median/min/max, bootstrap mean interval."""
    summary: dict = {}
    done = sorted({x["round"] for x in rows if all(any(y["round"] == x["round"] and y["mode"] == m for y in rows)
                                                   for m in MODES)})
    for m in MODES[1:]:
        ratios = []
        for r in done:
            p = next(x for x in rows if x["round"] == r and x["mode"] == "plain")["mean_step_s"]
            s = next(x for x in rows if x["round"] == r and x["mode"] == m)["mean_step_s"]
            ratios.append(s / p)
        summary[m] = {"ratio_median": round(statistics.median(ratios), 4), "ratio_min": round(min(ratios), 4),
                      "ratio_max": round(max(ratios), 4), "ratios": [round(x, 4) for x in ratios],
                      "supervisor_cpu_s": [x["supervisor_cpu_s"] for x in rows if x["mode"] == m]}
        if len(ratios) >= 2:
            summary[m]["ratio_mean_boot95"] = {k: (round(v, 4) if isinstance(v, float) else v)
                                               for k, v in bootstrap_ratio(ratios).items()}
    summary["plain_mean_step_s"] = [round(x["mean_step_s"], 5) for x in rows if x["mode"] == "plain"]
    return summary


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--sleep-s", type=float, default=0.08)
    ap.add_argument("--warmup", type=int, default=20, help="leading steps left out of the mean")
    ap.add_argument("--max-wall-s", type=float, default=None, help="start no round that would end past this")
    ap.add_argument("--profile", action="store_true", help="cProfile the supervisor in the last round's run+hook")
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="gpufield-overhead-") as d:
        rows = run_rounds(a.rounds, a.steps, a.sleep_s, Path(d), profile=a.profile, warmup=a.warmup,
                          max_wall_s=a.max_wall_s)
    summary = summarize(rows)
    print(json.dumps(summary, indent=1))
    for x in rows:
        if "profile" in x:
            print(x["profile"])
    if a.out:
        a.out.write_text(json.dumps({"args": vars(a) | {"out": str(a.out)}, "summary": summary, "rows": rows},
                                    indent=1) + "\n")


if __name__ == "__main__":
    main()
