"""``alpha`` mode in branch and bound under real torchrun (gloo, CPU, P = 2): every rank runs the same
β-CROWN search holding only its clauses' α and β (``RefineConfig.spec_split``).

Tiny MLPs with three unsafe clauses ``c_k·y ≤ t_k`` whose exact minima come from scipy's MILP
(tests/verify/nets.py): ``t_k = min_k − δ`` for all k (unsat), or one ``t_k = min_k + δ`` (sat).
P = 2 must give the exact verdict and P = 1's search (domains, rounds), a sat counterexample
that onnxruntime confirms here, and a per-rank peak below P = 1's (storage tracker).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from gpufield.verify.dist.comm import Comm
from gpufield.verify.dist.worker import bab_case

from . import nets

SIZES = [3, 12, 12, 3]
# seeds (even: unsat, odd: sat) whose P = 1 search takes 3-9 domains (< 3 s); truth from the MILP
SEEDS = (12, 14, 9)
BAB = {"batch": 8, "max_domains": 2000, "iterations": 5, "root_iterations": 10, "timeout_s": 120.0}


def _problems(tmp_path):
    out = []
    for seed in SEEDS:
        rng = np.random.default_rng(seed)
        model, layers = nets.mlp(rng, SIZES)
        path = nets.save(model, tmp_path / f"m{seed}.onnx")
        x0 = rng.uniform(-1, 1, SIZES[0])
        lo, hi = x0 - 0.8, x0 + 0.8
        sat = seed % 2 == 1
        clauses = []
        for k in range(3):
            c = rng.normal(0, 1, SIZES[-1])
            exact = nets.milp_min(layers, lo, hi, c)
            delta = 0.2 * (1 + abs(exact))
            clauses.append({"c": c.tolist(), "t": exact + delta if (sat and k == 2) else exact - delta})
        out.append({"name": f"s{seed}", "onnx": str(path), "lo": lo.tolist(), "hi": hi.tolist(),
                    "clauses": clauses, "bab": BAB, "truth": "sat" if sat else "unsat"})
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("alpha_bab")
    problems = _problems(tmp)
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        ref = {p["name"]: bab_case(p, {}, Comm(), "cpu", "none") for p in problems}
    finally:
        torch.set_num_threads(n)
    job = tmp / "job.json"
    job.write_text(json.dumps({"shard": "alpha", "save_bounds": False, "cases": problems}))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           "-m", "gpufield.verify.dist.worker", str(job), str(tmp / "out")]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stderr[-4000:]
    ranks = [json.loads((tmp / "out" / f"rank{k}.json").read_text()) for k in range(2)]
    return problems, ref, ranks


def test_alpha_bab_verdicts_equal_and_exact(runs):
    from gpufield.verify.io.ort import OrtModel

    problems, ref, ranks = runs
    assert {p["truth"] for p in problems} == {"sat", "unsat"}
    for p in problems:
        one = ref[p["name"]]
        assert one["verdict"] == p["truth"], (p["name"], one)
        for r, rep in enumerate(ranks):
            got = rep[p["name"]]
            assert got["shard"] == "alpha" and got["world"] == 2 and got["split_calls"] > 0
            assert got["verdict"] == p["truth"], (p["name"], r, got)
            assert (got["domains"], got["rounds"]) == (one["domains"], one["rounds"]), (p["name"], r)
            if got["verdict"] == "sat":  # independent check of the witness: in the box, some clause holds
                x = np.asarray(got["cex"])
                assert (np.asarray(p["lo"]) <= x).all() and (x <= np.asarray(p["hi"])).all()
                y = np.asarray(OrtModel(p["onnx"])(x.astype(np.float32)), dtype=np.float64)
                assert any(np.dot(k["c"], y) <= k["t"] for k in p["clauses"])
    assert sum(ref[p["name"]]["domains"] for p in problems) > len(problems)  # some search really branched


def test_alpha_bab_peak_per_rank_below_single_process(runs):
    problems, ref, ranks = runs
    for p in problems:
        if ref[p["name"]]["domains"] < 3:
            continue
        for rep in ranks:
            got = rep[p["name"]]
            assert got["method"] == "storage-tracker"
            assert got["resident_bytes"] == ref[p["name"]]["resident_bytes"]  # weights and box replicated
            assert got["peak_bytes"] < ref[p["name"]]["peak_bytes"], (p["name"], got["peak_bytes"])
