"""Histogram quantiles (PromQL histogram_quantile) against numpy quantiles of the generating samples."""

from __future__ import annotations

import bisect
import math
from pathlib import Path

import numpy as np
import pytest

from gpufield.errors import InputError, TelemetryError
from gpufield.telemetry import (
    HistogramSeries,
    histogram_delta,
    histogram_quantile,
    histogram_series,
    parse_file,
    parse_text,
    windowed_quantile,
)

DATA = Path(__file__).parent / "data"
ITL_BUCKETS = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0]
ITL = "vllm:inter_token_latency_seconds"


def _bucket_of(x: float, bounds: list[float]) -> tuple[float, float]:
    i = bisect.bisect_left(bounds, x)  # le is inclusive
    return (bounds[i - 1] if i else 0.0), (bounds[i] if i < len(bounds) else math.inf)


def test_docs_example_known_answers():
    (h,) = histogram_series(parse_file(str(DATA / "prometheus_docs_example.prom")),
                            "http_request_duration_seconds").values()
    assert h.count == 144320 and h.sum == 53423
    # rank 72160 lies in (0.1, 0.2]: 0.1 + 0.1 * (72160 - 33444) / (100392 - 33444)
    assert histogram_quantile(0.5, h) == pytest.approx(0.1 + 0.1 * 38716 / 66948, rel=1e-15)
    assert histogram_quantile(0.01, h) == pytest.approx(0.05 * 1443.2 / 24054, rel=1e-12)
    assert histogram_quantile(0.99, h) == 1.0  # rank in the +Inf bucket -> highest finite bound
    assert histogram_quantile(-0.1, h) == -math.inf and histogram_quantile(1.5, h) == math.inf
    assert math.isnan(histogram_quantile(math.nan, h))


def _render(samples_by_batch, buckets):
    """Expose the samples with prometheus_client (an independent writer) after each batch."""
    pc = pytest.importorskip("prometheus_client")
    reg = pc.CollectorRegistry()
    hist = pc.Histogram("lat_seconds", "latency", ["lane"], registry=reg, buckets=buckets)
    texts = []
    for batch in samples_by_batch:
        for x in batch:
            hist.labels(lane="decode").observe(float(x))
        texts.append(pc.generate_latest(reg).decode())
    return texts


@pytest.mark.parametrize("q", [0.5, 0.9, 0.95, 0.99])
def test_quantile_lies_in_the_bucket_of_the_numpy_quantile(q):
    rng = np.random.default_rng(11)
    xs = rng.lognormal(np.log(0.04), 0.5, 20_000)
    (text,) = _render([xs], ITL_BUCKETS)
    (h,) = histogram_series(parse_text(text), "lat_seconds").values()
    est = histogram_quantile(q, h)
    lo, hi = _bucket_of(float(np.quantile(xs, q)), ITL_BUCKETS)
    assert lo <= est <= hi, (q, est, lo, hi)


def test_windowed_quantile_uses_only_the_window():
    rng = np.random.default_rng(5)
    fast = rng.uniform(0.010, 0.030, 50_000)  # long quiet history
    slow = rng.uniform(0.080, 0.140, 2_000)  # the last window: a slowdown
    t0, t1 = _render([fast, slow], ITL_BUCKETS)
    (a,) = histogram_series(parse_text(t0), "lat_seconds").values()
    (b,) = histogram_series(parse_text(t1), "lat_seconds").values()
    d = histogram_delta(a, b)
    assert d.count == 2_000 and d.sum == pytest.approx(slow.sum(), rel=1e-9)
    # bucket deltas equal numpy's counts of the window's samples (le inclusive)
    edges = [-math.inf, *ITL_BUCKETS, math.inf]
    per_bucket = np.diff([0, *d.cumulative_counts])
    expect = [np.sum((slow > lo) & (slow <= hi)) for lo, hi in zip(edges, edges[1:], strict=False)]
    assert per_bucket.tolist() == expect
    for q in (0.5, 0.99):
        lo, hi = _bucket_of(float(np.quantile(slow, q)), ITL_BUCKETS)
        assert lo <= windowed_quantile(q, a, b) <= hi
    assert histogram_quantile(0.9, b) < 0.05 < 0.08 < windowed_quantile(0.9, a, b)  # cumulative hides it


def test_vllm_fixture_windowed_itl_matches_regenerated_samples():
    """The fixtures were rendered from numpy seed 7 (see their header); regenerate and compare."""
    rng = np.random.default_rng(7)
    draws = []
    for n in (500, 300):
        rng.lognormal(np.log(0.18), 0.6, n)  # TTFT draws, in generation order
        draws.append(rng.lognormal(np.log(0.032), 0.35, 40 * n))
    a = histogram_series(parse_file(str(DATA / "vllm_scrape_t0.prom")), ITL)
    b = histogram_series(parse_file(str(DATA / "vllm_scrape_t1.prom")), ITL)
    key = (("engine", "0"), ("model_name", "meta-llama/Llama-3.1-8B-Instruct"))
    d = histogram_delta(a[key], b[key])
    assert d.count == 12_000 and d.sum == pytest.approx(draws[1].sum(), rel=1e-9)
    for q in (0.5, 0.9, 0.99):
        lo, hi = _bucket_of(float(np.quantile(draws[1], q)), ITL_BUCKETS)
        assert lo <= windowed_quantile(q, a[key], b[key]) <= hi


def _series(bounds, cum, count=None):
    return HistogramSeries(labels=(), upper_bounds=tuple(bounds), cumulative_counts=tuple(cum),
                           sum=0.0, count=cum[-1] if count is None else count)


def test_delta_reset_and_layout_change():
    a = _series([1, math.inf], [5, 10])
    b = _series([1, math.inf], [1, 2])  # server restarted: counters went down
    assert histogram_delta(a, b) is b
    with pytest.raises(TelemetryError, match="bounds changed"):
        histogram_delta(a, _series([2, math.inf], [5, 10]))
    assert math.isnan(windowed_quantile(0.5, a, a))  # no observations in the window


@pytest.mark.parametrize(("text", "match", "line"), [
    ('# TYPE h histogram\nh_bucket{le="1"} 3\nh_count 3\n', "no le=\"\\+Inf\" bucket", 2),
    ('# TYPE h histogram\nh_bucket{le="1"} 3\nh_bucket{le="+Inf"} 2\nh_count 2\n', "expected cumulative", 3),
    ('# TYPE h histogram\nh_bucket{le="1"} 3\nh_bucket{le="+Inf"} 4\nh_count 5\n', "_count 5.0 != \\+Inf bucket 4.0", 4),
    ('# TYPE h histogram\nh_bucket{le="x"} 3\n', "expected a float", 2),
    ("# TYPE h gauge\nh 1\n", "of type gauge", None),
    ("a 1\n", "is missing", None),
])
def test_histogram_series_errors(text, match, line):
    with pytest.raises(InputError, match=match) as e:
        histogram_series(parse_text(text), "h", path="m.prom")
    assert e.value.line == line and e.value.path == "m.prom"
