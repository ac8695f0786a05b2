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
from dataclasses import dataclass

import torch

from gpufield.verify.alpha import AlphaConfig, alpha_crown, recheck
from gpufield.verify.attack import validate
from gpufield.verify.graph import Graph
from gpufield.verify.propagate import backward, crown_intermediate, forward_linear, ibp
from gpufield.verify.spec import Spec


@dataclass(frozen=True, kw_only=True, slots=True)
class InputSplitConfig:
    """Settings of input-split branch and bound (:func:`input_bab`).

    Attributes:
        engine: ``v2`` (default: batched CROWN in float64 over many sub-boxes per call,
            sensitivity branching, attacks on the worst sub-boxes) or ``v1`` (the earlier loop:
            α-CROWN per batch of ``RefineConfig.batch`` in the working precision, float64 re-check).
        batch: most sub-boxes bounded per CROWN call (v2; α,β-CROWN's acasxu setting is in the
            thousands on a GPU). The batch of a round is also kept under
            ``RefineConfig.memory_budget_bytes``.
        attack_every: run PGD on the worst open sub-boxes every this many rounds (v2; 0: never;
            every round also evaluates each open sub-box's centre and the vertices minimising its
            linear bounds).
        attack_boxes: how many of the worst open sub-boxes that PGD starts from.
        attack_steps: PGD steps of that attack.
        intermediate: how the ReLU inputs are bounded before the backward pass of the spec (v2):
            ``backward`` (default: CROWN, a backward pass per layer) or ``forward`` (forward-mode
            linear bounds, :func:`~gpufield.verify.propagate.forward_linear`: one pass with a
            coefficient column per input; falls back to ``backward`` for ops without a forward
            rule). On acasxu (6 ReLU layers) forward is ~5x cheaper per sub-box but so much looser
            (root bound −895 vs −226 on 1_9 prop_7) that it proves less: see
            benchmarks/verify_RESULTS.md.
        branching: input dimension to bisect (v2): ``sb_max`` (default: the largest
            ``width_d · |A_sd|`` over the rows of the clauses still open), ``sb`` (the largest
            ``width_d · Σ_s |A_sd|`` over those rows) or ``width`` (the widest dimension relative to
            the root box). Sub-boxes to a proof on 4 acasxu instances (sb / sb_max / width):
            107/107/>495, 181/145/1327, 811/765/645, 1683/1221/>3715.
    """

    engine: str = "v2"
    batch: int = 4096
    attack_every: int = 4
    attack_boxes: int = 64
    attack_steps: int = 20
    intermediate: str = "backward"
    branching: str = "sb_max"

    def __post_init__(self):
        if self.engine not in ("v1", "v2"):
            raise ValueError(f"engine {self.engine!r} not in ('v1', 'v2')")
        if self.branching not in ("sb", "sb_max", "width"):
            raise ValueError(f"branching {self.branching!r} not in ('sb', 'sb_max', 'width')")
        if self.intermediate not in ("forward", "backward"):
            raise ValueError(f"intermediate {self.intermediate!r} not in ('forward', 'backward')")
        if self.batch < 1 or self.attack_every < 0 or self.attack_boxes < 1 or self.attack_steps < 1:
            raise ValueError(f"InputSplitConfig: batch={self.batch} >= 1, attack_every={self.attack_every} >= 0, "
                             f"attack_boxes={self.attack_boxes} >= 1, attack_steps={self.attack_steps} >= 1 required")


def _outward(lo64, hi64, dtype):
    lo, hi = lo64.to(dtype), hi64.to(dtype)
    lo = torch.where(lo.double() > lo64, torch.nextafter(lo, torch.full_like(lo, -torch.inf)), lo)
    hi = torch.where(hi.double() < hi64, torch.nextafter(hi, torch.full_like(hi, torch.inf)), hi)
    return lo, hi


def input_bab(graph: Graph, graph64: Graph, spec: Spec, lo64, hi64, cfg, *, margin_tol: float,
              deadline_s: float, case=None, ort_model=None, progress=None):
    """Split the box until every sub-box is proven, a counterexample is found, or a limit hits.

    Dispatches on ``cfg.input_split.engine`` (see :class:`InputSplitConfig`); the arguments
    and result are those of :func:`input_bab_v2`.
    """
    isc = getattr(cfg, "input_split", None) or InputSplitConfig()
    if isc.engine == "v2":
        return input_bab_v2(graph, graph64, spec, lo64, hi64, cfg, margin_tol=margin_tol, deadline_s=deadline_s,
                            case=case, ort_model=ort_model, progress=progress)
    return _input_bab_v1(graph, graph64, spec, lo64, hi64, cfg, margin_tol=margin_tol, deadline_s=deadline_s,
                         case=case, ort_model=ort_model, progress=progress)


def _input_bab_v1(graph: Graph, graph64: Graph, spec: Spec, lo64, hi64, cfg, *, margin_tol: float,
                  deadline_s: float, case=None, ort_model=None, progress=None):
    """The earlier loop (``engine='v1'``): α-CROWN per batch, float64 re-check of its slopes.

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


def _rows_tensors(spec: Spec, like: torch.Tensor):
    C = torch.as_tensor(spec.C_SM, dtype=like.dtype, device=like.device)
    b = torch.as_tensor(spec.b_S, dtype=like.dtype, device=like.device)
    return C, b


def crown_boxes(graph64: Graph, spec: Spec, lo, hi, memory_budget_bytes: int = 2 << 30,
                intermediate: str = "backward"):
    """CROWN (with IBP) row margins of many sub-boxes at once, in the graph's precision.

    Args:
        graph64: the network (float64 for a sound bound).
        spec: clause rows.
        lo, hi: sub-boxes ``[B, *input_shape]``.
        memory_budget_bytes: chunking cap of the intermediate passes.
        intermediate: ``forward`` or ``backward`` (see :class:`InputSplitConfig`).

    Returns:
        ``(margin_SB, A_SBN)``: per row the larger of the CROWN and IBP lower bounds of
        ``C_s y − b_s`` over each sub-box, and the input A-matrix of CROWN's lower pass
        (``lb_s ≥ A_s·x + c_s`` on the box; ``None`` when the output does not depend on the input).
    """
    B = lo.shape[0]
    with torch.no_grad():
        ib = ibp(graph64, lo, hi)
        fw = forward_linear(graph64, lo, hi, ref=ib) if intermediate == "forward" else None
        if fw is None:
            fw = crown_intermediate(graph64, lo, hi, ref=ib, memory_budget_bytes=memory_budget_bytes)
        inter = {**ib, **fw}
        rec: dict[str, torch.Tensor] = {}
        C = spec.C_SB(graph64.output_shape, B, lo)
        lb, _ = backward(graph64, graph64.output_name, C, lo, hi, inter, upper=False, record=rec)
        ol, ou = (t.flatten(1) for t in ib[graph64.output_name])
        Cm, b = _rows_tensors(spec, lo)
        lb_ibp = Cm.clamp(min=0) @ ol.T + Cm.clamp(max=0) @ ou.T
        m = torch.fmax(lb, lb_ibp) - b.reshape(-1, 1)
    A = rec.get(graph64.input_name)
    return m, (None if A is None else A.flatten(2))


def _hits(graph: Graph, spec: Spec, x_PN: torch.Tensor, shape) -> torch.Tensor:
    """Indices of points whose output satisfies some clause (all its rows ≤ b, up to 1e-6)."""
    with torch.no_grad():
        y = graph.forward(x_PN.to(graph.dtype).reshape(len(x_PN), *shape)).reshape(len(x_PN), -1).double()
    C, b = _rows_tensors(spec, y)
    worst = spec.clause_value((y @ C.T - b).T)
    return (worst <= 1e-6).any(0).nonzero().flatten()


def _pgd_boxes(graph: Graph, spec: Spec, lo_PN, hi_PN, shape, steps: int, seed: int, deadline_s: float):
    """PGD inside each sub-box towards the unsafe region; returns the final points ``[2P, N]``.

    Two starts per box (centre and a uniform random point); the objective per point is, over
    the clauses, the smallest ``Σ_{s∈k} max(C_s y − b_s, 0) + 0.01 · max_{s∈k} (C_s y − b_s)``
    (the penalty pulls every violated row at once, which the max alone does not: an output box
    as the unsafe set of reach_prob_density has 5 rows; the max term still ranks points inside).
    """
    dt = graph.dtype
    lo, hi = lo_PN.to(dt).repeat(2, 1), hi_PN.to(dt).repeat(2, 1)
    g = torch.Generator(device="cpu").manual_seed(seed)
    u = torch.rand(lo.shape, generator=g, dtype=dt).to(lo.device)
    u[:len(lo_PN)] = 0.5
    x = lo + (hi - lo) * u
    width = hi - lo
    C, b = _rows_tensors(spec, x)
    for t in range(steps):
        if time.monotonic() > deadline_s:
            break
        x.requires_grad_(True)
        y = graph.forward(x.reshape(len(x), *shape)).reshape(len(x), -1)
        m = (y @ C.T - b).T  # [S, P]
        idx = torch.as_tensor(spec.clause_S, device=m.device).reshape(-1, 1).expand_as(m)
        pen = torch.zeros(spec.n_clauses, m.shape[1], dtype=m.dtype, device=m.device).scatter_add(0, idx, m.clamp(min=0))
        obj = (pen + 0.01 * spec.clause_value(m)).amin(0)
        grad, = torch.autograd.grad(obj.sum(), x)
        with torch.no_grad():
            x = torch.minimum(torch.maximum(x - 0.25 * (1 - t / steps) * width * grad.sign(), lo), hi)
    return x.detach()


def input_bab_v2(graph: Graph, graph64: Graph, spec: Spec, lo64, hi64, cfg, *, margin_tol: float,
                 deadline_s: float, case=None, ort_model=None, progress=None):
    """Batched input-split branch and bound (``engine='v2'``).

    Each round takes the open sub-boxes with the lowest float64 bounds (up to
    ``cfg.input_split.batch``), bounds them in one float64 CROWN call (:func:`crown_boxes`,
    vectorised over the sub-boxes; the bound of a sub-box is also at least its parent's), drops
    the proven ones (smallest clause margin > ``margin_tol``), evaluates each open one at its
    centre and at the vertices minimising its open rows' linear bounds, runs PGD from the
    worst ones every ``attack_every`` rounds (every hit is validated by onnxruntime before it
    is returned), and bisects each open one at the float64 midpoint of the input dimension
    chosen by ``input_split.branching`` (default: the largest ``width_d · |A_sd|`` over the rows
    of its open clauses, the dimension its linear bound depends on most; after α,β-CROWN's
    input ``sb`` branching). Bisection covers the parent exactly, so an empty queue proves the
    property.

    Args:
        graph, graph64: working-precision network (attacks) and float64 network (bounds).
        spec: the open clauses (each with at least one row).
        lo64, hi64: float64 box ``[1, *input]``.
        cfg: :class:`~gpufield.verify.refine.RefineConfig` (``input_split``, ``max_domains``,
            ``memory_budget_bytes``).
        margin_tol: float64 margin a sub-box needs.
        deadline_s: ``time.monotonic()`` deadline; a round whose estimated time (the last
            round's, scaled by the batch) would end after it is not started.
        case, ort_model: VNN-LIB case and onnxruntime model for counterexamples (optional).
        progress: optional ``(boxes_left, global_lb, rounds_per_s)`` callback.

    Returns:
        :class:`~gpufield.verify.bab.BabResult` (``domains``: sub-boxes bounded).
    """
    from gpufield.verify.bab.search import BabResult

    isc = getattr(cfg, "input_split", None) or InputSplitConfig()
    t0 = time.monotonic()
    shape = lo64.shape[1:]
    N = lo64[0].numel()
    dev = lo64.device
    Q_lo, Q_hi = lo64.flatten(1).clone(), hi64.flatten(1).clone()
    root_w = torch.where(Q_hi > Q_lo, Q_hi - Q_lo, torch.ones_like(Q_lo))  # [1, N]
    Q_lb = torch.full((1,), -torch.inf, dtype=torch.float64, device=dev)
    S = len(spec.C_SM)
    clause_S = torch.as_tensor(spec.clause_S, device=dev)
    # per sub-box while it waits: 2N float64 + its bound; CROWN of a batch: A-matrices of the
    # widest layer, [width, B, width] x 8 (lA, uA, temporaries), float64
    widest = max([torch.Size(graph64.shape(n.name)).numel() for n in graph64.nodes] + [N])
    max_queue = max(2, cfg.memory_budget_bytes // (8 * (2 * N + 1)))
    batch_cap = int(max(1, min(isc.batch, cfg.memory_budget_bytes // (8 * 8 * widest * max(widest, S)))))
    count = rounds = 0
    res = BabResult(False, None, 0, 0, 0.0, "", -float("inf"))
    attack = case is not None and ort_model is not None
    last_s = per_box_s = 0.0

    def finish(proven, reason, cex=None):
        res.proven, res.counterexample, res.reason = proven, cex, reason
        res.global_lb = float("inf") if proven else float(Q_lb.min()) if len(Q_lb) else res.global_lb
        res.domains, res.rounds, res.seconds = count, rounds, time.monotonic() - t0
        return res

    def check(pts):
        for j in _hits(graph, spec, pts, shape)[:8].tolist():
            cex = validate(ort_model, case, pts[j].double().cpu().numpy())
            if cex is not None:
                return cex
        return None

    try:
        while len(Q_lb):
            B = min(batch_cap, len(Q_lb))
            now = time.monotonic()
            if now + per_box_s * B > deadline_s:  # the round would end after the deadline
                return finish(False, "deadline")
            if count >= cfg.max_domains:
                return finish(False, "max_domains")
            if len(Q_lb) > max_queue:
                return finish(False, "memory budget")
            if B < len(Q_lb):  # the worst sub-boxes first
                idx = torch.topk(Q_lb, B, largest=False).indices
                keep = torch.ones(len(Q_lb), dtype=torch.bool, device=dev)
                keep[idx] = False
                lo_B, hi_B, plb_B = Q_lo[idx], Q_hi[idx], Q_lb[idx]
                Q_lo, Q_hi, Q_lb = Q_lo[keep], Q_hi[keep], Q_lb[keep]
            else:
                lo_B, hi_B, plb_B = Q_lo, Q_hi, Q_lb
                Q_lo, Q_hi, Q_lb = Q_lo[:0], Q_hi[:0], Q_lb[:0]
            count += B
            rounds += 1
            m_SB, A = crown_boxes(graph64, spec, lo_B.reshape(B, *shape), hi_B.reshape(B, *shape),
                                  cfg.memory_budget_bytes, isc.intermediate)
            v_KB = spec.clause_value(m_SB)
            lb_B = torch.maximum(v_KB.min(0).values, plb_B)  # a sub-box lies inside its parent
            open_B = ~(lb_B > margin_tol)
            n_open = int(open_B.sum())
            if n_open:
                lo_o, hi_o, lb_o = lo_B[open_B], hi_B[open_B], lb_B[open_B]
                A_o = None if A is None else A[:, open_B]
                if attack:
                    # the centre and, per row, the vertex minimising the row's linear lower bound
                    pts = [(lo_o + hi_o) / 2]
                    if A_o is not None:
                        pts.append(torch.where(A_o >= 0, lo_o, hi_o).reshape(-1, N))
                    cex = check(torch.cat(pts))
                    if cex is not None:
                        return finish(False, "counterexample in a sub-box", cex)
                    if isc.attack_every and rounds % isc.attack_every == 1 % isc.attack_every:
                        w = torch.topk(lb_o, min(isc.attack_boxes, n_open), largest=False).indices
                        x = _pgd_boxes(graph, spec, lo_o[w], hi_o[w], shape, isc.attack_steps, rounds, deadline_s)
                        cex = check(x)
                        if cex is not None:
                            return finish(False, "counterexample by PGD in a sub-box", cex)
                width = hi_o - lo_o
                if A_o is None or isc.branching == "width":
                    score = width / root_w
                else:  # rows of clauses still open on the sub-box
                    row_open = ~(v_KB[:, open_B][clause_S] > margin_tol)  # [S, B_open]
                    sens = A_o.abs() * row_open[..., None]
                    sens = sens.amax(0) if isc.branching == "sb_max" else sens.sum(0)
                    score = width * (sens + 1e-12)
                score = torch.where(width > 0, score, torch.full_like(score, -1.0))
                d = score.argmax(1)
                rows_ = torch.arange(n_open, device=dev)
                lo_d, hi_d = lo_o[rows_, d], hi_o[rows_, d]
                mid = lo_d + (hi_d - lo_d) / 2
                if bool(((mid <= lo_d) | (mid >= hi_d)).any()):  # a sub-box too thin to bisect in float64
                    return finish(False, "a sub-box cannot be bisected further in float64")
                left_hi, right_lo = hi_o.clone(), lo_o.clone()
                left_hi[rows_, d] = mid
                right_lo[rows_, d] = mid
                Q_lo = torch.cat([Q_lo, lo_o, right_lo])
                Q_hi = torch.cat([Q_hi, left_hi, hi_o])
                Q_lb = torch.cat([Q_lb, lb_o, lb_o])
            t_now = time.monotonic()
            last_s, now = t_now - now, t_now
            per_box_s = last_s / B
            if progress is not None:
                glb = float(Q_lb.min()) if len(Q_lb) else float("inf")
                progress(len(Q_lb), glb, rounds / max(1e-9, now - t0))
        return finish(True, "all sub-boxes proven")
    except KeyboardInterrupt:
        return finish(False, "interrupted")
