"""``verify run --shard domains`` at P = 1 and P = 2 (torchrun, gloo, CPU) on shared mnist_fc instances.

Each (instance, P) is its own ``torchrun`` launch of ``python -m gpufield verify run ... --shard
domains --report``; the verdict is compared with the published VNN-COMP 2022 α,β-CROWN result;
per-rank peak memory (storage tracker), the domains bounded and moved come from the report.

    PYTHONPATH=src python benchmarks/verify_dist_domains.py --out benchmarks/results/verify_dist_domains_cpu.json

Default instances: mnist-net_256x2 with the properties that need branch and bound on this CPU
(6_0.03, 10_0.03, 13_0.05) and two soundness traps (sat: 1_0.03, 0_0.05).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared/data/vnncomp2022"
PROPS = ("6_0.03", "10_0.03", "13_0.05", "1_0.03", "0_0.05")


def published() -> dict[str, str]:
    """``prop name -> verdict`` of α,β-CROWN 2022 for mnist-net_256x2."""
    out = {}
    with open(DATA / "results/alpha_beta_crown_mnist_fc_results.csv") as f:
        for row in csv.reader(f):
            if len(row) > 4 and "256x2" in row[1]:
                out[Path(row[2]).stem.replace("prop_", "")] = row[4].strip()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--props", default=",".join(PROPS))
    ap.add_argument("--timeout", type=float, default=120.0)
    args = ap.parse_args()
    ref = published()
    rows = []
    print("| prop | published | P | verdict | wall s | domains | moved | peak MB per rank |")
    print("|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as d:
        for prop in args.props.split(","):
            for P in (1, 2):
                out, rep = Path(d) / f"{prop}_{P}.txt", Path(d) / f"{prop}_{P}.json"
                cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(P),
                       "-m", "gpufield", "verify", "run", str(DATA / "mnist_fc/onnx/mnist-net_256x2.onnx"),
                       str(DATA / f"mnist_fc/vnnlib/prop_{prop}.vnnlib"), "--out", str(out), "--report", str(rep),
                       "--shard", "domains", "--timeout", str(args.timeout)]
                t0 = time.monotonic()
                r = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
                wall = time.monotonic() - t0
                doc = json.loads(rep.read_text()) if rep.is_file() else {}
                verdict = out.read_text().split("\n", 1)[0] if out.is_file() else f"rc={r.returncode}"
                row = {"prop": prop, "published": ref.get(prop), "P": P, "verdict": verdict, "wall_s": wall,
                       "report": doc, "returncode": r.returncode}
                rows.append(row)
                peaks = " / ".join(f"{m.get('peak_bytes', 0) / 1e6:.1f}" for m in doc.get("ranks", []))
                bab = doc.get("bab", {})
                print(f"| {prop} | {ref.get(prop)} | {P} | {verdict} | {wall:.1f} | "
                      f"{(doc.get('margins') or {}).get('bab_domains', '-')} | "
                      f"{bab.get('domains_moved_from_rank0', '-')} | {peaks} |", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_name(f".{args.out.name}.tmp")
    tmp.write_text(json.dumps(rows, indent=1, default=str))
    os.replace(tmp, args.out)
    wrong = [r for r in rows if {r["verdict"], r["published"]} == {"sat", "unsat"}]
    print(f"wrong: {len(wrong)}")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
