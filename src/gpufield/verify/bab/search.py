"""The branch-and-bound loop: priority queue of open domains, batched β-CROWN bounding, attacks.

Every open domain (float64 lower bound ≤ ``margin_tol``) waits in a heap keyed on its bound, the
worst first, together with its split history, float64 intermediate bounds, best α and β, and the
split chosen for it. A round pops up to ``batch / 2`` domains, bounds their ``batch`` children
(:mod:`.bound`), drops the proven ones (float64 bound > ``margin_tol``, or an empty domain),
attacks the others at the box vertices that minimise their linear bounds (onnxruntime validates
any hit: ``sat``), chooses their next split (:mod:`.branch`) and pushes them. The two children
of a split cover the parent, so an empty queue proves the property. A child's bound is at least
its parent's (a child lies inside its parent). The global lower bound is the
smallest float64 bound in the queue (sound).

Shape legend: S spec rows, K clauses, B domains, N neurons, * node shape.
"""

from __future__ import annotations

import heapq
import itertools
import time
from dataclasses import dataclass, field

import torch

from gpufield.verify.attack import Counterexample, validate
from gpufield.verify.bab.bound import bound64, final_bound, intermediate64, optimise
from gpufield.verify.bab.branch import choose
from gpufield.verify.bab.interm import init_interm, tighten64
from gpufield.verify.bab.leaf import solve_leaf
from gpufield.verify.graph import Graph
from gpufield.verify.propagate import ancestors
from gpufield.verify.spec import Spec


@dataclass
class Domain:
    """One open domain, tensors with a batch dimension of 1 (see :mod:`.bound` for shapes)."""

    lb: float
    splits: dict[str, torch.Tensor]
    inter64: dict[str, tuple[torch.Tensor, torch.Tensor]]
    alpha: dict[str, torch.Tensor]
    beta: dict[str, torch.Tensor]
    decision: tuple[str, int] | None = None
    depth: int = 0

    def nbytes(self) -> int:
        ts = [*self.splits.values(), *self.alpha.values(), *self.beta.values(),
              *(t for p in self.inter64.values() for t in p)]
        return sum(t.numel() * t.element_size() for t in ts)


@dataclass
class BabResult:
    """Outcome of :func:`bab`.

    Attributes:
        proven: True only when every leaf passed the float64 check.
        counterexample: a witness validated by onnxruntime (``sat``), else None.
        domains: domains bounded.
        rounds: batches bounded.
        seconds: wall time.
        reason: why it stopped.
        global_lb: smallest float64 bound over the open domains when it stopped (+inf if proven).
    """

    proven: bool
    counterexample: Counterexample | None
    domains: int
    rounds: int
    seconds: float
    reason: str
    global_lb: float = -float("inf")
    history: list[tuple[float, int, float]] = field(default_factory=list)


def _cat(items, dim):
    return torch.cat(items, dim)


def _stack(parents: list[Domain], names, relus):
    splits = {n: _cat([d.splits[n] for d in parents], 0) for n in names}
    inter = {n: (_cat([d.inter64[n][0] for d in parents], 0), _cat([d.inter64[n][1] for d in parents], 0)) for n in names}
    alpha = {r: _cat([d.alpha[r] for d in parents], 2) for r in relus}
    beta = {n: _cat([d.beta[n] for d in parents], 1) for n in names}
    return splits, inter, alpha, beta


def _attack_vertices(graph: Graph, spec: Spec, case, ort_model, lo, hi, A_SBN, open_B, split=None):
    """Evaluate the box vertices minimising each row's linear bound; validate violations.

    ``spec`` is the whole spec; with ``split`` ``A_SBN`` holds this rank's rows only, and the
    candidates of all ranks are merged in the order of P = 1's rows (the same first 8 on every rank).
    """
    if A_SBN is None or not bool(open_B.any()):
        return None
    A = A_SBN[:, open_B].flatten(2)
    x = torch.where(A >= 0, lo[open_B].flatten(1), hi[open_B].flatten(1)).reshape(-1, A.shape[-1])
    with torch.no_grad():
        y = graph.forward(x.to(graph.dtype).reshape(len(x), *graph.input_shape)).reshape(len(x), -1).double()
    C = torch.as_tensor(spec.C_SM, dtype=torch.float64, device=y.device)
    b = torch.as_tensor(spec.b_S, dtype=torch.float64, device=y.device)
    worst = spec.clause_value((y @ C.T - b).T)  # clause k is hit iff all its rows ≤ b: max ≤ 0
    hit = (worst <= 1e-6).any(0).nonzero().flatten()
    if split is None:
        points = [x[j].double().cpu().numpy() for j in hit[:8].tolist()]
    else:  # row s of this rank is row offset + s of the whole spec: P = 1's index (offset + s)·B + b
        off = split.row_offset() * A.shape[1]
        points = [p for _, p in split.first([(off + j, x[j].double().cpu().numpy()) for j in hit[:8].tolist()])[:8]]
    for p in points:
        cex = validate(ort_model, case, p)
        if cex is not None:
            return cex
    return None


def _leaf(g64, spec, case, ort_model, lo64, hi64, inter64, alpha, splits, names, b, S, tol, split=None):
    one = {n: s[b:b + 1] for n, s in splits.items()}
    i64 = {n: (lw[b:b + 1], u[b:b + 1]) for n, (lw, u) in inter64.items()}
    beta, points = solve_leaf(g64, spec, lo64, hi64, i64, one, S)
    lb = bound64(g64, spec, lo64, hi64, i64, {r: a[:, :, b:b + 1] for r, a in alpha.items()}, beta, one, names,
                 split=split)
    if float(lb[0]) > tol:
        return "proven", None
    found = None
    for x in points if case is not None and ort_model is not None else []:
        cex = validate(ort_model, case, x)
        if cex is not None:
            found = cex
            break
    if split is not None:  # the lowest rank's counterexample, on every rank
        got = split.first([] if found is None else [(split.comm.rank, found)])
        found = got[0][1] if got else None
    return "open", found


def bab(graph: Graph, graph64: Graph, spec: Spec, lo, hi, lo64, hi64, ref64, cfg, *,
        margin_tol: float, deadline_s: float, case=None, ort_model=None, progress=None,
        interm_alphas=None) -> BabResult:
    """Complete verification of ``spec`` over the box by β-CROWN branch and bound.

    Args:
        graph, graph64: working-precision and float64 networks.
        spec: the open clauses (each needs at least one row).
        lo, hi / lo64, hi64: box ``[1, *input]`` (outward rounded) in each precision.
        ref64: sound float64 root bounds of every ReLU input (e.g. α-CROWN's).
        cfg: :class:`~gpufield.verify.refine.RefineConfig`.
        margin_tol: float64 margin a leaf needs.
        deadline_s: ``time.monotonic()`` deadline.
        case, ort_model: the VNN-LIB case and onnxruntime model, for counterexamples (optional).
        progress: callable ``(domains_left, global_lb, rounds_per_s)`` called once per round.
        interm_alphas: the root α-CROWN's slopes per intermediate start node
            (``{start: {relu: [2, N, 1, *]}}``), the warm start of ``cfg.opt_interm``.

    Returns:
        :class:`BabResult`. A ``KeyboardInterrupt`` ends the search with ``reason='interrupted'``.
    """
    t0 = time.monotonic()
    spec_split = getattr(cfg, "spec_split", None)  # clauses spread over ranks (gpufield.verify.dist.bab_shard)
    full_spec = spec
    if spec_split is not None:
        if getattr(cfg, "sync", None) is not None or cfg.opt_interm:
            raise ValueError("spec_split excludes sync (domains mode) and opt_interm")
        spec = spec_split.local(spec)
    relus = [r for r in graph.relu_nodes() if r.inputs[0] != graph.input_name]
    names = [r.inputs[0] for r in relus]
    rnames = [r.name for r in relus]
    S = len(spec.C_SM)
    dev = lo.device
    root = Domain(
        lb=-float("inf"),
        splits={n: torch.zeros(1, torch.Size(graph.shape(n)).numel(), dtype=torch.int8, device=dev) for n in names},
        inter64={n: ref64[n] for n in names},
        alpha={r.name: torch.ones(1, S, 1, *graph.shape(r.inputs[0]), dtype=lo.dtype, device=dev) * 0.5 for r in relus},
        beta={n: torch.zeros(S, 1, torch.Size(graph.shape(n)).numel(), dtype=lo.dtype, device=dev) for n in names},
    )
    with torch.no_grad():  # root slopes: CROWN's adaptive choice
        from gpufield.verify.ops.activation import adaptive_lower_slope
        for r in relus:
            root.alpha[r.name] = adaptive_lower_slope(*(t.to(lo.dtype) for t in ref64[r.inputs[0]])).unsqueeze(0).unsqueeze(0).expand(1, S, 1, *graph.shape(r.inputs[0])).clone()
    per_domain = max(1, 8 * max(torch.Size(graph.shape(n)).numel() for n in names) ** 2 * 8)
    relu_set = {r.name for r in relus}
    # layers worth re-bounding: those with a ReLU below them (the first is exact from the box)
    deep = [n for n in names if relu_set & ancestors(graph, n)] if cfg.opt_interm else []
    size = {n: torch.Size(graph.shape(n)).numel() for n in names}
    for m in deep:  # its α and β rows per domain: 2 N_m x (neurons below), x6 (value, grad, Adam, graph)
        per_domain += 2 * size[m] * 2 * sum(size[n] for n in names if n in ancestors(graph, m)) * 4 * 6
    root_slopes = None
    if interm_alphas and deep:
        root_slopes = {m: {r: a.to(lo.dtype) for r, a in t.items()} for m, t in interm_alphas.items() if m in deep}
    batch = int(max(2, min(cfg.batch, cfg.memory_budget_bytes // per_domain)))
    heap: list[tuple[float, int, Domain]] = []
    tick = itertools.count()
    count = rounds = 0
    res = BabResult(False, None, 0, 0, 0.0, "", -float("inf"))

    pending: list[tuple[Domain, tuple[str, int, int] | None]] = [(root, None)]

    def finish(proven, reason, cex=None):
        res.proven, res.counterexample, res.reason = proven, cex, reason
        res.domains, res.rounds, res.seconds = count, rounds, time.monotonic() - t0
        # popped parents whose children were not bounded yet still count (their bound is the parent's)
        open_lbs = [h[0] for h in heap] + [d.lb for d, _ in pending]
        res.global_lb = float("inf") if proven else min(open_lbs, default=res.global_lb)
        if sync is not None:  # every rank's domains and bounds
            sync.totals(res)
        return res

    rigid_s = 0.0  # the last round's time outside the optimiser, which cannot stop at the deadline
    opt_s = 0.0
    sync = getattr(cfg, "sync", None)  # domains spread over ranks (gpufield.verify.dist.domains)
    if sync is not None:
        deadline_s = sync.begin(spec=spec, case=case, cfg=cfg, margin_tol=margin_tol, deadline_s=deadline_s,
                                ort_model=ort_model, interm_alphas=interm_alphas, device=dev,
                                boxes=(lo, hi, lo64, hi64))
        if not sync.is_root:  # a worker: domains arrive from the other ranks
            pending = []

    def bound_round():
        """Bound the children of ``pending``, push the open ones; a stop ``(proven, reason, cex)`` or None."""
        nonlocal count, rounds, opt_s, pending
        # children of the popped parents (or the root in round 0)
        children = []
        for parent, split in pending:
            d = Domain(parent.lb, {n: s.clone() for n, s in parent.splits.items()}, parent.inter64,
                       parent.alpha, {n: b for n, b in parent.beta.items()}, depth=parent.depth + (split is not None))
            if split is not None:
                name, j, sgn = split
                d.splits[name][0, j] = sgn
            children.append(d)
        B = len(children)
        root_round = pending[0][1] is None
        count += B
        rounds += 1
        splits, inter64p, alpha, beta = _stack(children, names, rnames)
        lo64B, hi64B = lo64.expand(B, *lo64.shape[1:]), hi64.expand(B, *hi64.shape[1:])
        loB, hiB = lo.expand(B, *lo.shape[1:]), hi.expand(B, *hi.shape[1:])
        new_layers = [names.index(sp[0]) for _, sp in pending if sp is not None]
        fixed = frozenset(names[:min(new_layers) + 1]) if len(new_layers) == len(pending) else frozenset()
        inter64 = intermediate64(graph64, lo64B, hi64B, inter64p, splits, fixed,
                                 row_split=None if spec_split is None else spec_split.rows)
        inter = {n: (lw.to(lo.dtype), u.to(lo.dtype)) for n, (lw, u) in inter64.items()}
        inter[graph.input_name] = (loB, hiB)
        inter64[graph64.input_name] = (lo64B, hi64B)
        interm = None
        if deep:
            interm = init_interm(graph, [m for m in deep if m not in fixed], inter, splits, root_slopes)
        t_opt = time.monotonic()
        alpha, beta, _ = optimise(graph, spec, loB, hiB, inter, splits, alpha, beta,
                                  iterations=cfg.root_iterations if root_round else cfg.alpha.iterations,
                                  lr_alpha=cfg.alpha.lr, lr_beta=cfg.lr_beta, use_beta=cfg.beta,
                                  deadline_s=deadline_s, interm=interm, split=spec_split)
        opt_s = time.monotonic() - t_opt
        if interm:  # the optimised intermediate bounds, re-evaluated in float64 (sound)
            inter64 = tighten64(graph64, lo64B, hi64B, inter64, splits, interm)
            inter = {n: (lw.to(lo.dtype), u.to(lo.dtype)) for n, (lw, u) in inter64.items()}
        rec: dict[str, torch.Tensor] = {}
        lb64 = bound64(graph64, spec, lo64B, hi64B, inter64, alpha, beta, splits, names, record=rec, split=spec_split)
        # a child lies inside its parent: the parent's sound bound holds too (matters when the
        # deadline cut the child's optimisation short)
        lb64 = torch.maximum(lb64, torch.tensor([c.lb for c in children], dtype=lb64.dtype, device=lb64.device))
        open_B = ~(lb64 > margin_tol)
        if case is not None and ort_model is not None:
            cex = _attack_vertices(graph, full_spec, case, ort_model, lo64B, hi64B, rec.get(graph64.input_name),
                                   open_B, spec_split)
            if cex is not None:
                return False, "counterexample in a domain's bound minimiser", cex
        idx = open_B.nonzero().flatten()
        if len(idx):
            def sub(t, dim=0, idx=idx):
                return t.index_select(dim, idx)
            sub_inter = {n: (sub(lw), sub(u)) for n, (lw, u) in inter.items()}
            sub_alpha = {r: sub(a, 2) for r, a in alpha.items()}
            sub_beta = {n: sub(b, 1) for n, b in beta.items()}
            sub_splits = {n: sub(s) for n, s in splits.items()}
            rec32: dict[str, torch.Tensor] = {}
            with torch.no_grad():
                final_bound(graph, spec, sub(loB), sub(hiB), sub_inter, sub_alpha, sub_beta, sub_splits, record=rec32)
            picks = choose(graph, spec, sub(loB), sub(hiB), sub_inter, sub_alpha, sub_beta, sub_splits,
                           rec32, method=cfg.branching, k=cfg.fsb_k, split=spec_split)
            lb_list = lb64.tolist()
            for i, b in enumerate(idx.tolist()):
                if picks[i] is None:  # affine on the domain: an LP decides it
                    verdict, cex = _leaf(graph64, spec, case, ort_model, lo64, hi64, inter64, alpha,
                                         splits, names, b, S, margin_tol, spec_split)
                    if verdict == "proven":
                        continue
                    if cex is not None:
                        return False, "counterexample from a fully stable leaf's LP", cex
                    return False, "a fully stable leaf is neither proven nor falsified", None
                d = Domain(lb_list[b], {n: s[b:b + 1] for n, s in splits.items()},
                           {n: (inter64[n][0][b:b + 1], inter64[n][1][b:b + 1]) for n in names},
                           {r: a[:, :, b:b + 1].detach() for r, a in alpha.items()},
                           {n: bt[:, b:b + 1].detach() for n, bt in beta.items()},
                           decision=picks[i], depth=children[b].depth)
                heapq.heappush(heap, (d.lb, next(tick), d))
        pending = []  # every child is bounded and either proven or in the heap
        return None

    try:
        while True:
            t_round = time.monotonic()
            stop = None
            late = t_round + rigid_s > deadline_s  # the next round would end after the deadline
            if spec_split is not None:
                late = spec_split.any(late)
            if late:
                stop = (False, "deadline", None)
            elif pending:
                stop = bound_round()
            if stop is None and pending == []:
                glb = min([h[0] for h in heap], default=float("inf"))
                res.global_lb = glb
                rate = rounds / max(1e-9, time.monotonic() - t0)
                res.history.append((time.monotonic() - t0, len(heap), glb))
                if progress is not None:
                    progress(len(heap), glb, rate)
                rigid_s = time.monotonic() - t_round - opt_s
                opt_s = 0.0
                if sync is None and not heap:
                    stop = (True, "all domains proven", None)
                elif sync is None and count >= cfg.max_domains:
                    stop = (False, "max_domains", None)
                elif (spec_split.any(bool(heap) and len(heap) * heap[0][2].nbytes() > cfg.memory_budget_bytes)
                      if spec_split is not None else heap and len(heap) * heap[0][2].nbytes() > cfg.memory_budget_bytes):
                    stop = (False, "memory budget", None)
            if sync is not None:  # the ranks agree on one stop (or none), then even out their heaps
                stop = sync.round(heap, stop, count, pending)
            if stop is not None:
                return finish(*stop)
            pending = []
            while heap and len(pending) + 2 <= max(2, batch):  # pending holds the children
                d = heap[0][2]  # into pending before it leaves the heap (Ctrl-C loses nothing)
                name, j = d.decision
                pending += [(d, (name, j, 1)), (d, (name, j, -1))]
                heapq.heappop(heap)
    except KeyboardInterrupt:
        return finish(False, "interrupted")

