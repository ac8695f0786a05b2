"""Build the committed crossover table from a raw ``fp64_crossover_gpu.py`` output and print it as Markdown.

    PYTHONPATH=src python3 benchmarks/fp64_crossover_table.py \\
        --raw benchmarks/results/h200-run72/fp64-emulate/fp64_crossover.json --run h200-run72 \\
        --date 2026-12-02 --command "PYTHONPATH=src python3 benchmarks/fp64_crossover_gpu.py --out DIR" \\
        --write src/gpufield/fp64/data/crossover_h200.json

Prints one Markdown row per measured shape: every path's median time and error, and the path each policy
(:func:`gpufield.fp64.crossover.choose`: speed, accuracy, speed with tol 1e-12) takes there.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from gpufield.fp64.crossover import build_table, choose


def markdown(table: dict) -> list[str]:
    """Markdown lines: per entry, each path's time/error and the chosen path per policy."""
    out = ["| op | shape | path: median time / error | speed | accuracy | speed, tol 1e-12 |", "|---|---|---|---|---|---|"]
    for e in table["entries"]:
        dims = [e["M"], e["K"], e["N"]] if e["op"] == "matmul" else e["shape"]
        cells = []
        for p, r in sorted(e["paths"].items(), key=lambda kv: kv[1]["time_s"]):
            err = r.get("err_norm", r.get("err_rel_l2"))
            t = r["time_s"]
            ts = f"{t * 1e3:.3g} ms" if t >= 1e-4 else f"{t * 1e6:.3g} us"
            cells.append(f"{p} {ts} / {err:.1e}")
        ch = [choose(table, e["op"], dims, policy="speed").path, choose(table, e["op"], dims, policy="accuracy").path,
              choose(table, e["op"], dims, policy="speed", tol=1e-12).path]
        shape = "x".join(map(str, dims))
        out.append(f"| {e['op']} | {shape} | " + "; ".join(cells) + " | " + " | ".join(f"**{c}**" for c in ch) + " |")
    return out


def _cell(p, r):
    t = r["time_s"]
    ts = f"{t * 1e3:.3g} ms" if t >= 1e-4 else f"{t * 1e6:.3g} us"
    return f"{ts} / {r.get('err_norm', r.get('err_rel_l2')):.1e}" + (f" ({p})" if p else "")


def compact(table: dict, tol: float = 1e-14) -> list[str]:
    """Markdown, one row per shape: native, the fastest and the most accurate emulated path, cuBLAS emulation,
    and the path of each policy (speed; accuracy; speed with ``tol``)."""
    out = [f"| op | shape | native | fastest emulated | most accurate emulated | cuBLAS emulation | speed | accuracy "
           f"| speed, tol {tol:g} |", "|---|---|---|---|---|---|---|---|---|"]
    for e in table["entries"]:
        dims = [e["M"], e["K"], e["N"]] if e["op"] == "matmul" else e["shape"]
        emu = {p: r for p, r in e["paths"].items() if p not in ("native", "cublas_emu")}
        err = {p: r.get("err_norm", r.get("err_rel_l2")) for p, r in emu.items()}
        fast = min(emu, key=lambda p: emu[p]["time_s"]) if emu else None
        acc = min(emu, key=lambda p: (err[p], emu[p]["time_s"])) if emu else None
        cb = e["paths"].get("cublas_emu")
        ch = [choose(table, e["op"], dims, policy="speed").path, choose(table, e["op"], dims, policy="accuracy").path,
              choose(table, e["op"], dims, policy="speed", tol=tol).path]
        out.append(f"| {e['op']} | {'x'.join(map(str, dims))} | {_cell('', e['paths']['native'])} | "
                   f"{_cell(fast, emu[fast]) if fast else '-'} | {_cell(acc, emu[acc]) if acc else '-'} | "
                   f"{_cell('', cb) if cb else '-'} | " + " | ".join(f"**{c}**" for c in ch) + " |")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--raw", required=True, type=Path)
    ap.add_argument("--run", required=True)
    ap.add_argument("--date", required=True)
    ap.add_argument("--command", required=True)
    ap.add_argument("--commit", default=None, help="the commit the run measured (default: the raw output's env.commit)")
    ap.add_argument("--write", type=Path, default=None)
    ap.add_argument("--compact", action="store_true", help="one row per shape: native, best emulated, policies")
    a = ap.parse_args(argv)
    raw = json.loads(a.raw.read_text())
    prov = {"run": a.run, "commit": a.commit or (raw.get("env") or {}).get("commit"), "date": a.date, "command": a.command,
            "raw": str(a.raw)}
    table = build_table(raw, prov)
    if a.write:
        tmp = a.write.with_name(a.write.name + ".tmp")
        tmp.write_text(json.dumps(table, indent=1) + "\n")
        tmp.replace(a.write)
    print("\n".join(compact(table) if a.compact else markdown(table)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
