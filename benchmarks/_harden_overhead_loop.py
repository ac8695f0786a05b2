"""The training loop of ``benchmarks/harden_overhead.py`` (a torchrun entry point; gloo, DDP, CPU).

Each step waits ``--sleep-s`` (the part of a GPU-bound step where the CPU waits for the device),
then runs a small MLP's forward and backward under DDP (gloo all-reduce of the gradients), the
optimizer step and a loss all-reduce, and every rank prints one step line. Rank 0 writes the
per-step wall times (``time.perf_counter``, print included) to ``--out`` as JSON.
"""

from __future__ import annotations

import argparse
import json
import time


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--sleep-s", type=float, default=0.08)
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--hook", action="store_true", help="call gpufield.harden.monitor every step")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from gpufield.harden import monitor

    torch.set_num_threads(1)
    torch.manual_seed(0)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = DistributedDataParallel(torch.nn.Sequential(torch.nn.Linear(a.width, a.width), torch.nn.ReLU(),
                                                        torch.nn.Linear(a.width, a.width)))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(64, a.width)
    times = []
    for step in range(a.steps):
        t0 = time.perf_counter()
        time.sleep(a.sleep_s)
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        red = loss.detach().clone()
        if a.hook:
            with monitor.collective():
                dist.all_reduce(red)
            monitor.step(step)
        else:
            dist.all_reduce(red)
        print(f"[rank{rank}] step {step} | loss {red.item():.5f} | {time.perf_counter() - t0:.4f} s/step", flush=True)
        times.append(time.perf_counter() - t0)
    if rank == 0:
        with open(a.out, "w") as f:
            json.dump(times, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
