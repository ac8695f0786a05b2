"""One-screen terminal summary (rich): verdict, blamed entity, action, 3-8 evidence lines, other incidents."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from gpufield.triage.engine.model import Incident

if TYPE_CHECKING:
    from gpufield.triage.analyze import TriageResult

MAX_EVIDENCE = 8
_KIND_STYLE = {"RETRY": "yellow", "EXCLUDE_NODE": "bold red", "RESET_GPU": "bold red", "FIX_CONFIG": "cyan",
               "STOP": "bold magenta"}


def blamed(inc: Incident) -> str:
    """``host h, GPU g, rank r`` for the parts that are known ("-" when none)."""
    parts = []
    if inc.host:
        parts.append(f"host {inc.host}")
    if inc.gpu:
        parts.append(f"GPU {inc.gpu}" if not inc.gpu.startswith("GPU") else inc.gpu)
    if inc.rank is not None:
        parts.append(f"rank {inc.rank}")
    return ", ".join(parts) or "-"


def one_line(result: TriageResult) -> str:
    """The verdict as one plain line (``--quiet``)."""
    v = result.verdict
    if v is None:
        return "no failure signature found"
    root = v.root_cause if v.established else f"root UNKNOWN ({v.cls})"
    return f"{v.cls if v.established else root} [{blamed(v)}] conf={v.confidence:.2f} {v.action_kind}: {v.action}"


def _evidence_table(inc: Incident, width: int) -> Table:
    t = Table(show_header=True, header_style="bold", box=None, pad_edge=False, expand=False)
    t.add_column("role", style="dim", no_wrap=True)
    t.add_column("where", no_wrap=True)
    t.add_column("n", justify="right", no_wrap=True)
    t.add_column("line", overflow="ellipsis", no_wrap=True, max_width=max(40, width - 45))
    roots = [x for x in inc.evidence if x.role == "root"]
    casc = sorted((x for x in inc.evidence if x.role == "cascade"), key=lambda x: -x.count)
    shown = roots[: max(3, MAX_EVIDENCE - min(len(casc), 4))]
    shown += casc[: MAX_EVIDENCE - len(shown)]
    for x in shown:
        e = x.event
        where = f"{e.file.rsplit('/', 1)[-1]}:{e.line}"
        first = e.raw.strip().splitlines()[0] if e.raw.strip() else e.kind
        t.add_row(x.role, where, f"x{x.count}" if x.count > 1 else "", first)
    return t


def render(result: TriageResult, console: Console | None = None) -> None:
    """Print the one-screen summary of ``result`` to ``console`` (stdout by default)."""
    console = console or Console()
    v = result.verdict
    src = "bundled example incident" if result.example else ", ".join(result.inputs)
    if v is None:
        console.print(Panel(Text(f"No failure signature found in {len(result.events)} events ({src})."),
                            title="gpufield triage"))
        return
    head = Text()
    head.append(v.cls, style="bold")
    head.append("   root cause: ")
    head.append(v.root_cause, style="bold green" if v.established else "bold yellow")
    head.append(f"   confidence {v.confidence:.2f}\n")
    head.append(f"blamed: {blamed(v)}\n")
    head.append("action: ")
    head.append(v.action_kind, style=_KIND_STYLE.get(v.action_kind, ""))
    head.append(f"  {v.action}\n")
    head.append(f"why: {v.note}\n", style="dim")
    head.append(f"cascade: {v.cascade_count} event(s) explained"
                + (f" ({', '.join(v.cascade_classes)})" if v.cascade_classes else ""))
    parts: list = [head, _evidence_table(v, console.width)]
    if not v.established or v.next_evidence:
        nxt = Text("collect next: ", style="bold")
        nxt.append("; ".join(v.next_evidence[:3]))
        parts.append(nxt)
    console.print(Panel(Group(*parts), title=f"gpufield triage: {src}", title_align="left"))
    if len(result.incidents) > 1:
        t = Table(title="other incidents (less likely roots)", title_justify="left", box=None)
        for col in ("class", "root cause", "conf", "blamed", "action"):
            t.add_column(col)
        for inc in result.incidents[1:6]:
            t.add_row(inc.cls, inc.root_cause, f"{inc.confidence:.2f}", blamed(inc), inc.action_kind)
        console.print(t)
    files = result.stats.get("files", result.stats.get("n_files", "?"))
    if isinstance(files, list | tuple):
        files = len(files)
    offs = ", ".join(f"{h} {o:+.1f}s" for h, o in result.clock_offsets_s.items() if abs(o) >= 0.5)
    console.print(Text(f"{len(result.events)} events from {files} file(s)"
                       + (f"; clock offsets corrected: {offs}" if offs else ""), style="dim"))
