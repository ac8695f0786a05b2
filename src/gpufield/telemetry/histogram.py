"""Prometheus histograms: series from a scrape, bucket deltas between scrapes, quantiles.

:func:`histogram_quantile` is Prometheus' ``histogram_quantile`` (``promql/quantile.go``
``bucketQuantile``): rank ``q * count``, the first bucket whose cumulative count reaches it, and
linear interpolation inside that bucket (from 0 for the first bucket when its bound is positive);
a rank in the ``+Inf`` bucket returns the highest finite bound. :func:`windowed_quantile` applies it
to the bucket-count deltas of two scrapes, the way ``../shared/reference/power.md`` section 5.4
recommends for an SLO guard (e.g. vLLM ITL p99 over the last window).

Example::

    from gpufield.telemetry import parse_text, histogram_series, windowed_quantile
    a = histogram_series(parse_text(scrape1), "vllm:inter_token_latency_seconds")
    b = histogram_series(parse_text(scrape2), "vllm:inter_token_latency_seconds")
    key = next(iter(b))
    p99_s = windowed_quantile(0.99, a[key], b[key])
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from gpufield.errors import InputError, TelemetryError
from gpufield.telemetry.prometheus import MetricFamily

__all__ = ["HistogramSeries", "histogram_series", "histogram_delta", "histogram_quantile", "windowed_quantile"]

LabelKey = tuple[tuple[str, str], ...]


@dataclass(frozen=True, kw_only=True, slots=True)
class HistogramSeries:
    """One histogram series (one label set) at one scrape.

    Attributes:
        labels: the series' labels without ``le``, sorted ``(name, value)`` pairs.
        upper_bounds: bucket upper bounds ascending, the last ``+inf``.
        cumulative_counts: cumulative counts per bucket (same length).
        sum: the ``_sum`` sample (NaN if absent).
        count: the ``_count`` sample (equals the ``+Inf`` bucket).
    """

    labels: LabelKey
    upper_bounds: tuple[float, ...]
    cumulative_counts: tuple[float, ...]
    sum: float
    count: float


def histogram_series(families: Mapping[str, MetricFamily], name: str, *,
                     path: str | None = None) -> dict[LabelKey, HistogramSeries]:
    """Collect the series of histogram ``name`` from parsed families.

    Args:
        families: output of :func:`~gpufield.telemetry.parse_text`.
        name: family name, e.g. ``"vllm:e2e_request_latency_seconds"``.
        path: shown in error messages.

    Returns:
        ``{labels without le: HistogramSeries}``.

    Raises:
        InputError: the family is missing or not a histogram, a series lacks the ``+Inf`` bucket,
            counts decrease with ``le``, or ``_count`` disagrees with the ``+Inf`` bucket (naming the line).
    """
    fam = families.get(name)
    if fam is None or fam.type != "histogram":
        got = "missing" if fam is None else f"of type {fam.type}"
        raise InputError(f"histogram {name!r} is {got}: expected '# TYPE {name} histogram' and its samples",
                         path=path)
    buckets: dict[LabelKey, dict[float, tuple[float, int]]] = {}
    sums: dict[LabelKey, float] = {}
    counts: dict[LabelKey, tuple[float, int]] = {}
    for s in fam.samples:
        key = tuple(sorted((k, v) for k, v in s.labels.items() if k != "le"))
        if s.name == name + "_bucket":
            try:
                le = float(s.labels["le"])
            except ValueError:
                raise InputError(f"bucket bound le={s.labels['le']!r}: expected a float", path=path,
                                 line=s.line) from None
            buckets.setdefault(key, {})[le] = (s.value, s.line)
        elif s.name == name + "_sum":
            sums[key] = s.value
        elif s.name == name + "_count":
            counts[key] = (s.value, s.line)
    out = {}
    for key, bk in buckets.items():
        bounds = sorted(bk)
        line = bk[bounds[-1]][1]
        if not math.isinf(bounds[-1]) or bounds[-1] < 0:
            raise InputError(f"histogram {name}{dict(key)} has no le=\"+Inf\" bucket", path=path, line=line)
        cum = [bk[b][0] for b in bounds]
        for (b0, c0), (b1, c1) in zip(zip(bounds, cum, strict=True), zip(bounds[1:], cum[1:], strict=True),
                                      strict=False):
            if c1 < c0:
                raise InputError(f"histogram {name}: bucket le={b1} count {c1} < le={b0} count {c0}:"
                                 " expected cumulative counts", path=path, line=bk[b1][1])
        count, cline = counts.get(key, (cum[-1], line))
        if count != cum[-1]:
            raise InputError(f"histogram {name}: _count {count} != +Inf bucket {cum[-1]}", path=path, line=cline)
        out[key] = HistogramSeries(labels=key, upper_bounds=tuple(bounds), cumulative_counts=tuple(cum),
                                   sum=sums.get(key, math.nan), count=count)
    return out


def histogram_delta(earlier: HistogramSeries, later: HistogramSeries) -> HistogramSeries:
    """Bucket-wise difference ``later - earlier`` (the observations made between two scrapes).

    A counter reset (the later ``count`` below the earlier one, e.g. a server restart) is handled
    as Prometheus' ``increase`` does: the later series is taken as the whole window.

    Args:
        earlier: series from the first scrape.
        later: series from the second scrape (same labels).

    Returns:
        A :class:`HistogramSeries` of the window.

    Raises:
        TelemetryError: the bucket layouts differ.
    """
    if earlier.upper_bounds != later.upper_bounds:
        raise TelemetryError(f"bucket bounds changed between scrapes: {earlier.upper_bounds} -> {later.upper_bounds}")
    if later.count < earlier.count or any(
            b < a for a, b in zip(earlier.cumulative_counts, later.cumulative_counts, strict=True)):
        return later
    return HistogramSeries(
        labels=later.labels, upper_bounds=later.upper_bounds,
        cumulative_counts=tuple(b - a for a, b in zip(earlier.cumulative_counts, later.cumulative_counts,
                                                      strict=True)),
        sum=later.sum - earlier.sum, count=later.count - earlier.count)


def histogram_quantile(q: float, series: HistogramSeries) -> float:
    """The ``q``-quantile estimated from bucket counts, exactly as PromQL ``histogram_quantile``.

    Args:
        q: quantile in [0, 1] (q < 0 gives -inf, q > 1 gives +inf, NaN gives NaN, as PromQL).
        series: cumulative buckets (one scrape or a :func:`histogram_delta`).

    Returns:
        The estimate in the histogram's unit (e.g. seconds); NaN when there are no observations.
    """
    if math.isnan(q):
        return math.nan
    if q < 0:
        return -math.inf
    if q > 1:
        return math.inf
    bounds, cum = list(series.upper_bounds), list(series.cumulative_counts)
    if len(bounds) < 2 or not (math.isinf(bounds[-1]) and bounds[-1] > 0):
        return math.nan
    for i in range(1, len(cum)):  # ensureMonotonic
        cum[i] = max(cum[i], cum[i - 1])
    total = cum[-1]
    if total == 0:
        return math.nan
    rank = q * total
    b = next((i for i in range(len(bounds) - 1) if cum[i] >= rank), len(bounds) - 1)
    if b == len(bounds) - 1:
        return bounds[-2]
    if b == 0 and bounds[0] <= 0:
        return bounds[0]
    start, end, count = 0.0, bounds[b], cum[b]
    if b > 0:
        start = bounds[b - 1]
        count -= cum[b - 1]
        rank -= cum[b - 1]
    if count == 0:  # only for q == 0 with an empty first bucket: Go's 0/0 is NaN
        return math.nan
    return start + (end - start) * (rank / count)


def windowed_quantile(q: float, earlier: HistogramSeries, later: HistogramSeries) -> float:
    """``histogram_quantile(q, histogram_delta(earlier, later))``: the quantile of one window.

    Args:
        q: quantile in [0, 1].
        earlier: series at the window start.
        later: series at the window end.

    Returns:
        The estimate; NaN when the window holds no observations.

    Raises:
        TelemetryError: the bucket layouts differ.
    """
    return histogram_quantile(q, histogram_delta(earlier, later))
