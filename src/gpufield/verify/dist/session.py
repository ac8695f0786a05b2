"""``gpufield verify run --shard MODE`` over the ranks ``torchrun`` started (or one process alone).

    torchrun --standalone --nproc-per-node P -m gpufield verify run NET.onnx PROP.vnnlib \\
        --out result.txt --shard domains --report run.json

Rank 0 owns the command's outputs (the VNN-COMP result file and the ``--report`` JSON, each
written once, to a temporary name and renamed); the other ranks never touch them. Modes:

* ``domains``: rank 0 runs the usual pipeline; its branch and bound spreads domains over all
  ranks (:mod:`.domains`), the other ranks serve searches until rank 0 exits.
* ``fsdp``, ``alpha``, ``tp``: an incomplete check, the whole bound computed in float64 on every
  rank in lockstep (fixed iteration counts, no value- or time-dependent collective): IBP, CROWN
  and (``--method alpha``) α-CROWN on the FSDP-sharded graph (``fsdp``), α-CROWN with the clauses,
  the intermediate CROWN rows and the weights sharded (``alpha``, output slopes only), or TP CROWN (``tp``). ``unsat`` only when the float64
  bound proves every clause by more than ``margin_tol``; ``sat`` only from rank 0's PGD, validated by
  onnxruntime; else ``unknown`` (or ``timeout``).

Every rank's peak memory of the verifier's tensors (:mod:`.memory`: the CUDA allocator's peak on a
GPU, the storage tracker on CPU) and any rank's error come back to rank 0 in the final exchange
and go into the report. The process group's timeout is the run's timeout + 60 s, so a rank that
dies or stalls ends the others' collectives with an error instead of a hang (torchrun also stops
the remaining ranks when one exits with an error).
"""

from __future__ import annotations

import sys
import time
import traceback
from dataclasses import replace
from pathlib import Path

import torch

from gpufield.verify.dist.comm import Comm, DistConfig, init_from_env, shutdown

MODES = ("none", "tp", "fsdp", "alpha", "domains")


class Session:
    """This process's part in one sharded ``verify run``.

    Args:
        shard: one of :data:`MODES` other than ``none``.
        timeout_s: the run's timeout (s); collectives time out 60 s later.
        device: torch device of this rank (``cpu``, ``cuda``, ``cuda:N``).

    Raises:
        ValueError: unknown mode.
        RuntimeError: from ``torch.distributed`` when the rendezvous fails.
    """

    def __init__(self, shard: str, *, timeout_s: float, device: str = "cpu"):
        if shard not in MODES or shard == "none":
            raise ValueError(f"shard {shard!r} not in {MODES[1:]}")
        from gpufield.verify.dist.memory import measure

        self.shard, self.device, self.t0 = shard, device, time.monotonic()
        self.comm: Comm = init_from_env(DistConfig(backend="gloo", timeout_s=timeout_s + 60.0))
        self.errors: list[tuple[int, str]] = []
        self.bab: dict = {}
        self.cases: list[dict] = []
        self._meter = measure((), device, self.comm.rank)
        self._meter.__enter__()
        self._run_peak = 0

    @property
    def is_root(self) -> bool:
        """Rank 0, the one that writes the outputs."""
        return self.comm.rank == 0

    def memory(self) -> dict:
        """This rank's peaks: ``{"rank", "peak_bytes" (whole run), "window_peak_bytes" (since the last
        :meth:`restart_peak`, i.e. the current search), "method"}``."""
        m = self._meter
        if m is None:
            return {"rank": self.comm.rank, "peak_bytes": self._run_peak, "method": None}
        if m.device.type == "cuda":
            now, method = int(torch.cuda.max_memory_allocated(m.device)), "cuda-allocator"
        else:
            now, method = int(m.resident + m._mode.peak_bytes), "storage-tracker"
        self._run_peak = max(self._run_peak, now)
        return {"rank": self.comm.rank, "peak_bytes": self._run_peak, "window_peak_bytes": now, "method": method}

    def restart_peak(self) -> None:
        """Start a new peak window (each branch-and-bound search: per-instance figures in ``bench``)."""
        self.memory()
        m = self._meter
        if m is not None and m.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(m.device)
        elif m is not None:
            m._mode.peak_bytes = m._mode.live_bytes

    def _extra(self) -> dict:
        return {"memory": self.memory(), "rank": self.comm.rank}

    def refine_sync(self, model: str | Path):
        """The :class:`~gpufield.verify.dist.domains.DomainSync` for rank 0's ``RefineConfig.sync``."""
        from gpufield.verify.dist.domains import DomainSync

        self._sync = DomainSync(self.comm, onnx=str(model), extra=self._extra, on_begin=self.restart_peak)
        return self._sync

    def worker(self, model: str | Path, prop: str | Path, config) -> int:
        """A rank other than 0: take part until rank 0 is done; returns the exit status (0 ok, 1 error)."""
        from gpufield.verify.runner import load_instance

        status = "exit"
        try:
            if self.shard == "domains":
                from gpufield.verify.dist.domains import serve
                from gpufield.verify.io.onnx_load import load_onnx
                from gpufield.verify.io.ort import OrtModel

                status = serve(self.comm, lambda p: (load_onnx(p), OrtModel(p)), device=self.device,
                               dtype={"float32": torch.float32, "float64": torch.float64}[config.dtype],
                               extra=self._extra, on_begin=self.restart_peak)
            else:
                try:
                    loaded = load_instance(model, prop, config.ort_atol)
                except Exception:
                    self._fail("loading the instance failed")
                    loaded = None
                status = bounds_instance(self, loaded, config=config, deadline_s=float("inf"))
                if status != "left":  # rank 0 is still there: the final exchange (memory, errors)
                    msg = {"kind": "error", "msg": "loading the instance failed"} if status == "error" else {"kind": "idle"}
                    self.comm.all_gather_object({**msg, **self._extra()})
                status = "exit" if status in (None, "left") else status
        except Exception:
            self._fail("failed")
            status = "error"
        self.close()
        return 0 if status == "exit" else 1

    def _fail(self, what: str) -> None:
        msg = traceback.format_exc()
        self.errors.append((self.comm.rank, msg))
        print(f"gpufield: rank {self.comm.rank}: {what}:\n{msg}", file=sys.stderr, flush=True)

    def finish(self, report: Path | None, result=None) -> list[tuple[int, str]]:
        """Rank 0 after its verdict: collect every rank's memory and errors, write ``report``, leave.

        Returns:
            ``(rank, message)`` of every error reported (rank 0's own included).
        """
        from gpufield._files import atomic_write

        got = None
        sync = getattr(self, "_sync", None)
        if self.comm.world > 1 and not (sync is not None and sync.broken):
            try:
                got = self.comm.all_gather_object({"kind": "exit", **self._extra()})
            except Exception as e:
                self.errors.append((-1, f"final exchange failed: {type(e).__name__}: {e}"))
        ranks = [self.memory()] if got is None else [m.get("memory", {"rank": r}) for r, m in enumerate(got)]
        if sync is not None:
            self.errors += sync.errors
        if got is not None:
            self.errors += [(r, m["msg"]) for r, m in enumerate(got) if m.get("kind") == "error"]
        if report is not None:
            doc = {"shard": self.shard, "world": self.comm.world, "device": self.device,
                   "verdict": None if result is None else result.verdict,
                   "seconds": time.monotonic() - self.t0,
                   "message": None if result is None else result.message,
                   "margins": None if result is None else result.margins,
                   "ranks": ranks, "cases": self.cases, "bab": self.bab,
                   "errors": [{"rank": r, "message": m} for r, m in self.errors]}
            if sync is not None:
                doc["bab"] = {**self.bab, "rounds": sync.rounds, "domains_moved_from_rank0": sync.moved,
                              "searches": sync.searches}
            atomic_write(report, __import__("json").dumps(doc, indent=1, default=str) + "\n", force=True,
                         option="--report")
        self.close()
        return self.errors

    def close(self) -> None:
        """Stop the memory meter and leave the process group."""
        if self._meter is not None:
            self._meter.__exit__(None, None, None)
            self._meter = None
        shutdown(self.comm)


def _bounds64(session: Session, graph, prop, config) -> tuple[float, list[dict]]:
    """Every case's float64 clause margins in this mode; ``(smallest margin, per-case memory)``."""
    from gpufield.verify.dist.bounds import BoundsConfig, case_bounds
    from gpufield.verify.dist.fsdp import shard_graph, spec_side
    from gpufield.verify.dist.memory import graph_tensors, measure
    from gpufield.verify.dist.tp import tp_crown, tp_graph
    from gpufield.verify.runner import outward_box
    from gpufield.verify.spec import Spec

    comm, shard = session.comm, session.shard
    g = graph.cast(torch.float64, session.device)
    starts = None
    if shard == "fsdp":
        g = shard_graph(g, comm)
    elif shard == "alpha":  # slopes, intermediate rows and weights all sharded
        g = shard_graph(g, comm, keep=spec_side(g))
    elif shard == "tp":
        g, starts = tp_graph(g, comm)
    worst, cases = float("inf"), []
    methods = {"ibp": ("ibp",), "crown": ("ibp", "crown"), "alpha": ("ibp", "crown", "alpha")}[config.method]
    if shard == "alpha":
        methods = ("crown", "alpha")
    bcfg = BoundsConfig(methods=methods, alpha_iterations=config.alpha.iterations,
                        memory_budget_bytes=config.memory_budget_bytes, optimize_intermediate=shard != "alpha")
    for i, case in enumerate(prop.cases):
        spec = Spec.from_case(case, prop.n_outputs)
        lo, hi = outward_box(case, g.input_shape, torch.float64, session.device)
        with measure([*graph_tensors(g), lo, hi], session.device, comm.rank) as m:
            if shard == "tp":
                lb, _ = tp_crown(g, starts, lo, hi, spec.C_SB(g.output_shape, 1, lo), config.memory_budget_bytes)
                v = spec.clause_value(spec.margins(lb))
            else:
                out = case_bounds(g, spec, lo, hi, bcfg, comm if shard == "alpha" else None)
                C = torch.as_tensor(spec.C_SM, dtype=torch.float64)
                lo_o, hi_o = (t.flatten(1).cpu() for t in (out["ibp/lo"], out["ibp/hi"]))
                v = spec.clause_value(spec.margins(C.clamp(min=0) @ lo_o.T + C.clamp(max=0) @ hi_o.T)).cpu()
                if "crown/lb" in out:
                    v = torch.maximum(v, spec.clause_value(spec.margins(out["crown/lb"])).cpu())
                if "alpha/best" in out:
                    v = torch.maximum(v, out["alpha/best"].cpu())
        worst = min(worst, float(v.min()))
        cases.append({"case": i, "margin64": float(v.min()), **m.report.as_dict()})
    return worst, cases


def bounds_instance(session: Session, loaded, *, config, deadline_s: float):
    """``fsdp``/``alpha``/``tp`` on every rank in lockstep; rank 0 gets the ``VerifyResult``.

    Args:
        session: this rank's session.
        loaded: :func:`~gpufield.verify.runner.load_instance`'s triple, or None when this rank
            failed to load (it then tells the others, and all stop).
        config: the run's :class:`~gpufield.verify.runner.VerifyConfig`.
        deadline_s: ``time.monotonic()`` deadline (rank 0's decides; workers pass inf).

    Returns:
        On rank 0 a :class:`~gpufield.verify.runner.VerifyResult`; on the others None, ``"error"``
        when this rank could not load, or ``"left"`` when rank 0 had already left (no final exchange).
    """
    from gpufield.verify.attack import pgd_attack
    from gpufield.verify.runner import VerifyResult

    comm, t0 = session.comm, time.monotonic()
    cex, go = None, loaded is not None
    if session.is_root and go:  # a cheap falsification first, on rank 0 only
        graph, ort_model, prop = loaded
        g32 = graph.cast(torch.float32, session.device)
        for case in prop.cases:
            cex = pgd_attack(g32, ort_model, case, config.attack, deadline_s=deadline_s, rounds=1)
            if cex is not None:
                break
        go = cex is None and time.monotonic() < deadline_s
    msgs = comm.all_gather_object({"kind": "bounds" if loaded is not None else "error", "go": go,
                                   "msg": "" if loaded is not None else "loading failed"})
    if msgs[0]["kind"] == "exit":  # rank 0 left before bounding (it could not load the instance)
        return "left"
    if not all(m["kind"] == "bounds" for m in msgs) or not msgs[0]["go"]:
        if not session.is_root:
            return "error" if loaded is None else None
        if cex is not None:
            return VerifyResult("sat", cex, time.monotonic() - t0, {}, "PGD counterexample validated by onnxruntime")
        bad = [r for r, m in enumerate(msgs) if m["kind"] != "bounds"]
        if bad:
            return VerifyResult("unknown", None, time.monotonic() - t0, {}, f"rank(s) {bad} could not load the instance")
        return VerifyResult("timeout", None, time.monotonic() - t0, {}, "deadline reached while attacking")
    graph, ort_model, prop = loaded
    worst, session.cases = _bounds64(session, graph, prop, config)
    if not session.is_root:
        return None
    margins = {"float64": worst}
    if worst > config.margin_tol:
        return VerifyResult("unsat", None, time.monotonic() - t0, margins,
                            f"all clauses proven by float64 {session.shard}-sharded bounds over {comm.world} rank(s)")
    g32 = graph.cast(torch.float32, session.device)
    for r in range(1, config.attack_rounds + 1):
        for case in prop.cases:
            if time.monotonic() > deadline_s:
                return VerifyResult("timeout", None, time.monotonic() - t0, margins, "deadline reached while attacking")
            a = replace(config.attack, seed=config.attack.seed + 1000 * r)
            cex = pgd_attack(g32, ort_model, case, a, deadline_s=deadline_s, rounds=1)
            if cex is not None:
                return VerifyResult("sat", cex, time.monotonic() - t0, margins,
                                    f"PGD round {r} counterexample validated by onnxruntime")
    return VerifyResult("unknown", None, time.monotonic() - t0, margins,
                        f"{session.shard}-sharded float64 bounds not tight enough (margin {worst:.4g}); no counterexample")


def run_bounds(session: Session, out: Path, *, loaded, config, deadline_s: float, seal):
    """Rank 0 of ``fsdp``/``alpha``/``tp``: :func:`bounds_instance`, then the result file through ``seal``.

    Args:
        session, loaded, config, deadline_s: as in :func:`bounds_instance`.
        out: the VNN-COMP result file.
        seal: the command's :class:`~gpufield.deadline.ResultSeal` for ``out`` (writes ``timeout``
            if no verdict came by the deadline + grace).

    Returns:
        The :class:`~gpufield.verify.runner.VerifyResult` (``timeout`` when the seal had fired).
    """
    from gpufield.verify.io.results import write_result_file
    from gpufield.verify.runner import VerifyResult

    res = bounds_instance(session, loaded, config=config, deadline_s=deadline_s)
    if not seal.finish(lambda: write_result_file(out, res.verdict, res.counterexample, force=True)):
        res = VerifyResult("timeout", None, res.seconds, res.margins,
                           f"no verdict by the deadline; the verifier answered {res.verdict}")
    return res
