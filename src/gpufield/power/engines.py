"""Serving-engine metrics: real Prometheus names of vLLM, SGLang and NVIDIA Dynamo -> LaneSignals.

Metric names (power.md 5.1-5.3): vLLM V1 ``vllm:inter_token_latency_seconds``,
``vllm:time_to_first_token_seconds``, ``vllm:num_requests_waiting``, ``vllm:kv_cache_usage_perc``;
SGLang ``sglang:inter_token_latency_seconds``, ``sglang:time_to_first_token_seconds``,
``sglang:num_queue_reqs``, ``sglang:token_usage``; Dynamo frontend
``dynamo_frontend_inter_token_latency_seconds``, ``dynamo_frontend_time_to_first_token_seconds``,
``dynamo_frontend_queued_requests`` and worker ``dynamo_component_kvstats_gpu_cache_usage_percent``.

:class:`PromLaneSource` scrapes one ``/metrics`` endpoint per lane with httpx, keeps the histogram
snapshots, and reports p99 over the fast and slow windows from bucket-count *deltas* between the
snapshot nearest the window start and now (:func:`gpufield.telemetry.histogram.windowed_quantile`,
PromQL ``histogram_quantile`` semantics). In PD serving, TTFT is best read at the frontend (Dynamo)
or the decode server (SGLang streams from decode), ITL at the decode lane (vLLM issues #29474, #22454).
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from gpufield.errors import TelemetryError
from gpufield.power.types import Lane, LaneSignals
from gpufield.telemetry.histogram import HistogramSeries, histogram_series, windowed_quantile
from gpufield.telemetry.prometheus import parse_text

__all__ = ["EngineMetrics", "ENGINES", "PromLaneSource"]


@dataclass(frozen=True, kw_only=True, slots=True)
class EngineMetrics:
    """Metric names of one engine (histograms in seconds; ``kv_scale`` turns the KV gauge into 0..1)."""

    name: str
    itl: str
    ttft: str
    e2e: str
    waiting: str
    running: str
    kv_usage: str
    kv_scale: float = 1.0


ENGINES: dict[str, EngineMetrics] = {
    "vllm": EngineMetrics(name="vllm", itl="vllm:inter_token_latency_seconds",
                          ttft="vllm:time_to_first_token_seconds", e2e="vllm:e2e_request_latency_seconds",
                          waiting="vllm:num_requests_waiting", running="vllm:num_requests_running",
                          kv_usage="vllm:kv_cache_usage_perc"),
    "sglang": EngineMetrics(name="sglang", itl="sglang:inter_token_latency_seconds",
                            ttft="sglang:time_to_first_token_seconds", e2e="sglang:e2e_request_latency_seconds",
                            waiting="sglang:num_queue_reqs", running="sglang:num_running_reqs",
                            kv_usage="sglang:token_usage"),
    "dynamo": EngineMetrics(name="dynamo", itl="dynamo_frontend_inter_token_latency_seconds",
                            ttft="dynamo_frontend_time_to_first_token_seconds",
                            e2e="dynamo_frontend_request_duration_seconds",
                            waiting="dynamo_frontend_queued_requests", running="dynamo_frontend_inflight_requests",
                            kv_usage="dynamo_component_kvstats_gpu_cache_usage_percent", kv_scale=0.01),
}


def _merge(series: dict) -> HistogramSeries | None:
    """Sum every label set of a histogram into one series (same bucket layout required)."""
    items = list(series.values())
    if not items:
        return None
    first = items[0]
    counts = [0.0] * len(first.cumulative_counts)
    total, s = 0.0, 0.0
    for h in items:
        if h.upper_bounds != first.upper_bounds:
            raise TelemetryError("histogram series with different bucket layouts cannot be merged")
        counts = [a + b for a, b in zip(counts, h.cumulative_counts, strict=True)]
        total += h.count
        s += h.sum
    return HistogramSeries(labels=(), upper_bounds=first.upper_bounds, cumulative_counts=tuple(counts),
                           sum=s, count=total)


def _gauge(fams: dict, name: str) -> float:
    fam = fams.get(name)
    if fam is None or not fam.samples:
        return math.nan
    return float(sum(x.value for x in fam.samples))


class PromLaneSource:
    """TelemetrySource over engines' ``/metrics`` endpoints (one URL per lane).

    Args:
        urls: lane -> metrics URL (``http://host:port/metrics``).
        engine: key of :data:`ENGINES` (``"vllm"``, ``"sglang"``, ``"dynamo"``).
        fast_s / slow_s: window lengths. clock: monotonic seconds (tests inject a sim clock).
        get: ``url -> text`` (default ``httpx.get(url, timeout=2).text``).
    """

    def __init__(self, urls: dict[Lane, str], engine: str = "vllm", *, fast_s: float = 30.0,
                 slow_s: float = 300.0, clock: Callable[[], float] = time.monotonic,
                 get: Callable[[str], str] | None = None) -> None:
        if engine not in ENGINES:
            raise ValueError(f"engine must be one of {sorted(ENGINES)}, got {engine!r}")
        self.urls, self.m, self.fast_s, self.slow_s, self.clock = urls, ENGINES[engine], fast_s, slow_s, clock
        self._get = get or _httpx_get
        self._hist: dict[Lane, deque] = {lane: deque() for lane in urls}
        self._last_ok: dict[Lane, float] = {}

    def scrape(self, lane: Lane) -> dict:
        """Fetch and parse one lane's endpoint; keep ITL/TTFT snapshots for the windows."""
        now = self.clock()
        fams = parse_text(self._get(self.urls[lane]), path=self.urls[lane])
        itl = _merge(histogram_series(fams, self.m.itl)) if self.m.itl in fams else None
        ttft = _merge(histogram_series(fams, self.m.ttft)) if self.m.ttft in fams else None
        q = self._hist[lane]
        q.append((now, itl, ttft))
        while len(q) > 2 and q[1][0] <= now - self.slow_s:
            q.popleft()
        self._last_ok[lane] = now
        return fams

    def _window(self, lane: Lane, span_s: float, idx: int) -> float:
        q = self._hist[lane]
        if len(q) < 2:
            return math.nan
        now_t, *now_h = q[-1]
        start = next((e for e in q if e[0] >= now_t - span_s - 1e-9), q[0])
        if start is q[-1]:
            start = q[-2]
        a, b = start[1 + idx], now_h[idx]
        if a is None or b is None:
            return math.nan
        return windowed_quantile(0.99, a, b)

    def signals(self, lane: Lane) -> LaneSignals:
        """Scrape and report the lane's windows; a failed scrape shows up as stale telemetry."""
        now = self.clock()
        try:
            fams = self.scrape(lane)
        except Exception:  # network/parse failure: the guard's fail-safe handles staleness
            return LaneSignals(now_s=now, telemetry_age_s=now - self._last_ok.get(lane, -math.inf))
        waiting = _gauge(fams, self.m.waiting)
        kv = _gauge(fams, self.m.kv_usage) * self.m.kv_scale
        return LaneSignals(now_s=now, itl_p99_fast_s=self._window(lane, self.fast_s, 0),
                           itl_p99_slow_s=self._window(lane, self.slow_s, 0),
                           ttft_p99_fast_s=self._window(lane, self.fast_s, 1),
                           ttft_p99_slow_s=self._window(lane, self.slow_s, 1),
                           queue_depth=0 if math.isnan(waiting) else int(waiting),
                           kv_usage=0.0 if math.isnan(kv) else kv, telemetry_age_s=0.0)


def _httpx_get(url: str) -> str:
    import httpx

    r = httpx.get(url, timeout=2.0)
    r.raise_for_status()
    return r.text
