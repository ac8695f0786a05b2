"""SLO guard state machine: transitions, fail-safe, and violations bounded in the twin."""

from __future__ import annotations

import math

import numpy as np

from gpufield.power.config import GuardConfig
from gpufield.power.controller import LaneController, LaneLimits, PairPolicy, raise_setting
from gpufield.power.guard import AtCalibrated, Fallback, Raised, SloGuard
from gpufield.power.scenario import load_scenario
from gpufield.power.twin.engine import simulate
from gpufield.power.twin.load import Workload
from gpufield.power.types import DEFAULT, Lane, LaneSetting, LaneSignals

CFG = GuardConfig(itl_p99_slo_s=0.05, ttft_p99_slo_s=2.0, dwell_s=60, relax_s=600, period_s=5)


def sig(t, itl_fast=0.02, itl_slow=0.02, **kw):
    return LaneSignals(now_s=t, itl_p99_fast_s=itl_fast, itl_p99_slow_s=itl_slow, **kw)


def test_fast_breach_twice_jumps_to_defaults_at_once():
    g = SloGuard(Lane.DECODE, CFG)
    assert isinstance(g.step(sig(0)), AtCalibrated)
    assert isinstance(g.step(sig(5, itl_fast=0.06)), AtCalibrated)  # one breach is not enough
    st = g.step(sig(10, itl_fast=0.06))
    assert isinstance(st, Fallback) and st.reason == "fast breach"


def test_slow_breach_steps_one_notch_and_respects_dwell():
    g = SloGuard(Lane.DECODE, CFG)
    g.step(sig(0))
    st = g.step(sig(65, itl_slow=0.046))  # > 0.9 SLO
    assert st == Raised(1, 65)
    assert g.step(sig(70, itl_slow=0.046)) == Raised(1, 65)  # dwell 60 s
    assert g.step(sig(125, itl_slow=0.046)) == Raised(2, 125)


def test_relax_needs_a_long_calm_and_goes_one_notch_at_a_time():
    g = SloGuard(Lane.DECODE, CFG)
    g.step(sig(0))
    g.step(sig(65, itl_slow=0.046))
    t = 70
    while t < 65 + 600:
        assert isinstance(g.step(sig(t, itl_fast=0.02, itl_slow=0.02)), Raised)
        t += 5
    assert isinstance(g.step(sig(t + 5)), AtCalibrated)


def test_failsafe_on_stale_telemetry_nvml_error_and_thermal():
    for kw in ({"telemetry_age_s": 16.0}, {"nvml_error": True}, {"thermal_slowdown": True}):
        g = SloGuard(Lane.DECODE, CFG)
        st = g.step(sig(0, **kw))
        assert isinstance(st, Fallback), kw


def test_decode_leading_indicators_queue_and_kv():
    g = SloGuard(Lane.DECODE, CFG)
    g.step(sig(0))
    assert isinstance(g.step(sig(60, queue_depth=3)), AtCalibrated)
    assert g.step(sig(70, queue_depth=3)).level == 1  # queued >= 10 s
    g2 = SloGuard(Lane.DECODE, CFG)
    g2.step(sig(0))
    assert isinstance(g2.step(sig(61, kv_usage=0.95)), Raised)
    g3 = SloGuard(Lane.PREFILL, CFG)  # a prefill queue alone is not an alarm
    g3.step(LaneSignals(now_s=0))
    assert isinstance(g3.step(LaneSignals(now_s=100, queue_depth=5, ttft_p99_fast_s=0.3)), AtCalibrated)


def test_notches_move_toward_defaults():
    lim = LaneLimits(default_limit_w=700, max_clock_mhz=1980, step_w=25, clock_step_mhz=90)
    cap = LaneSetting(power_limit_w=450.0)
    assert raise_setting(cap, 2, lim).power_limit_w == 500.0
    assert raise_setting(cap, 20, lim) == DEFAULT
    win = LaneSetting(clock_window_mhz=(900, 1200))
    assert raise_setting(win, 1, lim).clock_window_mhz == (990, 1290)


def _surge_workload(sc, seed=5):
    """Normal load with a 90 s surge at 4x the rate in the middle (a violation the calibrated point cannot hold)."""
    base = sc.workload(duration_s=240, seed=seed)
    surge = sc.workload(duration_s=90, rate_factor=4.0, seed=seed + 1)
    t = np.concatenate([base.arrival_s, surge.arrival_s + 90.0])
    order = np.argsort(t, kind="stable")
    h = base.hash_ids + tuple(tuple(x + 10**9 for x in hh) for hh in surge.hash_ids)
    return Workload(t[order], np.concatenate([base.input_tokens, surge.input_tokens])[order],
                    np.concatenate([base.output_tokens, surge.output_tokens])[order], tuple(h[i] for i in order))


def test_guard_never_lets_a_violation_persist_past_its_window_budget():
    sc = load_scenario("moe-agentic-b200")
    w = _surge_workload(sc)
    slo = 0.030  # tight ITL SLO so that the surge at a deep cap violates it
    g = GuardConfig(itl_p99_slo_s=slo, ttft_p99_slo_s=sc.slo.ttft_p99_s, period_s=5.0)
    lim = LaneLimits(default_limit_w=sc.gpu.tdp_w, max_clock_mhz=sc.gpu.sm_clock_max_mhz, step_w=50,
                     clock_step_mhz=90)
    deep = LaneSetting(power_limit_w=420.0, label="deep cap")
    unguarded = simulate(sc.lane_pair(), w, PairPolicy(LaneController(Lane.PREFILL, DEFAULT, lim, None),
                                                       LaneController(Lane.DECODE, deep, lim, None)), window_s=10.0)
    guarded = simulate(sc.lane_pair(), w, PairPolicy(LaneController(Lane.PREFILL, DEFAULT, lim, g),
                                                     LaneController(Lane.DECODE, deep, lim, g)), window_s=10.0)

    def longest_run(r):
        bad = r.itl_p99_windows(min_tokens=50) > slo
        run = best = 0
        for b in bad:
            run = run + 1 if b else 0
            best = max(best, run)
        return best
    assert longest_run(unguarded) >= 5  # the surge really violates without the guard (>= 50 s)
    # budget: the fast window (30 s) + fast_breaches periods (10 s) to detect, one 10 s window to clear
    budget_windows = math.ceil((30 + g.fast_breaches * g.period_s) / 10) + 1
    assert longest_run(guarded) <= budget_windows
    assert any(s.is_default for _t, lane, s in guarded.settings if lane == "decode")


def test_fallback_recovers_to_the_top_notch_after_a_calm_period():
    g = SloGuard(Lane.DECODE, CFG)
    g.step(sig(0, itl_fast=0.06))
    assert isinstance(g.step(sig(5, itl_fast=0.06)), Fallback)
    t = 10
    while t < 10 + CFG.recover_s:
        assert isinstance(g.step(sig(t)), Fallback)
        t += 5
    assert g.step(sig(t)) == Raised(CFG.max_level, t)
