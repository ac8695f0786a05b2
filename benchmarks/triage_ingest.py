"""Ingestion throughput on a generated multi-GB training log (CPU only).

Generates ``--size-gb`` of ordinary training output (python-logging step lines, tqdm bars,
DeepSpeed ``log_dist`` lines with ``skipped=0``, torchrun-prefixed rank lines, NCCL INFO channel
lines) with incident records sprinkled in (all fixture files of ``tests/triage/data``, ~430 lines and
130 events, inserted after every ``--every`` 4-MiB chunks; default 16 = every 64 MiB), into a
temporary directory that is deleted afterwards, plus a 256-MiB "dense" stress file with the incident
block after every chunk. Then, in the same run:

* ``gpufield.triage.ingest.ingest(path, sink=...)`` in a child process (wall time, CPU time, MB/s,
  events, peak RSS of that process), on the full file (1 and 2 keyword-pass threads) and on its
  first tenth (flat memory = same RSS);
* the same on a gzip copy of a 256 MiB slice (decompression included);
* ``grep -c NVRM`` and ``grep -c -E 'NVRM|NCCL WARN|Watchdog caught|Xid'`` on the same file;
* a correctness check: events found == events in one insertion x number of insertions.

Run::

    .venv/bin/python benchmarks/triage_ingest.py --size-gb 2
"""

from __future__ import annotations

import argparse
import gzip
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
FIXTURES = REPO / "tests" / "triage" / "data"
CHUNK_BYTES = 4 << 20

CHILD = r"""
import json, re, sys, time
from gpufield.triage.ingest import IngestOptions, ingest
n = [0]
def sink(e):
    n[0] += 1
def hwm_mb():  # VmHWM of this process only (ru_maxrss would include the parent's RSS at fork)
    return int(re.search(r"VmHWM:\s+(\d+) kB", open("/proc/self/status").read()).group(1)) / 1024
base = hwm_mb()
t, c = time.perf_counter(), time.process_time()
r = ingest([sys.argv[1]], options=IngestOptions(year=2026), sink=sink)
dt, dc = time.perf_counter() - t, time.process_time() - c
print(json.dumps({"seconds": dt, "cpu_seconds": dc, "bytes": r.stats.bytes, "lines": r.stats.lines,
                  "candidates": r.stats.candidates, "events": n[0], "warnings": len(r.stats.warnings),
                  "rss_after_import_mb": base, "peak_rss_mb": hwm_mb()}))
"""


def ordinary_chunk(seed: int) -> bytes:
    """~4 MiB of ordinary training output, no incident in it."""
    rnd = random.Random(seed)
    out, size, step = [], 0, seed * 100_000
    while size < CHUNK_BYTES:
        step += 1
        r = rnd.random()
        ts = f"2026-05-18 19:{step // 60 % 60:02d}:{step % 60:02d},{step % 1000:03d}"
        if r < 0.60:
            s = (f"[{ts}] [INFO] [trainer.py:412] step {step} | loss {rnd.uniform(1, 3):.4f} | lr 2.0e-05 | "
                 f"grad_norm {rnd.uniform(0.2, 2):.3f} | tokens/s {rnd.randint(40000, 60000)} | mem 61.2 GiB")
        elif r < 0.80:
            pct = step % 100
            s = (f"Epoch 1: {pct:3d}%|{'█' * (pct // 10):<10}| {step}/{step + 10000} "
                 f"[12:34<15:22, 5.96it/s, loss={rnd.uniform(1, 3):.3f}, v_num=0]")
        elif r < 0.90:
            s = f"[default{step % 8}]:[rank{step % 64}]: iter {step} loss {rnd.uniform(1, 3):.4f} time {rnd.uniform(300, 400):.1f}ms"
        elif r < 0.95:
            s = (f"[{ts}] [INFO] [logging.py:96:log_dist] [Rank 0] step={step}, skipped=0, lr=[2e-05], "
                 f"mom=[(0.9, 0.95)]")
        else:
            s = (f"node-{step % 16:02d}:{4000 + step % 97}:{5000 + step % 89} [{step % 8}] NCCL INFO Channel "
                 f"{step % 32:02d}/0 : {step % 8}[{step % 8}] -> {(step + 1) % 8}[{(step + 1) % 8}] via P2P/CUMEM/read")
        b = (s + "\n").encode()
        out.append(b)
        size += len(b)
    return b"".join(out)


def incidents() -> bytes:
    """Every fixture file, as one block of incident records."""
    parts = [p.read_bytes() for p in sorted(FIXTURES.iterdir()) if p.suffix != ".md"]
    return b"".join(x if x.endswith(b"\n") else x + b"\n" for x in parts)


def _copy_head(src_path: Path, dst_path: Path, n: int, opener) -> None:
    """Copy the first ``n`` bytes (rounded up to a line end) without holding them in memory."""
    with open(src_path, "rb") as src, opener(dst_path, "wb") as dst:
        left = n
        while left > 0:
            buf = src.read(min(left, 8 << 20))
            if not buf:
                break
            dst.write(buf)
            left -= len(buf)
        dst.write(src.readline())


def child(path: Path, threads: int = 1) -> dict:
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "GPUFIELD_INGEST_THREADS": str(threads)}
    out = subprocess.run([sys.executable, "-c", CHILD, str(path)], capture_output=True, text=True, check=True,
                         cwd=REPO, env=env)
    return json.loads(out.stdout)


def grep(pattern: list[str], path: Path) -> tuple[float, int]:
    t = time.perf_counter()
    out = subprocess.run(["grep", "-c", *pattern, str(path)], capture_output=True, text=True)
    return time.perf_counter() - t, int(out.stdout.strip() or 0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-gb", type=float, default=2.0)
    ap.add_argument("--every", type=int, default=16, help="insert the incident block after every N 4-MiB chunks")
    ap.add_argument("--dir", default=None, help="where to write the log (default: a new /tmp directory)")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="gpufield-ingest-", dir=args.dir))
    try:
        big = tmp / "train.log"
        inc = incidents()
        chunks = [ordinary_chunk(s) for s in range(8)]
        n_ins, total = 0, 0
        t = time.perf_counter()
        with open(big, "wb") as f:
            k = 0
            while total < args.size_gb * 1e9:
                c = chunks[k % len(chunks)]
                f.write(c)
                total += len(c)
                k += 1
                if k % args.every == 0:
                    f.write(inc)
                    total += len(inc)
                    n_ins += 1
        gen_s = time.perf_counter() - t
        (tmp / "one.log").write_bytes(inc)
        per_insertion = child(tmp / "one.log")["events"]

        small = tmp / "small.log"
        _copy_head(big, small, int(total / 10), open)
        gz = tmp / "slice.log.gz"
        _copy_head(big, gz, 256 << 20, lambda p, m: gzip.open(p, m, compresslevel=6))
        dense = tmp / "dense.log"                       # stress: the incident block after every chunk
        with open(dense, "wb") as f:
            for k in range(64):
                f.write(chunks[k % len(chunks)])
                f.write(inc)
        dense_expected = per_insertion * 64

        os.sync()
        t = time.perf_counter()
        subprocess.run(["wc", "-l", str(big)], capture_output=True, check=True)   # also warms the page cache
        wc_s = time.perf_counter() - t
        load_before = os.getloadavg()
        g1 = grep(["NVRM"], big)
        g2 = grep(["-E", "NVRM|NCCL WARN|Watchdog caught|Xid"], big)
        full = child(big)
        full2 = child(big, threads=2)
        tenth = child(small)
        gzr = child(gz)
        den = child(dense)
        res = {
            "file_bytes": total, "insertions": n_ins, "incident_bytes_share": len(inc) * n_ins / total,
            "generate_s": gen_s, "events_expected": per_insertion * n_ins, "full": full, "full_2_threads": full2, "tenth": tenth,
            "gzip_256MiB": gzr, "dense": den, "dense_expected": dense_expected, "grep_c_NVRM": {"seconds": g1[0], "count": g1[1]},
            "grep_c_E_4patterns": {"seconds": g2[0], "count": g2[1]}, "wc_l_seconds": wc_s, "cpus": os.cpu_count(),
            "loadavg_before": load_before, "loadavg_after": os.getloadavg(),
        }
        print(json.dumps(res, indent=2))
        mb = total / 1e6
        print(f"\ningest  {mb:,.0f} MB in {full['seconds']:.1f} s = {mb / full['seconds']:.0f} MB/s wall, "
              f"{mb / full['cpu_seconds']:.0f} MB per CPU-s, {full['events']:,} events "
              f"(expected {per_insertion * n_ins:,}), peak RSS {full['peak_rss_mb']:.0f} MB "
              f"({full['rss_after_import_mb']:.0f} MB after imports)")
        print(f"2 threads: {mb / full2['seconds']:.0f} MB/s wall, {mb / full2['cpu_seconds']:.0f} MB per CPU-s")
        print(f"tenth   {tenth['bytes'] / 1e6:,.0f} MB: {tenth['bytes'] / 1e6 / tenth['seconds']:.0f} MB/s, "
              f"peak RSS {tenth['peak_rss_mb']:.0f} MB")
        print(f"gzip    {gzr['bytes'] / 1e6:,.0f} MB (uncompressed): {gzr['bytes'] / 1e6 / gzr['seconds']:.0f} MB/s")
        print(f"dense   {den['bytes'] / 1e6:,.0f} MB, {den['events']:,} events (expected {dense_expected:,}): "
              f"{den['bytes'] / 1e6 / den['seconds']:.0f} MB/s")
        print(f"grep -c NVRM: {g1[0]:.1f} s = {mb / g1[0]:.0f} MB/s (count {g1[1]:,}); "
              f"grep -c -E 4 patterns: {g2[0]:.1f} s = {mb / g2[0]:.0f} MB/s; wc -l {mb / wc_s:.0f} MB/s")
        print(f"load average before/after: {load_before[0]:.1f} / {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
