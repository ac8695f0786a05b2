"""``domains`` mode: one branch and bound whose open domains are spread over the ranks.

Rank 0 (the *driver*) runs the whole verification pipeline (attack, IBP/CROWN/α-CROWN, the root
MIP, result file). When it starts a branch and bound (:func:`gpufield.verify.bab.search.bab` with
``RefineConfig.sync`` set to a :class:`DomainSync`), the other ranks (*workers*, in
:func:`serve`) join it: every rank keeps its own heap and bounds its own worst domains each round,
exactly as one process does, and after every round all ranks exchange one small status
(heap size, lowest bound, domains bounded, a stop reason, a counterexample) with one
``all_gather_object``. From those statuses every rank computes the same decision:

* a counterexample on any rank ends the search (rank 0 re-validates it with onnxruntime against
  the property as written before it may become ``sat``);
* any rank's stop (deadline, memory budget, an undecided leaf, an error, a lost peer) ends it
  unproven;
* ``proven`` only when no rank stopped and every rank's heap is empty: the children of every
  split are bounded by some rank, so the union of the leaves covers the root box;
* otherwise, when the heaps are uneven (the largest holds more than twice the smallest), a second
  ``all_gather_object`` moves domains (the donors' worst, packed on the CPU) so that every rank
  holds ``⌊T/P⌋`` or ``⌈T/P⌉`` of the ``T`` open domains.

Every collective is issued by every rank at the same point of the same round, and its kind is
decided from gathered data only, so a rank that runs dry keeps answering (an empty round) and a
rank that stops makes all stop in the same round: no rank waits for a collective another rank
never issues. A rank that dies makes the others' collective fail (or time out, after the
process group's ``timeout_s``), which ends the search as ``unknown``.

Message kinds (dicts): ``idle`` (a worker between searches), ``bab`` (the driver starts a search),
``round``, ``domains``, ``error`` (a worker's exception), ``exit`` (the driver is done).
"""

from __future__ import annotations

import itertools
import sys
import time
import traceback
from dataclasses import replace

import torch

from gpufield.verify.dist.comm import Comm


def _pack(d, device: str | torch.device):
    """A :class:`~gpufield.verify.bab.search.Domain` with compact copies of its tensors on ``device``."""
    def mv(t):
        return t.detach().to(device).clone()
    return type(d)(d.lb, {k: mv(v) for k, v in d.splits.items()},
                   {k: (mv(a), mv(b)) for k, (a, b) in d.inter64.items()},
                   {k: mv(v) for k, v in d.alpha.items()}, {k: mv(v) for k, v in d.beta.items()},
                   d.decision, d.depth)


def plan(counts: list[int]) -> list[tuple[int, int, int]]:
    """Moves ``(src, dst, k)`` that even out heap sizes ``counts`` (one per rank), or ``[]``.

    Nothing moves unless the largest heap holds more than twice the smallest and at least 2 more
    domains. Targets: ``T // P`` each, one more for the first ``T % P`` ranks; donors give to
    receivers in rank order. Deterministic: every rank computes the same plan.
    """
    P, T = len(counts), sum(counts)
    if P < 2 or max(counts) - min(counts) < 2 or max(counts) <= 2 * min(counts):
        return []
    target = [T // P + (r < T % P) for r in range(P)]
    give = [(r, c - t) for r, (c, t) in enumerate(zip(counts, target, strict=True)) if c > t]
    need = [[r, t - c] for r, (c, t) in enumerate(zip(counts, target, strict=True)) if c < t]
    moves = []
    for src, k in give:
        while k > 0 and need:
            dst, n = need[0]
            m = min(k, n)
            moves.append((src, dst, m))
            k -= m
            need[0][1] -= m
            if need[0][1] == 0:
                need.pop(0)
    return moves


class DomainSync:
    """The per-round agreement of one rank in a domain-parallel branch and bound.

    Args:
        comm: the process group (a world of one works too: nothing is exchanged).
        onnx: the driver's model path, sent to the workers when a search starts.
        remaining_s: worker side, the search's time left when it started (from the driver).
        extra: ``extra() -> dict`` merged into every message (e.g. this rank's memory so far).
        on_begin: called as each search starts on this rank (e.g. to restart the memory peak).

    Attributes:
        is_root: rank 0 (the driver).
        broken: a collective failed; no further collective may be issued.
        exit: a worker saw the driver leave.
        errors: ``(rank, message)`` of workers that failed.
        moved: domains this rank sent to others (over all rounds).
        stopped_by: the rank whose own stop (deadline, memory, leaf) ended the last search.
        rounds: status exchanges.
    """

    def __init__(self, comm: Comm, *, onnx: str | None = None, remaining_s: float | None = None, extra=None,
                 on_begin=None):
        self.comm, self.onnx, self.remaining_s = comm, onnx, remaining_s
        self.extra = extra if extra is not None else dict
        self.on_begin = on_begin
        self.searches: list[dict] = []
        self.is_root = comm.rank == 0
        self.broken = self.exit = False
        self.errors: list[tuple[int, str]] = []
        self.moved = self.rounds = 0
        self.stopped_by: int | None = None
        self.last: list[dict] = []
        self._tick = itertools.count(-1, -1)  # heap keys below bab's own (never equal)
        self.case = self.ort_model = None

    def gather(self, msg: dict) -> list[dict] | None:
        """``all_gather_object(msg)``; None (and :attr:`broken`) when the group failed."""
        if self.broken:
            return None
        try:
            return self.comm.all_gather_object({**self.extra(), **msg})
        except Exception as e:  # gloo/NCCL raise RuntimeError subclasses when a peer is gone or late
            self.broken = True
            self.errors.append((-1, f"collective failed on rank {self.comm.rank}: {type(e).__name__}: {e}"))
            return None

    def begin(self, *, spec, case, cfg, margin_tol, deadline_s, ort_model, interm_alphas, device, boxes) -> float:
        """Start of a search: the driver tells the workers what to bound (``boxes``: the search's
        ``(lo, hi, lo64, hi64)``, sent as they are: ``case`` may be None); returns the deadline."""
        self.case, self.ort_model, self.case_device, self.max_domains = case, ort_model, device, cfg.max_domains
        if self.on_begin is not None:
            self.on_begin()
        if not self.is_root:
            return time.monotonic() + float(self.remaining_s)
        onnx = getattr(ort_model, "path", None) or self.onnx
        self.searches.append({"onnx": onnx, "rounds": 0, "ranks": []})
        if self.comm.world > 1:
            cpu = None if interm_alphas is None else {
                m: {r: a.detach().cpu() for r, a in t.items()} for m, t in interm_alphas.items()}
            self.gather({"kind": "bab", "onnx": onnx, "case": case, "spec": spec,
                         "boxes": tuple(t.detach().cpu() for t in boxes),
                         "cfg": replace(cfg, sync=None), "margin_tol": margin_tol,
                         "remaining_s": deadline_s - time.monotonic(), "interm_alphas": cpu})
        return deadline_s

    def round(self, heap, stop, count: int, pending) -> tuple | None:
        """After a round: agree on the stop and rebalance ``heap`` in place.

        Args:
            heap: this rank's ``(lb, key, Domain)`` heap.
            stop: this rank's own stop ``(proven, reason, cex)`` or None.
            count: domains this rank bounded so far.
            pending: parents popped but not bounded (their bounds count as open).

        Returns:
            The common stop ``(proven, reason, counterexample)`` or None to go on.
        """
        import heapq

        self.rounds += 1
        lbs = [h[0] for h in heap] + [d.lb for d, _ in pending]
        mine = {"kind": "round", "n": len(heap) + len(pending), "glb": min(lbs, default=float("inf")),
                "count": count, "stop": None if stop is None else stop[:2],
                "cex": None if stop is None else stop[2]}
        got = self.gather(mine)
        if got is None:
            return False, self.errors[-1][1], None
        self.last = got
        if self.searches:  # per search: every rank's memory and domains at its latest round
            self.searches[-1].update(rounds=self.searches[-1]["rounds"] + 1,
                                     ranks=[{"memory": m.get("memory"), "domains": m.get("count")} for m in got])
        for r, m in enumerate(got):
            if m["kind"] == "error":
                self.errors.append((r, m["msg"]))
                return False, f"rank {r} failed: {m['msg'].strip().splitlines()[-1]}", None
            if m["kind"] == "exit":
                self.exit = True
                return False, "the driver left the search", None
        for r, m in enumerate(got):
            if m["cex"] is not None:
                cex = m["cex"]
                if self.is_root and r != 0:  # the driver's own check against the property as written
                    from gpufield.verify.attack import validate

                    cex = validate(self.ort_model, self.case, cex.x_N) if self.ort_model is not None else None
                    if cex is None:
                        return False, f"rank {r}'s counterexample failed rank 0's re-validation", None
                return False, f"{m['stop'][1]} (rank {r})", cex
        for r, m in enumerate(got):
            if m["stop"] is not None:  # the reason as bab gives it (refine reads 'deadline'); who, apart
                self.stopped_by = r
                return False, m["stop"][1], None
        cfg_max = getattr(self, "max_domains", None)
        if cfg_max is not None and sum(m["count"] for m in got) >= cfg_max:
            return False, "max_domains", None
        if stop is None and all(m["n"] == 0 for m in got):
            return True, "all domains proven", None
        moves = plan([m["n"] for m in got])
        if moves:
            out: dict[int, list] = {}
            for src, dst, k in moves:
                if src == self.comm.rank:
                    out[dst] = [_pack(heapq.heappop(heap)[2], "cpu") for _ in range(k)]
                    self.moved += k
            recv = self.gather({"kind": "domains", "to": out})
            if recv is None:
                return False, self.errors[-1][1], None
            dev = self.case_device
            for m in recv:
                for d in m.get("to", {}).get(self.comm.rank, []):
                    d = _pack(d, dev)
                    heapq.heappush(heap, (d.lb, next(self._tick), d))
        return None

    case_device: str | torch.device = "cpu"
    max_domains: int | None = None

    def totals(self, res) -> None:
        """Turn this rank's :class:`~gpufield.verify.bab.search.BabResult` into every rank's totals."""
        if not self.last or any(m["kind"] != "round" for m in self.last):
            return
        res.domains = sum(m["count"] for m in self.last)
        if not res.proven:
            res.global_lb = min([res.global_lb, *(m["glb"] for m in self.last)])


def serve(comm: Comm, load, *, device: str = "cpu", dtype: torch.dtype = torch.float32, extra=None,
          on_begin=None) -> str:
    """A worker's loop: join every search the driver starts until it exits.

    Args:
        comm: the process group (this rank is not 0).
        load: ``load(onnx_path) -> (graph, ort_model)`` (cached by the caller or here).
        device: torch device of this rank's tensors.
        dtype: working precision of the search (the driver's).
        extra, on_begin: as in :class:`DomainSync`.

    Returns:
        ``exit`` (the driver finished), ``broken`` (a collective failed) or ``error``.
    """
    from gpufield.verify.bab.search import bab

    models: dict[str, tuple] = {}
    status = "exit"
    while True:
        msgs = DomainSync(comm, extra=extra).gather({"kind": "idle"})
        if msgs is None:
            return "broken"
        m = msgs[0]
        if m["kind"] == "exit":
            return status
        if m["kind"] != "bab":
            continue
        sync = DomainSync(comm, remaining_s=m["remaining_s"], extra=extra, on_begin=on_begin)
        sync.case_device, sync.max_domains = device, m["cfg"].max_domains
        try:
            if m["onnx"] not in models:
                graph, ort_model = load(m["onnx"])
                models[m["onnx"]] = (graph.cast(dtype, device), graph.cast(torch.float64, device), ort_model)
            g, g64, ort_model = models[m["onnx"]]
            case = m["case"]
            lo, hi, lo64, hi64 = (t.to(device) for t in m["boxes"])
            ref64 = {r.inputs[0]: (torch.zeros(1, *g.shape(r.inputs[0]), dtype=torch.float64, device=device),) * 2
                     for r in g.relu_nodes()}  # only shapes: a worker's root domain is never bounded
            ia = None if m["interm_alphas"] is None else {
                k: {r: a.to(device) for r, a in t.items()} for k, t in m["interm_alphas"].items()}
            bab(g, g64, m["spec"], lo, hi, lo64, hi64, ref64, replace(m["cfg"], sync=sync),
                margin_tol=m["margin_tol"], deadline_s=time.monotonic() + m["remaining_s"], case=case,
                ort_model=ort_model, interm_alphas=ia)
        except Exception:
            msg = traceback.format_exc()
            print(f"gpufield: rank {comm.rank}: branch and bound failed:\n{msg}", file=sys.stderr, flush=True)
            status = "error"
            if sync.gather({"kind": "error", "msg": msg}) is None:
                return "broken"
            continue
        if sync.broken:
            return "broken"
        if sync.exit:
            return status
