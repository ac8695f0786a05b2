"""Split refinement on tiny nets against the exact optimum (scipy MILP): it never proves a
false property, and it proves true ones that α-CROWN alone cannot."""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch

from gpufield.verify import AlphaConfig, alpha_crown, crown_intermediate, ibp, load_onnx
from gpufield.verify.io.vnnlib import Case, Clause
from gpufield.verify.refine import RefineConfig, refine
from gpufield.verify.spec import Spec

from . import nets


def _run(tmp_path, seed, offset, max_domains):
    rng = np.random.default_rng(seed)
    model, layers = nets.mlp(rng, [3, 10, 10, 2])
    g = load_onnx(nets.save(model, tmp_path / f"m{seed}.onnx"))
    g64 = g.cast(torch.float64)
    x0 = rng.uniform(-1, 1, 3)
    lo, hi = x0 - 0.7, x0 + 0.7
    c = rng.normal(0, 1, 2)
    exact = nets.milp_min(layers, lo, hi, c)
    spec = Spec.from_case(Case(lo, hi, (Clause(c.reshape(1, 2), np.array([exact + offset])),)), 2)
    boxes = [(torch.tensor(lo, dtype=dt).reshape(1, 3), torch.tensor(hi, dtype=dt).reshape(1, 3))
             for dt in (torch.float32, torch.float64)]
    refs = []
    for gg, (low, h) in ((g, boxes[0]), (g64, boxes[1])):
        ib = ibp(gg, low, h)
        refs.append({**ib, **crown_intermediate(gg, low, h, ref=ib)})
    root = alpha_crown(g, spec, *boxes[0], refs[0], refs[0], AlphaConfig(iterations=30))
    r = refine(g, g64, spec, *boxes[0], *boxes[1], refs[0], refs[1],
               RefineConfig(max_domains=max_domains, batch=32), margin_tol=1e-7,
               deadline_s=time.monotonic() + 60)
    return float(root.best_KB.min()), r


@pytest.mark.parametrize("seed", range(3))
def test_never_proves_a_false_property(tmp_path, seed):
    # unsafe set {c·y ≤ exact + 1e-3} is reached by the MILP optimum: must not be proven
    _, r = _run(tmp_path, seed, 1e-3, 48)
    assert not r.proven


def test_proves_what_alpha_crown_cannot(tmp_path):
    gains = []
    for seed in range(4):
        root, r = _run(tmp_path, 50 + seed, -0.05, 300)  # true property with a 0.05 margin
        gains.append((root <= 0, r.proven, r.domains))
        if root <= 0 and r.proven:
            break
    assert any(a and p for a, p, _ in gains), gains
