"""Serving-engine metrics: adapters for vLLM, SGLang and NVIDIA Dynamo behind one protocol -> LaneSignals.

Each engine is an :class:`EngineAdapter` (one instance per engine in :data:`ENGINES`) that says which
histograms carry ITL and TTFT and how the engine's gauges become the guard's two leading indicators.
The semantics are fixed per engine and per metric (sources: the engines' own ``/metrics`` examples and
metric definitions, cited in ``tests/power/data/engine_metrics/*.prom``):

* **KV usage** is a per-engine fraction (0..1) in every engine: vLLM ``vllm:kv_cache_usage_perc``
  ("1 means 100 percent usage"), SGLang ``sglang:token_usage``, Dynamo
  ``dynamo_component_kvstats_gpu_cache_usage_percent`` ("GPU cache usage as a percentage (0.0-1.0)",
  on the worker's port). With several engines (vLLM data parallelism: one series per ``engine``
  label; Dynamo: one per worker) the lane reports the **maximum**: the guard's indicator is "an engine
  is about to run out of KV", which one full engine already means; a sum (0.5 + 0.5 read as 1.0) or
  a mean (one full engine hidden by an idle one) would both be wrong.
* **Decode queue** counts requests waiting for a decode slot or KV space: vLLM
  ``vllm:num_requests_waiting``, SGLang ``sglang:num_queue_reqs`` + ``sglang:num_decode_prealloc_queue_reqs``
  (summed over engines / data-parallel ranks: counts add). Series that only differ by
  ``tp_rank`` / ``pp_rank`` / ``moe_ep_rank`` / ``pid`` are replicas of one scheduler and are max'ed
  first. Dynamo's ``dynamo_frontend_queued_requests`` is **not** used: it counts requests from the
  HTTP handler until their first token (prefill included; ai-dynamo/dynamo
  ``lib/llm/src/http/service/metrics.rs``), so it is non-zero under any steady load. A Dynamo lane
  reads the engine-native queue gauge its worker exposes on the worker's port; without one the
  queue indicator is absent (``None``), never guessed.
* **Missing is missing.** When a lane's SLO histogram (decode: ITL, prefill: TTFT) is absent from
  every scrape of the lane, the signals carry ``telemetry_age_s`` = time since the histogram was
  last seen (``inf`` if never), so the guard's stale-telemetry fail-safe acts; NaN p99 with a fresh
  age only means "no tokens in the window" (an idle lane).

:class:`PromLaneSource` scrapes **several** ``/metrics`` URLs per lane (Dynamo: frontend on
``DYN_HTTP_PORT`` and worker on ``DYN_SYSTEM_PORT``), merges their families, keeps histogram
snapshots and reports p99 over the fast and slow windows from bucket-count deltas
(:func:`gpufield.telemetry.histogram.windowed_quantile`, PromQL ``histogram_quantile`` semantics).
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from gpufield.errors import TelemetryError
from gpufield.power.types import Lane, LaneSignals
from gpufield.telemetry.histogram import HistogramSeries, histogram_series, windowed_quantile
from gpufield.telemetry.prometheus import MetricFamily, parse_text

__all__ = ["EngineAdapter", "PromEngine", "ENGINES", "PromLaneSource", "lane_histogram", "merge_families"]

#: labels whose series are replicas of one scheduler (max'ed before engines are combined)
REPLICA_LABELS = frozenset({"tp_rank", "pp_rank", "moe_ep_rank", "pid"})


@runtime_checkable
class EngineAdapter(Protocol):
    """How one serving engine's ``/metrics`` become a lane's signals (see the module docstring)."""

    name: str
    itl: str
    ttft: str

    def kv_usage(self, fams: Mapping[str, MetricFamily]) -> float | None:
        """Highest per-engine KV-cache use (0..1), or None when the engine exposes none."""
        ...

    def queue_depth(self, fams: Mapping[str, MetricFamily]) -> float | None:
        """Requests waiting for a decode slot or KV space (summed over engines), or None."""
        ...


def _engine_groups(fam: MetricFamily) -> dict[tuple, float]:
    """Per engine (labels without replica labels) the max over its replica series."""
    out: dict[tuple, float] = {}
    for s in fam.samples:
        if not math.isfinite(s.value):
            continue
        key = tuple(sorted((k, v) for k, v in s.labels.items() if k not in REPLICA_LABELS))
        out[key] = max(out.get(key, -math.inf), s.value)
    return out


@dataclass(frozen=True, kw_only=True, slots=True)
class PromEngine:
    """An :class:`EngineAdapter` over Prometheus names.

    Attributes:
        name: engine key. itl / ttft / e2e: histogram names (seconds).
        kv: KV-usage gauges (0..1 per engine), the first present is used, max over engines.
        queue: decode-queue gauges; every present one is summed over engines.
    """

    name: str
    itl: str
    ttft: str
    e2e: str
    kv: tuple[str, ...]
    queue: tuple[str, ...]

    def kv_usage(self, fams: Mapping[str, MetricFamily]) -> float | None:
        """Highest per-engine KV use (0..1); None when no KV gauge is exposed."""
        for n in self.kv:
            if n in fams:
                g = _engine_groups(fams[n])
                if g:
                    return max(g.values())
        return None

    def queue_depth(self, fams: Mapping[str, MetricFamily]) -> float | None:
        """Waiting requests summed over engines (replicas max'ed first); None when not exposed."""
        tot, seen = 0.0, False
        for n in self.queue:
            if n in fams:
                g = _engine_groups(fams[n])
                if g:
                    tot, seen = tot + sum(g.values()), True
        return tot if seen else None


ENGINES: dict[str, PromEngine] = {
    "vllm": PromEngine(name="vllm", itl="vllm:inter_token_latency_seconds", ttft="vllm:time_to_first_token_seconds",
                       e2e="vllm:e2e_request_latency_seconds",
                       kv=("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
                       queue=("vllm:num_requests_waiting",)),
    "sglang": PromEngine(name="sglang", itl="sglang:inter_token_latency_seconds",
                         ttft="sglang:time_to_first_token_seconds", e2e="sglang:e2e_request_latency_seconds",
                         kv=("sglang:token_usage",),
                         queue=("sglang:num_queue_reqs", "sglang:num_decode_prealloc_queue_reqs")),
    "dynamo": PromEngine(name="dynamo", itl="dynamo_frontend_inter_token_latency_seconds",
                         ttft="dynamo_frontend_time_to_first_token_seconds",
                         e2e="dynamo_frontend_request_duration_seconds",
                         kv=("dynamo_component_kvstats_gpu_cache_usage_percent", "vllm:kv_cache_usage_perc",
                             "sglang:token_usage"),
                         queue=("vllm:num_requests_waiting", "sglang:num_queue_reqs",
                                "sglang:num_decode_prealloc_queue_reqs")),
}


def merge_families(parts: Sequence[Mapping[str, MetricFamily]]) -> dict[str, MetricFamily]:
    """Union of several scrapes' families; a family present in several gets all their samples."""
    out: dict[str, MetricFamily] = {}
    for fams in parts:
        for name, fam in fams.items():
            if name not in out:
                out[name] = MetricFamily(name=name, type=fam.type, help=fam.help, samples=list(fam.samples))
            else:
                out[name].samples.extend(fam.samples)
    return out


def _merge(series: dict) -> HistogramSeries | None:
    """Sum every label set of a histogram into one series (observations add; same buckets required)."""
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


def lane_histogram(fams: Mapping[str, MetricFamily], name: str) -> HistogramSeries | None:
    """Histogram ``name`` summed over all its label sets (engines, workers), or None when absent.

    Raises:
        InputError: a malformed histogram (see :func:`~gpufield.telemetry.histogram.histogram_series`).
        TelemetryError: label sets with different bucket layouts.
    """
    return _merge(histogram_series(fams, name)) if name in fams else None


_hist = lane_histogram


class PromLaneSource:
    """TelemetrySource over engines' ``/metrics`` endpoints (one or several URLs per lane).

    Args:
        urls: lane -> metrics URL or list of URLs (Dynamo: ``[frontend, worker]``).
        engine: key of :data:`ENGINES` or an :class:`EngineAdapter`.
        fast_s / slow_s: window lengths. clock: monotonic seconds (tests inject a sim clock).
        get: ``url -> text`` (default ``httpx.get(url, timeout=2).text``).
        thermal: optional ``lane -> bool`` (thermal slowdown on any of the lane's GPUs), e.g. from
            NVML clock-event reasons; :class:`~gpufield.power.runtime.RuntimeLoop` also ORs in its own.

    Raises:
        ValueError: unknown engine or a lane without URLs.
    """

    def __init__(self, urls: Mapping[Lane, str | Sequence[str]], engine: str | EngineAdapter = "vllm", *,
                 fast_s: float = 30.0, slow_s: float = 300.0, clock: Callable[[], float] = time.monotonic,
                 get: Callable[[str], str] | None = None,
                 thermal: Callable[[Lane], bool] | None = None) -> None:
        if isinstance(engine, str):
            if engine not in ENGINES:
                raise ValueError(f"engine must be one of {sorted(ENGINES)}, got {engine!r}")
            engine = ENGINES[engine]
        self.urls = {lane: [u] if isinstance(u, str) else list(u) for lane, u in urls.items()}
        if any(not u for u in self.urls.values()):
            raise ValueError("every lane needs at least one metrics URL")
        self.m, self.fast_s, self.slow_s, self.clock = engine, fast_s, slow_s, clock
        self._get = get or _httpx_get
        self._thermal = thermal
        self._hist: dict[Lane, deque] = {lane: deque() for lane in self.urls}
        self._last_ok: dict[Lane, float] = {}
        self.errors: dict[Lane, str] = {}

    def _slo_metric(self, lane: Lane) -> str:
        return self.m.itl if lane is Lane.DECODE else self.m.ttft

    def scrape(self, lane: Lane) -> dict[str, MetricFamily]:
        """Fetch and merge every URL of one lane; keep ITL/TTFT snapshots for the windows.

        Raises:
            Exception: whatever fetching or parsing a URL raises (the lane's scrape is then lost).
        """
        now = self.clock()
        fams = merge_families([parse_text(self._get(u), path=u) for u in self.urls[lane]])
        itl, ttft = _hist(fams, self.m.itl), _hist(fams, self.m.ttft)
        q = self._hist[lane]
        q.append((now, itl, ttft))
        while len(q) > 2 and q[1][0] <= now - self.slow_s:
            q.popleft()
        if self._slo_metric(lane) in fams:
            self._last_ok[lane] = now
        return fams

    def check(self, lane: Lane) -> list[str]:
        """Start-up check: one scrape; the problems found (empty = the lane is readable).

        Reports unreachable URLs, the lane's missing SLO histogram, and (decode) missing KV / queue gauges.
        """
        probs, parts = [], []
        for u in self.urls[lane]:
            try:
                parts.append(parse_text(self._get(u), path=u))
            except Exception as e:  # noqa: BLE001 - reported, not raised: a start-up report
                probs.append(f"{lane.value}: {u}: {type(e).__name__}: {e}")
        if probs:
            return probs
        fams = merge_families(parts)
        if self._slo_metric(lane) not in fams:
            probs.append(f"{lane.value}: histogram {self._slo_metric(lane)} not found at {', '.join(self.urls[lane])}")
        if lane is Lane.DECODE and self.m.kv_usage(fams) is None:
            probs.append(f"decode: no KV-usage gauge (looked for {', '.join(getattr(self.m, 'kv', ()))})")
        return probs

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
        """Scrape and report the lane's windows; a failed scrape or a missing SLO histogram is stale telemetry."""
        now = self.clock()
        thermal = bool(self._thermal(lane)) if self._thermal is not None else False
        try:
            fams = self.scrape(lane)
        except Exception as e:  # network/parse failure: the guard's fail-safe handles staleness
            self.errors[lane] = f"{type(e).__name__}: {e}"
            return LaneSignals(now_s=now, telemetry_age_s=now - self._last_ok.get(lane, -math.inf),
                               thermal_slowdown=thermal)
        self.errors.pop(lane, None)
        queue = self.m.queue_depth(fams)
        kv = self.m.kv_usage(fams)
        return LaneSignals(now_s=now, itl_p99_fast_s=self._window(lane, self.fast_s, 0),
                           itl_p99_slow_s=self._window(lane, self.slow_s, 0),
                           ttft_p99_fast_s=self._window(lane, self.fast_s, 1),
                           ttft_p99_slow_s=self._window(lane, self.slow_s, 1),
                           queue_depth=0 if queue is None else int(queue),
                           kv_usage=0.0 if kv is None else kv,
                           telemetry_age_s=now - self._last_ok.get(lane, -math.inf),
                           thermal_slowdown=thermal)


def _httpx_get(url: str) -> str:
    import httpx

    r = httpx.get(url, timeout=2.0)
    r.raise_for_status()
    return r.text

