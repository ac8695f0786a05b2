"""End-to-end ``gpufield triage`` throughput on a generated training log (CPU only).

Generates ``--size-mb`` of ordinary training output with incident blocks (the generator of
``benchmarks/triage_ingest.py``: every fixture of ``tests/triage/data`` inserted after every
``--every`` 4-MiB chunks) into a temporary directory that is deleted afterwards. Then, in the same
run and on the same file:

* ``grep -c NVRM`` and ``grep -c -E 'NVRM|NCCL WARN|Watchdog caught|Xid'`` (wall time);
* ingest only, in a child process: default options, and the options ``analyze`` uses
  (``with_loss=True, loss_every=gpufield.triage.analyze.LOSS_EVERY``);
* the CLI end to end: ``gpufield triage <file> --json`` in a child process (import, ingest, phase
  scan, engine, JSON rendering), wall and CPU time (``RUSAGE_CHILDREN``), top incident class.

Run::

    .venv/bin/python benchmarks/triage_analyze.py --size-mb 500
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from triage_ingest import REPO, grep, incidents, ordinary_chunk  # noqa: E402

CHILD = r"""
import json, sys, time
from gpufield.triage.analyze import LOSS_EVERY
from gpufield.triage.ingest import IngestOptions, ingest
opts = IngestOptions(year=2026, with_loss=True, loss_every=LOSS_EVERY) if sys.argv[2] == "analyze" else IngestOptions(year=2026)
t, c = time.perf_counter(), time.process_time()
r = ingest([sys.argv[1]], options=opts, sink=lambda e: None)
print(json.dumps({"seconds": time.perf_counter() - t, "cpu_seconds": time.process_time() - c, "bytes": r.stats.bytes,
                  "events": r.stats.events, "loss_every": opts.loss_every if opts.with_loss else None}))
"""


def _cpu_children() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def ingest_child(path: Path, mode: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    out = subprocess.run([sys.executable, "-c", CHILD, str(path), mode], capture_output=True, text=True, check=True,
                         cwd=REPO, env=env)
    return json.loads(out.stdout)


def cli(path: Path) -> dict:
    exe = Path(sys.executable).with_name("gpufield")
    c0, t = _cpu_children(), time.perf_counter()
    out = subprocess.run([str(exe), "triage", str(path), "--json"], capture_output=True, text=True, cwd=REPO)
    dt, dc = time.perf_counter() - t, _cpu_children() - c0
    doc = json.loads(out.stdout) if out.stdout.strip().startswith("{") else {}
    incs = doc.get("incidents") or []
    return {"seconds": dt, "cpu_seconds": dc, "exit": out.returncode, "incidents": len(incs),
            "top_class": incs[0].get("class") if incs else None, "stderr_tail": out.stderr[-300:]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mb", type=float, default=500.0)
    ap.add_argument("--every", type=int, default=16, help="insert the incident block after every N 4-MiB chunks")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="gpufield-analyze-"))
    try:
        big = tmp / "train.log"
        inc, chunks = incidents(), [ordinary_chunk(s) for s in range(8)]
        total, k = 0, 0
        with open(big, "wb") as f:
            while total < args.size_mb * 1e6:
                f.write(chunks[k % len(chunks)])
                total += len(chunks[k % len(chunks)])
                k += 1
                if k % args.every == 0:
                    f.write(inc)
                    total += len(inc)
        subprocess.run(["wc", "-l", str(big)], capture_output=True, check=True)  # warm the page cache
        load_before = os.getloadavg()
        g1, g2 = grep(["NVRM"], big), grep(["-E", "NVRM|NCCL WARN|Watchdog caught|Xid"], big)
        plain = ingest_child(big, "default")
        withloss = ingest_child(big, "analyze")
        end2end = cli(big)
        mb = total / 1e6
        res = {"file_bytes": total, "grep_c_NVRM": {"seconds": g1[0], "count": g1[1]},
               "grep_c_E_4patterns": {"seconds": g2[0], "count": g2[1]}, "ingest_default": plain,
               "ingest_analyze_options": withloss, "cli_end_to_end": end2end, "cpus": os.cpu_count(),
               "loadavg_before": load_before, "loadavg_after": os.getloadavg()}
        print(json.dumps(res, indent=2))
        for name, r in (("ingest (default)", plain), ("ingest (analyze options)", withloss), ("gpufield triage --json", end2end)):
            print(f"{name:26s} {r['seconds']:6.1f} s  {mb / r['seconds']:6.0f} MB/s wall  {mb / r['cpu_seconds']:6.0f} MB per CPU-s")
        print(f"grep -c NVRM {mb / g1[0]:.0f} MB/s; grep -c -E 4 patterns {mb / g2[0]:.0f} MB/s; "
              f"load {load_before[0]:.1f} -> {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
