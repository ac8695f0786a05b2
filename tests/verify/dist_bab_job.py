"""torchrun job of tests/verify/test_dist_domains.py: domain-parallel β-CROWN on tiny MLPs.

    torchrun --standalone --nproc-per-node P tests/verify/dist_bab_job.py PROBLEMS.json OUT.json

``PROBLEMS.json``: ``[{"onnx", "lo", "hi", "c", "threshold", "fault"}, ...]`` (the unsafe set
``c·y ≤ threshold`` over the box). Rank 0 decides each problem with
:func:`gpufield.verify.refine.refine` and ``RefineConfig.sync`` (the other ranks serve its
searches); a problem with ``fault`` makes rank 1's model loader raise, as a worker's failure;
one with ``kill`` makes rank 1's process exit at once when it joins that search (a dead peer;
put it last: the group is gone afterwards); ``no_case`` searches without the VNN-LIB case and
onnxruntime model (the workers get the boxes from rank 0).
Rank 0 writes, per problem, the verdict, the reason, the domains bounded and moved, and whether
the counterexample satisfies the property (checked here again with onnxruntime).
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import replace

import numpy as np
import torch

from gpufield.verify import OrtModel, crown_intermediate, ibp, load_onnx
from gpufield.verify.alpha import AlphaConfig
from gpufield.verify.dist.comm import DistConfig, init_from_env, shutdown
from gpufield.verify.dist.domains import DomainSync, serve
from gpufield.verify.io.vnnlib import Case, Clause
from gpufield.verify.refine import RefineConfig, refine
from gpufield.verify.spec import Spec

CFG = RefineConfig(batch=4, alpha=AlphaConfig(iterations=8), root_iterations=15)


def decide(p: dict, sync=None) -> dict:
    """One problem at this rank (rank 0 or P = 1): verdict, reason, counts."""
    g = load_onnx(p["onnx"])
    g64, ort = g.cast(torch.float64), OrtModel(p["onnx"])
    lo, hi, c = (np.asarray(p[k]) for k in ("lo", "hi", "c"))
    n = len(lo)
    case = Case(lo, hi, (Clause(c.reshape(1, -1), np.array([p["threshold"]])),))
    spec = Spec.from_case(case, len(c))
    lo64, hi64 = (torch.tensor(v).reshape(1, n) for v in (lo, hi))
    ib = ibp(g64, lo64, hi64)
    ref64 = {**ib, **crown_intermediate(g64, lo64, hi64, ref=ib)}
    box32 = [torch.tensor(v, dtype=torch.float32).reshape(1, n) for v in (lo, hi)]
    cfg = CFG if sync is None else replace(CFG, sync=sync)
    moved0 = 0 if sync is None else sync.moved
    no_case = p.get("no_case", False)  # as refine's root check calls it: no case, no onnxruntime
    r = refine(g, g64, spec, *box32, lo64, hi64, None, ref64, cfg, margin_tol=1e-7,
               deadline_s=time.monotonic() + 60.0, case=None if no_case else case, ort_model=None if no_case else ort)
    verdict = "unsat" if r.proven else ("sat" if r.counterexample is not None else "unknown")
    checked = None
    if r.counterexample is not None:  # independent check: in the box, and onnxruntime's output unsafe
        x = r.counterexample.x_N
        y = np.asarray(ort(x.astype(np.float32)), dtype=np.float64)
        checked = bool((lo <= x).all() and (x <= hi).all() and c @ y <= p["threshold"])
    return {"verdict": verdict, "reason": r.reason, "domains": r.domains, "checked": checked,
            "moved": None if sync is None else sync.moved - moved0}


def main(problems_path: str, out_path: str) -> int:
    problems = json.loads(open(problems_path).read())
    comm = init_from_env(DistConfig(timeout_s=60.0))
    if comm.rank != 0:
        def load(path):
            if any(p["fault"] and p["onnx"] == path for p in problems) and comm.rank == 1:
                raise RuntimeError(f"injected fault loading {path}")
            if any(p.get("kill") and p["onnx"] == path for p in problems) and comm.rank == 1:
                os._exit(0)  # no goodbye: rank 0's next collective must fail, not hang
            return load_onnx(path), OrtModel(path)
        status = serve(comm, load)
        shutdown(comm)
        return 0 if status in ("exit", "error") else 1
    out = []
    for p in problems:
        out.append(decide(p, DomainSync(comm, onnx=p["onnx"])))
    if comm.world > 1:
        try:
            comm.all_gather_object({"kind": "exit"})
        except RuntimeError:  # rank 1 is gone (a kill problem)
            pass
    open(out_path, "w").write(json.dumps(out))
    shutdown(comm)
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
