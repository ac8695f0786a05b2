"""Calibration: knee under noise, decode cap placement and gate, prefill floor and queueing formulas."""

from __future__ import annotations

import math

import numpy as np
import pytest

from gpufield.power.calibrate.decode import GateResult, SweepPoint, calibrate_decode
from gpufield.power.calibrate.knee import fit_knee
from gpufield.power.calibrate.prefill import (
    PrefillPoint,
    calibrate_prefill,
    md1_wait_s,
    mm1_wait_p99_s,
)
from gpufield.power.config import CalibrationConfig
from gpufield.power.types import LaneSetting

STEP = 25.0


@pytest.mark.parametrize("seed", range(5))
def test_knee_recovers_a_synthetic_cliff_within_one_step_under_2pct_noise(seed):
    rng = np.random.default_rng(seed)
    cliff = 475.0
    caps = np.arange(700.0, 199.0, -STEP)
    t = np.where(caps >= cliff, 1.0, 1.0 - (cliff - caps) * 0.003)
    x = np.concatenate([caps, caps])
    y = np.concatenate([t, t]) * np.exp(rng.normal(0, 0.02, 2 * len(caps)))
    k = fit_knee(x, y, n_boot=100, seed=seed)
    assert abs(k.knee - cliff) <= STEP
    assert k.ci_low - STEP <= cliff <= k.ci_high + STEP


def _synthetic_lane(cliff_w: float, noise: float, seed: int):
    """A decode lane whose throughput is flat above ``cliff_w`` and falls 0.4%/W below it."""
    rng = np.random.default_rng(seed)

    def thr(s: LaneSetting) -> float:
        cap = s.power_limit_w or 700.0
        if s.clock_window_mhz is not None:  # clock locks: flat above 1200 MHz
            f = s.clock_window_mhz[1]
            return 1000.0 * min(1.0, 1 - (1200 - f) * 0.001) if f < 1200 else 1000.0
        return 1000.0 * (1.0 if cap >= cliff_w else 1 - (cliff_w - cap) * 0.004)

    def power(s: LaneSetting) -> float:
        cap = s.power_limit_w or 700.0
        natural = 650.0 if s.clock_window_mhz is None else 300 + 0.25 * s.clock_window_mhz[1]
        return min(cap, natural)

    def measure(s: LaneSetting) -> SweepPoint:
        t = thr(s) * math.exp(rng.normal(0, noise))
        p = power(s) * math.exp(rng.normal(0, noise))
        itl = 0.02 * 1000.0 / thr(s)
        return SweepPoint(x=math.nan, setting=s, throughput_tok_s=t, itl_p50_s=itl * 0.9, itl_p99_s=itl,
                          power_w=p, j_per_token=p / t)

    def gate(s: LaneSetting) -> GateResult:
        return GateResult(itl_p99_s=0.02 * 1000.0 / thr(s), e2e_mean_s=5.0 * 1000.0 / thr(s))
    return measure, gate


@pytest.mark.parametrize("seed", range(4))
def test_decode_cap_lands_at_cliff_plus_margin_within_one_step(seed):
    cliff = 450.0
    measure, gate = _synthetic_lane(cliff, 0.02, seed)
    cfg = CalibrationConfig(step_w=STEP, n_boot=100)
    res = calibrate_decode(measure=measure, gate=gate, default_limit_w=700.0, min_limit_w=200.0,
                           sm_clocks_mhz=list(range(1980, 344, -15)), slo_itl_p99_s=0.05, cfg=cfg)
    cap = {f.family: f for f in res.families}["power_cap"]
    margin = cfg.margin_for(700.0)  # max(25 W, 5% of 700 W) = 35 W
    assert cap.chosen is not None
    assert abs(cap.chosen_x - (cliff + margin)) <= STEP + 1e-9
    assert res.best.family == "power_cap"  # the cap beats clock locks on this lane


def test_gate_raises_the_cap_until_latency_fits():
    cliff = 450.0
    measure, _gate = _synthetic_lane(cliff, 0.0, 0)
    calls = []

    def strict_gate(s: LaneSetting) -> GateResult:  # peak load needs >= 575 W
        calls.append(s.power_limit_w)
        ok = (s.power_limit_w or 700.0) >= 575.0
        return GateResult(itl_p99_s=0.02 if ok else 0.2, e2e_mean_s=5.0)

    res = calibrate_decode(measure=measure, gate=strict_gate, default_limit_w=700.0, min_limit_w=200.0,
                           sm_clocks_mhz=[1980, 1500], slo_itl_p99_s=0.05,
                           cfg=CalibrationConfig(step_w=STEP, n_boot=50))
    cap = {f.family: f for f in res.families}["power_cap"]
    assert cap.chosen_x == 575.0 and cap.gate_tries >= 3


def test_queueing_formulas_against_a_simulated_queue():
    rng = np.random.default_rng(1)
    lam, s = 2.0, 0.3
    n = 200_000
    arr = np.cumsum(rng.exponential(1 / lam, n))
    # Lindley recursion, deterministic service (M/D/1) and exponential service (M/M/1)
    for service, check in ((np.full(n, s), "md1"), (rng.exponential(s, n), "mm1")):
        w = np.zeros(n)
        for i in range(1, n):
            w[i] = max(0.0, w[i - 1] + service[i - 1] - (arr[i] - arr[i - 1]))
        if check == "md1":
            assert w.mean() == pytest.approx(md1_wait_s(lam, s), rel=0.05)
        else:
            assert np.percentile(w, 99) == pytest.approx(mm1_wait_p99_s(lam, s), rel=0.05)
    assert math.isinf(md1_wait_s(4.0, 0.3))


def test_prefill_floor_meets_budget_and_refuses_an_unenforceable_floor():
    fmax = 1980
    clocks = list(range(1980, 344, -15))

    def measure(f: int) -> PrefillPoint:
        t = 0.2 * (fmax / f)  # beta = 1
        return PrefillPoint(clock_mhz=f, service_mean_s=t, service_p99_s=2 * t,
                            j_per_token=0.05 + 1e-5 * abs(f - 1200), power_peak_w=200 + 0.3 * f, held=True)

    kw = dict(measure=measure, sm_clocks_mhz=clocks, clock_step_mhz=90, peak_rate_per_s=1.0, instances=1,
              ttft_p99_slo_s=2.0, headroom=0.1, kv_transfer_p99_s=0.05, first_decode_s=0.03)
    res = calibrate_prefill(enforced_limit_w=700.0, **kw)
    assert res.beta == pytest.approx(1.0, abs=1e-6)
    lo, hi = res.setting.clock_window_mhz
    budget = 0.9 * 2.0 - 0.05 - 0.03

    def need(f):
        t = 0.2 * fmax / f
        return 2 * t + mm1_wait_p99_s(1.0, t)
    assert need(lo) <= budget and need(lo - 15) > budget  # lowest supported clock meeting the budget
    assert hi >= lo
    # a board that cannot hold the floor under its limit keeps the default, with the reason
    res2 = calibrate_prefill(enforced_limit_w=400.0, **kw)
    assert res2.setting.is_default and "not enforceable" in res2.reason


def test_efficiency_descends_past_the_cliff_only_while_the_gate_holds():
    from gpufield.power.config import mode_calibration
    from gpufield.power.types import Mode

    measure, _ = _synthetic_lane(450.0, 0.0, 0)

    def run(gate_floor_w: float):
        def gate(s: LaneSetting) -> GateResult:  # the latency budget holds down to gate_floor_w
            cap = s.power_limit_w or 700.0
            return GateResult(itl_p99_s=0.02 if cap >= gate_floor_w else 0.2, e2e_mean_s=5.0)
        kw = dict(measure=measure, gate=gate, default_limit_w=700.0, min_limit_w=200.0,
                  sm_clocks_mhz=[1980, 1500], slo_itl_p99_s=0.05)
        bal = calibrate_decode(cfg=CalibrationConfig(step_w=STEP, n_boot=50), **kw)
        eff = calibrate_decode(cfg=mode_calibration(Mode.EFFICIENCY, CalibrationConfig(step_w=STEP, n_boot=50)), **kw)
        return ({f.family: f for f in bal.families}["power_cap"], {f.family: f for f in eff.families}["power_cap"])

    cb, ce = run(300.0)
    assert cb.chosen_x == 500.0  # balanced: cliff 450 + max(25, 35) W = 485 -> next grid step
    # efficiency: margin one step (475), then descends to the end of the flat part (the cliff) and
    # never below it
    assert ce.chosen_x == 450.0 and ce.j_per_token < cb.j_per_token
    cb, ce = run(460.0)
    assert ce.chosen_x == 475.0  # here the gate, not the flat part, stops the descent


@pytest.mark.parametrize("seed", range(4))
def test_knee_of_a_step_cliff_lies_between_the_last_flat_and_the_first_dropped_value(seed):
    # an HBM-state drop is a step: -11% at once, then level
    rng = np.random.default_rng(seed)
    x = np.arange(1965.0, 700.0, -90.0)
    t = np.where(x >= 930, 1.0, 0.89)
    xx = np.concatenate([x, x])
    k = fit_knee(xx, np.concatenate([t, t]) * np.exp(rng.normal(0, 0.02, 2 * len(x))), n_boot=100, seed=seed)
    assert 885 <= k.knee <= 975 and k.step < -0.05


def _step_lane(noise: float, seed: int):
    """Decode lane with a *step* cliff under SM-clock ceilings (flat >= 975 MHz, -11% below, then a
    compute-bound decline below 700 MHz), as the twin's HBM gate produces."""
    rng = np.random.default_rng(seed)

    def thr(s: LaneSetting) -> float:
        if s.clock_window_mhz is None:
            return 1000.0 if (s.power_limit_w or 700.0) >= 300 else 500.0
        f = s.clock_window_mhz[1]
        return 1000.0 * (1.0 if f >= 930 else 0.89 if f >= 700 else 0.89 - (700 - f) * 0.0012)

    def measure(s: LaneSetting) -> SweepPoint:
        t = thr(s) * math.exp(rng.normal(0, noise))
        f = s.clock_window_mhz[1] if s.clock_window_mhz else 1980
        p = (150 + 0.3 * f) * math.exp(rng.normal(0, noise))
        return SweepPoint(x=math.nan, setting=s, throughput_tok_s=t, itl_p50_s=0.01, itl_p99_s=10.0 / thr(s),
                          power_w=p, j_per_token=p / t)

    def gate(s: LaneSetting) -> GateResult:
        return GateResult(itl_p99_s=10.0 / thr(s), e2e_mean_s=5.0 * 1000.0 / thr(s))
    return measure, gate


@pytest.mark.parametrize("seed", range(3))
def test_clock_ceiling_over_a_step_cliff_lands_one_margin_above_the_flat_part(seed):
    # fitted over the whole tail, a two-segment knee sat inside the flat part and the ceiling landed
    # two steps above the flat part's end; the knee now comes from the flat part and the first two
    # values past it
    measure, gate = _step_lane(0.02, seed)
    cfg = CalibrationConfig(step_w=STEP, clock_step_mhz=90, n_boot=100)
    clocks = list(range(1965, 344, -15))
    res = calibrate_decode(measure=measure, gate=gate, default_limit_w=700.0, min_limit_w=200.0,
                           sm_clocks_mhz=clocks, slo_itl_p99_s=0.05, cfg=cfg)
    fam = {f.family: f for f in res.families}["clock_lock"]
    assert fam.flat_min == 975
    assert fam.knee is not None and 885 <= fam.knee.knee <= fam.flat_min
    # flat part + margin = 1065 MHz; the knee's bootstrap interval may add up to one sweep step
    assert 1065 <= fam.chosen_x <= 1155


@pytest.mark.parametrize("seed", range(4))
def test_prefill_window_top_is_the_smoothed_sweet_spot_not_a_noisy_point(seed):
    rng = np.random.default_rng(seed)
    fmax = 1965
    clocks = list(range(1965, 164, -15))

    def j_true(f: float, f_sweet: float) -> float:  # U-shaped energy per token, minimum at f_sweet
        return 0.12 * (1 + 1.5 * ((f - f_sweet) / 1000.0) ** 2)

    def run(f_sweet: float, low_at: int | None):
        def measure(f: int) -> PrefillPoint:
            j = j_true(f, f_sweet) * math.exp(rng.normal(0, 0.02)) * (0.95 if f == low_at else 1.0)
            t = 0.18 * fmax / f
            return PrefillPoint(clock_mhz=f, service_mean_s=t, service_p99_s=2 * t, j_per_token=j,
                                power_peak_w=200 + 0.2 * f, held=True)
        return calibrate_prefill(measure=measure, sm_clocks_mhz=clocks, clock_step_mhz=90, peak_rate_per_s=1.0,
                                 instances=4, ttft_p99_slo_s=2.0, headroom=0.1, kv_transfer_p99_s=0.05,
                                 first_decode_s=0.03, enforced_limit_w=700.0)
    # sweet spot below the floor, one point above the floor reading 5% low: the window is a lock
    res = run(450.0, low_at=1155)
    lo, hi = res.setting.clock_window_mhz
    assert 900 < lo < 1155 and hi == lo  # (a pointwise "within 2% of the minimum" gave >= 1155)
    # sweet spot above the floor: the top is within two sweep steps of it (the curve rises only
    # 1.5% over +-100 MHz there, about the smoothed curve's noise)
    res = run(1500.0, low_at=None)
    lo, hi = res.setting.clock_window_mhz
    assert lo < 1500 and abs(hi - 1500) <= 180
