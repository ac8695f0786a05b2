"""One rank of the preflight all-reduce (run as ``python -m gpufield.harden.preflight._allreduce_worker``).

Joins a real ``torch.distributed`` process group over TCP on localhost, checks one all-reduce's
result (rank r contributes r + 1, every element must equal w(w + 1)/2), then times ``iters``
all-reduces of ``bytes`` bytes of float32 after 2 warm-up ones. Rank 0 prints one JSON line:
``{"ok", "world_size", "backend", "bytes", "time_s" (slowest rank's median), "init_s", "correct"}``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from datetime import timedelta


def main(argv: list[str] | None = None) -> int:
    """Run one rank; returns the process exit status."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--world", type=int, required=True)
    ap.add_argument("--backend", choices=("gloo", "nccl"), required=True)
    ap.add_argument("--init", required=True)
    ap.add_argument("--bytes", type=int, required=True)
    ap.add_argument("--iters", type=int, required=True)
    ap.add_argument("--timeout-s", type=float, required=True)
    a = ap.parse_args(argv)
    t0 = time.perf_counter()
    import torch
    import torch.distributed as dist

    dev = torch.device("cpu")
    if a.backend == "nccl":
        dev = torch.device("cuda", a.rank)
        torch.cuda.set_device(dev)
    dist.init_process_group(a.backend, init_method=a.init, rank=a.rank, world_size=a.world,
                            timeout=timedelta(seconds=a.timeout_s))

    def sync() -> None:
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)

    try:
        n = max(1, a.bytes // 4)
        x = torch.full((n,), float(a.rank + 1), dtype=torch.float32, device=dev)
        dist.all_reduce(x)
        sync()
        init_s = time.perf_counter() - t0
        want = a.world * (a.world + 1) / 2
        correct = bool(torch.all(x == want).item())
        y = torch.zeros(n, dtype=torch.float32, device=dev)
        for _ in range(2):
            dist.all_reduce(y)
        sync()
        times = []
        for _ in range(a.iters):
            dist.barrier()
            sync()
            t = time.perf_counter()
            dist.all_reduce(y)
            sync()
            times.append(time.perf_counter() - t)
        med = torch.tensor([statistics.median(times)], dtype=torch.float64, device=dev)
        dist.all_reduce(med, op=dist.ReduceOp.MAX)
        ok = torch.tensor([1.0 if correct else 0.0], device=dev)
        dist.all_reduce(ok, op=dist.ReduceOp.MIN)
        if a.rank == 0:
            print(json.dumps({"ok": True, "world_size": a.world, "backend": a.backend, "bytes": n * 4,
                              "time_s": float(med.item()), "init_s": init_s, "correct": bool(ok.item() == 1.0)}),
                  flush=True)
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
