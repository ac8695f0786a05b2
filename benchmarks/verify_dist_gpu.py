"""verify.dist on one GPU: P = 1 against 2 processes sharing it over gloo (fsdp and alpha modes).

Two ``torchrun`` launches of ``gpufield.verify.dist.worker`` (P = 1, every case unsharded; P = 2,
each case in its mode), every rank on ``cuda:0`` with a gloo group. Gloo's CUDA support covers
only some collectives, so :mod:`gpufield.verify.dist.comm` stages CUDA tensors through host memory
under gloo (``staged``): the fsdp all-gathers copy each shard to the host and the gathered
layer back into one device buffer. Per rank: peak GPU memory (``torch.cuda.max_memory_allocated``
of that process, after ``reset_peak_memory_stats`` at the case's start; the two processes have
separate caching allocators, so each figure is that rank's own), the case's wall time, the weight
bytes it holds. Bounds: fsdp P = 2 against P = 1 with ``torch.equal`` on every tensor; alpha
(clause-sharded) ``alpha/best`` max |difference| (contract ``rtol = atol = 1e-5``).

    PYTHONPATH=src python3 benchmarks/verify_dist_gpu.py --out DIR            # on the GPU
    PYTHONPATH=src python benchmarks/verify_dist_gpu.py --dry-run --out DIR   # CPU, tiny sizes

The whole script stops within ``--budget-s`` (150 s): each launch gets the time left as its
timeout, and a launch is not started with less than 20 s left. Writes ``DIR/verify_dist_gpu.json``
(and the launches' raw files under ``DIR/raw``); prints a Markdown table last.
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


def _mnist() -> Path | None:
    for d in (REPO.parent / "shared/data/vnncomp2022/mnist_fc", REPO / "shared/data/vnncomp2022/mnist_fc",
              Path("/work/shared/data/vnncomp2022/mnist_fc")):
        if (d / "onnx/mnist-net_256x4.onnx").is_file():
            return d
    return None


def cases(dry: bool) -> list[dict]:
    """The job's cases (name, network, bounds, mode at P = 2)."""
    width, depth = (64, 3) if dry else (4096, 8)
    mlp = {"mlp": [784] + [width] * depth + [10], "seed": 0, "eps": 0.02}
    out = [
        {"name": f"MLP 784-{width}x{depth}-10 CROWN", **mlp, "shard": "fsdp", "bounds": {"methods": ["ibp", "crown"]}},
        {"name": f"MLP 784-{width}x{depth}-10 alpha-CROWN 5 it. output slopes", **mlp, "shard": "alpha",
         "bounds": {"methods": ["alpha"], "alpha_iterations": 5, "optimize_intermediate": False}},
    ]
    m = _mnist()
    if m is not None:
        m4 = {"onnx": str(m / "onnx/mnist-net_256x4.onnx"), "vnnlib": str(m / "vnnlib/prop_1_0.05.vnnlib")}
        out += [
            {"name": "mnist256x4 CROWN", **m4, "shard": "fsdp", "bounds": {"methods": ["ibp", "crown"]}},
            {"name": "mnist256x4 alpha-CROWN 2 it. interm. slopes", **m4, "shard": "fsdp",
             "bounds": {"methods": ["alpha"], "alpha_iterations": 2}},
            {"name": "mnist256x4 alpha-CROWN 5 it. output slopes", **m4, "shard": "alpha",
             "bounds": {"methods": ["alpha"], "alpha_iterations": 5, "optimize_intermediate": False}},
        ]
    return out


def launch(P: int, job: dict, raw: Path, timeout_s: float) -> dict:
    """One torchrun launch; ``{"ok", "wall_s", "ranks": [per-rank report dicts], "stderr"}``."""
    d = raw / f"P{P}"
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
    ranks = []
    for k in range(P):
        f = d / "out" / f"rank{k}.json"
        ranks.append(json.loads(f.read_text()) if f.is_file() else {})
    return {"ok": ok and all(ranks), "wall_s": time.monotonic() - t0, "ranks": ranks, "stderr": err}


def compare(raw: Path, name: str, shard: str) -> dict:
    """P = 2 rank 0's bounds against P = 1's for case ``name``."""
    import torch

    a = torch.load(raw / "P1/out/rank0.pt", map_location="cpu")[name]
    b = torch.load(raw / "P2/out/rank0.pt", map_location="cpu")[name]
    if shard == "fsdp":
        keys = sorted(a)
        eq = [k for k in keys if k in b and torch.equal(a[k], b[k])]
        return {"tensors": len(keys), "bitwise_equal": len(eq), "equal": len(eq) == len(keys)}
    d = float((a["alpha/best"] - b["alpha/best"]).abs().max())
    ok = bool(torch.allclose(a["alpha/best"], b["alpha/best"], rtol=1e-5, atol=1e-5))
    return {"max_abs_diff": d, "equal": ok, "bitwise": bool(torch.equal(a["alpha/best"], b["alpha/best"]))}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="output folder")
    ap.add_argument("--dry-run", action="store_true", help="CPU, tiny MLP (tests the same code path)")
    ap.add_argument("--budget-s", type=float, default=150.0, help="wall-clock limit of the whole script (s)")
    args = ap.parse_args()
    t_end = time.monotonic() + args.budget_s - 5.0
    import torch

    if not args.dry_run and not torch.cuda.is_available():
        print("CUDA is not available: run with --dry-run on a CPU", file=sys.stderr)
        return 2
    device = "cpu" if args.dry_run else "cuda"
    args.out.mkdir(parents=True, exist_ok=True)
    raw = args.out / "raw"
    cs = cases(args.dry_run)
    doc: dict = {"device": device, "torch": torch.__version__, "budget_s": args.budget_s, "launches": {},
                 "cases": [], "gpu": torch.cuda.get_device_name(0) if device == "cuda" else None}
    for P in (1, 2):
        left = t_end - time.monotonic()
        if left < 20.0:
            doc["launches"][P] = {"ok": False, "skipped": f"{left:.0f} s left"}
            continue
        job = {"device": device, "save_bounds": True, "dtype": "float32",
               "cases": [c if P > 1 else {**c, "shard": "none"} for c in cs]}
        doc["launches"][P] = launch(P, job, raw, left)
    rows = []
    for c in cs:
        row = {"case": c["name"], "mode": c["shard"]}
        for P in (1, 2):
            L = doc["launches"][P]
            if L.get("ok"):
                reps = [r.get(c["name"], {}) for r in L["ranks"]]
                row[f"P{P}"] = [{"rank": k, "peak_bytes": r.get("peak_bytes"), "seconds": r.get("seconds"),
                                 "weight_bytes": r.get("weight_bytes"), "method": r.get("method"),
                                 "gather_calls": r.get("gather_calls"), "gather_s": r.get("gather_seconds")}
                                for k, r in enumerate(reps)]
        if all(doc["launches"][P].get("ok") for P in (1, 2)):
            try:
                row["bounds"] = compare(raw, c["name"], c["shard"])
            except Exception as e:  # a missing case in one launch: recorded, not fatal
                row["bounds"] = {"error": f"{type(e).__name__}: {e}"}
        rows.append(row)
    doc["cases"] = rows
    for L in doc["launches"].values():
        L.pop("ranks", None)
    tmp = args.out / ".verify_dist_gpu.json.tmp"
    tmp.write_text(json.dumps(doc, indent=1))
    os.replace(tmp, args.out / "verify_dist_gpu.json")
    print(f"device {device} ({doc['gpu'] or 'cpu'}), torch {torch.__version__}; launches: " + ", ".join(
        f"P={P} {'ok' if L.get('ok') else 'FAILED'} {L.get('wall_s', 0):.1f} s" for P, L in doc["launches"].items()))
    for P, L in doc["launches"].items():
        if not L.get("ok"):
            print(f"P={P}: {L.get('skipped') or L.get('stderr', '')[-800:]}")
    print("| case | mode | P=1 peak MB | P=2 peak MB rank0 / rank1 | ratio | P=1 s | P=2 s r0 | bounds |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        p1, p2 = r.get("P1"), r.get("P2")
        if not p1 or not p2 or p1[0].get("peak_bytes") is None or any(x.get("peak_bytes") is None for x in p2):
            print(f"| {r['case']} | {r['mode']} | - | - | - | - | - | not measured |")
            continue
        pk = [x["peak_bytes"] / 1e6 for x in p2]
        print(f"| {r['case']} | {r['mode']} | {p1[0]['peak_bytes'] / 1e6:.1f} | {pk[0]:.1f} / {pk[1]:.1f} | "
              f"{max(pk) / (p1[0]['peak_bytes'] / 1e6):.3f}x | {p1[0]['seconds']:.3f} | {p2[0]['seconds']:.3f} | "
              f"{json.dumps(r.get('bounds'))} |")
    return 0 if all(L.get("ok") for L in doc["launches"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
