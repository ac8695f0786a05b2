"""Fit the twin's GPU power model (twin.gpu) to read-only power probes (benchmarks/power_twin_probe.py).

Inputs per probe case (all measured or counted by the probe, none assumed): mean board power (the NVML
energy counter over the steady window; the median of the 50 ms power samples where a run has no
counter), median SM clock ``f``, counted FLOP/s, HBM bytes/s and kernel launches/s. The model's inputs
follow (twin.gpu docstring)::

    a_c = FLOP/s / (bf16_flops_per_clock * f),   a_m = bytes/s / hbm_bandwidth_bytes_per_s,   L = launches/s
    b   = 1 (kernels back to back: GEMM, decode, copy),   0 (launch-bound: the SMs idle between
          launches; what the short kernels draw is counted per launch in P_launch)

Fit, in two steps, on the cases the probe's docstring marks ``fit`` (``held_out`` cases are only
predicted); several runs (boards) are fitted together through :func:`merge_probes`:

1. ``P_ctx(f)`` from the idle cases with a live CUDA context (``idle_ctx``, ``idle_post``): a line
   through their (mean clock, mean power) points when their clocks span >= 200 MHz; otherwise the
   observed end is their mean and the other end is ``idle_pre`` (no context; the mean over runs)
   when that sits at the other end of the clock range, else the base model's value (stated in
   ``notes``). ``idle_hold_s``: how long the clock stayed up in the fit idle cases with context.
2. ``P_busy``, ``P_sm``, ``P_mem``, ``P_launch`` by non-negative least squares on the loaded fit
   cases, rows weighted by 1/P (the target is relative error)::

       P - P_ctx(f) = P_busy * b g(f) + P_sm * a_c g(f) + P_mem * a_m (s_h r_m + s_p g(f)) + P_launch * g(f) L / 1e5

   At default settings memory-bound cases leave the top clock only when they are also cap-bound and
   compute-heavy (large decode batches), which confounds the split of the memory power between the
   memory clock (``s_h``) and the SM clock (``s_p``) with ``P_sm``; the split is kept from the base
   model (its source: the Illusion paper's clock-locking bound) and only the total ``P_mem`` is
   fitted. ``stream_sm_activity`` is folded into ``P_path`` (set to 0).

The voltage curve ``V(f)`` is kept ([RECON]): default-settings data see only the cap-bound clocks and
the top clock, and fitting it overfits (benchmarks/power_RESULTS.md section 6).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from gpufield.power.twin.gpu import LAUNCH_REF_PER_S, GpuModel

__all__ = ["CasePrediction", "PowerFit", "fit_power_model", "merge_probes", "regime_of", "case_inputs", "case_busy",
           "case_power_w"]

_REGIMES = (("idle_pre", "idle_no_ctx"), ("idle", "idle"), ("gemm", "prefill_gemm"),
            ("decode", "decode_hbm"), ("launch", "launch_bound"), ("copy", "copy"))


def merge_probes(probes: dict[str, dict]) -> dict:
    """Several probe runs (e.g. two H200 boards) as one probe for :func:`fit_power_model`.

    Args:
        probes: ``{label: parsed power_twin_probe.json}``.

    Returns:
        A probe whose cases are named ``"<case>@<label>"`` (splits kept), with each run's times shifted
        by 1e7 s times its position so windows of different runs (different monotonic clocks) never
        overlap.
    """
    cases, samples = [], []
    for i, (label, pr) in enumerate(probes.items()):
        off = 1e7 * i
        for c in pr["cases"]:
            c = {**c, "name": f"{c['name']}@{label}"}
            if "nvml" in c:
                c["nvml"] = {**c["nvml"], "t0_s": c["nvml"]["t0_s"] + off, "t1_s": c["nvml"]["t1_s"] + off}
            cases.append(c)
        samples.extend({**x, "t_s": x["t_s"] + off} for x in pr.get("samples", []))
    return {"meta": {"merged": list(probes)}, "cases": cases, "samples": samples}


def regime_of(name: str) -> str:
    """Regime of a probe case by its name prefix (``gemm_4096`` -> ``prefill_gemm``).

    Raises:
        ValueError: a name with no known prefix.
    """
    for prefix, regime in _REGIMES:
        if name.startswith(prefix):
            return regime
    raise ValueError(f"probe case {name!r} has no known regime prefix {[p for p, _ in _REGIMES]}")


def case_power_w(case: dict) -> float:
    """Measured mean power of a case (W): energy counter over the window, else the sample median.

    Raises:
        ValueError: the case has neither.
    """
    v = case["nvml"]
    p = v.get("power_w_energy") if v.get("power_w_energy") is not None else v.get("power_w_median")
    if p is None:
        raise ValueError(f"probe case {case['name']}: no power reading")
    return float(p)


def case_busy(case: dict) -> float:
    """Busy fraction ``b`` of a case (module docstring): 0 for idle and launch-bound cases, else 1."""
    return 0.0 if regime_of(case["name"]) in ("idle", "idle_no_ctx", "launch_bound") else 1.0


def case_inputs(case: dict, gpu: GpuModel) -> tuple[float, float, float, float]:
    """``(f_mhz, a_c, a_m, launches_per_s)`` of a probe case for the GPU model (module docstring).

    Raises:
        ValueError: no SM clock reading in the case's window.
    """
    f = case["nvml"].get("sm_clock_mhz_median")
    if f is None:
        raise ValueError(f"probe case {case['name']}: no SM clock reading")
    f = float(f)
    a_c = float(case["flop_per_s"]) / (gpu.bf16_flops_per_clock * f * 1e6)
    a_m = float(case["hbm_bytes_per_s"]) / gpu.hbm_bandwidth_bytes_per_s
    return f, a_c, a_m, float(case["launches_per_s"])


@dataclass(frozen=True, kw_only=True, slots=True)
class CasePrediction:
    """One probe case, measured against the fitted model.

    Attributes:
        name / regime / split: the case, its regime (:func:`regime_of`), ``fit`` or ``held_out``.
        clock_mhz: median SM clock of the window; measured_w / predicted_w: mean power (W) at it.
        rel_err: ``predicted / measured - 1``. a_c, a_m, launches_per_s: the model inputs.
    """

    name: str
    regime: str
    split: str
    clock_mhz: float
    measured_w: float
    predicted_w: float
    rel_err: float
    a_c: float
    a_m: float
    launches_per_s: float


@dataclass(frozen=True, kw_only=True, slots=True)
class PowerFit:
    """Result of :func:`fit_power_model`.

    Attributes:
        model: the base model with the fitted parameters replaced.
        params: the fitted values by :class:`GpuModel` field name.
        cases: every usable probe case with its prediction.
        notes: what the fit had to assume, in words.
    """

    model: GpuModel
    params: dict
    cases: tuple[CasePrediction, ...]
    notes: tuple[str, ...]

    def regime_errors(self, split: str) -> dict[str, dict]:
        """Per regime: ``n``, ``max_abs_rel_err``, ``mean_abs_rel_err`` and ``{case: rel_err}``."""
        out: dict[str, dict] = {}
        for c in self.cases:
            if c.split == split:
                out.setdefault(c.regime, {"cases": {}})["cases"][c.name] = c.rel_err
        for r in out.values():
            e = np.abs(list(r["cases"].values()))
            r.update(n=len(e), max_abs_rel_err=float(e.max()), mean_abs_rel_err=float(e.mean()))
        return out


def _window_clocks(probe: dict, case: dict) -> np.ndarray:
    t0, t1 = case["nvml"]["t0_s"], case["nvml"]["t1_s"]
    f = [s["sm_clock_mhz"] for s in probe.get("samples", []) if t0 <= s["t_s"] <= t1 and s["sm_clock_mhz"] is not None]
    return np.asarray(f if f else [case["nvml"]["sm_clock_mhz_median"]], dtype=float)


def _hold_s(probe: dict, case: dict, f_max: float) -> float | None:
    """Seconds from the window start until the clock first leaves the top (None: never in the window)."""
    t0, t1 = case["nvml"]["t0_s"], case["nvml"]["t1_s"]
    for s in probe.get("samples", []):
        if t0 <= s["t_s"] <= t1 and s["sm_clock_mhz"] is not None and s["sm_clock_mhz"] < f_max - 100:
            return float(s["t_s"] - t0)
    return None


def _nnls(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Non-negative least squares by an active set (a handful of columns)."""
    free = list(range(x.shape[1]))
    coef = np.zeros(x.shape[1])
    while free:
        sol, *_ = np.linalg.lstsq(x[:, free], y, rcond=None)
        if (sol >= 0).all():
            coef[:] = 0.0
            coef[free] = sol
            return coef
        free.pop(int(np.argmin(sol)))
    return coef


def fit_power_model(probe: dict, base: GpuModel) -> PowerFit:
    """Fit the power terms of ``base`` to a probe's ``fit`` cases; predict every case.

    Args:
        probe: parsed ``power_twin_probe.json`` (keys ``cases``, ``samples``).
        base: the SKU's model; clocks, limits, peak rates and the voltage curve are kept.

    Returns:
        The :class:`PowerFit` (fitted model, parameters, per-case predictions, notes).

    Raises:
        ValueError: fewer than 3 usable loaded fit cases, or no idle case with a context in the fit.
    """
    cases = [c for c in probe["cases"] if "skipped" not in c and c.get("nvml", {}).get("n_samples", 0) >= 2]
    fit = [c for c in cases if c["split"] == "fit"]
    notes: list[str] = []
    f_lo, f_hi = float(base.sm_clock_min_mhz), float(base.sm_clock_max_mhz)
    # 1. idle with a live context
    idle = [c for c in fit if regime_of(c["name"]) == "idle"]
    if not idle:
        raise ValueError("the probe has no idle case with a CUDA context in its fit set")
    fi = np.array([_window_clocks(probe, c).mean() for c in idle])
    pi = np.array([case_power_w(c) for c in idle])
    pre = [c for c in fit if regime_of(c["name"]) == "idle_no_ctx"]
    idle_w = float(np.mean([case_power_w(c) for c in pre])) if pre else base.idle_w
    if np.ptp(fi) >= 200:
        slope, icpt = np.polyfit(fi, pi, 1)
        p_lo, p_hi = icpt + slope * f_lo, icpt + slope * f_hi
    elif fi.mean() > (f_lo + f_hi) / 2:
        p_hi = float(pi.mean())
        pre_f = float(np.median([c["nvml"]["sm_clock_mhz_median"] for c in pre])) if pre else None
        if pre_f is not None and pre_f < f_lo + 100:
            p_lo = idle_w
            notes.append(f"idle with context seen only near the top clock ({fi.mean():.0f} MHz): the parked "
                         f"end of P_ctx is idle_pre (no context, {pre_f:.0f} MHz, {idle_w:.1f} W)")
        else:
            p_lo = base.idle_ctx_w
            notes.append("idle with context seen only near the top clock: parked end kept from the base model")
    else:
        p_lo = float(pi.mean())
        p_hi = base.idle_max_clock_w
        notes.append(f"idle with context seen only parked ({fi.mean():.0f} MHz): P_ctx(f_max) kept from the base model")
    holds = [_hold_s(probe, c, f_hi) for c in idle if _window_clocks(probe, c).max() >= f_hi - 100]
    if holds and all(h is None for h in holds):
        hold = 1e9
        notes.append("the clock never left the top in the fit idle cases with context: idle_hold_s = 1e9 (never parks)")
    elif holds:
        hold = float(min(h for h in holds if h is not None))
    else:
        hold = 0.0
        notes.append("the fit idle cases with context were parked from their start: idle_hold_s = 0")
    m0 = dataclasses.replace(base, idle_w=float(idle_w), idle_ctx_w=float(p_lo), idle_max_clock_w=float(p_hi),
                             idle_hold_s=hold, stream_sm_activity=0.0)
    # 2. dynamic terms
    mem_sum = base.hbm_w + base.mem_path_sm_w
    s_h, s_p = base.hbm_w / mem_sum, base.mem_path_sm_w / mem_sum
    loaded = [c for c in fit if regime_of(c["name"]) not in ("idle", "idle_no_ctx")]
    if len(loaded) < 3:
        raise ValueError(f"need >= 3 loaded fit cases, the probe has {len(loaded)}")
    rows, ys, ws = [], [], []
    for c in loaded:
        f, a_c, a_m, lam = case_inputs(c, m0)
        g = float(m0.voltage_scale(f))
        p = case_power_w(c)
        rows.append([case_busy(c) * g, a_c * g, a_m * (s_h + s_p * g), g * lam / LAUNCH_REF_PER_S])
        ys.append(p - float(m0.idle_power_w(f)))
        ws.append(1.0 / p)
    w = np.asarray(ws)[:, None]
    p_busy, p_sm, p_mem, p_launch = _nnls(np.asarray(rows) * w, np.asarray(ys) * w[:, 0])
    gemm = [c for c in fit if regime_of(c["name"]) == "prefill_gemm"]
    big = max(gemm, key=lambda c: c["flop_per_s"]) if gemm else None
    params = {"idle_w": float(idle_w), "idle_ctx_w": float(p_lo), "idle_max_clock_w": float(p_hi), "idle_hold_s": hold,
              "busy_w": float(p_busy), "sm_dynamic_w": float(p_sm), "hbm_w": float(p_mem * s_h), "mem_path_sm_w": float(p_mem * s_p),
              "launch_w": float(p_launch), "stream_sm_activity": 0.0,
              "gemm_mem_activity": float(case_inputs(big, m0)[2]) if big else base.gemm_mem_activity}
    model = dataclasses.replace(m0, **params)
    preds = []
    for c in cases:
        regime = regime_of(c["name"])
        p = case_power_w(c)
        f, a_c, a_m, lam = case_inputs(c, model)
        if regime == "idle_no_ctx":
            q = model.idle_w
        elif regime == "idle":  # the clock moves in an idle window: average the model over its samples
            q = float(np.mean(model.idle_power_w(_window_clocks(probe, c))))
        else:
            q = float(model.power_w(f, 0, a_c, a_m, lam, busy=case_busy(c)))
        preds.append(CasePrediction(name=c["name"], regime=regime, split=c["split"], clock_mhz=f, measured_w=p,
                                    predicted_w=q, rel_err=q / p - 1.0, a_c=a_c, a_m=a_m, launches_per_s=lam))
    return PowerFit(model=model, params=params, cases=tuple(preds), notes=tuple(notes))
