"""The twin's oracle searches only settings an actuator accepts, and its two arms have distinct names."""

from __future__ import annotations

import pytest

from gpufield.power.ab import _ORACLE_CACHE, _oracle, _oracle_grid
from gpufield.power.config import CalibrationConfig
from gpufield.power.controller import static_policy
from gpufield.power.scenario import load_scenario
from gpufield.power.twin.engine import simulate
from gpufield.power.types import MIN_CLOCK_TOP_FRAC, GpuCaps, LaneSetting


@pytest.mark.parametrize("name", ["moe-agentic-b200", "dense-agentic-b200"])
def test_every_oracle_candidate_is_a_window_the_actuators_accept(name):
    sc = load_scenario(name)
    g = sc.gpu
    caps = GpuCaps(uuid="GPU-twin", name=g.name, min_limit_w=g.min_limit_w, max_limit_w=g.max_limit_w,
                   default_limit_w=g.tdp_w, sm_clocks_mhz=tuple(int(c) for c in g.sm_clocks_mhz),
                   mem_clocks_mhz=tuple(g.mem_clocks_mhz))
    decs, pres = _oracle_grid(sc, CalibrationConfig(step_w=50.0))
    wins = [s.clock_window_mhz for s in decs + pres if s.clock_window_mhz]
    assert wins
    for lo, hi in wins:
        assert caps.check_window(lo, hi) == (lo, hi)  # raises for a window the actuators refuse
    lowest_prefill = min(s.clock_window_mhz[1] for s in pres if s.clock_window_mhz)
    assert lowest_prefill >= MIN_CLOCK_TOP_FRAC * g.sm_clock_max_mhz
    assert lowest_prefill > 435  # the B200 oracle used to lock prefill at 435 MHz


def test_the_two_oracle_arms_are_named_apart():
    sc = load_scenario("dense-agentic-b200")
    w = sc.workload(duration_s=40)
    cfg = CalibrationConfig(step_w=300.0, clock_step_mhz=500.0)
    d = LaneSetting()
    ref = simulate(sc.lane_pair(), w, static_policy(d, d))
    try:
        with_budget, _ = _oracle(sc, w, cfg, ref, 0.05)
        slo_only, _ = _oracle(sc, w, cfg, ref, None)
    finally:
        _ORACLE_CACHE.clear()  # as simulate_ab does: the cache must not outlive the search
    assert with_budget is not None and slo_only is not None
    assert (with_budget.name, slo_only.name) == ("oracle", "oracle-slo-only")
