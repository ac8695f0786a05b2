"""Self-contained HTML report: verdict, inline-SVG timeline of events by host and rank, evidence lines.

One file, no external assets (no scripts, fonts, images or stylesheets are fetched), rendered with a
Jinja2 template shipped in ``report/templates``. Writing never replaces an existing file unless the
caller asks for it (``force=True``).
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from gpufield.errors import InputError
from gpufield.triage.engine.model import Tier
from gpufield.triage.report.json_export import iso
from gpufield.triage.report.summary import blamed

if TYPE_CHECKING:
    from gpufield.triage.analyze import TriageResult

LANE_H = 18
LEFT = 170
WIDTH = 1100
MAX_LANES = 64
MAX_DOTS = 4000  # beyond this the page stays readable: root evidence is always drawn, the rest sampled
#: colour per event source family (hardware red ... teardown grey)
COLOURS = {"kernel": "#d62728", "smi": "#d62728", "dcgm": "#ff7f0e", "nccl": "#ff7f0e", "cuda": "#9467bd",
           "train": "#2ca02c", "torch": "#1f77b4", "torchrun": "#7f7f7f", "tool": "#17becf"}


@dataclass(frozen=True, slots=True)
class Dot:
    """One event drawn on the timeline."""

    x: float
    y: float
    colour: str
    title: str
    root: bool


def _lane(e) -> str:
    host = e.host or Path(e.file).name
    return f"{host} / rank {e.rank}" if e.rank is not None else f"{host}"


def timeline_svg_data(result: TriageResult) -> dict:
    """Lanes, dots and axis labels for the template's inline SVG."""
    skip = {"loss", "gpu_map", "metric_sample", "nccl_init", "nccl_bootstrap"}
    events = [e for e in result.events if e.kind not in skip and e.severity not in ("debug", "info")]
    if len(events) > MAX_DOTS:
        keep = {id(x.event) for inc in result.incidents for x in inc.evidence}
        step = len(events) // MAX_DOTS + 1
        events = [e for i, e in enumerate(events) if id(e) in keep or i % step == 0]
    lanes = sorted({_lane(e) for e in events}, key=lambda s: (s.split(" / ")[0], len(s), s))[:MAX_LANES]
    index = {lane: i for i, lane in enumerate(lanes)}
    tl = result.engine.timeline if result.engine else None
    times = [tl.t(e) for e in events] if tl else [e.ts_ns for e in events]
    known = [t for t in times if t is not None]
    t0, t1 = (min(known), max(known)) if known else (0, 1)
    span = max(t1 - t0, 1)
    roots = {id(x.event) for inc in result.incidents[:1] for x in inc.evidence if x.role == "root"}
    dots = []
    untimed = 0
    for e, t in zip(events, times, strict=True):
        lane = _lane(e)
        if lane not in index:
            continue
        if t is None:  # untimed events: a strip at the right, in file order
            x = WIDTH - 40 + (untimed % 30)
            untimed += 1
        else:
            x = LEFT + (WIDTH - LEFT - 60) * (t - t0) / span
        title = f"{e.file}:{e.line} {e.kind} {iso(t) or 'no time'}\n{e.raw[:300]}"
        dots.append(Dot(round(x, 1), 20 + index[lane] * LANE_H, COLOURS.get(e.source, "#444"), title, id(e) in roots))
    return {"lanes": [(lane, 20 + i * LANE_H) for i, lane in enumerate(lanes)], "dots": dots,
            "height": 40 + len(lanes) * LANE_H, "width": WIDTH, "left": LEFT,
            "t0": iso(t0) if known else None, "t1": iso(t1) if known else None, "untimed": untimed}


def render_html(result: TriageResult) -> str:
    """The report as one HTML string."""
    import jinja2  # lazily: a plain `gpufield triage` never renders HTML

    env = jinja2.Environment(
        loader=jinja2.FunctionLoader(
            lambda name: (resources.files("gpufield.triage.report") / "templates" / name).read_text("utf-8")),
        autoescape=True, trim_blocks=True, lstrip_blocks=True)
    tpl = env.get_template("report.html.j2")
    return tpl.render(result=result, incidents=result.incidents, svg=timeline_svg_data(result), blamed=blamed,
                      iso=iso, colours=COLOURS, tiers=[t.name for t in Tier])


def write_html(result: TriageResult, path: str | os.PathLike[str], *, force: bool = False) -> Path:
    """Write the report to ``path``.

    Args:
        result: what to render.
        path: output file.
        force: replace ``path`` if it exists.

    Returns:
        The path written.

    Raises:
        InputError: ``path`` exists and ``force`` is False, or its directory does not exist.
    """
    out = Path(path)
    if out.exists() and not force:
        raise InputError("file exists; refusing to overwrite it (pass --force to replace it)", path=str(out))
    if not out.parent.is_dir():
        raise InputError("directory does not exist", path=str(out.parent))
    html = render_html(result)
    fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(html)
        mask = os.umask(0o022)  # mkstemp makes 0600; give the mode a new file gets (0644 under umask 022)
        os.umask(mask)
        os.chmod(tmp, 0o666 & ~mask)
        if out.exists() and not force:  # appeared meanwhile
            raise InputError("file exists; refusing to overwrite it (pass --force to replace it)", path=str(out))
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return out
