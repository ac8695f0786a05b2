"""MIP/LP refinement of intermediate ReLU bounds at the root ("bab-refine").

α,β-CROWN's ``complete_verifier: bab-refine`` (VNN-COMP 2022, mnist_fc 256x4/6) tightens the
pre-activation bounds of the first layers by mixed-integer programming before branch and bound
(Wang et al. 2021, arXiv:2103.06624; MIP encoding of Tjeng et al. 2019, arXiv:1711.07356). Here:
for ReLU-input layers ``1 .. layers`` (layer 0 is an affine image of the box, already exact) and
every neuron still unstable (``l < 0 < u``), ``min`` and ``max`` of ``z_j`` over the exact network
are solved with HiGHS or Gurobi (:mod:`gpufield.verify.mip_solvers`), one task per neuron (the
side nearer zero first, the other skipped once the neuron is proven stable), in parallel worker
processes, layer by layer (a layer's model uses the refined bounds of the
layers before it). Earlier unstable ReLUs are encoded big-M style (``a ≥ z``, ``a ≥ 0``,
``a ≤ z − l(1 − d)``, ``a ≤ u d``) with ``d`` binary, or ``d ∈ [0, 1]`` with ``binary=False``,
which is exactly the triangle relaxation (the LP). Stable ReLUs are exact (``a = z`` / ``a = 0``);
``l ≤ z ≤ u`` of earlier layers are added as valid constraints.

Soundness: HiGHS works in floating point with tolerances, so a solver value is only used as
(1) the MIP dual bound (``mip_dual_bound``: valid also at a time limit; the primal objective
value never is) or, for a pure LP (no binaries), the optimal objective (status 0), and (2) only
after an explicit outward safety slack ``abs_slack + rel_slack·|v| + range_slack·(u − l)`` (defaults
1e-5, 1e-6 and 1e-3 of the neuron's interval before refinement,
far above HiGHS's 1e-7 feasibility/optimality tolerances and the ~1e-16·|b| rounding of the
extracted affine maps; the input box is rescaled to ``[-1, 1]`` first, since those absolute
tolerances are not small against a box a few 1e-6 wide: with weights ~1e3 the solver's bounds
then missed real values by tens of percent, tests/verify/test_milp_soundness.py). New bounds
are intersected with the given ones (they only tighten; a neuron whose refined interval would
be empty keeps its old one). This is the same standard as
α,β-CROWN with Gurobi: sound up to the documented slack, not a floating-point proof.

Shape legend: N_k neurons of ReLU-input layer k (N_-1: flattened input), B batch (1 here).
"""

from __future__ import annotations

import os
import time
import warnings
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field

import numpy as np
import torch

from gpufield.verify.graph import Graph


def chain(g64: Graph) -> tuple[list[str], list[np.ndarray], list[np.ndarray]] | None:
    """The network as ``z_k = W_k a_{k-1} + b_k`` between consecutive ReLUs, if it is a chain.

    Args:
        g64: float64 network.

    Returns:
        ``(names, W, b)``: ReLU input names, ``W_k`` ``[N_k, N_{k-1}]`` and ``b_k`` ``[N_k]``
        (float64 numpy; ``a_{-1}`` is the flattened input), or None when some node reads a tensor
        from outside its segment (residual connections, several ReLU inputs per layer).
    """
    names, Ws, bs = [], [], []
    prev = g64.input_name
    for relu in g64.relu_nodes():
        z = relu.inputs[0]
        seg = g64.nodes[g64.position(prev) + 1:g64.position(z) + 1]
        mid = g64.nodes[g64.position(z) + 1:g64.position(relu.name)]
        seen = {prev}
        for n in seg:
            if n.op.nonlinear or any(i not in seen for i in n.inputs):
                return None
            seen.add(n.name)
        if mid or len(relu.inputs) != 1:
            return None
        n_in = torch.Size(g64.shape(prev)).numel()
        X = torch.cat([torch.zeros(1, n_in, dtype=torch.float64), torch.eye(n_in, dtype=torch.float64)]).to(g64.device).to(g64.device)
        vals = {prev: X.reshape(n_in + 1, *g64.shape(prev))}
        with torch.no_grad():
            for n in seg:
                vals[n.name] = n.op.forward(*(vals[i] for i in n.inputs))
        out = vals[z].reshape(n_in + 1, -1).cpu().numpy()
        names.append(z)
        bs.append(out[0].copy())
        Ws.append((out[1:] - out[0]).T.copy())
        prev = relu.name
    return names, Ws, bs


def build(W, b, lo, hi, L, U, t: int, binary: bool):
    """Constraint data of the MIP bounding layer ``t`` (see the module docstring).

    Args:
        W, b: affine maps from :func:`chain`; lo, hi: input box ``[N_-1]``.
        L, U: bounds of layers ``0 .. t-1`` (lists of ``[N_k]`` float64).
        t: layer whose neurons are the objectives.
        binary: integer ``d`` (MIP) or continuous (triangle LP).

    Returns:
        ``(A, row_lo, row_hi, var_lo, var_hi, integrality, a_prev)``: sparse CSR constraints,
        variable bounds and the column index of each neuron of ``a_{t-1}`` (its ``z`` column
        when active, -1 when dead: ``a = 0``).
    """
    from scipy.sparse import coo_matrix

    vlo, vhi, integ = [np.asarray(lo, float)], [np.asarray(hi, float)], [np.zeros(len(lo))]
    prev = np.arange(len(lo))
    nvar = len(lo)
    rows, cols, vals, rlo, rhi = [], [], [], [], []
    nrow = 0

    def add(ri, ci, v):
        rows.append(np.asarray(ri))
        cols.append(np.asarray(ci))
        vals.append(np.asarray(v, float))

    for k in range(t):
        Wk, bk, lk, uk = W[k], b[k], L[k], U[k]
        n = len(bk)
        act, dead = lk >= 0, uk <= 0
        uns = ~act & ~dead
        # layer 0 is an affine image of the box: its [l, u] hold already, dead neurons need no row
        keep = np.nonzero(~dead if k == 0 else np.ones(n, bool))[0]
        z = nvar + np.arange(len(keep))
        zi = np.full(n, -1)
        zi[keep] = z
        us = np.nonzero(uns)[0]
        # a = z for active neurons (no column of its own), a = 0 for dead ones (none): only the
        # unstable get a post-activation column and a binary d (keeps models under solver size caps)
        a = np.where(act, zi, -1)
        a[us] = nvar + len(keep) + np.arange(len(us))
        d = nvar + len(keep) + len(us) + np.arange(len(us))
        nvar += len(keep) + 2 * len(us)
        vlo += [lk[keep], np.zeros(len(us)), np.zeros(len(d))]
        vhi += [uk[keep], uk[us], np.ones(len(d))]
        integ += [np.zeros(len(keep) + len(us)), np.full(len(d), 1.0 if binary else 0.0)]
        # z - W a_prev = b (one row per kept neuron; l <= z <= u as variable bounds)
        live = np.nonzero(prev >= 0)[0]
        rr, cc = np.nonzero(Wk[keep][:, live])
        add(nrow + rr, prev[live][cc], -Wk[keep][:, live][rr, cc])
        add(nrow + np.arange(len(keep)), z, np.ones(len(keep)))
        rlo.append(bk[keep])
        rhi.append(bk[keep])
        nrow += len(keep)
        # a - z >= 0 (unstable)
        add(nrow + np.arange(len(us)), a[us], np.ones(len(us)))
        add(nrow + np.arange(len(us)), zi[us], -np.ones(len(us)))
        rlo.append(np.zeros(len(us)))
        rhi.append(np.full(len(us), np.inf))
        nrow += len(us)
        # a - z - l d <= -l and a - u d <= 0 (unstable)
        for cz, cd, rh in ((-1.0, -lk[us], -lk[us]), (0.0, -uk[us], np.zeros(len(us)))):
            add(nrow + np.arange(len(us)), a[us], np.ones(len(us)))
            if cz:
                add(nrow + np.arange(len(us)), zi[us], np.full(len(us), cz))
            add(nrow + np.arange(len(us)), d, cd)
            rlo.append(np.full(len(us), -np.inf))
            rhi.append(rh)
            nrow += len(us)
        prev = a
    A = coo_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
                   shape=(nrow, nvar)).tocsr()
    return (A, np.concatenate(rlo), np.concatenate(rhi), np.concatenate(vlo), np.concatenate(vhi),
            np.concatenate(integ), prev)


_NET: dict = {}


def _init(W, b, lo, hi, solver, parent_pid: int | None = None):
    """Load the network into this process; in a worker (``parent_pid`` given) also exit as soon as
    that parent is gone: a verifier killed by its harness (SIGTERM/SIGKILL at a timeout) must not
    leave solver processes behind (spawned pool workers never see their queue close)."""
    from gpufield.verify.mip_solvers import backend

    _NET.update(W=W, b=b, lo=lo, hi=hi, key=None, solver=backend(solver))
    if parent_pid is not None:
        import threading

        def watch():
            while os.getppid() == parent_pid:
                time.sleep(0.5)
            os._exit(0)

        threading.Thread(target=watch, name="gpufield-parent-watch", daemon=True).start()


def _kill(pool: ProcessPoolExecutor) -> None:
    """Kill a pool's workers and drop the pool without waiting. ``shutdown(wait=True)`` after a
    Ctrl-C in the parent waited for running solves and could hang for good (a worker blocked on
    the pool's queue lock); Python 3.14 has ``kill_workers``, older ones only the private map."""
    if hasattr(pool, "kill_workers"):
        pool.kill_workers()
    else:
        for proc in list((getattr(pool, "_processes", None) or {}).values()):
            proc.kill()
    pool.shutdown(wait=False, cancel_futures=True)


def _solve(t, j, L, U, binary, version, deadline_wall, neuron_s, slack, gap, stop):
    """One neuron in a worker, both senses: ``[(t, j, sense, bound or None, status, input or None)]``
    (the input: the solver's primal point, box coordinates in ``[-1, 1]``).

    The side nearer zero goes first (α,β-CROWN's order); with ``stop`` the solver ends as soon as
    that side is proven stable with room for the safety slack, and the other side is then skipped.
    ``slack = (abs, rel, range)`` as in :func:`milp_refine`.
    """
    abs_slack, rel_slack, range_slack = slack
    if _NET.get("key") != (t, version, binary):
        _NET["model"] = build(_NET["W"], _NET["b"], _NET["lo"], _NET["hi"], L, U, t, binary)
        _NET["key"] = (t, version, binary)
    model = _NET["model"]
    prev, w, bj = model[-1], _NET["W"][t][j], _NET["b"][t][j]
    live = prev >= 0
    width = U[t][j] - L[t][j]
    margin = 2 * (abs_slack + range_slack * width + rel_slack * (abs(bj) + width))
    first = 1.0 if -L[t][j] < U[t][j] else -1.0
    out = []
    for sense in (first, -first):
        limit = min(neuron_s, deadline_wall - time.time())
        if limit < 0.05:
            out.append((t, j, sense, None, "skipped", None))
            continue
        c = np.zeros(model[0].shape[1])
        c[prev[live]] = sense * w[live]
        # objective v = min sense·(z_j − b_j); this side is stable once v ≥ margin − sense·b_j
        v, status, xs = _NET["solver"].solve((t, version, binary), model, c, time_limit_s=limit,
                                             stop_at=margin - sense * bj if stop else None, gap=gap)
        xs = None if xs is None else np.clip(xs[:len(_NET["lo"])], -1.0, 1.0)
        if v is None:
            out.append((t, j, sense, None, status, xs))
            continue
        v = v - abs_slack - rel_slack * abs(v)  # sound lower bound of sense·(z_j − b_j)
        z = sense * v + bj - sense * range_slack * width  # outward by a fraction of the old interval
        out.append((t, j, sense, z, status, xs))
        if stop and sense * z >= 0:  # stable on this side: the other bound cannot matter
            break
    return out


def _probe_points(n: int, count: int = 2048, seed: int = 0) -> np.ndarray:
    """Points of the box ``[-1, 1]^n`` for the consistency check: its centre, every corner when
    ``n <= 10`` (else ``count // 4`` random ones), and ``count`` uniform points. ``[P, n]``."""
    rng = np.random.default_rng(seed)
    corners = (np.array(np.meshgrid(*[[-1.0, 1.0]] * n)).reshape(n, -1).T if n <= 10
               else rng.choice([-1.0, 1.0], (count // 4, n)))
    return np.vstack([np.zeros((1, n)), corners, rng.uniform(-1.0, 1.0, (count, n))])


def _real_range(W, b, t: int, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Smallest and largest real pre-activation ``z_t`` over the points ``X [P, n]`` (float64)."""
    a = X
    for k in range(t + 1):
        z = a @ W[k].T + b[k]
        a = np.maximum(z, 0.0)
    return z.min(0), z.max(0)


@dataclass
class MilpStats:
    """What :func:`milp_refine` did.

    Attributes:
        solved: problems with a usable bound, per layer; tightened: bounds that got tighter.
        unstable_before / unstable_after: unstable neurons per refined layer.
        seconds: wall time; status: solver outcome -> count.
        discarded: layers whose solver bounds excluded a real network value (found by the
            consistency check of :func:`milp_refine`) and were therefore not used.
    """

    solved: dict[int, int] = field(default_factory=dict)
    tightened: dict[int, int] = field(default_factory=dict)
    unstable_before: dict[int, int] = field(default_factory=dict)
    unstable_after: dict[int, int] = field(default_factory=dict)
    seconds: float = 0.0
    status: dict[str, int] = field(default_factory=dict)
    discarded: list[int] = field(default_factory=list)

    def merge(self, other: MilpStats) -> MilpStats:
        """These counts and ``other``'s (a later call on other layers), added up."""
        out = MilpStats({**self.solved, **other.solved}, {**self.tightened, **other.tightened},
                        {**self.unstable_before, **other.unstable_before},
                        {**self.unstable_after, **other.unstable_after}, self.seconds + other.seconds,
                        dict(self.status), [*self.discarded, *other.discarded])
        for k, v in other.status.items():
            out.status[k] = out.status.get(k, 0) + v
        return out


def milp_refine(g64: Graph, lo64, hi64, bounds64: dict, *, layers: int = 2, first: int = 1,
                neuron_time_s: float = 5.0,
                total_s: float = 60.0, workers: int | None = None, binary: bool = True,
                abs_slack: float = 1e-5, rel_slack: float = 1e-6, range_slack: float = 1e-3,
                solver: str = "highs", gap: float = 1e-4,
                stop_at_stable: bool = True) -> tuple[dict, MilpStats]:
    """Tighten the bounds of ReLU-input layers ``1 .. layers`` by per-neuron MIP (or LP).

    Args:
        g64: float64 network (must be a chain, see :func:`chain`).
        lo64, hi64: input box ``[1, *input]`` float64.
        bounds64: name -> ``(l, u)`` ``[1, *node]`` float64 sound bounds of every ReLU input.
        layers: deepest ReLU-input layer to refine (0-based; layer 0 is never re-solved).
        first: shallowest layer to refine (default 1; a larger value keeps the given bounds of
            the layers before it, e.g. when they were refined by an earlier call).
        neuron_time_s: solver time limit of one problem (one neuron, one side; s).
        total_s: wall budget of the whole refinement (s); problems not started are dropped, and
            with workers the wait for them ends then too (workers still busy are killed; their
            neurons keep the bounds given, counted as ``killed`` in the stats).
        workers: worker processes (default ``os.cpu_count()``; 1 solves in this process).
        binary: MIP with binary ReLU indicators, else the triangle LP.
        abs_slack, rel_slack: outward safety slack applied to every solver bound.
        range_slack: further outward slack, a fraction of the neuron's interval before refinement
            (deep layers with values ~1e3-1e6 missed real values by 2-4e-5 of that interval after
            the absolute and relative slack, tests/verify/test_milp_soundness.py).
        solver: ``highs`` (scipy) or ``gurobi`` (gurobipy, :mod:`gpufield.verify.mip_solvers`).
        gap: relative MIP gap at which a solve stops (α,β-CROWN uses 1e-2; only the dual bound
            is used, so a gap costs at most that fraction of tightness).
        stop_at_stable: stop a solve once it proves the neuron stable on its side, and skip the
            other side then (α,β-CROWN's ``BestBdStop``); False solves both sides to the gap.

    Returns:
        ``(bounds, stats)``: a copy of ``bounds64`` with refined layers intersected, and
        :class:`MilpStats`.

    Raises:
        ValueError: ``g64`` is not a chain of affine layers and ReLUs, or a bad parameter.
    """
    t0, deadline = time.monotonic(), time.time() + total_s
    ch = chain(g64)
    if ch is None:
        raise ValueError(f"{g64.source or 'network'}: MIP refinement needs a chain of affine layers and ReLUs")
    if (layers < 0 or first < 1 or neuron_time_s <= 0 or total_s < 0 or gap < 0
            or min(abs_slack, rel_slack, range_slack) < 0):
        raise ValueError("layers >= 0, first >= 1, neuron_time_s > 0, total_s, gap, abs_slack, rel_slack, "
                         "range_slack >= 0 required")
    from gpufield.verify.mip_solvers import backend

    backend(solver)  # a clear error here, not in a worker
    names, W, b = ch
    out = dict(bounds64)
    L = [bounds64[n][0].flatten().cpu().numpy().astype(np.float64).copy() for n in names]
    U = [bounds64[n][1].flatten().cpu().numpy().astype(np.float64).copy() for n in names]
    lo, hi = lo64.flatten().cpu().numpy(), hi64.flatten().cpu().numpy()
    # the box as x = c + r e, e in [-1, 1]: HiGHS's absolute tolerances (1e-7) are not small
    # against a box a few 1e-6 wide; in e the first layer's rows stay well scaled
    cen, rad = (lo + hi) / 2, (hi - lo) / 2
    W, b = [W[0] * rad, *W[1:]], [b[0] + W[0] @ cen, *b[1:]]
    lo, hi = -np.ones_like(lo), np.ones_like(hi)
    stats = MilpStats()
    probe = _probe_points(len(lo))
    workers = max(1, workers or os.cpu_count() or 1)
    pool = None
    if workers > 1:
        import multiprocessing as mp

        pool = ProcessPoolExecutor(workers, mp_context=mp.get_context("spawn"), initializer=_init,
                                   initargs=(W, b, lo, hi, solver, os.getpid()))
    else:
        _init(W, b, lo, hi, solver)
    try:
        for t in range(first, min(layers, len(names) - 1) + 1):
            uns = np.nonzero((L[t] < 0) & (U[t] > 0))[0]
            stats.unstable_before[t] = len(uns)
            # largest triangles first: they matter most and go first when the budget runs out
            order = uns[np.argsort(-(-L[t][uns] * U[t][uns] / (U[t][uns] - L[t][uns])))]
            slack = (abs_slack, rel_slack, range_slack)
            args = [(t, int(j), L[:t + 1], U[:t + 1], binary, t, deadline, neuron_time_s, slack, gap, stop_at_stable)
                    for j in order]
            late = False
            if pool is None:
                results = [r for a in args for r in _solve(*a)]
            else:  # wait no longer than the budget: a worker still starting up (spawn imports
                # torch) or past its solver's limit is killed, the solved neurons are kept
                futs, results = [pool.submit(_solve, *a) for a in args], []
                try:
                    for f in as_completed(futs, timeout=max(0.0, deadline - time.time()) + 0.2):
                        results.extend(f.result())
                except TimeoutError:
                    _kill(pool)
                    pool, late = None, True
                    stats.status["killed"] = stats.status.get("killed", 0) + sum(not f.done() for f in futs)
            stats.solved[t] = stats.tightened[t] = 0
            newL, newU = L[t].copy(), U[t].copy()
            failed = [st for *_, st, _x in results if st.startswith("gurobi error")]
            if failed:  # e.g. the pip licence's size cap: say so, the neurons keep their bounds
                warnings.warn(f"Gurobi failed on {len(failed)} problems of layer {t} ({failed[0]}; the pip "
                              "licence caps models at 2,000 variables/constraints): their bounds stay as given",
                              RuntimeWarning, stacklevel=2)
            found = [x for *_, x in results if x is not None]
            for _, j, s, v, st, _x in results:
                stats.status[st] = stats.status.get(st, 0) + 1
                if v is None:
                    continue
                stats.solved[t] += 1
                if s > 0 and v > newL[j]:
                    newL[j], stats.tightened[t] = v, stats.tightened[t] + 1
                elif s < 0 and v < newU[j]:
                    newU[j], stats.tightened[t] = v, stats.tightened[t] + 1
            bad = newL > newU
            newL, newU = np.where(bad, L[t], newL), np.where(bad, U[t], newU)
            zmin, zmax = _real_range(W, b, t, np.vstack([probe, *found]) if found else probe)
            tol = 1e-9 * (1 + np.abs(zmin) + np.abs(zmax))
            if (newL > zmin + tol).any() or (newU < zmax - tol).any():
                # a real network value outside a "proven" bound: the solver's floating point
                # failed on this model (badly scaled weights/box); keep the bounds we were given
                stats.status["discarded"] = stats.status.get("discarded", 0) + 1
                stats.discarded.append(t)
                stats.tightened[t] = 0
                newL, newU = L[t], U[t]
            L[t], U[t] = newL, newU
            stats.unstable_after[t] = int(((L[t] < 0) & (U[t] > 0)).sum())
            ref_l, ref_u = bounds64[names[t]]
            out[names[t]] = (torch.as_tensor(L[t], dtype=ref_l.dtype, device=ref_l.device).reshape(ref_l.shape),
                             torch.as_tensor(U[t], dtype=ref_u.dtype, device=ref_u.device).reshape(ref_u.shape))
            if late or time.time() > deadline:
                break
    except BaseException:  # Ctrl-C or an error: stop the solvers now, do not wait for their solves
        if pool is not None:
            _kill(pool)
            pool = None
        raise
    finally:
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
    stats.seconds = time.monotonic() - t0
    return out, stats
