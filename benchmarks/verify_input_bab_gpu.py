"""H200 run of batched input-split branch and bound on acasxu and reach_prob_density.

Self-contained, no network. From the repo root::

    PYTHONPATH=src python benchmarks/verify_input_bab_gpu.py $OUT/verify-input [--data DIR]

``--data``: the folder holding ``acasxu/``, ``reach_prob_density/`` and ``results/`` of VNN-COMP
2022 (default: ``../shared/data/vnncomp2022``, else ``shared/data/vnncomp2022``).

What it runs, in one process on ``cuda`` (one warm-up instance first, not counted), each
instance through :func:`gpufield.verify.runner.verify_instance` with the VNN-COMP timeout capped
(``--acas-cap-s`` / ``--rpd-cap-s``); no instance of a subset starts once its share of
``--budget-s`` (default 75, 60, 45 s) is spent:

1. acasxu dev subset: every 9th row of instances.csv from row 0 (21 instances);
2. reach_prob_density: all 36 rows;
3. acasxu held-out subset: every 9th row from row 4 (21 instances), while budget is left;
4. two end-to-end ``gpufield verify run`` processes (``--timeout 10``) on the slowest acasxu
   instance of step 1, checking that the result file is final by timeout + 1 s from process start.

Writes ``results.json`` (after every instance, temporary name + rename), ``log.txt``, and prints a
table: decided / wrong / overruns (answer later than timeout + 1 s) per subset, beside
alpha-beta-CROWN 2022 on the same rows.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out_dir", type=Path)
    ap.add_argument("--data", type=Path, default=None)
    ap.add_argument("--acas-cap-s", type=float, default=6.0)
    ap.add_argument("--rpd-cap-s", type=float, default=3.0)
    ap.add_argument("--budget-s", default="75,60,45",
                    help="seconds per subset (acasxu dev, reach_prob_density, acasxu held-out): no instance "
                         "of a subset starts after its share is spent")
    ap.add_argument("--acas-all", action="store_true",
                    help="run all acasxu rows (one subset 'acasxu_all', the first --budget-s value) and nothing else")
    ap.add_argument("--no-cli", action="store_true", help="skip the two end-to-end CLI runs")
    ap.add_argument("--batch", type=int, default=16384)
    ap.add_argument("--device", default="cuda")
    a = ap.parse_args(argv)
    out = a.out_dir
    out.mkdir(parents=True, exist_ok=True)
    log = open(out / "log.txt", "a", buffering=1)

    def say(msg):
        print(msg, flush=True)
        log.write(msg + "\n")

    data = a.data
    if data is None:
        for cand in (Path("../shared/data/vnncomp2022"), Path("shared/data/vnncomp2022")):
            if (cand / "acasxu").is_dir():
                data = cand
                break
    if data is None or not (data / "acasxu" / "instances.csv").exists():
        say(f"no data: pass --data DIR holding acasxu/, reach_prob_density/, results/ (tried {data})")
        return 2

    import torch

    from gpufield.verify import AlphaConfig, RefineConfig, VerifyConfig
    from gpufield.verify.bab.input_split import InputSplitConfig
    from gpufield.verify.io.results import instance_key, read_instances, read_results
    from gpufield.verify.runner import load_instance, verify_instance

    info = {"torch": torch.__version__, "cuda": torch.cuda.is_available(), "argv": sys.argv, "data": str(data)}
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
    try:
        import onnxruntime
        info["onnxruntime"] = onnxruntime.__version__
    except ImportError:
        say("onnxruntime missing: counterexamples cannot be validated, nothing can be run")
        return 2
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10).stdout.strip()
        info["commit"] = head
    except (OSError, subprocess.SubprocessError):
        pass
    say(json.dumps(info))
    cfg = VerifyConfig(device=a.device, alpha=AlphaConfig(iterations=100),
                       refine=RefineConfig(input_split_max_dims=16, memory_budget_bytes=16 << 30,
                                           input_split=InputSplitConfig(batch=a.batch)))
    res = {"info": info, "config": {"acas_cap_s": a.acas_cap_s, "rpd_cap_s": a.rpd_cap_s, "batch": a.batch,
                                    "budget_s": a.budget_s}, "rows": [], "cli": []}

    def dump():
        p = out / "results.json"
        tmp = p.with_name(f".results.json.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(res, indent=1))
        tmp.replace(p)

    def subset(bench, every, offset):
        rows = read_instances(data / bench / "instances.csv")
        return [r for i, r in enumerate(rows) if every == 1 or i % every == offset]

    plan = [("acasxu_dev", "acasxu", subset("acasxu", 9, 0), a.acas_cap_s),
            ("reach_prob_density", "reach_prob_density", subset("reach_prob_density", 1, 0), a.rpd_cap_s),
            ("acasxu_heldout", "acasxu", subset("acasxu", 9, 4), a.acas_cap_s)]
    if a.acas_all:
        plan = [("acasxu_all", "acasxu", subset("acasxu", 1, 0), a.acas_cap_s)]
    refs = {b: read_results(data / "results" / f"alpha_beta_crown_{b}_results.csv")
            for b in ("acasxu", "reach_prob_density")}
    # warm-up (CUDA context, kernels), not counted
    w = plan[0][2][0]
    t = time.monotonic()
    verify_instance(data / "acasxu" / w.onnx, data / "acasxu" / w.vnnlib, timeout_s=5.0, config=cfg)
    say(f"warm-up {time.monotonic() - t:.1f} s")
    budgets = [float(v) for v in a.budget_s.split(",")]
    for (tag, bench, rows, cap), budget in zip(plan, budgets, strict=True):
        t_start = time.monotonic()
        for inst in rows:
            if time.monotonic() - t_start > budget:
                say(f"budget spent: {tag} {inst.vnnlib} not run")
                res["rows"].append({"subset": tag, "onnx": inst.onnx, "vnnlib": inst.vnnlib, "verdict": "not run"})
                continue
            timeout = min(inst.timeout_s, cap)
            theirs = refs[bench].get(instance_key(bench, inst.onnx, inst.vnnlib), "?")
            try:
                loaded = load_instance(data / bench / inst.onnx, data / bench / inst.vnnlib)
                t0 = time.monotonic()
                r = verify_instance(data / bench / inst.onnx, data / bench / inst.vnnlib, timeout_s=timeout,
                                    config=cfg, loaded=loaded)
                secs, verdict, msg, dom = time.monotonic() - t0, r.verdict, r.message, r.margins.get("bab_domains")
            except Exception as e:  # record and go on
                secs, verdict, msg, dom = 0.0, "error", f"{type(e).__name__}: {e}", None
            wrong = verdict in ("sat", "unsat") and theirs in ("sat", "unsat") and verdict != theirs
            row = {"subset": tag, "onnx": inst.onnx, "vnnlib": inst.vnnlib, "timeout_s": timeout, "verdict": verdict,
                   "reference": theirs, "seconds": round(secs, 3), "wrong": wrong, "overrun": secs > timeout + 1.0,
                   "domains": dom, "message": msg}
            res["rows"].append(row)
            say(f"{tag:18} {Path(inst.onnx).stem:32} {Path(inst.vnnlib).stem:10} {verdict:8} ref {theirs:8} "
                f"{secs:6.2f} s domains {dom}")
            dump()
    totals = {}
    for tag, *_ in plan:
        rs = [r for r in res["rows"] if r["subset"] == tag and r["verdict"] != "not run"]
        totals[tag] = {"run": len(rs), "decided": sum(r["verdict"] in ("sat", "unsat") for r in rs),
                       "wrong": sum(r["wrong"] for r in rs), "overruns": sum(r["overrun"] for r in rs),
                       "reference_decided": sum(r["reference"] in ("sat", "unsat") for r in rs),
                       "errors": sum(r["verdict"] == "error" for r in rs), "seconds": round(sum(r["seconds"] for r in rs), 1)}
        say(f"{tag}: {totals[tag]}")
    res["totals"] = totals
    dump()
    # end to end through the CLI: the result file must be final by timeout + 1 s from process start
    dev = [r for r in res["rows"] if r["subset"] == "acasxu_dev" and "seconds" in r]
    if dev and not a.no_cli:
        slow = max(dev, key=lambda r: r["seconds"])
        for k in range(2):
            rf = out / f"cli_result_{k}.txt"
            rf.unlink(missing_ok=True)
            t0, t0_wall = time.monotonic(), time.time()
            p = subprocess.run([sys.executable, "-m", "gpufield", "verify", "run", str(data / "acasxu" / slow["onnx"]),
                                str(data / "acasxu" / slow["vnnlib"]), "--out", str(rf), "--timeout", "10",
                                "--device", a.device, "--force"], capture_output=True, text=True, timeout=60,
                               env={**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH", "src")})
            wall = time.monotonic() - t0
            first = rf.read_text().split("\n", 1)[0] if rf.exists() else "(none)"
            written_s = rf.stat().st_mtime - t0_wall if rf.exists() else None  # last write, from process start
            res["cli"].append({"instance": f"{slow['onnx']},{slow['vnnlib']}", "rc": p.returncode, "wall_s": round(wall, 2),
                               "result": first, "written_after_s": None if written_s is None else round(written_s, 2),
                               "final_by_timeout_plus_1": written_s is not None and written_s <= 11.0,
                               "stderr_tail": p.stderr[-500:]})
            say(f"cli run {k}: rc {p.returncode}, process {wall:.2f} s, result {first} written "
                f"{written_s if written_s is None else round(written_s, 2)} s after start (rule: <= 11 s)")
        dump()
    return 0


if __name__ == "__main__":
    sys.exit(main())
