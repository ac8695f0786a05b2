"""Per-rank peak memory and wall time of gpufield.verify.dist against P = 1 (CPU, gloo, torchrun).

Each configuration (network, shard mode, method, P) runs in its own ``torchrun`` launch (a fresh
process per rank, never two modes in one process: the paper's measurement artefact, verify.md
§1.8). Memory is the dispatch-mode storage tracker of :mod:`gpufield.verify.dist.memory` (peak of
the verifier's tensors: resident graph constants + box, plus everything allocated while bounding
and still alive); time is the bounding region's wall time on rank 0 (loading excluded). One run per
configuration.

    PYTHONPATH=src python benchmarks/verify_dist.py --out benchmarks/results/verify_dist_cpu.json

Prints a Markdown table; ``--only NAME`` runs configurations whose name contains NAME.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MNIST = REPO.parent / "shared/data/vnncomp2022/mnist_fc"
M4 = {"onnx": str(MNIST / "onnx/mnist-net_256x4.onnx"), "vnnlib": str(MNIST / "vnnlib/prop_1_0.05.vnnlib")}
CROWN = {"methods": ["crown"]}
ALPHA = {"methods": ["alpha"], "alpha_iterations": 2}
ALPHA_CLAUSE = {"methods": ["alpha"], "alpha_iterations": 5, "optimize_intermediate": False}


def configs():
    """(name, case entry, shard mode used at P > 1, list of P)."""
    return [
        ("mnist256x4 CROWN", {**M4, "bounds": CROWN}, "fsdp", [1, 2, 4]),
        ("mnist256x4 alpha-CROWN (2 it., interm. slopes)", {**M4, "bounds": ALPHA}, "fsdp", [1, 2, 4]),
        ("mnist256x4 alpha-CROWN (5 it., output slopes) by clause", {**M4, "bounds": ALPHA_CLAUSE}, "alpha",
         [1, 2, 4]),
        ("MLP 784-1024x4-10 CROWN", {"mlp": [784] + [1024] * 4 + [10], "seed": 0, "eps": 0.02,
                                     "bounds": CROWN}, "fsdp", [1, 2, 4]),
        ("mnist256x4 CROWN, TP", {**M4, "bounds": CROWN}, "tp", [1, 2, 4]),
        ("MLP 784-1024x4-10 CROWN, TP", {"mlp": [784] + [1024] * 4 + [10], "seed": 0, "eps": 0.02,
                                         "bounds": CROWN}, "tp", [1, 2, 4]),
        ("MLP 784-4096x8-10 IBP", {"mlp": [784] + [4096] * 8 + [10], "seed": 0, "eps": 0.02,
                                   "bounds": {"methods": ["ibp"]}}, "fsdp", [1, 2, 4]),
    ]


def launch(entry: dict, shard: str, P: int, tmp: Path) -> list[dict]:
    """One torchrun launch; returns the per-rank report dicts."""
    job = tmp / f"job_{shard}_{P}.json"
    job.write_text(json.dumps({"shard": shard if P > 1 else "none", "save_bounds": False,
                               "cases": [{"name": "c", **entry}]}))
    out = tmp / f"out_{shard}_{P}"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(P),
           "-m", "gpufield.verify.dist.worker", str(job), str(out)]
    r = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    if r.returncode:
        raise RuntimeError(r.stderr[-3000:])
    return [json.loads((out / f"rank{k}.json").read_text())["c"] for k in range(P)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="write all per-rank reports here (JSON)")
    ap.add_argument("--only", default="", help="run configurations whose name contains this")
    args = ap.parse_args()
    rows, raw = [], []
    print("| configuration | P | mode | weights MB/rank | peak MB/rank (max over ranks) | peak vs P=1 | "
          "transient MB | time s (rank 0) | time vs P=1 | gathers (MB) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as d:
        for name, entry, shard, Ps in configs():
            if args.only not in name:
                continue
            base = None
            for P in Ps:
                reps = launch(entry, shard, P, Path(d))
                peak = max(r["peak_bytes"] for r in reps)
                r0 = reps[0]
                if base is None:
                    base = (peak, r0["seconds"])
                raw.append({"config": name, "P": P, "shard": shard if P > 1 else "none", "ranks": reps})
                line = (f"| {name} | {P} | {shard if P > 1 else 'none'} | {r0['weight_bytes'] / 1e6:.2f} | "
                        f"{peak / 1e6:.2f} | {peak / base[0]:.3f}x | {r0['transient_bytes'] / 1e6:.2f} | "
                        f"{r0['seconds']:.2f} | {r0['seconds'] / base[1]:.2f}x | "
                        f"{r0['gather_calls']} ({r0['gather_bytes'] / 1e6:.0f}) |")
                rows.append(line)
                print(line, flush=True)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        tmp = args.out.with_name(f".{args.out.name}.tmp")
        tmp.write_text(json.dumps(raw, indent=1))
        os.replace(tmp, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
