"""ReLU-split refinement: complete verification by branch and bound (β-CROWN).

v1 of this module split domains and re-ran α-CROWN on clamped bounds (no β). It now drives the
β-CROWN branch and bound of :mod:`gpufield.verify.bab`: domains keep their split history,
float64 intermediate bounds, warm-started α and β and their float64 lower bound in a priority
queue (worst first); batches are sized from a memory budget; split constraints enter the
backward pass with Lagrange multipliers β optimised jointly with α (Wang et al. 2021,
arXiv:2103.06624); neurons are chosen by BaBSR (Bunel et al. 2020, arXiv:1909.06588) or filtered
smart branching (De Palma et al. 2021, arXiv:2104.06718); networks with few inputs can instead be
split on the input box (``input_split_max_dims``). Deeper chain networks first get their root
intermediate bounds tightened by per-neuron MIP (:mod:`gpufield.verify.milp_bounds`,
``mip_refine_layers``; α,β-CROWN's ``bab-refine``). As everywhere, a leaf counts as proven
only on its float64 bound, and ``sat`` only with a counterexample validated by onnxruntime.

Shape legend: S spec rows, K clauses, B domains, * node shape without batch.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

import torch

from gpufield.verify.alpha import AlphaConfig, alpha_crown, tables, valid_slopes
from gpufield.verify.attack import Counterexample
from gpufield.verify.bab import BRANCHING, bab
from gpufield.verify.bab.input_split import InputSplitConfig, input_bab
from gpufield.verify.graph import Graph
from gpufield.verify.milp_bounds import MilpStats, chain, milp_refine
from gpufield.verify.mip_solvers import SOLVERS
from gpufield.verify.propagate import Interval, crown_intermediate
from gpufield.verify.spec import Spec


@dataclass(frozen=True, kw_only=True, slots=True)
class RefineConfig:
    """Branch-and-bound settings (defaults after α,β-CROWN's mnist_fc configuration).

    Attributes:
        max_domains: most domains to bound in total (a safety cap; the deadline and the memory
            budget are the real limits: on one H200 a 256x4 instance bounds ~1,300-1,650 domains
            per second, so the former 200,000 stopped H200 run 9's hard instances at ~240 s of 300).
        batch: most domains bounded together (also capped by ``memory_budget_bytes``).
        alpha: optimiser of each batch: ``iterations`` Adam steps, ``lr`` for α.
        root_iterations: Adam steps for the root domain.
        beta: optimise β multipliers (False: α only on clamped bounds, v1 behaviour).
        lr_beta: Adam learning rate of β.
        branching: ``babsr`` or ``fsb``.
        fsb_k: candidates per domain for ``fsb``.
        memory_budget_bytes: cap on one batch's A-matrices and on the queue's tensors.
        input_split_max_dims: networks with at most this many inputs are split on the input box
            (:mod:`gpufield.verify.bab.input_split`) instead of on ReLUs; 0 (default): never.
        input_split: settings of that input-split search.
        mip_refine_layers: before branch and bound, tighten the root bounds of ReLU-input layers
            ``1 .. mip_refine_layers`` by per-neuron MIP (:mod:`gpufield.verify.milp_bounds`,
            α,β-CROWN's ``bab-refine``); 0: off.
        mip_min_relu_layers: only for chain networks with at least this many ReLU layers (the
            default 3 leaves 2-layer nets, where plain BaB is fast, and the tiny test nets alone).
        mip_neuron_time_s: solver time limit per neuron and sense (s).
        mip_total_s: cap on the refinement's wall time (s; default none); it also takes at most
            ``mip_fraction`` of the time left before the deadline (the cap was 90 s, which kept
            a 300 s run from the MIP time the 256x4 instances need).
        mip_fraction: share of the time left that the refinement may take (α,β-CROWN: 0.8 of
            the timeout, ``refine_neuron_time_percentage``).
        mip_workers: solver processes (None: ``os.cpu_count()``; 1: in this process).
        mip_solver: ``highs`` (scipy, default) or ``gurobi`` (gurobipy with a licence; α,β-CROWN's
            solver; 3-4x faster on mnist_fc 256x4), :mod:`gpufield.verify.mip_solvers`.
        mip_gap: relative gap at which one neuron's MIP stops (α,β-CROWN: 1e-2).
        mip_after_s: run plain branch and bound for this long first and refine by MIP only if it
            has not decided the property by then (many instances close in seconds and the MIP
            costs tens of seconds: H200 run 6 lost 256x4 prop_8_0.03, 11.6 s without MIP, to a
            MIP-first timeout); 0: MIP first.
        opt_interm: optimise the domains' intermediate bounds too (own α and β per bounded
            neuron, jointly with the final objective; α,β-CROWN's ``enable_opt_interm_bounds``,
            :mod:`gpufield.verify.bab.interm`). Costs memory: the batch shrinks to fit.
        mip_rebound_iterations: α-CROWN steps that re-bound the deeper layers after each
            MIP-refined layer (:func:`rebound_after_mip`); 0: CROWN with the root's slopes only.
        sync: a :class:`gpufield.verify.dist.domains.DomainSync` that spreads the domains over
            the ranks of a process group (``--shard domains``); None: this process alone.
        spec_split: a :class:`gpufield.verify.dist.bab_shard.SpecSplit`: every rank of a process
            group runs the same search holding only its clauses' α and β (``alpha`` mode);
            excludes ``sync`` and ``opt_interm``.
    """

    max_domains: int = 5_000_000
    batch: int = 256
    alpha: AlphaConfig = AlphaConfig(iterations=20)
    root_iterations: int = 50
    beta: bool = True
    lr_beta: float = 0.05
    branching: str = "fsb"
    fsb_k: int = 4
    memory_budget_bytes: int = 2 << 30
    input_split_max_dims: int = 0
    input_split: InputSplitConfig = InputSplitConfig()
    mip_refine_layers: int = 3
    mip_min_relu_layers: int = 3
    mip_neuron_time_s: float = 10.0
    mip_total_s: float = float("inf")
    mip_fraction: float = 0.8
    mip_workers: int | None = None
    mip_solver: str = "highs"
    mip_gap: float = 1e-2
    mip_after_s: float = 20.0
    opt_interm: bool = False
    mip_rebound_iterations: int = 100
    sync: object | None = None
    spec_split: object | None = None

    def __post_init__(self):
        if self.max_domains < 1 or self.batch < 2 or self.fsb_k < 1 or self.root_iterations < 0:
            raise ValueError(f"max_domains={self.max_domains} >= 1, batch={self.batch} >= 2, "
                             f"fsb_k={self.fsb_k} >= 1, root_iterations >= 0 required")
        if self.branching not in BRANCHING:
            raise ValueError(f"branching {self.branching!r} not in {BRANCHING}")
        if self.lr_beta <= 0 or self.memory_budget_bytes <= 0 or self.input_split_max_dims < 0:
            raise ValueError("lr_beta and memory_budget_bytes must be positive")
        if (self.mip_refine_layers < 0 or self.mip_neuron_time_s <= 0 or self.mip_total_s < 0
                or (self.mip_workers is not None and self.mip_workers < 1) or self.mip_after_s < 0
                or self.mip_gap < 0 or self.mip_rebound_iterations < 0 or self.mip_solver not in SOLVERS
                or not 0 < self.mip_fraction <= 1):
            raise ValueError(f"mip_refine_layers={self.mip_refine_layers} >= 0, mip_neuron_time_s="
                             f"{self.mip_neuron_time_s} > 0, mip_total_s={self.mip_total_s} >= 0, "
                             f"mip_workers={self.mip_workers} >= 1 or None, mip_gap={self.mip_gap} >= 0, "
                             f"mip_solver={self.mip_solver!r} in {SOLVERS}, 0 < mip_fraction={self.mip_fraction} <= 1, "
                             f"mip_rebound_iterations={self.mip_rebound_iterations} >= 0 required")


@dataclass(frozen=True)
class RefineResult:
    """Outcome: ``proven`` is True only when every leaf passed the float64 check.

    Attributes:
        proven: the open clauses are infeasible.
        domains: domains bounded.
        seconds: wall time.
        reason: why it stopped.
        global_lb: smallest float64 domain bound left open (+inf when proven).
        counterexample: a validated witness found inside the loop (``sat``), else None.
        mip: what the root MIP refinement did (None: it did not run).
    """

    proven: bool
    domains: int
    seconds: float
    reason: str
    global_lb: float = -float("inf")
    counterexample: Counterexample | None = None
    mip: MilpStats | None = None


def _mip_applies(graph64: Graph, cfg: RefineConfig) -> bool:
    """Whether ``cfg`` asks for root MIP refinement and the network is a deep enough chain."""
    return (cfg.mip_refine_layers > 0 and len(graph64.relu_nodes()) >= cfg.mip_min_relu_layers
            and chain(graph64) is not None)


def rebound_after_mip(graph: Graph, graph64: Graph, spec: Spec, lo, hi, lo64, hi64,
                      ref64: dict[str, Interval], refined: set[str], interm_alphas, *,
                      iterations: int, memory_budget_bytes: int, deadline_s: float):
    """Re-bound the layers after MIP-refined ones: CROWN, then α-CROWN on the new references.

    α,β-CROWN's ``bab-refine`` runs optimised CROWN with the MIP bounds as references after each
    refined layer; without this the deeper layers keep the bounds computed before the MIP, and
    the next layer's MIP starts from loose big-M values and more unstable neurons (256x4
    prop_9_0.05, CPU: layer 1 refined, layer 2 went from 105 to 24 unstable neurons, layer 3
    from 256 to 183, and that layer-2 MIP took 46 s instead of minutes).

    Args:
        graph, graph64: working-precision and float64 networks.
        spec: the open clauses (the α-CROWN objective).
        lo, hi / lo64, hi64: box ``[1, *input]`` in each precision.
        ref64: sound float64 bounds of every ReLU input (the MIP-refined ones included).
        refined: ReLU inputs whose bounds the MIP set (kept as they are).
        interm_alphas: slopes per intermediate start node (``{start: {relu: [2, N, 1, *]}}``) for
            the first CROWN pass, or None (adaptive CROWN).
        iterations: Adam steps of the α-CROWN pass (0: CROWN only).
        memory_budget_bytes: chunking cap.
        deadline_s: ``time.monotonic()`` deadline of the α-CROWN pass.

    Returns:
        ``(ref64, interm_alphas)``: bounds intersected with the given ones (sound: float64 CROWN
        with slopes in [0, 1]; the α-CROWN pass in working precision only chooses the slopes) and
        the slopes behind them.
    """
    fixed = frozenset(refined)

    def in64(al):  # an optimiser's slopes, made valid (a NaN from a float32 overflow becomes 0)
        return None if al is None else {m: {r: valid_slopes(a.to(torch.float64)) for r, a in t.items()}
                                        for m, t in al.items()}

    with torch.no_grad():
        out = {**ref64, **crown_intermediate(graph64, lo64, hi64, ref=ref64, alphas=in64(interm_alphas),
                                             fixed=fixed, memory_budget_bytes=memory_budget_bytes)}
    if iterations <= 0 or time.monotonic() >= deadline_s:
        return out, interm_alphas
    ref = {k: (a.to(graph.dtype), b.to(graph.dtype)) for k, (a, b) in out.items()}
    res = alpha_crown(graph, spec, lo, hi, ref, ref,
                      AlphaConfig(iterations=iterations, memory_budget_bytes=memory_budget_bytes), deadline_s)
    new = {m: {r: valid_slopes(a) for r, a in t.items()}
           for m, t in tables(res.snapshots[max(res.snapshots)]).items() if m != graph.output_name}
    with torch.no_grad():
        out = {**out, **crown_intermediate(graph64, lo64, hi64, ref=out, alphas=in64(new), fixed=fixed,
                                           memory_budget_bytes=memory_budget_bytes)}
    return out, new


def _mip_root(graph64: Graph, lo64, hi64, ref64, cfg: RefineConfig, deadline_s: float, root_check=None,
              note=None, rebound=None):
    """Root MIP refinement when ``cfg`` asks for it and the network fits; else ``(ref64, None)``.

    Layer by layer (α,β-CROWN's ``bab-refine`` order): after each refined layer ``rebound(ref64,
    refined_names)`` (when given) re-bounds the deeper layers on the refined ones, then
    ``root_check`` (the root bound with the refined bounds, True when it proves the property)
    may end it early. ``note(str)``, when given, is told which layer is being refined (the live
    status line). Returns ``(bounds, stats, proven)``.
    """
    t_end = time.monotonic() + min(cfg.mip_total_s, cfg.mip_fraction * (deadline_s - time.monotonic()))
    if t_end - time.monotonic() < 1.0 or not _mip_applies(graph64, cfg):
        return ref64, None, False
    stats = None
    names = chain(graph64)[0]
    for t in range(1, min(cfg.mip_refine_layers, len(names) - 1) + 1):
        left = t_end - time.monotonic()
        if left < 1.0:
            break
        if note is not None:
            lo_t, hi_t = ref64[names[t]]
            uns = int(((lo_t < 0) & (hi_t > 0)).sum())
            note(f"MIP refinement of layer {t} ({uns} unstable neurons, {cfg.mip_solver}, "
                 f"{left:.0f} s left of its budget)")
        ref64, st = milp_refine(graph64, lo64, hi64, ref64, layers=t, first=t,
                                neuron_time_s=cfg.mip_neuron_time_s, total_s=left, workers=cfg.mip_workers,
                                solver=cfg.mip_solver, gap=cfg.mip_gap)
        stats = st if stats is None else stats.merge(st)
        if not st.tightened.get(t):
            continue
        if rebound is not None:
            ref64 = rebound(ref64, set(names[:t + 1]))
        if root_check is not None and root_check(ref64):
            return ref64, stats, True
    return ref64, stats, False


def refine(graph: Graph, graph64: Graph, spec: Spec, lo, hi, lo64, hi64,
           ref: dict[str, Interval] | None, ref64: dict[str, Interval], cfg: RefineConfig,
           *, margin_tol: float, deadline_s: float, case=None, ort_model=None,
           progress=None, interm_alphas=None) -> RefineResult:
    """Branch and bound until every leaf is proven, a counterexample is found, or a limit hits.

    Args:
        graph, graph64: working-precision and float64 copies of the network.
        spec: the still-open clauses (each with at least one row).
        lo, hi / lo64, hi64: box ``[1, *input_shape]`` in each precision (outward rounded).
        ref: unused (kept for v1 callers); ref64: sound float64 root bounds of every ReLU input.
        cfg: settings.
        margin_tol: float64 margin a leaf needs.
        deadline_s: ``time.monotonic()`` deadline.
        case, ort_model: VNN-LIB case and onnxruntime model for in-loop counterexamples.
        progress: optional ``(domains_left, global_lb, rounds_per_s)`` callback; if it has a
            ``note(str)`` attribute, the root MIP refinement reports its layer there.
        interm_alphas: the root α-CROWN's slopes per intermediate start node, the warm start of
            ``cfg.opt_interm``.

    Returns:
        :class:`RefineResult`.
    """
    if lo64[0].numel() <= cfg.input_split_max_dims and cfg.sync is None:
        r = input_bab(graph, graph64, spec, lo64, hi64, cfg, margin_tol=margin_tol, deadline_s=deadline_s,
                      case=case, ort_model=ort_model, progress=progress)
        mip = None
    else:
        first = None
        if cfg.mip_after_s > 0 and _mip_applies(graph64, cfg):  # plain BaB first, MIP if it stalls
            first = bab(graph, graph64, spec, lo, hi, lo64, hi64, ref64, cfg, margin_tol=margin_tol,
                        deadline_s=min(deadline_s, time.monotonic() + cfg.mip_after_s), case=case,
                        ort_model=ort_model, progress=progress, interm_alphas=interm_alphas)
            if (first.proven or first.counterexample is not None or first.reason != "deadline"
                    or time.monotonic() >= deadline_s):  # decided, interrupted or out of time
                return RefineResult(first.proven, first.domains, first.seconds, first.reason,
                                    first.global_lb, first.counterexample, None)

        def root_check(r64):  # the root domain alone, bounded with the refined layers
            one = bab(graph, graph64, spec, lo, hi, lo64, hi64, r64, replace(cfg, max_domains=1),
                      margin_tol=margin_tol, deadline_s=deadline_s, interm_alphas=interm_alphas)
            return one.proven

        slopes = [interm_alphas]

        def rebound(r64, refined):  # deeper layers on the refined ones (α,β-CROWN: optimised CROWN)
            r64, slopes[0] = rebound_after_mip(
                graph, graph64, spec, lo, hi, lo64, hi64, r64, refined, slopes[0],
                iterations=cfg.mip_rebound_iterations, memory_budget_bytes=cfg.memory_budget_bytes,
                deadline_s=deadline_s)
            return r64

        ref64, mip, _ = _mip_root(  # a proven root: bab's first round proves it again
            graph64, lo64, hi64, ref64, cfg, deadline_s, root_check, note=getattr(progress, "note", None),
            rebound=rebound)
        interm_alphas = slopes[0]
        r = bab(graph, graph64, spec, lo, hi, lo64, hi64, ref64, cfg, margin_tol=margin_tol,
                deadline_s=deadline_s, case=case, ort_model=ort_model, progress=progress,
                interm_alphas=interm_alphas)
        if first is not None:  # the restarted search's counts include the probe's
            r.domains += first.domains
            r.seconds += first.seconds
            if not r.proven and first.global_lb > r.global_lb:
                r.global_lb = first.global_lb  # both are sound bounds of the same property
    secs = r.seconds + (mip.seconds if mip is not None else 0.0)
    return RefineResult(r.proven, r.domains, secs, r.reason, r.global_lb, r.counterexample, mip)
