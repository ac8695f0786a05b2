"""Falsification: PGD with random restarts, one target clause per batch element, and exact
validation of every counterexample with onnxruntime.

Projected gradient descent in the input box (Madry et al. 2018, arXiv:1706.06083) on the
clause violation ``max_i (A_i y − b_i)`` (``≤ 0`` means ``y`` lies in the unsafe polytope);
each clause gets its own restarts (targeted attack) which first take a few output-diversified
initialisation (ODI) steps along a random output direction, as α,β-CROWN's ``diversed_PGD``
does; steps are signed gradients scaled by the box width with a linearly decaying step size. A point counts only after onnxruntime's float32
forward puts it in an unsafe polytope as written (strict atoms strictly, no tolerance: see
:func:`validate`) and the point lies in the box.

Shape legend: R batch of attack points, N input size, M outputs, K rows of a clause.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch

from gpufield.verify.graph import Graph
from gpufield.verify.io.ort import OrtModel
from gpufield.verify.io.vnnlib import Case


@dataclass(frozen=True, kw_only=True, slots=True)
class AttackConfig:
    """PGD settings.

    Attributes:
        restarts: random starts per clause in one round.
        steps: PGD steps per round.
        step_frac: initial step as a fraction of the box width (decays linearly to 0).
        seed: RNG seed of the first round (later rounds add the round index).
        odi_steps: output-diversified initialisation steps (Tashiro et al. 2020,
            arXiv:2003.06878): each restart first ascends a random direction of the output.
    """

    restarts: int = 16
    steps: int = 100
    step_frac: float = 0.1
    seed: int = 0
    odi_steps: int = 10

    def __post_init__(self):
        if self.restarts < 1 or self.steps < 1 or self.step_frac <= 0:
            raise ValueError(f"bad AttackConfig: restarts={self.restarts} steps={self.steps} "
                             f"step_frac={self.step_frac}")


@dataclass(frozen=True)
class Counterexample:
    """A validated violation.

    Attributes:
        x_N: float64 ``[N]`` inside the box: float32 values, except on coordinates whose
            interval holds no float32 value (there the float64 value; the model saw its float32
            rounding).
        y_M: float64 ``[M]`` onnxruntime outputs at ``x_N``.
        clause: index of the satisfied unsafe clause.
    """

    x_N: np.ndarray
    y_M: np.ndarray
    clause: int


def into_box_f32(x_N: np.ndarray, lo_N: np.ndarray, hi_N: np.ndarray,
                 lo_strict_N: np.ndarray | None = None, hi_strict_N: np.ndarray | None = None) -> np.ndarray:
    """Round to float32 and nudge each value by one ulp where rounding left the box (or sits on a
    strict bound)."""
    x = np.clip(x_N, lo_N, hi_N).astype(np.float32)
    low = x.astype(np.float64) < lo_N
    if lo_strict_N is not None:
        low |= lo_strict_N & (x.astype(np.float64) == lo_N)
    x = np.where(low, np.nextafter(x, np.float32(np.inf)), x)
    high = x.astype(np.float64) > hi_N
    if hi_strict_N is not None:
        high |= hi_strict_N & (x.astype(np.float64) == hi_N)
    return np.where(high, np.nextafter(x, np.float32(-np.inf)), x)


def no_float32_inside(lo_N: np.ndarray, hi_N: np.ndarray) -> np.ndarray:
    """Bool ``[N]``: coordinates whose interval ``[lo, hi]`` (float64) contains no float32 value."""
    lo32 = np.asarray(lo_N, dtype=np.float64).astype(np.float32)
    up = np.where(lo32.astype(np.float64) < lo_N, np.nextafter(lo32, np.float32(np.inf)), lo32)
    return up.astype(np.float64) > hi_N


def validate(ort_model: OrtModel, case: Case, x_N: np.ndarray) -> Counterexample | None:
    """Check a candidate with onnxruntime; return it as a :class:`Counterexample` or None.

    Acceptance is exact, never within a tolerance: the float32 point must lie in the box as
    written (strict bounds strictly; on a coordinate whose interval holds no float32 value, the
    reported float64 value lies in it and the model is evaluated at its float32 rounding) and onnxruntime's output, in float64, must satisfy every
    atom of some clause as written (``<``/``>`` strictly; :meth:`~.io.vnnlib.Clause.contains`
    settles near-ties in exact arithmetic). The VNN-COMP checker is more lenient: the 2022 one
    (``SCORING/counterexamples.py`` and ``settings.py`` of ChristopherBrix/vnncomp2022_results,
    ``COUNTEREXAMPLE_TOL = 1e-4``) re-runs onnxruntime on the written ``X``, requires
    ``‖y_ort − Y‖∞ < 1e-4``, ``lo − 1e-4 ≤ x ≤ hi + 1e-4`` and ``A Y ≤ b + 1e-4`` (it reads ``<``
    as ``<=``); 2024-2026 use rtol 1e-3 for the output match and atol 1e-4 for the property. So
    a point accepted here passes that check whenever its onnxruntime agrees with ours within the
    tolerance, and the tolerance is never spent on accepting a point that misses the property.
    """
    lo_s, hi_s = case.lo_strict_N, case.hi_strict_N
    x32 = into_box_f32(np.asarray(x_N, dtype=np.float64), case.lo_N, case.hi_N, lo_s, hi_s)
    xd = x32.astype(np.float64)
    # an interval holding no float32 value (a pinned coordinate lo = hi that float32 cannot
    # represent, as in collins_rul_cnn): the point reported is the float64 value in the box;
    # the model sees its float32 rounding, as onnxruntime (and the VNN-COMP checker) sees any X
    gap = no_float32_inside(case.lo_N, case.hi_N)
    x_in = np.clip(np.asarray(x_N, dtype=np.float64), case.lo_N, case.hi_N)
    xd = np.where(gap, x_in, xd)
    x32 = np.where(gap, x_in.astype(np.float32), x32)  # round to nearest, as a reader of X does
    if not case.contains_input(xd):
        return None
    y = np.asarray(ort_model(x32), dtype=np.float64)
    for k, cl in enumerate(case.clauses):
        if cl.contains(y):
            return Counterexample(xd, y, k)
    return None


def pgd_attack(graph: Graph, ort_model: OrtModel, case: Case, cfg: AttackConfig,
               *, deadline_s: float = float("inf"), rounds: int = 1) -> Counterexample | None:
    """Search the box for an output in one of the unsafe polytopes.

    Args:
        graph: network (float32 recommended), on the device to attack on.
        ort_model: the oracle that validates candidates.
        case: box and unsafe clauses.
        cfg: restarts/steps/step size.
        deadline_s: ``time.monotonic()`` deadline.
        rounds: how many rounds of restarts to run (fresh seeds each round).

    Returns:
        A validated counterexample, or None.
    """
    dev, dt = graph.device, graph.dtype
    lo = torch.as_tensor(case.lo_N, dtype=dt, device=dev)
    hi = torch.as_tensor(case.hi_N, dtype=dt, device=dev)
    width = hi - lo
    clauses = [k for k, c in enumerate(case.clauses)]
    for k in clauses:
        if len(case.clauses[k].b_K) == 0:  # the whole box is unsafe
            cex = validate(ort_model, case, (case.lo_N + case.hi_N) / 2)
            if cex is not None:
                return cex
    rows = [(k, torch.as_tensor(case.clauses[k].A_KM, dtype=dt, device=dev),
             torch.as_tensor(case.clauses[k].b_K, dtype=dt, device=dev)) for k in clauses
            if len(case.clauses[k].b_K)]
    if not rows:
        return None
    R = cfg.restarts
    for rnd in range(rounds):
        g = torch.Generator(device="cpu").manual_seed(cfg.seed + rnd)
        x = lo + width * torch.rand(len(rows) * R, len(lo), generator=g, dtype=dt).to(dev)
        if rnd == 0:
            x[::R] = (lo + hi) / 2
        if cfg.odi_steps:
            w = (torch.rand(len(x), int(torch.Size(graph.output_shape).numel()), generator=g, dtype=dt) * 2 - 1).to(dev)
            w[::R] = 0.0  # the first restart of every clause starts undiversified
            for _ in range(cfg.odi_steps):
                x.requires_grad_(True)
                y = graph.forward(x.reshape(len(x), *graph.input_shape)).reshape(len(x), -1)
                grad, = torch.autograd.grad((y * w).sum(), x)
                with torch.no_grad():
                    x = torch.minimum(torch.maximum(x + cfg.step_frac * width * grad.sign(), lo), hi)
        for t in range(cfg.steps):
            x.requires_grad_(True)
            y = graph.forward(x.reshape(len(x), *graph.input_shape)).reshape(len(x), -1)
            viol = torch.cat([((y[i * R:(i + 1) * R] @ A.T) - b).amax(1) for i, (k, A, b) in enumerate(rows)])
            hit = (viol <= 0).nonzero().flatten()
            for j in hit[:4].tolist():
                cex = validate(ort_model, case, x[j].detach().double().cpu().numpy())
                if cex is not None:
                    return cex
            if time.monotonic() > deadline_s:
                return None
            grad, = torch.autograd.grad(viol.sum(), x)
            step = cfg.step_frac * (1 - t / cfg.steps) * width
            with torch.no_grad():
                x = torch.minimum(torch.maximum(x - step * grad.sign(), lo), hi)
    return None
