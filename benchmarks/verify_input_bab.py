"""Input-split branch and bound on low-dimensional VNN-COMP benchmarks: variants side by side.

Runs a deterministic subset of a benchmark's ``instances.csv`` (every ``--every``-th row from
``--offset``, chosen before looking at any result) in this process with each branch-and-bound
variant in turn, instance by instance (so the variants see the same machine load), and
compares each verdict with a reference results CSV (alpha-beta-CROWN 2022).

Variants (``--variants``, comma separated):
  neuron    the CLI default before this change: β-CROWN ReLU-split BaB (input_split_max_dims=0)
  input_v1  the old input-split loop (α-CROWN 20 it. per batch of 256, width·Σ|A| branching)
  input_v2  the batched input-split loop (:mod:`gpufield.verify.bab.input_split`, the default now)

Counted per variant: decided (sat + unsat), wrong (opposite to the reference), overruns (an
answer later than timeout + 1 s of wall time from the call), sum of wall seconds.

Usage (repo root, ``PYTHONPATH=src``)::

    python benchmarks/verify_input_bab.py OUT_DIR --bench ../shared/data/vnncomp2022/acasxu \\
        --reference ../shared/data/vnncomp2022/results/alpha_beta_crown_acasxu_results.csv \\
        --every 9 --offset 0 --timeout-cap 20 --variants input_v1,input_v2 --device cpu

Writes ``OUT_DIR/<bench>_<tag>.json`` (per-instance rows and totals) and prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch


def configs(device: str):
    from gpufield.verify import AlphaConfig, RefineConfig, VerifyConfig
    from gpufield.verify.bab.input_split import InputSplitConfig

    base = VerifyConfig(device=device, alpha=AlphaConfig(iterations=100), refine=RefineConfig())
    return {
        "neuron": base,
        "input_v1": replace(base, refine=replace(base.refine, input_split_max_dims=16,
                                                 input_split=InputSplitConfig(engine="v1"))),
        "input_v2": replace(base, refine=replace(base.refine, input_split_max_dims=16,
                                                 input_split=InputSplitConfig())),
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir", type=Path)
    ap.add_argument("--bench", type=Path, required=True)
    ap.add_argument("--reference", type=Path, required=True)
    ap.add_argument("--every", type=int, default=9)
    ap.add_argument("--offset", type=int, default=0)
    ap.add_argument("--timeout-cap", type=float, default=20.0)
    ap.add_argument("--variants", default="input_v1,input_v2")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--tag", default="")
    ap.add_argument("--budget-s", type=float, default=float("inf"),
                    help="stop starting instances after this many seconds of wall time")
    a = ap.parse_args(argv)

    from gpufield.verify.io.results import instance_key, read_instances, read_results
    from gpufield.verify.runner import load_instance, verify_instance

    a.out_dir.mkdir(parents=True, exist_ok=True)
    cfgs = configs(a.device)
    variants = a.variants.split(",")
    for v in variants:
        if v not in cfgs:
            raise SystemExit(f"unknown variant {v!r}; choose from {sorted(cfgs)}")
    rows_all = read_instances(a.bench / "instances.csv")
    chosen = [r for i, r in enumerate(rows_all) if i % a.every == a.offset]
    ref = read_results(a.reference)
    name = a.bench.name
    out = {"bench": name, "every": a.every, "offset": a.offset, "timeout_cap_s": a.timeout_cap,
           "device": a.device, "torch": torch.__version__, "cpus": os.cpu_count(),
           "load_avg_start": os.getloadavg(), "rows": []}
    t_start = time.monotonic()
    for inst in chosen:
        if time.monotonic() - t_start > a.budget_s:
            break
        timeout = min(inst.timeout_s, a.timeout_cap)
        theirs = ref.get(instance_key(name, inst.onnx, inst.vnnlib), "?")
        loaded = load_instance(a.bench / inst.onnx, a.bench / inst.vnnlib)
        for v in variants:
            t0 = time.monotonic()
            res = verify_instance(a.bench / inst.onnx, a.bench / inst.vnnlib, timeout_s=timeout,
                                  config=cfgs[v], loaded=loaded)
            secs = time.monotonic() - t0
            wrong = res.verdict in ("sat", "unsat") and theirs in ("sat", "unsat") and res.verdict != theirs
            row = {"onnx": inst.onnx, "vnnlib": inst.vnnlib, "variant": v, "timeout_s": timeout,
                   "verdict": res.verdict, "reference": theirs, "seconds": round(secs, 3), "wrong": wrong,
                   "overrun": secs > timeout + 1.0, "domains": res.margins.get("bab_domains"),
                   "message": res.message}
            out["rows"].append(row)
            print(f"{Path(inst.onnx).stem[12:17]:>6} {Path(inst.vnnlib).stem:>8} {v:>9} {res.verdict:>8} "
                  f"(ref {theirs:>7}) {secs:7.2f} s  domains {row['domains']}", flush=True)
    totals = {}
    for v in variants:
        rs = [r for r in out["rows"] if r["variant"] == v]
        totals[v] = {"instances": len(rs), "decided": sum(r["verdict"] in ("sat", "unsat") for r in rs),
                     "sat": sum(r["verdict"] == "sat" for r in rs), "unsat": sum(r["verdict"] == "unsat" for r in rs),
                     "wrong": sum(r["wrong"] for r in rs), "overruns": sum(r["overrun"] for r in rs),
                     "seconds": round(sum(r["seconds"] for r in rs), 2),
                     "reference_decided": sum(r["reference"] in ("sat", "unsat") for r in rs)}
    out["totals"] = totals
    out["wall_s"] = round(time.monotonic() - t_start, 2)
    out["load_avg_end"] = os.getloadavg()
    path = a.out_dir / f"{name}_{a.tag or 'o' + str(a.offset)}.json"
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(out, indent=1))
    tmp.replace(path)
    for v, t in totals.items():
        print(f"{v}: {t}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
