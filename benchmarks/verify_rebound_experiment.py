"""CPU experiment behind session 5's re-bounding after each MIP layer (benchmarks/verify_RESULTS.md).

Root α-CROWN on one mnist_fc 256x4 instance, then for layers 1..L: the MIP of layer t and the
unstable neuron counts per ReLU layer (a) with the deeper layers as before (the old pipeline),
(b) after float64 CROWN with the root's slopes on the refined bounds, (c) after α-CROWN re-run on
those references (its bound; the elementwise best intermediate bounds over its iterations).
The next layer's MIP starts from (b). Usage::

    PYTHONPATH=src python3 benchmarks/verify_rebound_experiment.py DATA prop_9_0.05 10 3 gurobi

DATA holds mnist_fc/; then the vnnlib stem, the per-neuron MIP seconds, the layers, the solver.
Output: benchmarks/results/cpu-rebound/prop_9_0.05.log (2-core CPU, 2 solver processes).
"""

from __future__ import annotations

import sys
import time

import torch

from gpufield.verify.alpha import _Adam, _spec_rows, init_params, tables
from gpufield.verify.milp_bounds import chain, milp_refine
from gpufield.verify.propagate import backward, crown_intermediate
from gpufield.verify.runner import VerifyConfig, _Case, load_instance


def unstable(ref, names) -> list[int]:
    return [int(((ref[n][0] < 0) & (ref[n][1] > 0)).sum()) for n in names]


def alpha_best_inter(g, spec, lo, hi, ref, iterations=100):
    """α-CROWN (Adam, lr 0.1) keeping the elementwise best intermediate bounds (float32, counts only)."""
    params = init_params(g, spec, ref, 1, True)
    leaves = [p.requires_grad_() for p in params.values()]
    opt = _Adam(leaves, 0.1, 0.98)
    best_inter, best = None, None
    for _ in range(iterations + 1):
        tabs = tables(params)
        inter = crown_intermediate(g, lo, hi, ref=ref, alphas=tabs)
        C_SM, b_S, clauses = _spec_rows(spec, params, lo)
        C = C_SM.reshape(len(C_SM), 1, *g.output_shape)
        lb, _ = backward(g, g.output_name, C, lo, hi, inter, alphas=tabs.get(g.output_name), upper=False)
        val = spec.clause_value(lb - b_S.reshape(-1, 1), clauses)
        best = val.detach() if best is None else torch.maximum(best, val.detach())
        if best_inter is None:
            best_inter = {k: (a.detach().clone(), b.detach().clone()) for k, (a, b) in inter.items()}
        else:
            for k, (a, b) in inter.items():
                best_inter[k] = (torch.maximum(best_inter[k][0], a.detach()),
                                 torch.minimum(best_inter[k][1], b.detach()))
        grads = torch.autograd.grad(-(val * (best <= 0)).sum(), leaves, allow_unused=True)
        opt.step(grads)
        with torch.no_grad():
            for k, p in params.items():
                if not k.startswith("lambda|"):
                    p.clamp_(0, 1)
    return float(best.min()), best_inter


def main() -> None:
    data, prop, neuron_s, layers, solver = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
    d = data.rstrip("/") + "/mnist_fc/"
    graph, _, p = load_instance(d + "onnx/mnist-net_256x4.onnx", d + f"vnnlib/{prop}.vnnlib")
    torch.set_num_threads(2)
    g, g64 = graph.cast(torch.float32, "cpu"), graph.cast(torch.float64, "cpu")
    s = _Case(g, g64, p.cases[0], p.n_outputs, VerifyConfig())
    t0 = time.time()
    s.prove(time.monotonic() + 100)
    print("alpha", s.margins, f"{time.time() - t0:.1f}s", flush=True)
    names = chain(g64)[0]
    print("unstable CROWN     ", unstable(s._ref64, names))
    print("unstable alpha-last", unstable(s.ref64, names), flush=True)
    slopes = {m: {r: a.to(torch.float64) for r, a in t.items()} for m, t in s.interm_alphas.items()}
    cur = s.ref64
    for t in range(1, layers + 1):
        t0 = time.time()
        cur, st = milp_refine(g64, s.lo64, s.hi64, cur, layers=t, first=t, neuron_time_s=neuron_s,
                              total_s=3000, workers=2, solver=solver, gap=1e-2)
        print(f"MIP layer {t}: {time.time() - t0:.1f}s", st.unstable_before, st.unstable_after,
              st.tightened, "discarded", st.discarded, flush=True)
        print("  unstable after MIP (stale later layers)", unstable(cur, names), flush=True)
        with torch.no_grad():
            rc = crown_intermediate(g64, s.lo64, s.hi64, ref=cur, alphas=slopes)
        cur = {**cur, **{k: (torch.maximum(cur[k][0], rc[k][0]), torch.minimum(cur[k][1], rc[k][1]))
                         for k in rc if k in cur}}
        print("  unstable after CROWN(last alphas) recompute", unstable(cur, names), flush=True)
        t1 = time.time()
        m, bi = alpha_best_inter(g, s.spec, s.lo, s.hi, {k: (a.float(), b.float()) for k, (a, b) in cur.items()})
        print(f"  alpha re-opt: margin {m:.3f}; unstable best-inter", unstable(bi, names),
              f"{time.time() - t1:.1f}s", flush=True)


if __name__ == "__main__":
    main()
