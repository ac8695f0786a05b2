"""VNN-COMP 2022 mnist_fc (the 60 shared instances) on one GPU, with a hard total-time cap.

Run from the source tree (no install needed; needs torch>=2.11, onnx, onnxruntime, numpy,
scipy, rich, typer; duckdb is not needed)::

    PYTHONPATH=src python3 benchmarks/verify_bench_gpu.py --out OUTDIR            # cuda
    PYTHONPATH=src python3 benchmarks/verify_bench_gpu.py --out OUTDIR --device cpu

It writes ``OUTDIR/verify_mnist_fc_<device>.csv`` (VNN-COMP results format, one row flushed
per instance), ``OUTDIR/verify_mnist_fc_<device>.json`` (summary: counts, agreement and wrong
answers against alpha-beta-CROWN's published 2022 results, total time, settings, device) and
prints the counts. Per-instance timeout = min(CSV timeout, --max-instance-s, remaining budget /
instances left), so the whole run stays inside --total-s (default 400 s: 60 instances finish
under 8 minutes including start-up). ``--select REGEX`` runs only matching instances (e.g.
``256x4.*0.05``); β-CROWN branch and bound is on (``--no-bab`` for the v1 pipeline,
``--branching babsr|fsb``, ``--bab-batch``, ``--bab-memory-gb``).

The benchmark data is looked up in --data, else ``shared/data/vnncomp2022`` inside the repo,
else ``../shared/data/vnncomp2022`` next to it.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _find_data(arg: str | None) -> Path:
    cands = [Path(arg)] if arg else [REPO / "shared/data/vnncomp2022", REPO.parent / "shared/data/vnncomp2022"]
    for c in cands:
        if (c / "mnist_fc/instances.csv").exists():
            return c
    sys.exit(f"mnist_fc data not found in {[str(c) for c in cands]}; pass --data DIR (holding mnist_fc/ and results/)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="output directory")
    ap.add_argument("--data", default=None, help="directory holding mnist_fc/ and results/")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--max-instance-s", type=float, default=60.0, help="per-instance cap (s); VNN-COMP: 120/300")
    ap.add_argument("--total-s", type=float, default=400.0, help="whole-run budget (s)")
    ap.add_argument("--alpha-iterations", type=int, default=100)
    ap.add_argument("--attack-rounds", type=int, default=20)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: leave as is)")
    ap.add_argument("--select", default=None, help="regex on 'onnx,vnnlib': run only matching instances (e.g. 256x2)")
    ap.add_argument("--no-bab", action="store_true", help="switch off beta-CROWN branch and bound (v1 pipeline)")
    ap.add_argument("--branching", default="fsb", help="fsb | babsr")
    ap.add_argument("--bab-batch", type=int, default=1024, help="most domains bounded together")
    ap.add_argument("--bab-iterations", type=int, default=20, help="Adam steps per BaB batch")
    ap.add_argument("--bab-memory-gb", type=float, default=None,
                    help="BaB memory budget (batch size and queue); default 16 on cuda, 2 on cpu")
    a = ap.parse_args()

    import torch

    from gpufield.verify import AlphaConfig, VerifyConfig, bench

    if a.device.startswith("cuda") and not torch.cuda.is_available():
        sys.exit("CUDA is not available; use --device cpu")
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    data = _find_data(a.data)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    tag = a.device.replace(":", "")
    csv_path = out / f"verify_mnist_fc_{tag}.csv"
    if csv_path.exists():
        csv_path.unlink()
    from gpufield.verify.refine import RefineConfig

    mem_gb = a.bab_memory_gb if a.bab_memory_gb is not None else (16.0 if a.device.startswith("cuda") else 2.0)
    rcfg = None if a.no_bab else RefineConfig(batch=a.bab_batch, branching=a.branching,
                                             alpha=AlphaConfig(iterations=a.bab_iterations),
                                             memory_budget_bytes=int(mem_gb * 2**30))
    cfg = VerifyConfig(device=a.device, dtype=a.dtype, alpha=AlphaConfig(iterations=a.alpha_iterations),
                       attack_rounds=a.attack_rounds, refine=rcfg)
    if a.device.startswith("cuda"):  # warm up CUDA/cuBLAS outside the timed instances
        x = torch.randn(256, 256, device=a.device)
        (x @ x).sum().item()
    t0 = time.monotonic()
    s = bench(data / "mnist_fc", csv_path,
              reference=data / "results/alpha_beta_crown_mnist_fc_results.csv",
              config=cfg, max_instance_s=a.max_instance_s, total_budget_s=a.total_s, select=a.select)
    wall = time.monotonic() - t0
    summary = {
        "benchmark": "vnncomp2022 mnist_fc (256x2, 256x4: 60 instances)",
        "device": a.device,
        "device_name": torch.cuda.get_device_name(a.device) if a.device.startswith("cuda") else platform.processor(),
        "torch": torch.__version__,
        "settings": {"threads": torch.get_num_threads(), "max_instance_s": a.max_instance_s, "total_s": a.total_s, "dtype": a.dtype,
                     "alpha_iterations": a.alpha_iterations, "attack_rounds": a.attack_rounds, "select": a.select,
                     "bab": None if rcfg is None else {"batch": a.bab_batch, "branching": a.branching,
                                                       "iterations": a.bab_iterations, "beta": True,
                                                       "memory_gb": mem_gb}},
        "counts": s.counts,
        "reference_abcrown_2022_counts": s.reference_counts,
        "agree": s.agree,
        "wrong": s.wrong,
        "wrong_instances": s.wrong_instances,
        "instances_s": s.total_s,
        "wall_s": wall,
        "rows": s.rows,
    }
    (out / f"verify_mnist_fc_{tag}.json").write_text(json.dumps(summary, indent=2))
    print(f"device {summary['device_name']}  wall {wall:.1f} s  instances {s.total_s:.1f} s")
    print(f"ours:             {s.counts}")
    print(f"abcrown 2022:     {s.reference_counts}")
    print(f"agree {s.agree}  wrong {s.wrong} {s.wrong_instances}")
    return 1 if s.wrong else 0


if __name__ == "__main__":
    sys.exit(main())
