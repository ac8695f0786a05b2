"""One VNN-COMP instance end to end: load, check, attack, bound, decide — within a timeout.

Pipeline per case (input box): a quick PGD round; IBP; CROWN with CROWN intermediate bounds
(intersected with IBP); α-CROWN if still open; then more PGD rounds while time remains.
``unsat`` is answered only when every clause of every case is proven infeasible by a bound
that was re-evaluated in float64 with a margin above ``margin_tol``; ``sat`` only with a
counterexample validated by onnxruntime.

Shape legend: B batch (1 here: one box at a time), * node shape, N input size.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from gpufield.errors import ModelFormatError, SpecFormatError
from gpufield.verify.alpha import AlphaConfig, alpha_crown, recheck, tables, valid_slopes
from gpufield.verify.attack import AttackConfig, Counterexample, pgd_attack
from gpufield.verify.deadline import Deadline, PhaseClock, ResultSeal
from gpufield.verify.graph import Graph
from gpufield.verify.io.onnx_load import load_onnx
from gpufield.verify.io.ort import OrtModel, differential_check
from gpufield.verify.io.vnnlib import Case, parse_vnnlib
from gpufield.verify.propagate import backward, crown_intermediate, ibp
from gpufield.verify.refine import RefineConfig, refine
from gpufield.verify.spec import Spec

_DTYPES = {"float32": torch.float32, "float64": torch.float64}
METHODS = ("ibp", "crown", "alpha")


@dataclass(frozen=True, kw_only=True, slots=True)
class VerifyConfig:
    """Settings of :func:`verify_instance`.

    Attributes:
        method: strongest bound to use: ``ibp``, ``crown`` or ``alpha`` (α-CROWN).
        device: torch device for bounds and attack (``cpu``, ``cuda``, ``cuda:1``).
        dtype: ``float32`` (default) or ``float64`` working precision.
        alpha: α-CROWN optimiser settings.
        attack: PGD settings of one round.
        attack_rounds: most PGD rounds after bounding failed (stops earlier at the deadline).
        refine: β-CROWN branch and bound after α-CROWN (None: off); runs after the first
            ``min(2, attack_rounds)`` extra PGD rounds, until the deadline or a limit.
        margin_tol: a clause counts as proven only if its float64 margin exceeds this.
        ort_atol: tolerance of the load-time differential check against onnxruntime.
        memory_budget_bytes: cap on the A-matrices of one spec chunk.
        progress: name each phase on stderr, with a live branch-and-bound line (rich on a terminal,
            plain lines elsewhere).
        grace_s: :func:`run_instance` seals the result file as ``timeout`` this long after the
            deadline if no verdict came by then (:class:`~gpufield.verify.deadline.ResultSeal`);
            keep it below 1 s so the file is final by timeout + 1 s.
        f64_cost_ratio: estimated cost of a float64 bound pass relative to the measured float32
            one; a float64 re-check that would end after the deadline is not started.
        phase_hook: called with the phase name as each runner phase starts (``attack``,
            ``bounds``, ``float64``, ``alpha``, ``alpha_recheck``, ``root_bounds``, ``bab``,
            ``attack_round``); for instrumentation and for tests that slow a phase down.
    """

    method: str = "alpha"
    device: str = "cpu"
    dtype: str = "float32"
    alpha: AlphaConfig = field(default_factory=AlphaConfig)
    attack: AttackConfig = field(default_factory=AttackConfig)
    attack_rounds: int = 20
    refine: RefineConfig | None = field(default_factory=RefineConfig)
    margin_tol: float = 1e-7
    ort_atol: float = 1e-4
    memory_budget_bytes: int = 2 << 30
    progress: bool = False
    grace_s: float = 0.5
    f64_cost_ratio: float = 3.0
    phase_hook: Callable[[str], None] | None = None

    def __post_init__(self):
        if self.method not in METHODS:
            raise ValueError(f"method {self.method!r} not in {METHODS}")
        if self.dtype not in _DTYPES:
            raise ValueError(f"dtype {self.dtype!r} not in {tuple(_DTYPES)}")
        if self.attack_rounds < 0 or self.margin_tol < 0:
            raise ValueError(f"attack_rounds={self.attack_rounds}, margin_tol={self.margin_tol} must be >= 0")
        if not (0.0 <= self.grace_s < 1.0) or not self.f64_cost_ratio > 0:
            raise ValueError(f"grace_s={self.grace_s} must be in [0, 1) and f64_cost_ratio={self.f64_cost_ratio} > 0")

    def phase(self, name: str) -> None:
        """Announce a phase to :attr:`phase_hook` (no-op without one)."""
        if self.phase_hook is not None:
            self.phase_hook(name)


@dataclass(frozen=True)
class VerifyResult:
    """Outcome of one instance.

    Attributes:
        verdict: ``sat``, ``unsat``, ``unknown`` or ``timeout``.
        counterexample: the validated witness of ``sat``.
        seconds: wall time including loading.
        margins: per stage (``ibp``, ``crown``, ``alpha``, ``float64``), the smallest clause margin
            over all cases (positive = proven), for reports.
        message: a one-line account of how the verdict was reached.
    """

    verdict: str
    counterexample: Counterexample | None
    seconds: float
    margins: dict[str, float]
    message: str = ""


def outward_box(case: Case, shape, dtype, device) -> tuple[torch.Tensor, torch.Tensor]:
    """The case's box as ``[1, *shape]`` tensors in ``dtype``, rounded outwards (never shrinks)."""
    lo = torch.as_tensor(case.lo_N, dtype=torch.float64)
    hi = torch.as_tensor(case.hi_N, dtype=torch.float64)
    lo_d, hi_d = lo.to(dtype), hi.to(dtype)
    lo_d = torch.where(lo_d.double() > lo, torch.nextafter(lo_d, torch.tensor(-torch.inf, dtype=dtype)), lo_d)
    hi_d = torch.where(hi_d.double() < hi, torch.nextafter(hi_d, torch.tensor(torch.inf, dtype=dtype)), hi_d)
    return lo_d.reshape(1, *shape).to(device), hi_d.reshape(1, *shape).to(device)


def _ibp_clauses(graph: Graph, spec: Spec, bounds) -> torch.Tensor:
    low, u = (t.flatten(1) for t in bounds[graph.output_name])
    C = torch.as_tensor(spec.C_SM, dtype=low.dtype, device=low.device)
    lb_SB = C.clamp(min=0) @ low.T + C.clamp(max=0) @ u.T
    return spec.clause_value(spec.margins(lb_SB))


def _crown_clauses(graph, spec, lo, hi, ref, budget):
    inter = crown_intermediate(graph, lo, hi, ref=ref, memory_budget_bytes=budget)
    C = spec.C_SB(graph.output_shape, lo.shape[0], lo)
    lb, _ = backward(graph, graph.output_name, C, lo, hi, inter, upper=False)
    return spec.clause_value(spec.margins(lb)), inter


class _Case:
    """Bounding state of one case (internal)."""

    def __init__(self, g, g64, case, n_out, cfg):
        self.case, self.cfg = case, cfg
        self.spec = Spec.from_case(case, n_out)
        self.g, self.g64 = g, g64
        self.lo, self.hi = outward_box(case, g.input_shape, g.dtype, g.device)
        self.lo64, self.hi64 = outward_box(case, g.input_shape, torch.float64, g.device)
        self.margins: dict[str, float] = {}
        self._ref64 = None
        self.skipped = ""  # a phase not started because it would have ended after the deadline

    def ref64(self):
        if self._ref64 is None:
            ib = ibp(self.g64, self.lo64, self.hi64)
            self._ref64 = crown_intermediate(self.g64, self.lo64, self.hi64, ref=ib,
                                             memory_budget_bytes=self.cfg.memory_budget_bytes)
            self._ref64 = {**ib, **self._ref64}
        return self._ref64

    def prove(self, deadline_s: float, clock: PhaseClock | None = None) -> bool:
        """Bound the case: IBP, CROWN, α-CROWN, each proof re-checked in float64.

        Phases that cannot be interrupted start only if their estimate (from the float32 pass
        measured in ``clock``, times ``f64_cost_ratio`` for float64) ends before ``deadline_s``;
        otherwise the case stays open (the caller answers ``timeout``).
        """
        cfg, g, sp = self.cfg, self.g, self.spec
        clock = clock if clock is not None else PhaseClock()
        dl = Deadline(deadline_s)
        with torch.no_grad(), clock.timed("bounds32"):
            cfg.phase("bounds")
            ib = ibp(g, self.lo, self.hi)
            v = _ibp_clauses(g, sp, ib)
            self.margins["ibp"] = float(v.min())
            if cfg.method != "ibp":
                v, inter = _crown_clauses(g, sp, self.lo, self.hi, ib, cfg.memory_budget_bytes)
                self.margins["crown"] = float(v.min())
        est64 = cfg.f64_cost_ratio * clock.estimate("bounds32")
        if bool((v > 0).all()):
            if not dl.allows(est64):  # the float64 re-check would end after the deadline
                self.skipped = f"float64 re-check (about {est64:.2g} s)"
                return False
            cfg.phase("float64")
            if self._proven64(None, use_ibp=cfg.method == "ibp"):
                return True
        if cfg.method != "alpha" or dl.expired():
            return False
        if self.input_split_first():  # input-split BaB bounds the box itself, batched (its round 1)
            self.ref = None
            return False
        ref = {**ib, **inter}
        cfg.phase("alpha")
        res = alpha_crown(g, sp, self.lo, self.hi, ref, inter, cfg.alpha, deadline_s)
        self.margins["alpha"] = float(res.best_KB.min())
        if not dl.allows(est64 * (1 + len(res.snapshots))):  # CROWN64 + a pass per snapshot
            self.skipped = f"float64 re-check of alpha-CROWN (about {est64 * (1 + len(res.snapshots)):.2g} s)"
            return False
        cfg.phase("alpha_recheck")
        proven = self._proven64(res.snapshots)
        if not proven:  # root bounds for refinement: the latest slopes' intermediate bounds
            if not dl.allows(clock.estimate("bounds32") + est64):
                self.skipped = f"root bounds for branch and bound (about {clock.estimate('bounds32') + est64:.2g} s)"
                return False
            cfg.phase("root_bounds")
            last = {k: v.to(g.dtype) for k, v in res.snapshots[max(res.snapshots)].items()}
            # an optimiser's iterate: a NaN slope (float32 overflow) becomes 0
            last = {k: v if k.startswith("lambda|") else valid_slopes(v) for k, v in last.items()}
            with torch.no_grad():
                self.ref = crown_intermediate(g, self.lo, self.hi, ref=ref, alphas=tables(last))
                last64 = {k: v.to(torch.float64) for k, v in last.items()}
                self.interm_alphas = {k: t for k, t in tables(last).items() if k != g.output_name}
                self.ref64 = crown_intermediate(self.g64, self.lo64, self.hi64, ref=self.ref64(),
                                                alphas=tables(last64))
        return proven

    def input_split_first(self) -> bool:
        """Whether branch and bound splits this case's input box with the batched engine, which
        bounds the root box itself: root α-CROWN and the early PGD rounds are skipped."""
        r = self.cfg.refine
        return (r is not None and self.lo[0].numel() <= r.input_split_max_dims
                and r.input_split.engine == "v2" and r.sync is None)

    def refine(self, deadline_s: float, ort_model=None, progress=None):
        """β-CROWN branch and bound on the clauses still open after α-CROWN (see :mod:`.refine`).

        Returns:
            None when nothing ran, else the :class:`~gpufield.verify.refine.RefineResult`.
        """
        if self.cfg.refine is None or not hasattr(self, "ref"):
            return None
        if not self.g.relu_only and self.lo[0].numel() > self.cfg.refine.input_split_max_dims:
            return None  # neuron splits are ReLU splits; input splits work for every op
        v64 = getattr(self, "v64", None)  # float64 root margins, when a float64 check ran
        open_k = [k for k in range(self.spec.n_clauses) if v64 is None or not v64[k, 0] > self.cfg.margin_tol]
        if not open_k or any(len(self.case.clauses[k].b_K) == 0 for k in open_k):
            return None
        r = refine(self.g, self.g64, self.spec.subset(open_k), self.lo, self.hi, self.lo64, self.hi64,
                   self.ref, self.ref64, self.cfg.refine, margin_tol=self.cfg.margin_tol,
                   deadline_s=deadline_s, case=self.case, ort_model=ort_model, progress=progress,
                   interm_alphas=getattr(self, "interm_alphas", None))
        self.margins["bab_domains"] = float(r.domains)
        self.margins["bab_s"] = r.seconds  # branch and bound wall time, the MIP's included
        if r.mip is not None:
            self.margins["mip_s"] = r.mip.seconds
            self.margins["mip_tightened"] = float(sum(r.mip.tightened.values()))
            self.margins["mip_layers"] = float(max(r.mip.solved, default=0))  # deepest layer refined
            self.margins["mip_unstable_left"] = float(sum(r.mip.unstable_after.values()))
        self.margins["bab_lb"] = float(r.global_lb)
        return r

    def _proven64(self, snapshots, use_ibp=False) -> bool:
        with torch.no_grad():
            if use_ibp:
                v = _ibp_clauses(self.g64, self.spec, ibp(self.g64, self.lo64, self.hi64))
            else:
                v, _ = _crown_clauses(self.g64, self.spec, self.lo64, self.hi64, self.ref64(),
                                      self.cfg.memory_budget_bytes)
                if snapshots:
                    v = torch.maximum(v, recheck(self.g64, self.spec, self.lo64, self.hi64,
                                                 self.ref64(), snapshots))
        self.margins["float64"] = float(v.min())
        self.v64 = v
        return bool((v > self.cfg.margin_tol).all())


class _live:
    """Context giving a progress callback (``note(str)`` for phases, a call per BaB round): a rich
    status line (domains left, bound, rounds/s) on a terminal; elsewhere (a log file, a pipe) plain lines on stderr: each phase as it starts
    and the branch-and-bound line every ``every_s`` seconds."""

    def __init__(self, on: bool, every_s: float = 10.0):
        self.on, self.status, self.every_s = on, None, every_s

    def __enter__(self):
        if not self.on:
            return None
        if not sys.stderr.isatty():
            last = [time.monotonic()]

            def line(left, glb, rate):
                if time.monotonic() - last[0] >= self.every_s:
                    last[0] = time.monotonic()
                    print(f"BaB: {left} domains left, global lower bound {glb:.4g}, {rate:.1f} rounds/s",
                          file=sys.stderr, flush=True)
            line.note = lambda msg: print(msg, file=sys.stderr, flush=True)
            return line
        from rich.console import Console

        self.status = Console(stderr=True).status("verify")
        self.status.start()

        def cb(left, glb, rate):
            self.status.update(f"BaB: {left} domains left, global lower bound {glb:.4g}, {rate:.1f} rounds/s")
        cb.note = self.status.update  # other phases (the root MIP) say what they do
        return cb

    def __exit__(self, *exc):
        if self.status is not None:
            self.status.stop()
        return False


def load_instance(onnx_path: str | Path, vnnlib_path: str | Path, atol: float = 1e-4):
    """Load and cross-check a model and its property.

    Returns:
        ``(graph, ort_model, property)``.

    Raises:
        ModelFormatError: unsupported model, or its forward disagrees with onnxruntime.
        SpecFormatError: malformed property, or its variable counts do not fit the model.
    """
    graph = load_onnx(onnx_path)
    ort_model = OrtModel(onnx_path)
    prop = parse_vnnlib(vnnlib_path)
    n_in = int(np.prod(graph.input_shape))
    n_out = int(np.prod(graph.output_shape))
    if prop.n_inputs != n_in or prop.n_outputs != n_out:
        raise SpecFormatError(
            f"declares {prop.n_inputs} inputs / {prop.n_outputs} outputs but the model "
            f"{Path(onnx_path).name} has {n_in} / {n_out}", path=str(vnnlib_path))
    for case in prop.cases:
        differential_check(graph, ort_model, case.lo_N, case.hi_N, atol=atol, rtol=atol)
    return graph, ort_model, prop


def verify_instance(onnx_path: str | Path, vnnlib_path: str | Path, *, timeout_s: float,
                    config: VerifyConfig | None = None, loaded: tuple | None = None,
                    deadline: Deadline | None = None) -> VerifyResult:
    """Decide one VNN-COMP instance.

    Args:
        onnx_path: model (``.onnx`` or ``.onnx.gz``).
        vnnlib_path: property (``.vnnlib`` or ``.vnnlib.gz``).
        timeout_s: wall-clock budget in seconds (loading included).
        config: settings (defaults: α-CROWN, float32, CPU).
        loaded: :func:`load_instance`'s ``(graph, ort_model, property)`` for these two files when
            the caller already loaded them (``gpufield verify run`` checks its inputs first), so
            the budget is not spent loading twice.
        deadline: an absolute deadline (e.g. counted from the process start, as ``gpufield
            verify run`` does); the earlier of it and ``timeout_s`` from now applies.

    Returns:
        :class:`VerifyResult` (``sat``/``unsat``/``unknown``/``timeout``). Interruptible phases
        stop at the deadline; one that cannot be interrupted is not started when its estimate
        would end after it (see :mod:`gpufield.verify.deadline`).

    Raises:
        ModelFormatError, SpecFormatError: bad inputs (see :func:`load_instance`).
    """
    cfg = config or VerifyConfig()
    dl = Deadline.after(timeout_s)
    dl = dl if deadline is None else deadline.earlier(dl.end_s)
    with _live(cfg.progress) as live:  # the status line (or plain lines off a terminal) names each phase
        return _verify(onnx_path, vnnlib_path, dl, cfg, live, loaded)


def _verify(onnx_path, vnnlib_path, dl: Deadline, cfg: VerifyConfig, live, loaded=None) -> VerifyResult:
    """:func:`verify_instance`'s body; ``live`` is the progress callback (None: silent)."""
    note = getattr(live, "note", None) or (lambda msg: None)
    t0 = time.monotonic()
    deadline = dl.end_s
    clock = PhaseClock()
    if loaded is None:
        note("loading the model and checking it against onnxruntime")
        loaded = load_instance(onnx_path, vnnlib_path, cfg.ort_atol)
        if dl.expired():
            return VerifyResult("timeout", None, time.monotonic() - t0, {}, "deadline reached while loading")
    graph, ort_model, prop = loaded
    if cfg.device.startswith("cuda") and not torch.cuda.is_available():
        raise ModelFormatError(f"device {cfg.device} requested but CUDA is not available")
    g = graph.cast(_DTYPES[cfg.dtype], cfg.device)
    g64 = graph.cast(torch.float64, cfg.device)
    g_attack = graph.cast(torch.float32, cfg.device)
    states = [_Case(g, g64, c, prop.n_outputs, cfg) for c in prop.cases]
    margins: dict[str, float] = {}

    def done(verdict, cex=None, msg=""):
        for s in states:
            for k, v in s.margins.items():
                margins[k] = min(margins.get(k, np.inf), v)
        return VerifyResult(verdict, cex, time.monotonic() - t0, margins, msg)

    note("PGD attack")
    cfg.phase("attack")
    for s in states:  # cheap falsification first
        cex = pgd_attack(g_attack, ort_model, s.case, cfg.attack, deadline_s=deadline, rounds=1)
        if cex is not None:
            return done("sat", cex, "PGD counterexample validated by onnxruntime")
    open_states = []
    for s in states:
        if time.monotonic() > deadline:
            return done("timeout", msg="deadline reached while bounding")
        note("bounds: " + {"ibp": "IBP", "crown": "IBP, CROWN"}.get(
            cfg.method, f"IBP, CROWN, alpha-CROWN ({cfg.alpha.iterations} iterations)"))
        if not s.prove(deadline, clock):
            open_states.append(s)
    if not open_states:
        return done("unsat", msg=f"all clauses proven ({cfg.method}), float64 re-check passed")

    def open_bound() -> str:  # the best sound float64 bound of the open clauses so far
        lb = min(max(s.margins.get("float64", -np.inf), s.margins.get("bab_lb", -np.inf)) for s in open_states)
        return f"best lower bound {lb:.4g}" if np.isfinite(lb) else "no float64 bound yet"

    def attack_rounds(first: int, last: int):
        for r in range(first, last + 1):
            for s in open_states:
                if time.monotonic() > deadline:
                    return done("timeout", msg=f"deadline reached while attacking ({open_bound()})")
                note(f"PGD attack, round {r} ({open_bound()})")
                cfg.phase("attack_round")
                a = AttackConfig(restarts=cfg.attack.restarts, steps=cfg.attack.steps,
                                 step_frac=cfg.attack.step_frac, seed=cfg.attack.seed + 1000 * r)
                cex = pgd_attack(g_attack, ort_model, s.case, a, deadline_s=deadline, rounds=1)
                if cex is not None:
                    return done("sat", cex, f"PGD round {r} counterexample validated by onnxruntime")
        return None

    early = 0 if all(s.input_split_first() for s in open_states) else min(2, cfg.attack_rounds)
    if (out := attack_rounds(1, early)) is not None:
        return out
    if cfg.refine is not None and cfg.method == "alpha":
        still = []
        for s in open_states:
            if time.monotonic() > deadline:
                return done("timeout", msg=f"deadline reached while refining ({open_bound()})")
            note(f"branch and bound ({open_bound()})")
            cfg.phase("bab")
            r = s.refine(deadline, ort_model, progress=live)
            if r is not None and r.counterexample is not None:
                return done("sat", r.counterexample, "counterexample found in branch and bound, validated by onnxruntime")
            if r is not None and r.reason == "interrupted":
                return done("unknown", msg=f"interrupted during branch and bound (global bound {r.global_lb:.4g})")
            if r is None or not r.proven:
                still.append(s)
        if not still:
            return done("unsat", msg="all clauses proven by branch and bound, float64 re-check passed")
        if time.monotonic() > deadline:
            lb = min(s.margins.get("bab_lb", -np.inf) for s in still)
            return done("timeout", msg=f"deadline reached in branch and bound (global lower bound {lb:.4g})")
        open_states = still
    if (out := attack_rounds(early + 1, cfg.attack_rounds)) is not None:
        return out
    skipped = [s.skipped for s in open_states if s.skipped]
    if skipped:
        return done("timeout", msg=f"not started: {skipped[0]}, which would have ended after the deadline")
    return done("unknown", msg="bounds not tight enough and no counterexample found")


def run_instance(onnx_path: str | Path, vnnlib_path: str | Path, result_path: str | Path, *,
                 timeout_s: float, config: VerifyConfig | None = None,
                 force: bool = False, loaded: tuple | None = None,
                 deadline: Deadline | None = None, seal: ResultSeal | None = None) -> VerifyResult:
    """:func:`verify_instance` and write the VNN-COMP result file (what ``gpufield verify run`` does).

    The result file is checked before any work (never overwritten without ``force``). Bad inputs
    write ``error`` to the result file and re-raise; Ctrl-C writes ``unknown`` (inside branch and
    bound it ends the search and ``unknown`` is returned with the bound reached in the message).
    ``loaded``, ``deadline``: as in :func:`verify_instance`.

    The file is final by the deadline + ``config.grace_s``: if no verdict is written by then, a
    timer thread writes ``timeout`` and a later verdict is discarded (the returned result then
    says ``timeout`` too, with the late verdict in its message). ``seal``: a
    :class:`~gpufield.deadline.ResultSeal` for ``result_path`` the caller armed already (``verify
    run`` arms it before loading); otherwise one is armed here.

    Raises:
        InputError: the result file exists and ``force`` is False.
        ModelFormatError, SpecFormatError: bad model or property (after writing ``error``).
    """
    from gpufield.errors import InputError
    from gpufield.verify.io.results import write_result_file

    rp = Path(result_path)
    if rp.exists() and not force:
        raise InputError("result file exists; pass --force to overwrite it", path=str(rp))
    cfg = config or VerifyConfig()
    dl = Deadline.after(timeout_s)
    dl = dl if deadline is None else deadline.earlier(dl.end_s)
    armed = seal is not None
    seal = seal if armed else ResultSeal(dl.end_s + cfg.grace_s, lambda: write_result_file(rp, "timeout", force=True))
    with nullcontext(seal) if armed else seal:
        try:
            res = verify_instance(onnx_path, vnnlib_path, timeout_s=timeout_s, config=cfg, loaded=loaded,
                                  deadline=dl)
        except InputError:
            seal.finish(lambda: write_result_file(rp, "error", force=True))
            raise
        except KeyboardInterrupt:  # Ctrl-C outside branch and bound: an honest unknown, then stop
            seal.finish(lambda: write_result_file(rp, "unknown", force=True))
            raise
        if not seal.finish(lambda: write_result_file(rp, res.verdict, res.counterexample, force=True)):
            res = VerifyResult("timeout", None, res.seconds, res.margins,
                               f"no verdict by the deadline + {cfg.grace_s:g} s, so the result file says "
                               f"timeout; the verifier answered {res.verdict} after {res.seconds:.2f} s")
    return res
