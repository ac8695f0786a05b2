"""ReLU-split refinement: complete verification by branch and bound (β-CROWN).

v1 of this module split domains and re-ran α-CROWN on clamped bounds (no β). It now drives the
β-CROWN branch and bound of :mod:`gpufield.verify.bab`: domains keep their split history,
float64 intermediate bounds, warm-started α and β and their float64 lower bound in a priority
queue (worst first); batches are sized from a memory budget; split constraints enter the
backward pass with Lagrange multipliers β optimised jointly with α (Wang et al. 2021,
arXiv:2103.06624); neurons are chosen by BaBSR (Bunel et al. 2020, arXiv:1909.06588) or filtered
smart branching (De Palma et al. 2021, arXiv:2104.06718); networks with few inputs can instead be
split on the input box (``input_split_max_dims``). As everywhere, a leaf counts as proven
only on its float64 bound, and ``sat`` only with a counterexample validated by onnxruntime.

Shape legend: S spec rows, K clauses, B domains, * node shape without batch.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpufield.verify.alpha import AlphaConfig
from gpufield.verify.attack import Counterexample
from gpufield.verify.bab import BRANCHING, bab
from gpufield.verify.bab.input_split import input_bab
from gpufield.verify.graph import Graph
from gpufield.verify.propagate import Interval
from gpufield.verify.spec import Spec


@dataclass(frozen=True, kw_only=True, slots=True)
class RefineConfig:
    """Branch-and-bound settings (defaults after α,β-CROWN's mnist_fc configuration).

    Attributes:
        max_domains: most domains to bound in total.
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
    """

    max_domains: int = 200_000
    batch: int = 256
    alpha: AlphaConfig = AlphaConfig(iterations=20)
    root_iterations: int = 50
    beta: bool = True
    lr_beta: float = 0.05
    branching: str = "fsb"
    fsb_k: int = 4
    memory_budget_bytes: int = 2 << 30
    input_split_max_dims: int = 0

    def __post_init__(self):
        if self.max_domains < 1 or self.batch < 2 or self.fsb_k < 1 or self.root_iterations < 0:
            raise ValueError(f"max_domains={self.max_domains} >= 1, batch={self.batch} >= 2, "
                             f"fsb_k={self.fsb_k} >= 1, root_iterations >= 0 required")
        if self.branching not in BRANCHING:
            raise ValueError(f"branching {self.branching!r} not in {BRANCHING}")
        if self.lr_beta <= 0 or self.memory_budget_bytes <= 0 or self.input_split_max_dims < 0:
            raise ValueError("lr_beta and memory_budget_bytes must be positive")


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
    """

    proven: bool
    domains: int
    seconds: float
    reason: str
    global_lb: float = -float("inf")
    counterexample: Counterexample | None = None


def refine(graph: Graph, graph64: Graph, spec: Spec, lo, hi, lo64, hi64,
           ref: dict[str, Interval] | None, ref64: dict[str, Interval], cfg: RefineConfig,
           *, margin_tol: float, deadline_s: float, case=None, ort_model=None,
           progress=None) -> RefineResult:
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
        progress: optional ``(domains_left, global_lb, rounds_per_s)`` callback.

    Returns:
        :class:`RefineResult`.
    """
    if lo64[0].numel() <= cfg.input_split_max_dims:
        r = input_bab(graph, graph64, spec, lo64, hi64, cfg, margin_tol=margin_tol, deadline_s=deadline_s,
                      case=case, ort_model=ort_model, progress=progress)
    else:
        r = bab(graph, graph64, spec, lo, hi, lo64, hi64, ref64, cfg, margin_tol=margin_tol,
                deadline_s=deadline_s, case=case, ort_model=ort_model, progress=progress)
    return RefineResult(r.proven, r.domains, r.seconds, r.reason, r.global_lb, r.counterexample)
