"""Domain-parallel branch and bound (``--shard domains``) under real torchrun (gloo, CPU, P = 2).

Tiny MLPs whose exact minimum is known (scipy MILP): the unsafe set ``c·y ≤ t`` with
``t = exact ∓ δ`` is unsat / sat. P = 2 must give the exact verdict (= P = 1's), every sat with a
counterexample that onnxruntime confirms, domains must really move between ranks, a rank must
find counterexamples first, and a worker that fails makes the problem ``unknown`` (never a
verdict) without hanging the others, which go on with the next problems. Then the CLI: ``verify
run --shard domains`` at P = 2 on a shared mnist_fc instance that needs branch and bound, against
the published VNN-COMP 2022 α,β-CROWN verdict.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from gpufield.verify.dist.comm import Comm
from gpufield.verify.dist.domains import DomainSync, plan

from . import nets
from .dist_bab_job import decide

JOB = Path(__file__).with_name("dist_bab_job.py")
SIZES = (3, 12, 12, 2)
# seeds (even: unsat, odd: sat) whose P = 1 search takes 5-250 domains and < 5 s on the 2-core VM
# (a scan of seeds 0-34 by cost only; the truth comes from the MILP either way)
SEEDS = (0, 2, 6, 8, 16, 1, 13, 17, 21, 23)


def _problems(tmp_path, seeds):
    out = []
    for seed in seeds:
        rng = np.random.default_rng(seed)
        model, layers = nets.mlp(rng, list(SIZES))
        path = nets.save(model, tmp_path / f"m{seed}.onnx")
        x0 = rng.uniform(-1, 1, SIZES[0])
        lo, hi = x0 - 0.8, x0 + 0.8
        c = rng.normal(0, 1, SIZES[-1])
        exact = nets.milp_min(layers, lo, hi, c)
        truth = "sat" if seed % 2 else "unsat"
        delta = 0.01 * (1 + abs(exact))
        out.append({"onnx": path, "lo": lo.tolist(), "hi": hi.tolist(), "c": c.tolist(), "truth": truth,
                    "threshold": exact + delta if truth == "sat" else exact - delta, "fault": False})
    return out


def _torchrun(tmp_path, P, problems):
    (tmp_path / "p.json").write_text(json.dumps(problems))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(P),
           str(JOB), str(tmp_path / "p.json"), str(tmp_path / "out.json")]
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(JOB.parents[2] / "src"), str(JOB.parents[2])])}
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env, cwd=JOB.parents[2])
    assert r.returncode == 0, r.stderr[-4000:]
    return json.loads((tmp_path / "out.json").read_text()), r.stderr


def test_plan_evens_out_heaps():
    assert plan([5]) == [] and plan([3, 2]) == [] and plan([4, 2]) == []
    assert plan([7, 0]) == [(0, 1, 3)]
    moves = plan([10, 0, 1, 5])
    after = [10, 0, 1, 5]
    for s, d, k in moves:
        after[s] -= k
        after[d] += k
    assert sorted(after) == [4, 4, 4, 4] and sum(k for *_, k in moves) == 7  # 6 from rank 0, 1 from rank 3


@pytest.fixture(scope="module")
def run2(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("dbab")
    probs = _problems(tmp, SEEDS)
    fault = dict(probs[1], fault=True)  # an unsat problem whose search rank 1 cannot join
    fault["onnx"] = str(Path(fault["onnx"]).with_name("fault.onnx"))
    Path(fault["onnx"]).write_bytes(Path(probs[1]["onnx"]).read_bytes())
    probs.insert(2, fault)
    probs.insert(1, dict(probs[0], no_case=True))  # seed 0 (unsat) without case / onnxruntime
    kill = dict(probs[0], kill=True)  # last: rank 1 dies as it joins this search
    kill["onnx"] = str(Path(kill["onnx"]).with_name("kill.onnx"))
    Path(kill["onnx"]).write_bytes(Path(probs[0]["onnx"]).read_bytes())
    probs.append(kill)
    got, stderr = _torchrun(tmp, 2, probs)
    return probs, got, stderr


def test_p2_verdicts_equal_exact_and_p1(run2):
    probs, got, _ = run2
    wrong = []
    for p, g in zip(probs, got, strict=True):
        if p["fault"] or p.get("kill"):
            continue
        if g["verdict"] != p["truth"]:
            wrong.append((p["onnx"], p["truth"], g))
        if g["verdict"] == "sat":
            assert g["checked"] is True, g
    assert wrong == []
    # P = 1 through the same sync code (a world of one) and without it: the same verdicts
    for p, g in zip(probs, got, strict=True):
        if p["onnx"].endswith(("m0.onnx", "m17.onnx")):
            assert decide(p)["verdict"] == g["verdict"] == decide(p, DomainSync(Comm()))["verdict"]


def test_p2_spreads_domains_and_workers_find_counterexamples(run2):
    probs, got, _ = run2
    assert sum(g["moved"] for g in got) > 0
    assert any("(rank 1)" in g["reason"] for g, p in zip(got, probs, strict=True) if p["truth"] == "sat")
    assert max(g["domains"] for g in got) > 4  # more than one round of splits


def test_worker_failure_is_unknown_and_others_go_on(run2):
    probs, got, stderr = run2
    i = next(i for i, p in enumerate(probs) if p["fault"])
    assert got[i]["verdict"] == "unknown" and "rank 1 failed" in got[i]["reason"], got[i]
    assert "injected fault" in got[i]["reason"] and "injected fault" in stderr
    assert [g["verdict"] for g in got[i + 1:-1]] == [p["truth"] for p in probs[i + 1:-1]]


def test_dead_worker_is_unknown_not_a_hang(run2):
    """Rank 1's process exits as it joins the last search: rank 0's next collective fails (gloo
    reports the closed connection), the search ends unproven, and the launch finishes."""
    probs, got, _ = run2
    assert probs[-1].get("kill") and got[-1]["verdict"] == "unknown"
    assert "collective failed" in got[-1]["reason"], got[-1]


def _tiny_instance(tmp_path):
    """Seed 100's 3-12-12-2 MLP and ``y_0 ≤ exact − δ`` as ONNX + VNN-LIB (unsat; 29 domains at P = 1)."""
    rng = np.random.default_rng(100)
    model, layers = nets.mlp(rng, [3, 12, 12, 2])
    onnx_path = nets.save(model, tmp_path / "tiny.onnx")
    x0 = rng.uniform(-1, 1, 3)
    lo, hi = x0 - 0.8, x0 + 0.8
    exact = nets.milp_min(layers, lo, hi, np.array([1.0, 0.0]))
    lines = [f"(declare-const X_{i} Real)" for i in range(3)] + ["(declare-const Y_0 Real)", "(declare-const Y_1 Real)"]
    for i in range(3):
        lines += [f"(assert (>= X_{i} {float(lo[i])!r}))", f"(assert (<= X_{i} {float(hi[i])!r}))"]
    lines.append(f"(assert (<= Y_0 {float(exact - 0.01 * (1 + abs(exact)))!r}))")
    (tmp_path / "tiny.vnnlib").write_text("\n".join(lines) + "\n")
    return onnx_path, str(tmp_path / "tiny.vnnlib")


def test_cli_run_shard_domains_p2(tmp_path):
    """``torchrun -m gpufield verify run --shard domains`` at P = 2: rank 0 writes the result and
    the report (both ranks' peak memory, no errors); the search really ran over both ranks."""
    onnx_path, vnnlib = _tiny_instance(tmp_path)
    out, rep = tmp_path / "r.txt", tmp_path / "rep.json"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "-m", "gpufield",
           "verify", "run", onnx_path, vnnlib, "--out", str(out), "--report", str(rep), "--shard", "domains",
           "--alpha-iterations", "0", "--timeout", "90"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(JOB.parents[2] / "src")}
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=200, env=env)
    assert r.returncode == 0, r.stderr[-4000:]
    assert out.read_text() == "unsat\n"
    doc = json.loads(rep.read_text())
    assert doc["world"] == 2 and doc["verdict"] == "unsat" and doc["errors"] == []
    assert [m["rank"] for m in doc["ranks"]] == [0, 1] and all(m["peak_bytes"] > 0 for m in doc["ranks"])
    assert doc["bab"]["rounds"] > 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.txt", "rep.json", "tiny.onnx", "tiny.vnnlib"]


@pytest.mark.parametrize("shard", ["fsdp", "alpha", "tp"])
def test_cli_run_bounds_modes_alone(tmp_path, shard):
    """``--shard fsdp|alpha|tp`` without torchrun (P = 1, the same code path): an instance whose
    threshold lies 30 % below the MILP minimum is proven, and the float64 margin in the report
    never exceeds the true one (exact − t); one 1 % above it is sat with a counterexample."""
    from gpufield.cli import main

    onnx_path, vnnlib = _tiny_instance(tmp_path)
    text = Path(vnnlib).read_text().splitlines()
    rng = np.random.default_rng(100)
    _, layers = nets.mlp(rng, [3, 12, 12, 2])
    x0 = rng.uniform(-1, 1, 3)
    exact = nets.milp_min(layers, x0 - 0.8, x0 + 0.8, np.array([1.0, 0.0]))
    for name, t in (("easy", exact - 0.3 * (1 + abs(exact))), ("sat", exact + 0.01 * (1 + abs(exact)))):
        (tmp_path / f"{name}.vnnlib").write_text("\n".join(text[:-1] + [f"(assert (<= Y_0 {float(t)!r}))"]) + "\n")
        out, rep = tmp_path / f"{name}.txt", tmp_path / f"{name}.json"
        args = ["verify", "run", onnx_path, str(tmp_path / f"{name}.vnnlib"), "--out", str(out), "--report", str(rep),
                "--shard", shard, "--alpha-iterations", "5", "--timeout", "60"]
        assert main(args) == 0
        doc = json.loads(rep.read_text())
        assert doc["world"] == 1 and doc["errors"] == [] and doc["ranks"][0]["peak_bytes"] > 0
        if name == "easy":
            assert out.read_text() == "unsat\n"
            assert 0 < doc["cases"][0]["margin64"] <= exact - t + 1e-9
        else:
            assert out.read_text().startswith("sat\n")
