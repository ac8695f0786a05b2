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
``--branching babsr|fsb``, ``--bab-batch``, ``--bab-memory-gb``); the root MIP refinement of
deeper nets (``bab-refine``) has ``--mip-layers`` (0: off), ``--mip-workers``, ``--mip-neuron-s``,
``--mip-total-s``.

``--shard K/N`` (K = 1..N) runs the K-th of N disjoint shards, balanced by alpha-beta-CROWN's
published 2022 time per instance (unsolved ones count as their timeout; greedy longest first),
and names its files ``verify_mnist_fc_<device>_shard<K>of<N>.{csv,json}``. Run one process per
GPU and merge with ``benchmarks/verify_merge.py``::

    for k in 1 2; do CUDA_VISIBLE_DEVICES=$((k-1)) PYTHONPATH=src python3 benchmarks/verify_bench_gpu.py \
        --out OUT --shard $k/2 --max-instance-s 300 --total-s 540 & done; wait
    python3 benchmarks/verify_merge.py OUT/verify_mnist_fc_cuda_shard*of2.json --out OUT/verify_mnist_fc_cuda

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


def shard_instances(data: Path, k: int, n: int, select: str | None = None) -> list[tuple[str, str]]:
    """``(onnx, vnnlib)`` of shard ``k`` (1-based) of ``n`` of the instances matching ``select``
    (a regex on ``onnx,vnnlib``; None: all): greedy longest-first on the published time."""
    import csv
    import re

    from gpufield.verify.io.results import instance_key, read_instances

    insts = [i for i in read_instances(data / "mnist_fc/instances.csv")
             if select is None or re.search(select, f"{i.onnx},{i.vnnlib}")]
    ref: dict[tuple[str, str, str], float] = {}
    ref_csv = data / "results/alpha_beta_crown_mnist_fc_results.csv"
    if ref_csv.exists():
        with open(ref_csv, newline="") as f:
            for row in csv.DictReader(f):
                if row["result"] in ("sat", "unsat"):
                    ref[instance_key(row["benchmark"], row["onnx"], row["vnnlib"])] = float(row["run_time"])
    weights = [(ref.get(instance_key("mnist_fc", i.onnx, i.vnnlib), i.timeout_s), i.line, i) for i in insts]
    loads, parts = [0.0] * n, [[] for _ in range(n)]
    for w, _, inst in sorted(weights, key=lambda t: (-t[0], t[1])):
        j = loads.index(min(loads))
        loads[j] += w
        parts[j].append(inst)
    return [(i.onnx, i.vnnlib) for i in sorted(parts[k - 1], key=lambda i: i.line)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="output directory")
    ap.add_argument("--data", default=None, help="directory holding mnist_fc/ and results/")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--max-instance-s", type=float, default=60.0, help="per-instance cap (s); VNN-COMP: 120/300")
    ap.add_argument("--instance-s", type=float, default=None,
                    help="replace the CSV's per-instance timeout (a long attempt; --max-instance-s still caps it)")
    ap.add_argument("--total-s", type=float, default=400.0, help="whole-run budget (s)")
    ap.add_argument("--alpha-iterations", type=int, default=100)
    ap.add_argument("--attack-rounds", type=int, default=20)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: leave as is)")
    ap.add_argument("--select", default=None, help="regex on 'onnx,vnnlib': run only matching instances (e.g. 256x2)")
    ap.add_argument("--no-bab", action="store_true", help="switch off beta-CROWN branch and bound (v1 pipeline)")
    ap.add_argument("--branching", default="fsb", help="fsb | babsr")
    ap.add_argument("--bab-batch", type=int, default=1024, help="most domains bounded together")
    ap.add_argument("--bab-max-domains", type=int, default=5_000_000, help="most domains per instance")
    ap.add_argument("--opt-interm", action="store_true",
                    help="optimise the domains' intermediate bounds too (alpha,beta-CROWN's enable_opt_interm_bounds)")
    ap.add_argument("--bab-iterations", type=int, default=20, help="Adam steps per BaB batch")
    ap.add_argument("--bab-memory-gb", type=float, default=None,
                    help="BaB memory budget (batch size and queue); default 16 on cuda, 2 on cpu")
    ap.add_argument("--mip-layers", type=int, default=3, help="root MIP refinement of ReLU-input layers 1..L (0: off)")
    ap.add_argument("--mip-workers", type=int, default=None,
                    help="MIP solver processes (default: CPU cores, divided by N with --shard K/N)")
    ap.add_argument("--mip-neuron-s", type=float, default=10.0, help="MIP time limit per neuron and sense (s)")
    ap.add_argument("--mip-solver", default="highs", choices=["highs", "gurobi"],
                    help="MIP solver of the root refinement (gurobi needs gurobipy)")
    ap.add_argument("--mip-gap", type=float, default=1e-2, help="relative gap at which one neuron's MIP stops")
    ap.add_argument("--mip-after-s", type=float, default=20.0,
                    help="plain branch and bound this long before the MIP refinement (0: MIP first)")
    ap.add_argument("--mip-fraction", type=float, default=0.8, help="share of the time left the MIP may take")
    ap.add_argument("--mip-total-s", type=float, default=float("inf"),
                    help="cap on the root MIP refinement per instance (s; default none: --mip-fraction of the time left)")
    ap.add_argument("--mip-rebound-iterations", type=int, default=100,
                    help="alpha-CROWN steps re-bounding the deeper layers after each MIP layer (0: CROWN only)")
    ap.add_argument("--shard", default=None, help="K/N: run the K-th of N disjoint, time-balanced shards")
    a = ap.parse_args()
    shard = None
    if a.shard is not None:
        try:
            shard = tuple(int(v) for v in a.shard.split("/"))
            assert len(shard) == 2 and 1 <= shard[0] <= shard[1]
        except (ValueError, AssertionError):
            sys.exit(f"--shard {a.shard!r}: expected K/N with 1 <= K <= N")

    import torch

    from gpufield.verify import AlphaConfig, VerifyConfig, bench

    if a.device.startswith("cuda") and not torch.cuda.is_available():
        sys.exit("CUDA is not available; use --device cpu")
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    data = _find_data(a.data)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    tag = a.device.replace(":", "") + ("" if shard is None else f"_shard{shard[0]}of{shard[1]}")
    select = a.select
    if shard is not None:
        import os
        import re

        keys = shard_instances(data, *shard, select=select)
        select = "^(?:" + "|".join(re.escape(f"{o},{v}") for o, v in keys) + ")$" if keys else "^$"
        if a.mip_workers is None:
            a.mip_workers = max(1, (os.cpu_count() or 1) // shard[1])
    csv_path = out / f"verify_mnist_fc_{tag}.csv"
    if csv_path.exists():
        csv_path.unlink()
    from gpufield.verify.refine import RefineConfig

    mem_gb = a.bab_memory_gb if a.bab_memory_gb is not None else (16.0 if a.device.startswith("cuda") else 2.0)
    rcfg = None if a.no_bab else RefineConfig(batch=a.bab_batch, branching=a.branching, max_domains=a.bab_max_domains,
                                             opt_interm=a.opt_interm,
                                             alpha=AlphaConfig(iterations=a.bab_iterations),
                                             memory_budget_bytes=int(mem_gb * 2**30),
                                             mip_refine_layers=a.mip_layers, mip_workers=a.mip_workers,
                                             mip_neuron_time_s=a.mip_neuron_s, mip_total_s=a.mip_total_s,
                                             mip_solver=a.mip_solver, mip_gap=a.mip_gap,
                                             mip_after_s=a.mip_after_s, mip_fraction=a.mip_fraction,
                                             mip_rebound_iterations=a.mip_rebound_iterations)
    cfg = VerifyConfig(device=a.device, dtype=a.dtype, alpha=AlphaConfig(iterations=a.alpha_iterations),
                       attack_rounds=a.attack_rounds, refine=rcfg)
    if a.device.startswith("cuda"):  # warm up CUDA/cuBLAS outside the timed instances
        x = torch.randn(256, 256, device=a.device)
        (x @ x).sum().item()
    t0 = time.monotonic()
    s = bench(data / "mnist_fc", csv_path,
              reference=data / "results/alpha_beta_crown_mnist_fc_results.csv",
              config=cfg, max_instance_s=a.max_instance_s, total_budget_s=a.total_s, select=select,
              instance_s=a.instance_s)
    wall = time.monotonic() - t0
    summary = {
        "benchmark": "vnncomp2022 mnist_fc (256x2, 256x4: 60 instances)",
        "device": a.device,
        "device_name": torch.cuda.get_device_name(a.device) if a.device.startswith("cuda") else platform.processor(),
        "torch": torch.__version__,
        "settings": {"threads": torch.get_num_threads(), "max_instance_s": a.max_instance_s, "instance_s": a.instance_s,
                     "total_s": a.total_s, "dtype": a.dtype,
                     "alpha_iterations": a.alpha_iterations, "attack_rounds": a.attack_rounds, "select": a.select,
                     "shard": a.shard,
                     "bab": None if rcfg is None else {"batch": a.bab_batch, "branching": a.branching,
                                                       "iterations": a.bab_iterations, "beta": True,
                                                       "max_domains": a.bab_max_domains,
                                                       "opt_interm": a.opt_interm,
                                                       "memory_gb": mem_gb, "mip_layers": a.mip_layers,
                                                       "mip_workers": a.mip_workers, "mip_neuron_s": a.mip_neuron_s,
                                                       "mip_total_s": a.mip_total_s if a.mip_total_s < float("inf") else None, "mip_solver": a.mip_solver,
                                                       "mip_gap": a.mip_gap, "mip_after_s": a.mip_after_s,
                                                       "mip_fraction": a.mip_fraction,
                                                       "mip_rebound_iterations": a.mip_rebound_iterations}},
        "counts": s.counts,
        "reference_abcrown_2022_counts": s.reference_counts,
        "agree": s.agree,
        "wrong": s.wrong,
        "wrong_instances": s.wrong_instances,
        "instances_s": s.total_s,
        "wall_s": wall,
        "rows": s.rows,
        "margins": s.margins,
    }
    (out / f"verify_mnist_fc_{tag}.json").write_text(json.dumps(summary, indent=2))
    print(f"device {summary['device_name']}  wall {wall:.1f} s  instances {s.total_s:.1f} s")
    print(f"ours:             {s.counts}")
    print(f"abcrown 2022:     {s.reference_counts}")
    print(f"agree {s.agree}  wrong {s.wrong} {s.wrong_instances}")
    return 1 if s.wrong else 0


if __name__ == "__main__":
    sys.exit(main())
