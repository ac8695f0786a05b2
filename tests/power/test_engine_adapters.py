"""Engine adapters on real /metrics text of vLLM, SGLang and Dynamo (fixtures name file and commit)."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest

from gpufield.power.config import GuardConfig
from gpufield.power.controller import LaneController, LaneLimits
from gpufield.power.engines import ENGINES, EngineAdapter, PromLaneSource
from gpufield.power.guard import AtCalibrated, Fallback
from gpufield.power.types import Lane, LaneSetting
from gpufield.telemetry.prometheus import parse_text

DATA = Path(__file__).parent / "data" / "engine_metrics"
CFG = GuardConfig(itl_p99_slo_s=0.05, ttft_p99_slo_s=2.0, dwell_s=60, relax_s=600, period_s=5)


def _text(name: str, **values: object) -> str:
    t = (DATA / name).read_text()
    for k, v in values.items():
        t = t.replace(f"}} {k}\n", f"}} {v}\n")
    return t


def _scale(text: str, family: str, k: int) -> str:
    """Multiply the counts of histogram ``family`` by ``k`` (as after k times the recorded traffic)."""
    out = []
    for line in text.splitlines():
        if line.startswith(family) and not line.startswith("#"):
            head, val = line.rsplit(" ", 1)
            line = f"{head} {float(val) * k}"
        out.append(line)
    return "\n".join(out) + "\n"


def test_adapters_satisfy_the_protocol_and_fixtures_parse():
    assert all(isinstance(a, EngineAdapter) for a in ENGINES.values())
    for f in DATA.glob("*.prom"):
        assert parse_text(_text(f.name, KV=0.1, WAITING=0, KV0=0.1, KV1=0.1, W0=0, W1=0, TOKEN_USAGE=0.1,
                                QUEUE=0, PREALLOC=0, QUEUED=0), path=str(f))


def test_dynamo_kv_gauge_is_a_fraction_and_frontend_queue_is_not_a_decode_queue():
    front = _text("dynamo_frontend.prom").replace("dynamo_frontend_queued_requests{model=\"qwen/qwen3-0.6b\"} 0",
                                                   "dynamo_frontend_queued_requests{model=\"qwen/qwen3-0.6b\"} 12")
    pages = {"http://fe:8000/metrics": front, "http://worker:8081/metrics": _text("dynamo_worker_vllm.prom",
                                                                                   KV=0.62, WAITING=0.0)}
    src = PromLaneSource({Lane.DECODE: ["http://fe:8000/metrics", "http://worker:8081/metrics"]}, "dynamo",
                         clock=lambda: 0.0, get=pages.__getitem__)
    s = src.signals(Lane.DECODE)
    assert s.kv_usage == pytest.approx(0.62)  # documented 0.0-1.0: not scaled by 0.01
    assert s.queue_depth == 0  # 12 requests before their first token are not waiting for decode
    assert s.telemetry_age_s == 0.0  # the ITL histogram came from the frontend URL
    pages["http://worker:8081/metrics"] = _text("dynamo_worker_vllm.prom", KV=0.62, WAITING=4.0)
    assert src.signals(Lane.DECODE).queue_depth == 4  # the worker's engine-native waiting queue


def test_dynamo_steady_load_does_not_step_the_decode_cap_up():
    t = [0.0]
    front = _text("dynamo_frontend.prom").replace("dynamo_frontend_queued_requests{model=\"qwen/qwen3-0.6b\"} 0",
                                                   "dynamo_frontend_queued_requests{model=\"qwen/qwen3-0.6b\"} 9")
    worker = _text("dynamo_worker_vllm.prom", KV=0.4, WAITING=0.0)

    def get(url):
        k = int(t[0] / 5) + 1
        return _scale(front, "dynamo_frontend_inter_token_latency_seconds", k) if "fe" in url else worker
    src = PromLaneSource({Lane.DECODE: ["http://fe/metrics", "http://w/metrics"]}, "dynamo", clock=lambda: t[0],
                         get=get)
    lim = LaneLimits(default_limit_w=700, max_clock_mhz=1980, step_w=25, clock_step_mhz=90)
    cap = LaneSetting(power_limit_w=450.0, label="cap 450 W")
    ctl = LaneController(Lane.DECODE, cap, lim, CFG)
    while t[0] <= 300:
        assert ctl.decide(src.signals(Lane.DECODE)) == cap, t[0]
        t[0] += 5
    assert isinstance(ctl.guard.state, AtCalibrated)


def test_vllm_data_parallel_kv_is_the_max_engine_and_waiting_adds():
    src = PromLaneSource({Lane.DECODE: "http://v/metrics"}, "vllm", clock=lambda: 0.0,
                         get=lambda u: _text("vllm_dp2.prom", KV0=0.5, KV1=0.5, W0=2.0, W1=3.0))
    s = src.signals(Lane.DECODE)
    assert s.kv_usage == pytest.approx(0.5)  # not 1.0: each engine's cache is half full
    assert s.queue_depth == 5
    src2 = PromLaneSource({Lane.DECODE: "http://v/metrics"}, "vllm", clock=lambda: 0.0,
                          get=lambda u: _text("vllm_dp2.prom", KV0=0.3, KV1=0.95, W0=0.0, W1=0.0))
    g = LaneController(Lane.DECODE, LaneSetting(power_limit_w=450.0), LaneLimits(
        default_limit_w=700, max_clock_mhz=1980, step_w=25, clock_step_mhz=90), CFG).guard
    s2 = src2.signals(Lane.DECODE)
    assert s2.kv_usage == pytest.approx(0.95)  # one engine nearly full is pressure, whatever the other does
    g.step(replace(s2, now_s=61.0))
    assert g.reason == "kv usage"


def test_sglang_token_usage_and_decode_queues():
    src = PromLaneSource({Lane.DECODE: "http://s/metrics"}, "sglang", clock=lambda: 0.0,
                         get=lambda u: _text("sglang.prom", TOKEN_USAGE=0.42, QUEUE=3.0, PREALLOC=2.0))
    s = src.signals(Lane.DECODE)
    assert s.kv_usage == pytest.approx(0.42) and s.queue_depth == 5


def test_missing_itl_metric_is_stale_and_the_guard_fails_safe():
    t = [0.0]
    full = _text("vllm_dp2.prom", KV0=0.2, KV1=0.2, W0=0.0, W1=0.0)
    gauges_only = "\n".join(x for x in full.splitlines() if "inter_token_latency" not in x) + "\n"
    pages = [gauges_only]
    src = PromLaneSource({Lane.DECODE: "http://v/metrics"}, "vllm", clock=lambda: t[0], get=lambda u: pages[0])
    s = src.signals(Lane.DECODE)
    assert math.isnan(s.itl_p99_fast_s) and s.telemetry_age_s == math.inf  # blind, and it says so
    assert src.check(Lane.DECODE) == ["decode: histogram vllm:inter_token_latency_seconds not found at "
                                      "http://v/metrics"]
    ctl = LaneController(Lane.DECODE, LaneSetting(power_limit_w=450.0), LaneLimits(
        default_limit_w=700, max_clock_mhz=1980, step_w=25, clock_step_mhz=90), CFG)
    assert ctl.decide(s).is_default and isinstance(ctl.guard.state, Fallback)
    # the metric appears, then disappears again: age counts from the last scrape that had it
    pages[0] = full
    t[0] = 5.0
    assert src.signals(Lane.DECODE).telemetry_age_s == 0.0
    pages[0] = gauges_only
    t[0] = 30.0
    assert src.signals(Lane.DECODE).telemetry_age_s == pytest.approx(25.0)


def test_thermal_state_reaches_the_guard():
    src = PromLaneSource({Lane.DECODE: "http://s/metrics"}, "sglang", clock=lambda: 0.0,
                         get=lambda u: _text("sglang.prom", TOKEN_USAGE=0.1, QUEUE=0.0, PREALLOC=0.0),
                         thermal=lambda lane: True)
    s = src.signals(Lane.DECODE)
    assert s.thermal_slowdown
    ctl = LaneController(Lane.DECODE, LaneSetting(power_limit_w=450.0), LaneLimits(
        default_limit_w=700, max_clock_mhz=1980, step_w=25, clock_step_mhz=90), CFG)
    assert ctl.decide(s).is_default and ctl.guard.reason == "thermal slowdown"
