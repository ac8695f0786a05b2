"""Merge the shard results of ``verify_bench_gpu.py --shard K/N`` into one summary.

Usage::

    python3 benchmarks/verify_merge.py OUT/verify_mnist_fc_cuda_shard*of2.json --out OUT/verify_mnist_fc_cuda

reads each shard's ``.json`` summary and the ``.csv`` next to it, and writes ``<out>.json`` (same
fields as one run: counts, reference counts, agree, wrong, wrong_instances, rows; instances_s
summed, wall_s the slowest shard's, plus the shard settings) and ``<out>.csv`` (one header, all rows
sorted by model, then epsilon, then property index: the mnist_fc ``instances.csv`` order). It refuses shards of
different N, a missing or repeated shard, or an instance present in two shards, and prints the
counts. Exit status 1 when any answer is wrong.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path


def merge(paths: list[Path]) -> dict:
    """Merged summary of shard json files (see the module docstring); raises SystemExit on bad input."""
    shards = [json.loads(p.read_text()) for p in paths]
    specs = [s.get("settings", {}).get("shard") for s in shards]
    if any(sp is None for sp in specs):
        sys.exit(f"not a shard summary (no settings.shard): {[str(p) for p, sp in zip(paths, specs, strict=True) if sp is None]}")
    ks = sorted(int(sp.split("/")[0]) for sp in specs)
    ns = {int(sp.split("/")[1]) for sp in specs}
    if len(ns) != 1 or ks != list(range(1, ns.pop() + 1)):
        sys.exit(f"shards {specs} are not exactly 1..N of one N")
    rows, seen = [], set()
    for s in shards:
        for r in s["rows"]:
            key = (r[0], r[1])
            if key in seen:
                sys.exit(f"instance {key} appears in two shards")
            seen.add(key)
            rows.append(r)
    counts = Counter()
    ref = Counter()
    for s in shards:
        counts.update(s["counts"])
        ref.update(s.get("reference_abcrown_2022_counts") or {})
    out = {k: shards[0][k] for k in ("benchmark", "device", "device_name", "torch") if k in shards[0]}
    out.update({
        "shards": specs,
        "settings": [s["settings"] for s in shards],
        "counts": dict(counts),
        "reference_abcrown_2022_counts": dict(ref),
        "agree": sum(s["agree"] for s in shards),
        "wrong": sum(s["wrong"] for s in shards),
        "wrong_instances": [w for s in shards for w in s["wrong_instances"]],
        "instances_s": sum(s["instances_s"] for s in shards),
        "wall_s": max(s["wall_s"] for s in shards),
        "rows": rows,
    })
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("json", nargs="+", type=Path, help="shard summaries (verify_mnist_fc_*_shardKofN.json)")
    ap.add_argument("--out", required=True, help="output path without extension")
    a = ap.parse_args()
    m = merge(a.json)
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    header, lines = [], []
    for p in a.json:
        csv_p = p.with_suffix(".csv")
        if csv_p.exists():
            for ln in csv_p.read_text().splitlines():
                if ln.startswith("benchmark,"):
                    header = [ln]
                elif ln.strip():
                    lines.append(ln)
    order = {(r[0], r[1]): i for i, r in enumerate(sorted(m["rows"], key=lambda r: (r[0], _prop_key(r[1]))))}
    lines.sort(key=lambda ln: order.get(tuple(ln.split(",")[1:3]), len(order)))
    out.with_suffix(".csv").write_text("".join(ln + "\n" for ln in header + lines))
    out.with_suffix(".json").write_text(json.dumps(m, indent=2))
    print(f"shards {m['shards']}  wall {m['wall_s']:.1f} s  instances {m['instances_s']:.1f} s")
    print(f"ours:             {m['counts']}")
    print(f"abcrown 2022:     {m['reference_abcrown_2022_counts']}")
    print(f"agree {m['agree']}  wrong {m['wrong']} {m['wrong_instances']}")
    return 1 if m["wrong"] else 0


def _prop_key(vnnlib: str):
    """``prop_<i>_<eps>`` sorts by eps then i (the instances.csv order of mnist_fc)."""
    stem = Path(vnnlib).name.removesuffix(".gz").removesuffix(".vnnlib")
    parts = stem.split("_")
    try:
        return (float(parts[-1]), int(parts[-2]), stem)
    except (ValueError, IndexError):
        return (0.0, 0, stem)


if __name__ == "__main__":
    sys.exit(main())
