"""Root MIP refinement of intermediate bounds (bab-refine) against independent oracles: the exact
min/max of every pre-activation from the float64 MILP of tests/verify/nets.py (its own big-M
encoding with IBP bounds) and numpy forward passes on random inputs; the refined bounds must
contain both, be at least as tight as CROWN's, and equal the exact ones where solved; the triangle
LP must lie between MIP and CROWN; branch and bound with refinement still returns the MILP verdict."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
import torch

from gpufield.verify import crown_intermediate, ibp, load_onnx
from gpufield.verify.milp_bounds import chain, milp_refine
from gpufield.verify.refine import RefineConfig

from . import nets
from .test_refine import FAST, _decide, _problem


def _net(tmp_path, seed, sizes=(3, 8, 8, 8, 2), radius=0.8):
    rng = np.random.default_rng(seed)
    model, layers = nets.mlp(rng, list(sizes))
    g64 = load_onnx(nets.save(model, tmp_path / f"n{seed}.onnx")).cast(torch.float64)
    x0 = rng.uniform(-1, 1, sizes[0])
    lo, hi = x0 - radius, x0 + radius
    lo64, hi64 = torch.tensor(lo).reshape(1, -1), torch.tensor(hi).reshape(1, -1)
    ib = ibp(g64, lo64, hi64)
    ref = {**ib, **crown_intermediate(g64, lo64, hi64, ref=ib)}
    return g64, layers, lo, hi, lo64, hi64, ref


def _forward_pre(layers, X):
    """numpy float64 pre-activations of every hidden layer for inputs ``X [P, n]``."""
    out, a = [], X
    for W, b in layers[:-1]:
        z = a @ W.T + b
        out.append(z)
        a = np.maximum(z, 0)
    return out


SOLVERS = ["highs", pytest.param("gurobi", marks=pytest.mark.skipif(
    importlib.util.find_spec("gurobipy") is None, reason="gurobipy not installed"))]


@pytest.mark.parametrize("solver", SOLVERS)
@pytest.mark.parametrize("stop", [False, True])
@pytest.mark.parametrize("seed", range(4))
def test_mip_bounds_are_exact_sound_and_tighter_than_crown(tmp_path, seed, stop, solver):
    """Exact where re-solved; with ``stop_at_stable`` a neuron the oracle finds stable may keep
    its other side, but is then proven stable, and an unstable one is still exact on both sides."""
    g64, layers, lo, hi, lo64, hi64, ref = _net(tmp_path, seed)
    out, st = milp_refine(g64, lo64, hi64, ref, layers=2, workers=1, solver=solver, stop_at_stable=stop)
    names = [r.inputs[0] for r in g64.relu_nodes()]
    X = np.random.default_rng(seed).uniform(lo, hi, (4000, len(lo)))
    pre = _forward_pre(layers, X)
    tightened = 0
    for t, name in enumerate(names):
        l0, u0 = (v.flatten().numpy() for v in ref[name])
        l1, u1 = (v.flatten().numpy() for v in out[name])
        assert (l1 >= l0).all() and (u1 <= u0).all()  # never looser than CROWN
        assert (l1 <= pre[t].min(0) + 1e-12).all() and (u1 >= pre[t].max(0) - 1e-12).all()
        if t == 0 or t > 2:
            assert np.array_equal(l1, l0) and np.array_equal(u1, u0)  # not refined
            continue
        for j in range(len(l0)):
            c = np.zeros(len(l0))
            c[j] = 1.0
            mn = nets.milp_min(layers[:t + 1], lo, hi, c)
            mx = -nets.milp_min(layers[:t + 1], lo, hi, -c)
            assert l1[j] <= mn + 1e-9 and u1[j] >= mx - 1e-9  # sound (the oracle is a primal value)
            if stop and l0[j] < 0 < u0[j] and (mn > 0.01 or mx < -0.01):
                assert l1[j] >= 0 or u1[j] <= 0  # proven stable, the other side maybe skipped
                tightened += 1
            elif l0[j] < 0 < u0[j]:  # re-solved: exact up to the safety slack and the oracle's gap
                slack = 1e-3 * (u0[j] - l0[j])  # milp_refine's range_slack
                assert abs(l1[j] - mn) < 1e-3 * (1 + abs(mn)) + slack and abs(u1[j] - mx) < 1e-3 * (1 + abs(mx)) + slack
                tightened += (l1[j] > l0[j] + 1e-6) + (u1[j] < u0[j] - 1e-6)
    assert st.unstable_before and tightened > 0


def test_triangle_lp_lies_between_mip_and_crown(tmp_path):
    g64, layers, lo, hi, lo64, hi64, ref = _net(tmp_path, 11)
    mip, _ = milp_refine(g64, lo64, hi64, ref, layers=2, workers=1, stop_at_stable=False)
    lp, st = milp_refine(g64, lo64, hi64, ref, layers=2, workers=1, binary=False, stop_at_stable=False)
    assert st.status.get("optimal", 0) > 0
    for name in [r.inputs[0] for r in g64.relu_nodes()][1:3]:
        (lm, um), (ll, ul), (lc, uc) = mip[name], lp[name], ref[name]
        assert (ll <= lm + 1e-9).all() and (ul >= um - 1e-9).all()
        assert (ll >= lc).all() and (ul <= uc).all()


def test_worker_processes_give_the_same_bounds(tmp_path):
    g64, _, _, _, lo64, hi64, ref = _net(tmp_path, 4)
    one, _ = milp_refine(g64, lo64, hi64, ref, layers=2, workers=1)
    two, st = milp_refine(g64, lo64, hi64, ref, layers=2, workers=2)
    for k in one:
        assert torch.allclose(one[k][0], two[k][0], atol=1e-9) and torch.allclose(one[k][1], two[k][1], atol=1e-9)
    assert st.status.get("optimal", 0) > 0


def test_no_budget_changes_nothing_and_non_chains_are_refused(tmp_path):
    g64, _, _, _, lo64, hi64, ref = _net(tmp_path, 5)
    out, st = milp_refine(g64, lo64, hi64, ref, layers=2, workers=1, total_s=0.0)
    assert all(torch.equal(out[k][0], ref[k][0]) and torch.equal(out[k][1], ref[k][1]) for k in ref)
    assert st.status.get("skipped", 0) > 0 and sum(st.solved.values()) == 0
    skip = load_onnx(nets.save(nets.every_op_mlp(np.random.default_rng(0)), tmp_path / "skip.onnx"))
    assert chain(skip.cast(torch.float64)) is None
    with pytest.raises(ValueError, match="chain"):
        milp_refine(skip.cast(torch.float64), torch.zeros(1, 2, 3), torch.ones(1, 2, 3), {}, workers=1)
    with pytest.raises(ValueError):
        RefineConfig(mip_workers=0)


@pytest.mark.parametrize("after_s", [0.0, 1e-6, 20.0])
def test_bab_with_root_mip_returns_the_milp_verdict(tmp_path, after_s):
    """As test_refine's completeness test, on 3-hidden-layer nets with the root MIP switched on:
    MIP first (0), a plain-BaB probe cut at once then MIP and a restarted search (1e-6), and a
    probe long enough to decide these small nets alone (20 s: the MIP never runs)."""
    cfg = RefineConfig(mip_refine_layers=2, mip_min_relu_layers=1, mip_workers=1, mip_after_s=after_s, **FAST)
    wrong, agree, ran = [], 0, 0
    seeds = range(3000, 3020)
    for seed in seeds:
        prob = _problem(tmp_path, seed, sizes=(2, 6, 6, 6, 2))
        exact = prob[6]
        truth = "sat" if seed % 2 else "unsat"
        delta = 0.02 * (1 + abs(exact))
        r, _ = _decide(prob, exact + delta if truth == "sat" else exact - delta, cfg)
        ran += r.mip is not None
        verdict = "unsat" if r.proven else ("sat" if r.counterexample is not None else "unknown")
        if verdict == truth:
            agree += 1
        elif verdict != "unknown":
            wrong.append(seed)
    assert wrong == [] and agree == len(seeds) and ran == (0 if after_s == 20.0 else len(seeds))


def test_layer_by_layer_calls_give_the_bounds_of_one_call(tmp_path):
    """``first`` (the refinement's layer-by-layer loop with a root check in between) changes
    nothing: layers 1 then 2 in two calls equal layers 1-2 in one; the stats merge."""
    g64, _, _, _, lo64, hi64, ref = _net(tmp_path, 6)
    both, st = milp_refine(g64, lo64, hi64, ref, layers=2, workers=1)
    one, s1 = milp_refine(g64, lo64, hi64, ref, layers=1, workers=1)
    two, s2 = milp_refine(g64, lo64, hi64, one, layers=2, first=2, workers=1)
    for k in both:
        assert torch.allclose(both[k][0], two[k][0], atol=1e-9) and torch.allclose(both[k][1], two[k][1], atol=1e-9)
    merged = s1.merge(s2)
    assert merged.solved == st.solved and merged.tightened == st.tightened and sum(st.tightened.values()) > 0
    assert sum(merged.status.values()) == sum(st.status.values())
    with pytest.raises(ValueError, match="first >= 1"):
        milp_refine(g64, lo64, hi64, ref, layers=2, first=0, workers=1)
    with pytest.raises(ValueError, match="not in"):
        milp_refine(g64, lo64, hi64, ref, layers=2, workers=1, solver="cplex")


def test_solver_workers_exit_when_their_parent_is_killed(tmp_path):
    """A harness that SIGKILLs the verifier at its timeout must not leave MIP workers running."""
    import os
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    code = ("import os, sys, time, multiprocessing as mp\n"
            "from concurrent.futures import ProcessPoolExecutor\n"
            "import numpy as np\n"
            "from gpufield.verify.milp_bounds import _init\n"
            "if __name__ == '__main__':\n"
            "    pool = ProcessPoolExecutor(1, mp_context=mp.get_context('spawn'), initializer=_init,\n"
            "        initargs=([np.eye(2)], [np.zeros(2)], -np.ones(2), np.ones(2), 'highs', os.getpid()))\n"
            "    print(pool.submit(os.getpid).result(), flush=True)\n"
            "    time.sleep(600)\n")
    script = tmp_path / "parent.py"
    script.write_text(code)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")}
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True, env=env)
    worker = int(parent.stdout.readline())
    parent.send_signal(signal.SIGKILL)
    parent.wait()

    def alive(pid):
        try:
            with open(f"/proc/{pid}/status") as f:
                return "\tZ" not in next(ln for ln in f if ln.startswith("State:"))
        except FileNotFoundError:
            return False

    t0 = time.monotonic()
    while alive(worker) and time.monotonic() - t0 < 20:
        time.sleep(0.2)
    assert not alive(worker), f"worker {worker} outlived its killed parent"


def test_ctrl_c_during_the_mip_stops_the_solvers_at_once(tmp_path):
    """Ctrl-C in the parent while workers solve: milp_refine raises KeyboardInterrupt within
    seconds and leaves no worker. Before, ``shutdown(wait=True)`` waited for every running solve
    (here up to 60 s each) and a new user's ``verify bench`` hung for good after a Ctrl-C."""
    import os
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    code = ("import signal, sys\n"
            "import numpy as np, torch\n"
            "from tests.verify import nets\n"
            "from gpufield.verify import crown_intermediate, ibp, load_onnx\n"
            "from gpufield.verify.milp_bounds import milp_refine\n"
            "if __name__ == '__main__':\n"
            "    signal.signal(signal.SIGINT, signal.default_int_handler)\n"
            "    rng = np.random.default_rng(0)\n"
            "    model, _ = nets.mlp(rng, [20, 60, 60, 60, 2])\n"
            f"    g = load_onnx(nets.save(model, {str(tmp_path / 'slow.onnx')!r})).cast(torch.float64)\n"
            "    x0 = rng.uniform(-1, 1, 20)\n"
            "    lo, hi = torch.tensor(x0 - 1).reshape(1, -1), torch.tensor(x0 + 1).reshape(1, -1)\n"
            "    ib = ibp(g, lo, hi)\n"
            "    ref = {**ib, **crown_intermediate(g, lo, hi, ref=ib)}\n"
            "    try:\n"
            "        milp_refine(g, lo, hi, ref, layers=3, workers=2, neuron_time_s=60)\n"
            "    except KeyboardInterrupt:\n"
            "        print('interrupted', flush=True)\n")
    script = tmp_path / "slow_mip.py"
    script.write_text(code)
    env = {**os.environ, "PYTHONPATH": f"{root / 'src'}{os.pathsep}{root}"}
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True, env=env)

    def children(pid):
        out = []
        for d in os.listdir("/proc"):
            if d.isdigit():
                try:
                    with open(f"/proc/{d}/stat") as f:
                        if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                            out.append(int(d))
                except (FileNotFoundError, ProcessLookupError, IndexError, ValueError):
                    pass
        return out

    t0 = time.monotonic()
    while len(children(parent.pid)) < 3 and parent.poll() is None and time.monotonic() - t0 < 120:
        time.sleep(0.2)  # two solvers and the resource tracker
    workers = children(parent.pid)
    time.sleep(3.0)  # let the solves start
    parent.send_signal(signal.SIGINT)
    try:
        out, _ = parent.communicate(timeout=15)
    except subprocess.TimeoutExpired:
        parent.kill()
        parent.communicate()
        raise AssertionError("milp_refine did not stop within 15 s of Ctrl-C") from None
    assert "interrupted" in out
    time.sleep(1.0)
    left = [w for w in workers if os.path.exists(f"/proc/{w}") and "\tZ" not in open(f"/proc/{w}/status").read()]
    assert len(workers) >= 2 and not left, (workers, left)


def test_the_live_line_is_told_which_layer_the_mip_refines(tmp_path):
    """A progress callback with a ``note`` attribute (the CLI's status line) hears of each layer."""
    import time

    from gpufield.verify.io.vnnlib import Case, Clause
    from gpufield.verify.refine import refine
    from gpufield.verify.spec import Spec

    g, g64, ort, lo, hi, c, exact, ref64 = _problem(tmp_path, 3000, sizes=(2, 6, 6, 6, 2))
    case = Case(lo, hi, (Clause(c.reshape(1, -1), np.array([exact - 0.02 * (1 + abs(exact))])),))
    notes, rounds = [], []

    def progress(left, glb, rate):
        rounds.append(left)

    progress.note = notes.append
    cfg = RefineConfig(mip_refine_layers=2, mip_min_relu_layers=1, mip_workers=1, mip_after_s=0.0, **FAST)
    box32 = [torch.tensor(v, dtype=torch.float32).reshape(1, len(lo)) for v in (lo, hi)]
    box64 = [torch.tensor(v).reshape(1, len(lo)) for v in (lo, hi)]
    r = refine(g, g64, Spec.from_case(case, len(c)), *box32, *box64, None, ref64, cfg, margin_tol=1e-7,
               deadline_s=time.monotonic() + 20, case=case, ort_model=ort, progress=progress)
    assert r.proven and r.mip is not None
    assert notes and notes[0].startswith("MIP refinement of layer 1 (") and "highs" in notes[0], notes
    assert rounds  # the branch-and-bound rounds still report as before


def test_a_gurobi_failure_is_a_warning_and_changes_no_bound(tmp_path):
    """A model over the pip licence's 2,000-variable cap (2,100 inputs): Gurobi refuses it; the
    user is told and every bound stays as given (sound)."""
    gp = pytest.importorskip("gurobipy")
    g64, _, _, _, lo64, hi64, ref = _net(tmp_path, 7, sizes=(2100, 6, 6, 2), radius=0.05)
    try:  # a full licence solves it: nothing to test then
        m = gp.Model()
        m.Params.OutputFlag = 0
        x = m.addMVar(2100)
        m.addConstr(x.sum() <= 1)
        m.optimize()
        pytest.skip("this Gurobi licence has no size cap")
    except gp.GurobiError:
        pass
    with pytest.warns(RuntimeWarning, match="Gurobi failed on .* problems of layer 1"):
        out, st = milp_refine(g64, lo64, hi64, ref, layers=1, workers=1, solver="gurobi")
    assert all(torch.equal(out[k][0], ref[k][0]) and torch.equal(out[k][1], ref[k][1]) for k in ref)
    assert any(k.startswith("gurobi error") for k in st.status)


def test_rebound_after_mip_is_sound_and_tightens_the_deeper_layers(tmp_path):
    """After layer 1's MIP the deeper layers are re-bounded on the refined bounds (α,β-CROWN's
    optimised CROWN after each refined layer): every real pre-activation (numpy float64 forward
    passes on 4,000 random inputs) and the exact MILP min/max of each deeper neuron stay inside,
    no bound loosens, layer 1 keeps the MIP's bounds, and over the seeds the deeper layers do get
    tighter (before, they kept their pre-MIP bounds)."""
    from gpufield.verify.io.vnnlib import Case, Clause
    from gpufield.verify.refine import rebound_after_mip
    from gpufield.verify.spec import Spec

    gained = 0
    for seed in range(5):
        g64, layers, lo, hi, lo64, hi64, ref = _net(tmp_path, 40 + seed)
        names = [r.inputs[0] for r in g64.relu_nodes()]
        one, _ = milp_refine(g64, lo64, hi64, ref, layers=1, workers=1)
        c = np.random.default_rng(seed).normal(0, 1, 2)
        spec = Spec.from_case(Case(lo, hi, (Clause(c.reshape(1, -1), np.array([0.0])),)), 2)
        g = g64.cast(torch.float32)
        out, slopes = rebound_after_mip(g, g64, spec, lo64.float(), hi64.float(), lo64, hi64, one, set(names[:2]),
                                        None, iterations=20, memory_budget_bytes=1 << 28,
                                        deadline_s=float("inf"))
        assert slopes and set(slopes) <= set(names)
        pre = _forward_pre(layers, np.random.default_rng(seed).uniform(lo, hi, (4000, len(lo))))
        for t, name in enumerate(names):
            l0, u0 = (v.flatten().numpy() for v in one[name])
            l1, u1 = (v.flatten().numpy() for v in out[name])
            assert (l1 >= l0).all() and (u1 <= u0).all()
            assert (l1 <= pre[t].min(0) + 1e-12).all() and (u1 >= pre[t].max(0) - 1e-12).all()
            if t <= 1:
                assert np.array_equal(l1, l0) and np.array_equal(u1, u0)  # box-exact and MIP-set
                continue
            for j in range(len(l0)):
                e = np.zeros(len(l0))
                e[j] = 1.0
                assert l1[j] <= nets.milp_min(layers[:t + 1], lo, hi, e) + 1e-9
                assert u1[j] >= -nets.milp_min(layers[:t + 1], lo, hi, -e) - 1e-9
            gained += int((l1 > l0 + 1e-9).sum() + (u1 < u0 - 1e-9).sum())
    assert gained > 0


def test_rebound_survives_a_float32_overflow_in_its_alpha_pass(tmp_path):
    """Weights ~1e18-1e19 (a soundness hunt's case): the float32 α-CROWN pass of the re-bounding
    overflows and leaves NaN slopes. Before, they went into the float64 CROWN pass as they were:
    NaN bounds made unstable neurons look dead and one layer deeper a finite lower bound missed
    real values (−1.05e38 against a real −1.45e38). Now NaN slopes count as 0 and a NaN bound
    falls back to the reference: every bound is finite and holds the real values (numpy float64
    forward passes on random points and the box corners)."""
    from gpufield.verify.io.vnnlib import Case, Clause
    from gpufield.verify.refine import rebound_after_mip
    from gpufield.verify.runner import outward_box
    from gpufield.verify.spec import Spec

    rng = np.random.default_rng(3)
    sizes, scales = (2, 5, 5, 5, 5, 2), [1e18, 1e19, 1, 1, 1]
    ws = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:], strict=True)):
        W = rng.normal(0, 1, (b, a)) * scales[i]
        ws.append((W.astype(np.float32), (rng.normal(0, 0.3, b) * min(np.prod(scales[:i + 1]), 1e30)).astype(np.float32)))
    model, layers = nets.gemm_relu(ws, [2])
    g = load_onnx(nets.save(model, tmp_path / "overflow.onnx"))
    g64 = g.cast(torch.float64)
    x0 = rng.uniform(-1, 1, 2)
    lo, hi = x0 - 1, x0 + 1
    case = Case(lo, hi, (Clause(rng.normal(0, 1, 2).reshape(1, -1), np.array([0.0])),))
    lo32, hi32 = outward_box(case, g.input_shape, torch.float32, "cpu")
    lo64, hi64 = outward_box(case, g.input_shape, torch.float64, "cpu")
    ib = ibp(g64, lo64, hi64)
    ref = {**ib, **crown_intermediate(g64, lo64, hi64, ref=ib)}
    names = [r.inputs[0] for r in g64.relu_nodes()]
    out, slopes = rebound_after_mip(g, g64, Spec.from_case(case, 2), lo32, hi32, lo64, hi64, ref, set(names[:2]),
                                    None, iterations=20, memory_budget_bytes=1 << 28, deadline_s=float("inf"))
    assert not any(torch.isnan(a).any() for t in slopes.values() for a in t.values())
    X = np.vstack([rng.uniform(lo, hi, (3000, 2)), [[lo[0], lo[1]], [lo[0], hi[1]], [hi[0], lo[1]], [hi[0], hi[1]]]])
    pre = _forward_pre(layers, X)
    for t, name in enumerate(names):
        lb, ub = (v.flatten().numpy() for v in out[name])
        assert np.isfinite(lb).all() and np.isfinite(ub).all(), (t, lb, ub)
        tol = 1e-9 * (1 + np.abs(pre[t]).max(0))
        assert (lb <= pre[t].min(0) + tol).all() and (ub >= pre[t].max(0) - tol).all(), t
