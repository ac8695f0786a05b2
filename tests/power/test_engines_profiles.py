"""Engine metrics (real names, windowed quantiles over HTTP from the twin) and profile keys."""

from __future__ import annotations

import time

import numpy as np
import pytest

from gpufield.errors import ProfileMismatchError
from gpufield.power.controller import static_policy
from gpufield.power.engines import ENGINES, PromLaneSource
from gpufield.power.profiles import Profile, ProfileKey, load_profile, save_profile
from gpufield.power.scenario import load_scenario
from gpufield.power.twin.engine import simulate
from gpufield.power.twin.server import VLLM_ITL_BUCKETS_S, TwinMetricsServer
from gpufield.power.types import Lane, LaneSetting
from gpufield.telemetry.histogram import HistogramSeries, histogram_quantile

SGLANG_TEXT = """# HELP sglang:inter_token_latency_seconds Histogram of inter-token latency in seconds.
# TYPE sglang:inter_token_latency_seconds histogram
sglang:inter_token_latency_seconds_bucket{model_name="qwen",le="0.002"} 0.0
sglang:inter_token_latency_seconds_bucket{model_name="qwen",le="0.004"} 0.0
sglang:inter_token_latency_seconds_bucket{model_name="qwen",le="0.006"} 10.0
sglang:inter_token_latency_seconds_bucket{model_name="qwen",le="0.008"} 90.0
sglang:inter_token_latency_seconds_bucket{model_name="qwen",le="0.01"} 100.0
sglang:inter_token_latency_seconds_bucket{model_name="qwen",le="+Inf"} 100.0
sglang:inter_token_latency_seconds_sum{model_name="qwen"} 0.7
sglang:inter_token_latency_seconds_count{model_name="qwen"} 100.0
# HELP sglang:num_queue_reqs The number of requests in the waiting queue.
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{model_name="qwen"} 3.0
# HELP sglang:token_usage The token usage.
# TYPE sglang:token_usage gauge
sglang:token_usage{model_name="qwen"} 0.42
"""


def test_sglang_names_and_bucket_delta_quantile():
    t = [0.0]
    texts = [SGLANG_TEXT.replace(" 10.0", " 0.0").replace(" 90.0", " 0.0").replace(" 100.0", " 0.0")
             .replace("_sum{model_name=\"qwen\"} 0.7", "_sum{model_name=\"qwen\"} 0.0"), SGLANG_TEXT]
    src = PromLaneSource({Lane.DECODE: "http://decode/metrics"}, "sglang", clock=lambda: t[0],
                         get=lambda url: texts.pop(0))
    src.scrape(Lane.DECODE)
    t[0] = 10.0
    s = src.signals(Lane.DECODE)
    # 100 observations: 10 in (4, 6] ms, 80 in (6, 8] ms, 10 in (8, 10] ms -> p99 = 8 + 2 * 9/10 ms
    assert s.itl_p99_fast_s == pytest.approx(0.0098)
    assert s.queue_depth == 3 and s.kv_usage == pytest.approx(0.42)
    assert ENGINES["dynamo"].ttft == "dynamo_frontend_time_to_first_token_seconds"


def test_failed_scrape_reports_stale_telemetry():
    t = [0.0]

    def get(url):
        raise OSError("connection refused")
    src = PromLaneSource({Lane.DECODE: "http://x/metrics"}, "vllm", clock=lambda: t[0], get=get)
    assert src.signals(Lane.DECODE).telemetry_age_s == float("inf")


def test_controller_reads_the_twin_over_http_like_a_vllm_server():
    sc = load_scenario("moe-agentic-b200")
    r = simulate(sc.lane_pair(), sc.workload(duration_s=90), static_policy(LaneSetting(), LaneSetting()))
    with TwinMetricsServer(r) as srv:
        clock = [30.0]
        src = PromLaneSource({Lane.DECODE: srv.url}, "vllm", clock=lambda: clock[0])
        srv.sim_time_s = 30.0
        src.scrape(Lane.DECODE)
        srv.sim_time_s = clock[0] = 60.0
        s = src.signals(Lane.DECODE)
    # expected: PromQL histogram_quantile over the same window's true ITL samples, bucketed like vLLM
    i, j = np.searchsorted(r.it_end_s, [30.0, 60.0], side="right")
    v, w = r.it_dt_s[i:j], r.it_tokens[i:j]
    bounds = VLLM_ITL_BUCKETS_S + (float("inf"),)
    cum = tuple(float(w[v <= b].sum()) for b in bounds)
    want = histogram_quantile(0.99, HistogramSeries(labels=(), upper_bounds=bounds, cumulative_counts=cum,
                                                    sum=float((v * w).sum()), count=float(w.sum())))
    assert s.itl_p99_fast_s == pytest.approx(want)
    true_p99 = float(np.quantile(np.repeat(v, w.astype(int)), 0.99))
    lo = max(b for b in (0.0,) + VLLM_ITL_BUCKETS_S if b < true_p99)
    hi = min(b for b in bounds if b >= true_p99)
    assert lo <= s.itl_p99_fast_s <= hi  # bucket interpolation stays in the true p99's bucket


def _key(**kw):
    d = dict(model="Qwen/Qwen3-Coder-480B-A35B-Instruct-FP8", model_revision="abc123", quantization="fp8",
             engine="vllm", engine_version="0.33.0", gpu="NVIDIA B200", driver="580.159.04", vbios="97.00",
             tp=4, ep=4, dp=1, lane="decode", load_bucket="peak", mode="balanced")
    d.update(kw)
    return ProfileKey(**d)


def test_profiles_round_trip_and_refuse_mismatch_or_stale(tmp_path):
    p = tmp_path / "decode.json"
    prof = Profile(key=_key(), setting=LaneSetting(power_limit_w=550.0, label="cap 550 W"), actuator="power_cap",
                   slo={"itl_p99_s": 0.05}, created_s=time.time())
    save_profile(prof, p)
    assert load_profile(p, _key()).setting.power_limit_w == 550.0
    with pytest.raises(ProfileMismatchError) as e:
        load_profile(p, _key(driver="590.48.01", tp=8))
    assert "driver" in str(e.value) and "tp: 4 != 8" in str(e.value)
    with pytest.raises(ProfileMismatchError, match="stale"):
        load_profile(p, _key(), now_s=time.time() + 31 * 86400)
    with pytest.raises(Exception, match="another key"):
        save_profile(Profile(key=_key(lane="prefill"), setting=LaneSetting(), actuator="default", slo={}), p)


def test_twin_calibration_writes_profiles_that_a_real_setup_refuses(tmp_path):
    from gpufield.power.ab import calibrate_twin

    sc = load_scenario("dense-agentic-b200")
    profs = calibrate_twin(sc, out_dir=str(tmp_path), bench_kw={"gate_s": 60.0, "warmup_s": 60.0})
    assert {p.key.lane for p in profs} == {"decode", "prefill"}
    dec = next(p for p in profs if p.key.lane == "decode")
    path = tmp_path / "dense-agentic-b200.decode.balanced.json"
    assert load_profile(path, dec.key).setting == dec.setting
    real = _key(model=dec.key.model, gpu=dec.key.gpu, quantization="fp8", tp=4, ep=1, dp=1)
    with pytest.raises(ProfileMismatchError, match="engine"):
        load_profile(path, real)
