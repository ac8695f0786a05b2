"""Hand-made SVG geometry for the HTML report (no plotting library, no network): lanes and line charts.

Everything here returns plain data (coordinates, labels, colours) that ``templates/report.html.j2``
turns into inline ``<svg>`` elements. Times are ns since the epoch (UTC).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

#: plot geometry (px)
WIDTH = 1100
LEFT = 190
RIGHT = 60
#: colour per series (tab10)
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
           "#17becf")
#: telemetry plots: title, unit label, metric predicate, scale to the unit shown
PANELS: tuple[tuple[str, str, Callable[[str], bool], float], ...] = (
    ("GPU power", "W", lambda m: m == "power_w", 1.0),
    ("SM clock", "MHz", lambda m: m == "sm_clock_hz", 1e-6),
    ("memory clock", "MHz", lambda m: m == "mem_clock_hz", 1e-6),
    ("ECC error counters", "count", lambda m: m.startswith("ecc_"), 1.0),
)


def ticks(t0: int, t1: int, n: int = 6) -> list[tuple[float, str]]:
    """About ``n`` evenly spaced time ticks between ``t0`` and ``t1`` (ns): (fraction 0..1, label)."""
    span = max(t1 - t0, 1)
    step_s = span / 1e9 / n
    nice = min((s for s in (0.001, 0.01, 0.1, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200,
                            21600, 43200, 86400) if s >= step_s), default=86400 * math.ceil(step_s / 86400))
    step = int(nice * 1e9)
    first = (t0 + step - 1) // step * step
    fmt = "%H:%M:%S.%f" if nice < 1 else "%H:%M:%S" if span < 86400e9 else "%m-%d %H:%M"
    out = []
    t = first
    while t <= t1 and len(out) < 3 * n:
        label = datetime.fromtimestamp(t / 1e9, tz=UTC).strftime(fmt)
        out.append(((t - t0) / span, label[:-3] if fmt.endswith("%f") else label))
        t += step
    return out


@dataclass(frozen=True, slots=True)
class Series:
    """One line of a chart: label, colour and polyline points (px)."""

    label: str
    colour: str
    points: str
    last: str


def line_chart(title: str, unit: str, series: dict[str, list[tuple[int, float]]], *, t0: int | None = None,
               t1: int | None = None, height: int = 150, step: bool = False,
               marks: Sequence[tuple[int, str]] = ()) -> dict[str, Any] | None:
    """Geometry of one time-series chart (None when there is nothing to draw).

    Args:
        title, unit: chart title and y-axis unit.
        series: label -> [(ts_ns, value)] (sorted here).
        t0, t1: x range (default: the data's).
        height: px.
        step: draw as a step function (counters).
        marks: vertical markers (ts_ns, label), e.g. the root event.
    """
    pts = {k: sorted(v) for k, v in series.items() if v}
    if not pts:
        return None
    ts = [t for v in pts.values() for t, _ in v]
    vals = [y for v in pts.values() for _, y in v]
    t0 = min(ts) if t0 is None else t0
    t1 = max(ts) if t1 is None else t1
    span = max(t1 - t0, 1)
    lo, hi = min(vals), max(vals)
    if lo == hi:
        lo, hi = lo - 1, hi + 1
    lo = min(lo, 0) if lo >= 0 and lo < 0.5 * hi else lo
    top, bottom = 22, height - 24
    plot_w = WIDTH - LEFT - RIGHT

    def x(t: int) -> float:
        return round(LEFT + plot_w * (t - t0) / span, 1)

    def y(v: float) -> float:
        return round(bottom - (bottom - top) * (v - lo) / (hi - lo), 1)

    lines = []
    for i, (label, v) in enumerate(sorted(pts.items())):
        coords: list[str] = []
        prev = None
        for t, val in v:
            if step and prev is not None:
                coords.append(f"{x(t)},{y(prev)}")
            coords.append(f"{x(t)},{y(val)}")
            prev = val
        lines.append(Series(label, PALETTE[i % len(PALETTE)], " ".join(coords), f"{v[-1][1]:.4g}"))
    step_v = (hi - lo) / 4
    dec = 0 if step_v >= 1 else min(6, 1 - math.floor(math.log10(step_v)))
    yt = [(y(lo + step_v * k), f"{lo + step_v * k:.{dec}f}") for k in range(5)]
    return {"title": title, "unit": unit, "height": height, "width": WIDTH, "left": LEFT, "right": WIDTH - RIGHT,
            "top": top, "bottom": bottom, "series": lines, "yticks": yt,
            "xticks": [(round(LEFT + plot_w * f, 1), lab) for f, lab in ticks(t0, t1)],
            "marks": [(x(t), lab) for t, lab in marks if t0 <= t <= t1]}


def telemetry_charts(samples: Iterable[Any], *, marks: Sequence[tuple[int, str]] = ()) -> list[dict[str, Any]]:
    """The report's telemetry panels (power, SM and memory clocks, ECC) from telemetry samples
    (objects with ``ts_ns``, ``metric``, ``value``, ``host``, ``gpu_index``/``pci_bdf``); one line per
    host and GPU (per counter for ECC). Times are as recorded (each host's own clock)."""
    by_panel: dict[int, dict[str, list[tuple[int, float]]]] = defaultdict(lambda: defaultdict(list))
    for s in samples:
        for k, (_t, _u, pred, scale) in enumerate(PANELS):
            if pred(s.metric):
                gpu = s.gpu_index if s.gpu_index is not None else (s.pci_bdf or s.gpu_uuid or "?")
                label = f"{s.host or '?'} GPU {gpu}" + (f" {s.metric}" if s.metric.startswith("ecc_") else "")
                by_panel[k][label].append((s.ts_ns, s.value * scale))
                break
    out = []
    for k, (title, unit, _p, _s) in enumerate(PANELS):
        if k in by_panel:
            chart = line_chart(title, unit, by_panel[k], step=title.startswith("ECC"), marks=marks)
            if chart:
                out.append(chart)
    return out


def xid_chart(events: Iterable[Any], t_of: Callable[[Any], int | None], *, t0: int | None, t1: int | None,
              marks: Sequence[tuple[int, str]] = ()) -> dict[str, Any] | None:
    """Cumulative Xid count per host and Xid code over skew-corrected time (step chart)."""
    per: dict[str, list[int]] = defaultdict(list)
    for e in events:
        if e.kind == "xid":
            t = t_of(e)
            if t is not None:
                per[f"{e.host or '?'} Xid {e.code}"].append(t)
    series = {k: [(t, float(i + 1)) for i, t in enumerate(sorted(v))] for k, v in per.items()}
    if not series:
        return None
    if t0 is not None and t1 is not None:
        for v in series.values():  # hold the count to the end of the timeline
            v.append((max(t1, v[-1][0]), v[-1][1]))
    return line_chart("Xid events (cumulative, skew-corrected time)", "count", series, t0=t0, t1=t1, step=True,
                      marks=marks)
