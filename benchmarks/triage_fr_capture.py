"""Capture real Flight Recorder dumps (and the torchrun log) of a collective timeout, CPU/gloo.

Run under torchrun with 2 ranks::

    TORCH_FR_BUFFER_SIZE=200 torchrun --nproc-per-node 2 benchmarks/triage_fr_capture.py OUTDIR

Rank 1 is "busy" (sleeps, as a rank tokenising a dataset would) before the 4th all_reduce while
rank 0 waits in it with a 3 s gloo timeout. Each rank writes the pickle torch's
``_dump_fr_trace`` returns (the bytes ``TORCH_NCCL_DUMP_ON_TIMEOUT`` writes to
``TORCH_NCCL_DEBUG_INFO_TEMP_FILE<rank>``) to ``OUTDIR/fr_trace_<rank>``: rank 0 after its timeout,
rank 1 while still busy (as a dump-on-timeout signal would catch it). The files are the test
fixtures of ``tests/triage/test_v2_flight_recorder.py``.
"""

from __future__ import annotations

import datetime
import os
import sys
import time


def main(out: str) -> None:
    import torch
    import torch.distributed as dist
    from torch._C._distributed_c10d import _dump_fr_trace

    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=3))
    rank = dist.get_rank()
    t = torch.ones(1024)
    for _ in range(3):
        dist.all_reduce(t)
    os.makedirs(out, exist_ok=True)
    if rank == 1:
        time.sleep(1.0)  # "tokenising": never enters collective 4 before rank 0 gives up
        with open(os.path.join(out, f"fr_trace_{rank}"), "wb") as f:
            f.write(_dump_fr_trace(True, True, False))
        time.sleep(6.0)
        return
    try:
        dist.all_reduce(t)
    except Exception as e:  # gloo: "Timed out waiting 3000ms for recv operation to complete"
        print(f"[rank{rank}]: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
    with open(os.path.join(out, f"fr_trace_{rank}"), "wb") as f:
        f.write(_dump_fr_trace(True, True, False))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "fr_out")
