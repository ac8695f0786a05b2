"""Self-contained HTML report: verdict, inline-SVG timelines by host and rank, evidence, telemetry plots.

One file, no external assets and no scripts (no fonts, images or stylesheets are fetched), rendered
with a Jinja2 template shipped in ``report/templates``. The timeline has one lane per host (host-level
lines: kernel, nvidia-smi) and one per host and rank; the blamed host's lanes are shaded and the
blamed rank's lane is outlined; root evidence is ringed, cascade evidence outlined. Its x axis is
the skew-corrected time (each host's estimated clock offset removed, labelled so); a second view
with the raw logged times is one click away (a CSS-only toggle), and every dot's tooltip gives
file:line, the logged and the corrected time. Below it: Xid counts over time, and, when telemetry is
given (``--telemetry`` files, or DCGM samples among the logs), power, SM / memory clock and ECC
charts per host and GPU, each in its host's own clock. Writing never replaces an existing file unless the
caller asks for it (``force=True``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpufield.triage.engine.model import Tier
from gpufield.triage.report import plots
from gpufield.triage.report.json_export import iso
from gpufield.triage.report.summary import blamed

if TYPE_CHECKING:
    from gpufield.triage.analyze import TriageResult

LANE_H = 18
LEFT = plots.LEFT
WIDTH = plots.WIDTH
MAX_LANES = 64
MAX_DOTS = 4000  # beyond this the page stays readable: evidence is always drawn, the rest sampled
#: colour per event source family (hardware red ... teardown grey)
COLOURS = {"kernel": "#d62728", "smi": "#d62728", "dcgm": "#ff7f0e", "nccl": "#ff7f0e", "cuda": "#9467bd",
           "train": "#2ca02c", "torch": "#1f77b4", "torchrun": "#7f7f7f", "tool": "#17becf"}
_SKIP = {"loss", "gpu_map", "metric_sample", "nccl_init", "nccl_bootstrap"}


@dataclass(frozen=True, slots=True)
class Dot:
    """One event drawn on the timeline (``role``: ``root``, ``cascade`` or ``""``)."""

    x: float
    y: float
    colour: str
    title: str
    role: str


def _lane(e) -> tuple[str, int]:
    """(host, rank or -1): one lane per host for host-level lines, one per host and rank."""
    return (e.host or Path(e.file).name, e.rank if e.rank is not None else -1)


def _lane_label(lane: tuple[str, int]) -> str:
    return f"{lane[0]} / rank {lane[1]}" if lane[1] >= 0 else f"{lane[0]} (host)"


def timeline_svg_data(result: TriageResult, *, corrected: bool = True) -> dict:
    """Lanes, dots and axis of one timeline view for the template's inline SVG.

    Args:
        result: the analysis.
        corrected: x = skew-corrected time (host offsets removed) when True, else each line's raw
            logged time.
    """
    events = [e for e in result.events if e.kind not in _SKIP and e.severity not in ("debug", "info")]
    top = result.incidents[0] if result.incidents else None
    role = {}
    for inc in result.incidents[:1]:
        for x in inc.evidence:
            role.setdefault(id(x.event), x.role)
    if len(events) > MAX_DOTS:
        step = len(events) // MAX_DOTS + 1
        events = [e for i, e in enumerate(events) if id(e) in role or i % step == 0]
    tl = result.engine.timeline if result.engine else None
    times = [tl.t(e) if (tl and corrected) else e.ts_ns for e in events]
    blamed_host = top.host if top else None
    blamed_rank = top.rank if top else None
    lanes_all = {_lane(e) for e in events}
    if blamed_host and blamed_rank is not None:  # the blamed rank gets its row even when it logged nothing
        lanes_all.add((blamed_host, blamed_rank))  # (the silent rank is the usual case)
    lanes_all = sorted(lanes_all)
    keep = {_lane(e) for e in events if id(e) in role}
    keep |= {ln for ln in lanes_all if ln[0] == blamed_host and ln[1] in (-1, blamed_rank)}
    lanes = [ln for ln in lanes_all if ln in keep]
    lanes += [ln for ln in lanes_all if ln not in keep][:max(0, MAX_LANES - len(lanes))]
    lanes.sort()
    index = {ln: i for i, ln in enumerate(lanes)}
    known = [t for t in times if t is not None]
    t0, t1 = (min(known), max(known)) if known else (0, 1)
    span = max(t1 - t0, 1)
    plot_w = WIDTH - LEFT - 60
    dots, untimed = [], 0
    for e, t in zip(events, times, strict=True):
        ln = _lane(e)
        if ln not in index:
            continue
        if t is None:  # untimed events: a strip at the right, in file order
            x = WIDTH - 40 + (untimed % 30)
            untimed += 1
        else:
            x = LEFT + plot_w * (t - t0) / span
        raw_t, cor_t = iso(e.ts_ns), iso(tl.t(e)) if tl else None
        when = f"logged {raw_t or 'no time'}" + (f", corrected {cor_t}" if cor_t and cor_t != raw_t else "")
        title = f"{e.file}:{e.line} {e.kind} ({when})\n{e.raw[:300]}"
        dots.append(Dot(round(x, 1), 20 + index[ln] * LANE_H, COLOURS.get(e.source, "#444"), title, role.get(id(e), "")))
    rows = [{"label": _lane_label(ln)[:30], "y": 20 + i * LANE_H,
             "blamed": "rank" if (ln[0] == blamed_host and ln[1] == blamed_rank and ln[1] >= 0)
             else "host" if ln[0] == blamed_host and blamed_host else ""} for i, ln in enumerate(lanes)]
    return {"lanes": rows, "dots": dots, "height": 44 + len(lanes) * LANE_H, "width": WIDTH, "left": LEFT,
            "xticks": [(round(LEFT + plot_w * f, 1), lab) for f, lab in plots.ticks(t0, t1)] if known else [],
            "t0": iso(t0) if known else None, "t1": iso(t1) if known else None, "untimed": untimed,
            "hidden_lanes": len(lanes_all) - len(lanes), "corrected": corrected}


def render_html(result: TriageResult, *, telemetry: Sequence[Any] = ()) -> str:
    """The report as one self-contained HTML string.

    Args:
        result: the analysis.
        telemetry: :class:`~gpufield.triage.telemetry_input.Sample` objects (``--telemetry``); the
            logs' own DCGM samples are plotted too.
    """
    import jinja2  # lazily: a plain `gpufield triage` never renders HTML

    env = jinja2.Environment(
        loader=jinja2.FunctionLoader(
            lambda name: (resources.files("gpufield.triage.report") / "templates" / name).read_text("utf-8")),
        autoescape=True, trim_blocks=True, lstrip_blocks=True)
    tpl = env.get_template("report.html.j2")
    tl = result.engine.timeline if result.engine else None
    top = result.incidents[0] if result.incidents else None
    marks = [(top.t_ns, "root")] if top and top.t_ns is not None else []
    corrected = timeline_svg_data(result, corrected=True)
    t_of = (lambda e: tl.t(e)) if tl else (lambda e: e.ts_ns)
    timed = [t for t in (t_of(e) for e in result.events if e.kind not in _SKIP) if t is not None]
    charts = []
    xid = plots.xid_chart(result.events, t_of, t0=min(timed, default=None), t1=max(timed, default=None), marks=marks)
    if xid:
        charts.append(xid)
    log_samples = [_LogSample(e) for e in result.events
                   if e.kind == "metric_sample" and e.ts_ns is not None and isinstance(e.fields.get("value"), int | float)]
    # telemetry is in each host's own clock: mark the root at its logged time there
    raw_marks = [(top.root.ts_ns, "root (as logged)")] if top and top.root.ts_ns is not None else []
    charts += plots.telemetry_charts([*telemetry, *log_samples], marks=raw_marks)
    return tpl.render(result=result, incidents=result.incidents, svg=corrected,
                      svg_raw=timeline_svg_data(result, corrected=False), charts=charts, blamed=blamed, iso=iso,
                      colours=COLOURS, tiers=[t.name for t in Tier], n_telemetry=len(telemetry) + len(log_samples),
                      offsets={h: o for h, o in result.clock_offsets_s.items()})


class _LogSample:
    """A DCGM / Prometheus ``metric_sample`` event seen as a telemetry sample."""

    __slots__ = ("ts_ns", "metric", "value", "host", "gpu_index", "pci_bdf", "gpu_uuid")

    def __init__(self, e) -> None:
        from gpufield.triage.telemetry_input import _DCGM

        name = str(e.fields.get("metric") or "")
        metric, scale = _DCGM.get(name, (name, 1.0))
        self.ts_ns, self.metric, self.value = e.ts_ns, metric, float(e.fields["value"]) * scale
        self.host, self.gpu_index, self.pci_bdf, self.gpu_uuid = e.host, e.gpu_index, e.gpu_bdf, e.gpu_uuid


def write_html(result: TriageResult, path: str | os.PathLike[str], *, force: bool = False,
               telemetry: Sequence[Any] = ()) -> Path:
    """Write the report to ``path`` (a temporary file beside it, then a rename).

    Args:
        result: what to render.
        path: output file.
        force: replace ``path`` if it is an existing regular file.
        telemetry: samples to plot (see :func:`render_html`).

    Returns:
        The path written.

    Raises:
        InputError: ``path`` exists and ``force`` is False; it is a device, FIFO, directory,
            symbolic link or one of the analysed files; its directory is missing or not writable.
    """
    from gpufield._files import atomic_write, check_output

    check_output(path, force=force, inputs=result.files, option="--html")
    return atomic_write(path, render_html(result, telemetry=telemetry), force=force, inputs=result.files,
                        option="--html")
