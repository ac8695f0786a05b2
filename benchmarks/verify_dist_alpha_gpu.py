"""The ``alpha`` mode on one GPU: P = 1 against 2 processes sharing it over gloo (bounds and branch and bound).

``torchrun`` launches (P = 1 once; P = 2 for the BaB cases, then for the MLP cases) of :mod:`gpufield.verify.dist.worker` (P = 1: every case unsharded;
P = 2: each case in its mode), every rank on ``cuda:0``, gloo (CUDA tensors staged through host
memory, :func:`gpufield.verify.dist.comm.staged`). Cases:

* MLP 784-4096x8-10 (the run-75 wide MLP), float32: CROWN under ``fsdp`` (comparison); α-CROWN
  (5 it., output slopes) under ``alpha`` three ways: clauses only (run 75's mode), clauses +
  intermediate rows (weights replicated), clauses + rows + FSDP weights (the mode's default);
* mnist_fc 256x4 β-CROWN branch and bound (FSB, root = α-CROWN on the output slopes): prop_8_0.03
  capped at ``max_domains`` (a fixed workload) and 256x2 prop_6_0.03 (published unsat, proven by
  branch and bound without MIP), under ``alpha``
  (clauses split: each rank keeps only its clauses' α, β); skipped without the mnist_fc files.

Per case and rank: ``torch.cuda.max_memory_allocated`` after ``reset_peak_memory_stats`` at the
case's start (each process has its own allocator), time; bounds against P = 1 (α margins max
|diff|, BaB verdict / domains / global lower bound).

    PYTHONPATH=src python3 benchmarks/verify_dist_alpha_gpu.py --out DIR [--mnist DIR]
    PYTHONPATH=src python benchmarks/verify_dist_alpha_gpu.py --dry-run --out DIR     # CPU, tiny

Stops within ``--budget-s`` (170 s). Writes ``DIR/verify_dist_alpha_gpu.json`` and prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _mnist(arg: str | None) -> Path | None:
    cands = [Path(arg)] if arg else []
    cands += [REPO.parent / "shared/data/vnncomp2022/mnist_fc", REPO / "shared/data/vnncomp2022/mnist_fc",
              Path("/work/shared/data/vnncomp2022/mnist_fc")]
    for d in cands:
        if (d / "onnx/mnist-net_256x4.onnx").is_file():
            return d
    return None


def cases(dry: bool, mnist: Path | None) -> list[dict]:
    width, depth = (64, 3) if dry else (4096, 8)
    mlp = {"mlp": [784] + [width] * depth + [10], "seed": 0, "eps": 0.02}
    al = {"methods": ["alpha"], "alpha_iterations": 5, "optimize_intermediate": False}
    out = [
        {"name": f"MLP {width}x{depth} CROWN", **mlp, "shard": "fsdp", "bounds": {"methods": ["ibp", "crown"]}},
        {"name": f"MLP {width}x{depth} alpha clauses only", **mlp, "shard": "alpha", "alpha_weights": "replicated",
         "bounds": {**al, "alpha_row_split": False}},
        {"name": f"MLP {width}x{depth} alpha clauses+rows", **mlp, "shard": "alpha", "alpha_weights": "replicated",
         "bounds": al},
        {"name": f"MLP {width}x{depth} alpha clauses+rows+fsdp", **mlp, "shard": "alpha", "bounds": al},
    ]
    if mnist is not None:
        net = str(mnist / "onnx/mnist-net_256x4.onnx")
        bab = {"batch": 32 if dry else 256, "max_domains": 60 if dry else 1500, "iterations": 5,
               "root_iterations": 5 if dry else 20, "timeout_s": 300.0 if dry else 40.0}
        out += [
            {"name": "mnist256x4 prop_8_0.03 BaB (capped)", "onnx": net, "vnnlib": str(mnist / "vnnlib/prop_8_0.03.vnnlib"),
             "shard": "alpha", "bab": bab, "require_ort": False},
            {"name": "mnist256x2 prop_6_0.03 BaB", "onnx": str(mnist / "onnx/mnist-net_256x2.onnx"),
             "vnnlib": str(mnist / "vnnlib/prop_6_0.03.vnnlib"), "shard": "alpha",
             "bab": {**bab, "max_domains": 100_000}, "require_ort": False},
        ]
    return out


def launch(P: int, job: dict, raw: Path, timeout_s: float, tag: str) -> dict:
    d = raw / tag
    d.mkdir(parents=True, exist_ok=True)
    (d / "job.json").write_text(json.dumps(job, indent=1))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(P),
           "-m", "gpufield.verify.dist.worker", str(d / "job.json"), str(d / "out")]
    t0 = time.monotonic()
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s,
                           env={**os.environ, "OMP_NUM_THREADS": "4"})
        ok, err = r.returncode == 0, r.stderr[-3000:]
    except subprocess.TimeoutExpired as e:
        ok, err = False, f"timed out after {timeout_s:.0f} s: {str(e.stderr or '')[-2000:]}"
    (d / "stderr.txt").write_text(err)
    ranks = [json.loads(f.read_text()) if (f := d / "out" / f"rank{k}.json").is_file() else {} for k in range(P)]
    return {"ok": ok and all(ranks), "wall_s": time.monotonic() - t0, "ranks": ranks, "stderr": err}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--mnist", default=None, help="mnist_fc folder (onnx/, vnnlib/); default: the shared data")
    ap.add_argument("--dry-run", action="store_true", help="CPU, tiny MLP (same code path)")
    ap.add_argument("--budget-s", type=float, default=170.0)
    args = ap.parse_args()
    t_end = time.monotonic() + args.budget_s - 5.0
    import torch

    if not args.dry_run and not torch.cuda.is_available():
        print("CUDA is not available: run with --dry-run on a CPU", file=sys.stderr)
        return 2
    device = "cpu" if args.dry_run else "cuda"
    args.out.mkdir(parents=True, exist_ok=True)
    raw = args.out / "raw"
    cs = cases(args.dry_run, _mnist(args.mnist))
    doc = {"device": device, "torch": torch.__version__, "gpu": torch.cuda.get_device_name(0) if device == "cuda" else None,
           "launches": {}, "cases": []}
    # P = 1 with every case; P = 2 in two launches (branch and bound first), so a slow one loses only its own
    plan = [("P1", 1, cs), ("P2-bab", 2, [c for c in cs if "bab" in c]), ("P2-mlp", 2, [c for c in cs if "bab" not in c])]
    where: dict[tuple[int, str], str] = {}
    for tag, P, sub in plan:
        if not sub:
            continue
        left = t_end - time.monotonic()
        if left < 20.0:
            doc["launches"][tag] = {"ok": False, "skipped": f"{left:.0f} s left"}
            continue
        job = {"device": device, "save_bounds": True, "dtype": "float32",
               "cases": [c if P > 1 else {**c, "shard": "none"} for c in sub]}
        doc["launches"][tag] = launch(P, job, raw, left, tag)
        for c in sub:
            where[(P, c["name"])] = tag
    rows = []
    for c in cs:
        row = {"case": c["name"], "mode": c["shard"]}
        for P in (1, 2):
            L = doc["launches"].get(where.get((P, c["name"]), ""), {})
            reps = [r.get(c["name"], {}) for r in L.get("ranks", [])]
            if reps and all(reps):
                row[f"P{P}"] = [{k: r.get(k) for k in ("peak_bytes", "resident_bytes", "seconds", "weight_bytes", "method",
                                                         "verdict", "domains", "rounds", "global_lb", "reason", "gather_calls")}
                                for r in reps]
        if "P1" in row and "P2" in row and "bab" not in c:
            try:
                a = torch.load(raw / "P1/out/rank0.pt", map_location="cpu")[c["name"]]
                b = torch.load(raw / "P2-mlp/out/rank0.pt", map_location="cpu")[c["name"]]
                k = "alpha/best" if "alpha/best" in a else "crown/lb"
                row["bounds"] = {"key": k, "max_abs_diff": float((a[k] - b[k]).abs().max()),
                                 "bitwise": bool(torch.equal(a[k], b[k]))}
            except Exception as e:
                row["bounds"] = {"error": f"{type(e).__name__}: {e}"}
        elif "P1" in row and "P2" in row:
            p1, p2 = row["P1"][0], row["P2"]
            row["bounds"] = {"same_verdict": all(r["verdict"] == p1["verdict"] for r in p2),
                             "same_domains": all(r["domains"] == p1["domains"] for r in p2),
                             "global_lb_P1": p1["global_lb"], "global_lb_P2": p2[0]["global_lb"]}
        rows.append(row)
    doc["cases"] = rows
    for L in doc["launches"].values():
        L.pop("ranks", None)
    tmp = args.out / ".verify_dist_alpha_gpu.json.tmp"
    tmp.write_text(json.dumps(doc, indent=1, default=str))
    os.replace(tmp, args.out / "verify_dist_alpha_gpu.json")
    print(f"device {device} ({doc['gpu'] or 'cpu'}), torch {torch.__version__}; launches: " + ", ".join(
        f"{t} {'ok' if L.get('ok') else 'FAILED'} {L.get('wall_s', 0):.1f} s" for t, L in doc["launches"].items()))
    for t, L in doc["launches"].items():
        if not L.get("ok"):
            print(f"{t}: {L.get('skipped') or L.get('stderr', '')[-800:]}")
    print("| case | mode | P=1 peak MB | P=2 peak MB rank0 / rank1 | ratio (max rank) | P=1 s | P=2 s r0 | bounds / verdict |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        p1, p2 = r.get("P1"), r.get("P2")
        if not p1 or not p2:
            print(f"| {r['case']} | {r['mode']} | - | - | - | - | - | not measured |")
            continue
        pk = [x["peak_bytes"] / 1e6 for x in p2]
        b1 = p1[0]["peak_bytes"] / 1e6
        print(f"| {r['case']} | {r['mode']} | {b1:.1f} | {' / '.join(f'{v:.1f}' for v in pk)} | {max(pk) / b1:.3f}x | "
              f"{p1[0]['seconds']:.2f} | {p2[0]['seconds']:.2f} | {json.dumps(r.get('bounds'))} |")
    return 0 if all(L.get("ok") for L in doc["launches"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
