"""``gpufield triage FILE --json`` on dense logs of 10 MB, 100 MB (and 1 GB): time, CPU, peak RSS.

The log (generated under a temporary directory, deleted afterwards) repeats one unit of ~1 MB:

* the shared corpus ``../shared/data/triage-cases/*.log`` concatenated (27 labelled failures,
  12.7 kB, ~80 events: Xids, NCCL/IB errors, watchdog timeouts, tracebacks, OOMs ...);
* an NCCL-INFO-heavy communicator set-up of a 64-rank job (8 hosts x 8 GPUs, ``NCCL_DEBUG=INFO``:
  per rank Bootstrap / NET/IB ``Using`` lines, ``comm ... Init START/COMPLETE``, 32 channel lines,
  ring/tree lines; ~6 % of its lines are events), with a new communicator id per unit;
* ordinary training output (python-logging step lines with a loss, tqdm bars).

In the same run, on the same file: ``grep -c -E 'NVRM|NCCL WARN|Watchdog caught|Xid'`` (the
baseline), then the CLI in a child process; wall time, CPU seconds and peak RSS of that child
(``os.wait4``), the events read and kept, and the incidents. The shared 2-core VM is loaded by other
engineers: compare the CPU columns and the ratios measured side by side.

Run::

    PYTHONPATH=src .venv/bin/python benchmarks/triage_scale.py --sizes-mb 10 100 [1000]
    git archive <rev> src | tar -x -C /tmp/base     # then, side by side with that revision:
    PYTHONPATH=src .venv/bin/python benchmarks/triage_scale.py --sizes-mb 10 100 1000 --baseline-src /tmp/base/src
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CASES = REPO.parent / "shared" / "data" / "triage-cases"
GREP = r"NVRM|NCCL WARN|Watchdog caught|Xid"


def nccl_setup(unit: int, rng: random.Random) -> list[str]:
    """One communicator set-up of a 64-rank job as NCCL 2.2x prints it at NCCL_DEBUG=INFO."""
    comm = 0x55D0C6A00000 + unit * 0x1000
    cid = rng.getrandbits(64)
    out = []
    for r in range(64):
        h, d = r // 8, r % 8
        p = f"node-{h}:{40000 + unit % 1000 * 10 + d}:{41000 + d} [{d}] NCCL INFO"
        out.append(f"{p} Bootstrap : Using eth0:10.1.{h}.1<0>")
        out.append(f"{p} NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB [2]mlx5_2:1/IB [3]mlx5_3:1/IB ; OOB eth0:10.1.{h}.1<0>")
        out.append(f"{p} comm 0x{comm:x} rank {r} nranks 64 cudaDev {d} nvmlDev {d} busId {d + 1}b000 commId 0x{cid:x} - Init START")
        out.append(f"{p} Setting affinity for GPU {d} to ffff,ffffffff,00000000")
        out.extend(f"{p} Channel {c:02d}/32 :    0   1   2   3   4   5   6   7   8   9  10  11  12  13  14  15"
                   for c in range(32))
        out.append(f"{p} Trees [0] {(r + 1) % 64}/-1/-1->{r}->{(r - 1) % 64} [1] {(r + 1) % 64}/-1/-1->{r}->{(r - 1) % 64}")
        out.extend(f"{p} Channel {c:02d}/0 : {r}[{d}] -> {(r + 1) % 64}[{(d + 1) % 8}] via P2P/IPC/read" for c in range(16))
        out.append(f"{p} Connected all rings")
        out.append(f"{p} Connected all trees")
        out.append(f"{p} threadThresholds 8/8/64 | 512/8/64 | 512 | 512")
        out.append(f"{p} comm 0x{comm:x} rank {r} nranks 64 cudaDev {d} nvmlDev {d} busId {d + 1}b000 commId 0x{cid:x} - Init COMPLETE")
    return out


def training(unit: int, rng: random.Random, n: int) -> list[str]:
    out = []
    for i in range(n):
        step = unit * n + i
        if i % 5 == 4:
            out.append(f" {step % 100:3d}%|{'#' * (step % 10):10s}| {step}/1000000 [12:01<40:00,  2.1it/s]")
        else:
            out.append(f"[2026-08-11 03:{step // 60 % 60:02d}:{step % 60:02d},{step % 1000:03d}] [INFO] [trainer.py:412] "
                       f"step {step} loss {2.0 + rng.random():.4f} lr 3.0e-04 grad_norm {rng.random():.3f} tokens/s {rng.randint(90000, 99999)}")
    return out


def build(path: Path, size_mb: int, cases: Path = CASES) -> dict:
    logs = sorted(Path(cases).glob("*.log"))
    if not logs:
        raise SystemExit(f"{cases}: no *.log files (the shared triage cases); pass --cases DIR")
    corpus = b"".join(p.read_bytes() for p in logs)
    if not corpus.endswith(b"\n"):
        corpus += b"\n"
    rng = random.Random(7)
    target = size_mb * 1_000_000
    written = units = 0
    with open(path, "wb") as f:
        while written < target:
            unit = corpus + ("\n".join(nccl_setup(units, rng)) + "\n").encode() + \
                ("\n".join(training(units, rng, 4000)) + "\n").encode()
            f.write(unit)
            written += len(unit)
            units += 1
    return {"bytes": written, "units": units, "corpus_bytes": len(corpus)}


def timed(cmd: list[str], env: dict | None = None) -> tuple[float, float, float, bytes]:
    """(wall s, CPU s, peak RSS MB, stdout) of one child process."""
    t = time.perf_counter()
    with tempfile.TemporaryFile() as out:
        p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.DEVNULL, env=env, cwd=REPO)
        _, status, ru = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t
        out.seek(0)
        data = out.read()
    return wall, ru.ru_utime + ru.ru_stime, ru.ru_maxrss / 1024, data


def _comparable(d: dict) -> dict:
    """The CLI's JSON without what may differ between two runs of the same analysis (timings)."""
    d = json.loads(json.dumps(d))
    d.get("stats", {}).pop("seconds", None)
    return d


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes-mb", type=int, nargs="+", default=[10, 100])
    ap.add_argument("--dir", default=None, help="where to write the logs (default: a new temporary directory)")
    ap.add_argument("--baseline-src", default=None, metavar="DIR",
                    help="also run the CLI of another checkout's src/ (e.g. main, from 'git archive <rev> src') on "
                         "each file, alternating with this one, and check that both print the same JSON (timings aside)")
    ap.add_argument("--one-worker-too", action="store_true",
                    help="also run this code with --workers 1 (one process; the default uses 2 on 2+ CPUs)")
    ap.add_argument("--baseline-one-worker-too", action="store_true",
                    help="with --baseline-src: also run the baseline with --workers 1")
    ap.add_argument("--cases", default=str(CASES), metavar="DIR",
                    help=f"the shared triage cases (*.log) the dense log is built from (default {CASES})")
    a = ap.parse_args()
    work = Path(a.dir or tempfile.mkdtemp(prefix="triage-scale-"))
    src = str(REPO / "src")
    codes = [("this", src, [])] + ([("this-1-worker", src, ["--workers", "1"])] if a.one_worker_too else []) \
        + ([("baseline", str(Path(a.baseline_src).resolve()), [])] if a.baseline_src else []) \
        + ([("baseline-1-worker", str(Path(a.baseline_src).resolve()), ["--workers", "1"])]
           if a.baseline_src and a.baseline_one_worker_too else [])
    rows = []
    try:
        for mb in a.sizes_mb:
            f = work / f"dense-{mb}MB.log"
            tb = time.perf_counter()
            info = build(f, mb, Path(a.cases))
            info["build_s"] = round(time.perf_counter() - tb, 2)
            gw, _, _, gout = timed(["grep", "-c", "-E", GREP, str(f)])
            outs = {}
            for code, path, extra in codes[::-1] if mb % 2 else codes:  # alternate which code runs first
                env = {**os.environ, "PYTHONPATH": path}
                # CPU seconds from os.wait4 include the helper process (reaped by the CLI)
                w, cpu, rss, out = timed([sys.executable, "-m", "gpufield", "triage", str(f), "--json", *extra], env)
                try:
                    d = json.loads(out)
                except ValueError:
                    d = {}
                st = d.get("stats", {})
                inc = d.get("incidents", [])
                outs[code] = _comparable(d)
                rows.append({"code": code, "size_mb": mb, **info, "grep_s": round(gw, 3), "grep_count": int(gout or 0),
                             "wall_s": round(w, 2), "cpu_s": round(cpu, 2), "peak_rss_mb": round(rss, 1),
                             "mb_per_s_wall": round(info["bytes"] / 1e6 / w, 1),
                             "mb_per_cpu_s": round(info["bytes"] / 1e6 / cpu, 1),
                             "ratio_to_grep": round(w / gw, 1), "events": st.get("events"),
                             "events_kept": st.get("events_kept"), "incidents": len(inc),
                             "classes": sorted({i.get("cls") or i.get("class") for i in inc}, key=str),
                             "load": os.getloadavg()[0]})
                print(json.dumps(rows[-1]), flush=True)
            if len(outs) > 1:
                print(json.dumps({"size_mb": mb, "same_json_all_codes": all(o == outs["this"] for o in outs.values())}),
                      flush=True)
            f.unlink()
    finally:
        if a.dir is None:
            shutil.rmtree(work, ignore_errors=True)
    rows = [r for r in rows if r["code"] == "this"]
    for x, y in zip(rows, rows[1:], strict=False):
        print(f"{x['size_mb']} -> {y['size_mb']} MB: wall x{y['wall_s'] / x['wall_s']:.2f}, CPU x{y['cpu_s'] / x['cpu_s']:.2f} "
              f"for x{y['bytes'] / x['bytes']:.2f} the bytes; same classes: {x['classes'] == y['classes']}")


if __name__ == "__main__":
    main()
