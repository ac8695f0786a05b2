"""What sets α-CROWN's per-rank peak, and the ``alpha`` mode against P = 1 (CPU or one GPU, gloo, torchrun).

α-CROWN with output slopes only (``optimize_intermediate=False``, as in branch and bound with
frozen intermediate bounds), 5 Adam steps, float32, on generated wide MLPs. Per configuration one
``torchrun`` launch of :mod:`gpufield.verify.dist.worker` (a fresh process per rank):

* ``none`` at P = 1 (the reference);
* ``alpha clauses`` (the first slice: only the output slopes, λ and Adam state split by clause;
  ``alpha_row_split=false``, ``alpha_weights=replicated``);
* ``alpha clauses+rows`` (also the intermediate CROWN rows: each rank bounds ``ceil(n/P)`` rows of
  every layer and all-gathers the bounds; weights replicated);
* ``alpha`` (clauses + rows + FSDP-sharded weights, the mode's default).

Printed columns: width x depth | P | variant | peak MB per rank (max over ranks) | vs P = 1 |
resident MB (weights or shards + gather buffer + box) | at rank 0's peak (CPU): A ``[rows, 1, N]``
MB, 2-D ``[rows, N]`` MB, slopes + Adam MB, other MB | rank 0 s | vs P = 1 | max |Δ alpha/best|.

Memory per rank: the CPU storage tracker (:mod:`gpufield.verify.dist.memory`), with the live
tensors at the peak grouped by shape and sorted into classes (A-matrices ``[rows, 1, N]``;
2-D ``[rows, N]``: the one-hot spec, flattened A / ``|A|`` temporaries, IBP's ``|W|``; slopes
``[1, S, 1, N]`` incl. Adam m/v, gradients, snapshots; the rest; weights are the resident term); on a GPU
``torch.cuda.max_memory_allocated`` of each process (no inventory). Bounds: ``alpha/best`` against
P = 1 (max |diff|; bitwise flag).

    PYTHONPATH=src python benchmarks/verify_dist_alpha.py --out benchmarks/results/verify_dist_alpha_cpu.json
    PYTHONPATH=src python3 benchmarks/verify_dist_alpha.py --device cuda --width 4096 --depth 8 --ps 1,2 --out DIR/x.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

VARIANTS = {
    "alpha clauses": {"shard": "alpha", "alpha_weights": "replicated", "row_split": False},
    "alpha clauses+rows": {"shard": "alpha", "alpha_weights": "replicated", "row_split": True},
    "alpha": {"shard": "alpha", "alpha_weights": "fsdp", "row_split": True},
}


def classify(inv: list[dict], width: int) -> dict[str, int]:
    """Bytes at the peak per class (see the module doc), from a ``peak_inventory`` list."""
    out = {"A [rows,1,N]": 0, "2-D [rows,N]": 0, "gather buffer": 0, "slopes+Adam": 0, "other": 0}
    for t in inv:
        s = t["shape"]
        if len(s) == 3 and s[1] == 1:
            out["A [rows,1,N]"] += t["bytes"]
        elif len(s) == 4 and s[0] in (1, 2) and s[2] == 1:
            out["slopes+Adam"] += t["bytes"]
        elif len(s) == 2 and s[0] > 1:
            out["2-D [rows,N]"] += t["bytes"]  # onehot C, flattened A / |A| temporaries, IBP's |W|
        elif len(s) == 1 and s[0] >= width * width // 2:
            out["gather buffer"] += t["bytes"]
        else:
            out["other"] += t["bytes"]
    return out


def launch(P: int, job: dict, tmp: Path, tag: str, timeout_s: float) -> tuple[list[dict], float]:
    d = tmp / tag
    d.mkdir(parents=True, exist_ok=True)
    (d / "job.json").write_text(json.dumps(job))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(P),
           "-m", "gpufield.verify.dist.worker", str(d / "job.json"), str(d / "out")]
    t0 = time.monotonic()
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s,
                       env={**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")})
    if r.returncode:
        raise RuntimeError(f"{tag}: {r.stderr[-3000:]}")
    return [json.loads((d / "out" / f"rank{k}.json").read_text())["c"] for k in range(P)], time.monotonic() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--width", type=int, default=1024)
    ap.add_argument("--depth", type=int, default=4)
    ap.add_argument("--ps", default="1,2,4", help="world sizes, 1 first")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--timeout-s", type=float, default=900.0, help="per launch")
    args = ap.parse_args()
    import torch

    Ps = [int(p) for p in args.ps.split(",")]
    entry = {"name": "c", "mlp": [784] + [args.width] * args.depth + [10], "seed": 0, "eps": 0.02}
    bounds = {"methods": ["alpha"], "alpha_iterations": 5, "optimize_intermediate": False}
    cpu = args.device == "cpu"
    rows = []
    with tempfile.TemporaryDirectory() as td:
        tmp = Path(td)
        base = None
        for P in Ps:
            for name in (["none"] if P == 1 else args.variants.split(",")):
                v = VARIANTS.get(name, {"shard": "none", "alpha_weights": "replicated", "row_split": True})
                job = {"device": args.device, "dtype": "float32", "save_bounds": True, "inventory": cpu,
                       "shard": v["shard"], "alpha_weights": v["alpha_weights"],
                       "bounds": {**bounds, "alpha_row_split": v["row_split"]}, "cases": [entry]}
                reps, wall = launch(P, job, tmp, f"{name.replace(' ', '_')}_{P}", args.timeout_s)
                best = [torch.load(tmp / f"{name.replace(' ', '_')}_{P}" / "out" / f"rank{k}.pt")["c"]["alpha/best"]
                        for k in range(P)]
                peak = max(r["peak_bytes"] for r in reps)
                if base is None:
                    base = {"peak": peak, "s": reps[0]["seconds"], "best": best[0]}
                diff = float((best[0] - base["best"]).abs().max())
                row = {"P": P, "variant": name, "peak_bytes_per_rank": [r["peak_bytes"] for r in reps],
                       "peak_vs_P1": peak / base["peak"], "seconds_rank0": reps[0]["seconds"],
                       "time_vs_P1": reps[0]["seconds"] / base["s"], "launch_wall_s": wall,
                       "weight_bytes": reps[0]["weight_bytes"], "resident_bytes": reps[0]["resident_bytes"],
                       "gather_calls": reps[0]["gather_calls"], "method": reps[0]["method"],
                       "alpha_best_max_abs_diff_vs_P1": diff,
                       "alpha_best_bitwise_vs_P1": bool(torch.equal(best[0], base["best"])),
                       "ranks_agree": all(torch.equal(b, best[0]) for b in best)}
                if cpu:
                    row["classes_rank0"] = classify(reps[0]["peak_inventory"], args.width)
                    row["top_inventory_rank0"] = reps[0]["peak_inventory"][:6]
                rows.append(row)
                cls = row.get("classes_rank0", {})
                print(f"| {args.width}x{args.depth} | {P} | {name} | {peak / 1e6:.2f} | {row['peak_vs_P1']:.3f}x | "
                      f"{row['resident_bytes'] / 1e6:.2f} | "
                      + " | ".join(f"{cls.get(k, 0) / 1e6:.2f}" for k in ("A [rows,1,N]", "2-D [rows,N]",
                                                                             "slopes+Adam", "other"))
                      + f" | {row['seconds_rank0']:.2f} | {row['time_vs_P1']:.2f}x | {diff:.2e} |", flush=True)
    doc = {"device": args.device, "torch": torch.__version__, "width": args.width, "depth": args.depth,
           "gpu": torch.cuda.get_device_name(0) if args.device.startswith("cuda") else None, "rows": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmpf = args.out.with_name(f".{args.out.name}.tmp")
    tmpf.write_text(json.dumps(doc, indent=1))
    os.replace(tmpf, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
