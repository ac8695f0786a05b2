"""A/B on a short horizon, the CLI, twin invariants, and a shadow run against the spy NVML."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest

from gpufield.cli import main
from gpufield.power.ab import simulate_ab
from gpufield.power.config import GuardConfig
from gpufield.power.controller import LaneLimits, static_policy
from gpufield.power.scenario import load_scenario
from gpufield.power.shadow import (
    LatencyWindowSource,
    attest,
    attestation_unchanged,
    run_shadow,
    shadow_plan,
)
from gpufield.power.twin.engine import simulate
from gpufield.power.twin.gpu import load_gpu_model
from gpufield.power.types import Lane, LaneSetting
from gpufield.testing import FakeNvml, h200


@pytest.fixture(scope="module")
def short_ab():
    sc = load_scenario("moe-agentic-b200")
    return simulate_ab(sc, duration_s=150, oracle=False, efficiency=False, bench_kw={"gate_s": 90.0, "warmup_s": 60.0})


def test_short_ab_balanced_saves_energy_within_slo(short_ab):
    d, b = short_ab.arm("default"), short_ab.arm("balanced")
    assert b.tokens_per_j > d.tokens_per_j * 1.10
    assert b.itl_slo_every_window and b.ttft_slo_met
    assert b.e2e_mean_s <= d.e2e_mean_s * 1.10
    assert d.output_tokens == pytest.approx(b.output_tokens)  # same trace, all requests served
    js = short_ab.to_dict()
    assert js["arms"][0]["tokens_per_j_vs_default"] == 0.0 and "calibration" in js


def test_twin_energy_is_power_times_time_and_idle_is_counted():
    sc = load_scenario("moe-agentic-b200")
    w = sc.workload(duration_s=60)
    r = simulate(sc.lane_pair(), w, static_policy(LaneSetting(), LaneSetting()))
    assert r.energy_windows_j.sum() == pytest.approx(r.energy_j, rel=1e-9)
    n = sc.n_gpus
    # the lane pair never draws less than 8 idle GPUs nor more than 8 at TDP, on average
    assert n * sc.gpu.idle_w * r.end_s < r.energy_j < n * sc.gpu.tdp_w * r.end_s
    # a lower decode cap can only lower decode energy per token (flat memory-bound power)
    r2 = simulate(sc.lane_pair(), w, static_policy(LaneSetting(), LaneSetting(power_limit_w=500.0)))
    assert r2.decode_energy_j < r.decode_energy_j
    # the prefill lane does not depend on the decode policy; only its idle energy up to the run's end
    # (the last decode token) moves with the end. With a live context the idle clock does not park
    # (H200 probe, twin.fit), so that idle power lies between P_ctx at the lowest and the top clock.
    n_pre, d_end = sc.lanes["prefill_gpus"], r2.end_s - r.end_s
    lo, hi = sorted((n_pre * sc.gpu.idle_ctx_w * d_end, n_pre * sc.gpu.idle_max_clock_w * d_end))
    assert lo - 1e-6 <= r2.prefill_energy_j - r.prefill_energy_j <= hi + 1e-6


def test_cli_lists_and_simulates_json(capsys):
    assert main(["power", "scenarios"]) == 0
    assert "moe-agentic-b200" in capsys.readouterr().out
    assert main(["power", "simulate", "nope"]) == 2
    rc = main(["power", "simulate", "dense-agentic-b200", "--json", "--duration", "60", "--no-oracle",
               "--no-efficiency"])
    assert rc == 0
    d = json.loads(capsys.readouterr().out)
    assert [a["name"] for a in d["arms"]] == ["default", "vendor-maxq", "static-clock-lock", "static-cap", "balanced"]


def test_shadow_run_on_spy_nvml_logs_intents_and_leaves_the_gpu_untouched(tmp_path):
    spy = FakeNvml.spy([h200(0)], clock=time.monotonic)
    spy.nvmlInit()
    before = attest(spy)
    plan = shadow_plan(load_gpu_model("H200"))
    src = LatencyWindowSource(fast_s=1.0, slow_s=5.0)
    for _ in range(50):
        src.record(Lane.DECODE, 0.02, 8)
    g = GuardConfig(itl_p99_slo_s=0.05, ttft_p99_slo_s=1.0, period_s=0.05)
    lim = LaneLimits(default_limit_w=700, max_clock_mhz=1980, step_w=25, clock_step_mhz=90)
    ticks, intents = run_shadow(nvml=spy, lane=Lane.DECODE, setting=plan[Lane.DECODE], guard=g, limits=lim,
                                source=src, duration_s=0.3, period_s=0.05, log_path=str(tmp_path / "i.jsonl"))
    ok, diffs = attestation_unchanged(before, attest(spy))
    assert ok, diffs
    assert spy.setter_calls == []
    assert intents and intents[0]["action"] == "power_limit" and intents[0]["value"] == plan[Lane.DECODE].power_limit_w
    assert len(ticks) >= 3 and all(t.duration_s < 0.05 for t in ticks)


def test_shadow_plan_for_h200_sits_between_the_memory_floor_and_the_gemm_clock():
    m = load_gpu_model("H200")
    plan = shadow_plan(m)
    cap = plan[Lane.DECODE].power_limit_w
    assert m.min_limit_w < cap < m.tdp_w
    lo, hi = plan[Lane.PREFILL].clock_window_mhz
    assert lo <= hi and abs(hi - 1470) <= 15  # the probe's cap-bound GEMM clock


def test_attestation_flags_a_gpu_left_changed():
    nv = FakeNvml([h200(0, power_limit_mw=500_000)])
    nv.nvmlInit()
    a = attest(nv)
    ok, diffs = attestation_unchanged(a, a)
    assert not ok and "enforced 500.0 W != default 700.0 W" in diffs[0]
    assert np.isfinite(a[next(iter(a))]["sm_clock_mhz"])


def test_shadow_path_imports_without_simpy_duckdb_scipy():
    # the H200 shadow host has torch, nvidia-ml-py, numpy, httpx, rich; no simpy and no duckdb
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    code = ("import sys\nfor m in ('simpy', 'duckdb', 'scipy', 'pyarrow'): sys.modules[m] = None\n"
            "import runpy\nsys.argv = ['x', '--help']\n"
            "try:\n    runpy.run_path('benchmarks/power_shadow_gpu.py', run_name='__main__')\n"
            "except SystemExit as e:\n    sys.exit(e.code)\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=repo, capture_output=True, text=True,
                       env={"PYTHONPATH": str(repo / "src"), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr
    assert "--fake-nvml" in r.stdout
