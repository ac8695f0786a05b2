"""Branch and bound on the input box, for networks with few inputs.

A domain is a sub-box (kept exactly in float64; bisection at the float64 midpoint covers the
parent). Boxes are bounded in batches by α-CROWN in the working precision and proven only by the
float64 re-evaluation of the slopes on the float64 sub-box (:func:`~gpufield.verify.alpha.recheck`,
as at the root). The split dimension maximises ``width_d · Σ_S |A_Sd|`` (the input A-matrix of
CROWN: the dimension the linear bound depends on most). Open boxes are attacked at their centre
and at the vertices minimising their linear bounds; onnxruntime validates any hit.

Shape legend: S spec rows, K clauses, B boxes, N input size.
"""

from __future__ import annotations

import time

import torch

from gpufield.verify.alpha import AlphaConfig, alpha_crown, recheck
from gpufield.verify.attack import validate
from gpufield.verify.graph import Graph
from gpufield.verify.propagate import backward, crown_intermediate, ibp
from gpufield.verify.spec import Spec


def _outward(lo64, hi64, dtype):
    lo, hi = lo64.to(dtype), hi64.to(dtype)
    lo = torch.where(lo.double() > lo64, torch.nextafter(lo, torch.full_like(lo, -torch.inf)), lo)
    hi = torch.where(hi.double() < hi64, torch.nextafter(hi, torch.full_like(hi, torch.inf)), hi)
    return lo, hi


def input_bab(graph: Graph, graph64: Graph, spec: Spec, lo64, hi64, cfg, *, margin_tol: float,
              deadline_s: float, case=None, ort_model=None, progress=None):
    """Split the box until every sub-box is proven, a counterexample is found, or a limit hits.

    Args:
        graph, graph64: working-precision and float64 networks.
        spec: the open clauses.
        lo64, hi64: float64 box ``[1, *input]``.
        cfg: :class:`~gpufield.verify.refine.RefineConfig` (``batch``, ``max_domains``, ``alpha``).
        margin_tol, deadline_s, case, ort_model, progress: as in :func:`~gpufield.verify.bab.bab`.

    Returns:
        :class:`~gpufield.verify.bab.BabResult`.
    """
    from gpufield.verify.bab.search import BabResult

    t0 = time.monotonic()
    shape = lo64.shape[1:]
    # open boxes (float64, exact) and their float64 lower bounds; children go to the front
    Q_lo, Q_hi = lo64.flatten(1), hi64.flatten(1)
    Q_lb = torch.full((1,), -torch.inf, dtype=torch.float64, device=lo64.device)
    count = rounds = 0
    res = BabResult(False, None, 0, 0, 0.0, "", -float("inf"))
    acfg = AlphaConfig(iterations=cfg.alpha.iterations, lr=cfg.alpha.lr, optimize_intermediate=True)

    def finish(proven, reason, cex=None):
        res.proven, res.counterexample, res.reason = proven, cex, reason
        res.global_lb = float("inf") if proven else float(Q_lb.min()) if len(Q_lb) else res.global_lb
        res.domains, res.rounds, res.seconds = count, rounds, time.monotonic() - t0
        return res

    try:
        while len(Q_lo):
            if time.monotonic() > deadline_s:
                return finish(False, "deadline")
            if count >= cfg.max_domains:
                return finish(False, "max_domains")
            lo_B, hi_B = Q_lo[:cfg.batch], Q_hi[:cfg.batch]
            B = len(lo_B)
            count += B
            rounds += 1
            lo, hi = (t.reshape(B, *shape) for t in _outward(lo_B, hi_B, graph.dtype))
            l64, h64 = lo_B.reshape(B, *shape), hi_B.reshape(B, *shape)
            with torch.no_grad():
                ib = ibp(graph, lo, hi)
                ref = {**ib, **crown_intermediate(graph, lo, hi, ref=ib)}
            r = alpha_crown(graph, spec, lo, hi, ref, ref, acfg, deadline_s)
            with torch.no_grad():
                ib64 = ibp(graph64, l64, h64)
                ref64 = {**ib64, **crown_intermediate(graph64, l64, h64, ref=ib64)}
                lb_B = recheck(graph64, spec, l64, h64, ref64, r.snapshots).min(0).values
                open_B = ~(lb_B > margin_tol)
                rec: dict[str, torch.Tensor] = {}
                backward(graph, graph.output_name, spec.C_SB(graph.output_shape, B, lo), lo, hi, ref,
                         upper=False, record=rec)
            A = rec.get(graph.input_name, torch.ones(1, B, lo_B.shape[1], dtype=lo.dtype, device=lo.device)).flatten(2)
            if case is not None and ort_model is not None and bool(open_B.any()):
                verts = torch.where(A >= 0, lo_B.to(A.dtype), hi_B.to(A.dtype))[:, open_B].reshape(-1, A.shape[-1])
                pts = torch.cat([((lo_B + hi_B) / 2)[open_B].to(A.dtype), verts])
                with torch.no_grad():
                    y = graph.forward(pts.reshape(len(pts), *shape)).reshape(len(pts), -1).double()
                C = torch.as_tensor(spec.C_SM, dtype=torch.float64, device=y.device)
                b = torch.as_tensor(spec.b_S, dtype=torch.float64, device=y.device)
                hit = (spec.clause_value((y @ C.T - b).T) <= 1e-6).any(0).nonzero().flatten()
                for j in hit[:8].tolist():
                    cex = validate(ort_model, case, pts[j].double().cpu().numpy())
                    if cex is not None:
                        return finish(False, "counterexample in a sub-box", cex)
            lo_o, hi_o, A_o, lb_o = lo_B[open_B], hi_B[open_B], A[:, open_B], lb_B[open_B]
            score = (hi_o - lo_o) * (A_o.abs().sum(0).to(lo_o.dtype) + 1e-12)
            d = score.argmax(1)
            mid = ((lo_o + hi_o) / 2).gather(1, d[:, None]).squeeze(1)
            left_hi, right_lo = hi_o.clone(), lo_o.clone()
            rows = torch.arange(len(d), device=d.device)
            left_hi[rows, d] = mid
            right_lo[rows, d] = mid
            Q_lo = torch.cat([lo_o, right_lo, Q_lo[B:]])
            Q_hi = torch.cat([left_hi, hi_o, Q_hi[B:]])
            Q_lb = torch.cat([lb_o, lb_o, Q_lb[B:]])
            if progress is not None:
                glb = float(Q_lb.min()) if len(Q_lb) else float("inf")
                progress(len(Q_lb), glb, rounds / max(1e-9, time.monotonic() - t0))
        return finish(True, "all sub-boxes proven")
    except KeyboardInterrupt:
        return finish(False, "interrupted")
