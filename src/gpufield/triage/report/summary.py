"""One-screen terminal summary (rich): verdict, blamed entity, action, 3-8 evidence lines, other incidents."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from gpufield.triage.engine.model import Incident
from gpufield.triage.events import Event

if TYPE_CHECKING:
    from gpufield.triage.analyze import TriageResult

MAX_EVIDENCE = 8
#: cascade kinds shown first (closest to the root first); at most one line per kind
_CASCADE_ORDER = ("ib_completion_error", "ib_async_event", "nic_link_state", "nccl_remote_error", "nccl_system_error",
                  "nccl_warn", "cuda_error", "cuda_illegal_address", "python_exception", "heartbeat_timeout",
                  "watchdog_timeout", "watchdog_blocked", "flight_recorder", "last_enqueued", "child_failed",
                  "signal_death")
# syslog / journal / dmesg / glog / torch-rank prefixes in front of the message
_PREFIX = re.compile(
    r"^(?:\[(?:rank|default)\d+\]:)?(?:\w{3} +\d+ [\d:.]+ \S+ \S+: |\d{4}-\d\d-\d\dT\S+ \S+ \S+: )?"
    r"(?:\[[^\]]*\d+\.\d+\] ?)?(?:\[?[IWEF]\d{0,4}(?: [\d:.]+)?(?: \d+)? [\w./<>-]+:\d+\] ?)?"
    r"(?:[^\s:\[\]]+:\d+:\d+ \[\d+\] (?:[\w./-]+:\d+ )?)?")
#: what the parsers understand, said when no line of the input was recognised
UNDERSTOOD = ("kernel log / dmesg / journalctl / syslog (NVRM Xid, PCIe AER, OOM killer), NCCL debug output, "
              "PyTorch (ProcessGroupNCCL watchdog, CUDA errors, tracebacks), torchrun / elastic, training "
              "output (loss lines), nvidia-smi -q, DCGM / Prometheus text")
#: what to collect when no line of the input was recognised
COLLECT_WHEN_NOTHING = (
    "the kernel log of every node of the job (dmesg -T or journalctl -k; the NVRM Xid lines)",
    "the job's output run with NCCL_DEBUG=INFO",
    "every rank's torchrun / PyTorch log (stdout and stderr)",
)
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


def display_line(e: Event) -> str:
    """A short, readable form of an event for the terminal: the message without log prefixes."""
    f = e.fields
    if e.kind == "child_failed":
        sig = f" ({f['signal_name']})" if f.get("signal_name") else ""
        return (f"ChildFailedError: host {e.host or '?'} rank {e.rank if e.rank is not None else '?'} "
                f"exitcode {f.get('exitcode', e.code)}{sig}")
    first = e.raw.strip().splitlines()[0] if e.raw.strip() else e.kind
    return _PREFIX.sub("", first).strip() or first


def where_of(e: Event) -> str:
    """``parent/name:line`` of an event's file (the terminal's short form of file:line)."""
    return f"{'/'.join(e.file.replace(chr(92), '/').split('/')[-2:])}:{e.line}"


def _sources(result: TriageResult) -> str:
    return "bundled example incident" if result.example else ", ".join(
        "standard input" if p == "-" else p for p in result.inputs)


def _nothing_recognised(result: TriageResult) -> bool:
    """No line of any input became an event (text was read, but none of it is a known log format)."""
    return not result.events and not result.stats.get("events")


def one_line(result: TriageResult) -> str:
    """The verdict as one plain line (``--quiet``)."""
    v = result.verdict
    if v is None:
        if _nothing_recognised(result):
            return f"no failure signature found: no line of {_sources(result)} was recognised as a log record"
        return "no failure signature found"
    label = v.cls if v.established else f"{v.cls} (root UNKNOWN)"
    return f"{label} [{blamed(v)}] conf={v.confidence:.2f} {v.action_kind}: {v.action}"


def _evidence_table(inc: Incident, width: int) -> Table:
    """Evidence rows: ``role  n  parent/file:line`` on one line, the log line under it. Nothing is
    cut: a location or line longer than the terminal wraps (folds) instead of ending in an ellipsis."""
    t = Table(show_header=True, header_style="bold", box=None, pad_edge=False, expand=True)
    t.add_column("role", style="dim", no_wrap=True, width=7)
    t.add_column("n", justify="right", no_wrap=True, width=4)
    t.add_column("where / line", overflow="fold", ratio=1)
    roots = [x for x in inc.evidence if x.role == "root" and x.event.kind != "gpu_map"]
    rank = {k: i for i, k in enumerate(_CASCADE_ORDER)}
    casc, kinds = [], set()
    for x in sorted((x for x in inc.evidence if x.role == "cascade"),
                    key=lambda x: (rank.get(x.event.kind, len(rank)), -x.count)):
        if x.event.kind not in kinds and x.event.kind not in ("loss", "nccl_return", "pg_teardown"):
            kinds.add(x.event.kind)
            casc.append(x)
    shown = roots[: max(3, MAX_EVIDENCE - min(len(casc), 5))]
    shown += casc[: MAX_EVIDENCE - len(shown)]
    for x in shown:
        e = x.event
        t.add_row(x.role, f"x{x.count}" if x.count > 1 else "", Text(where_of(e), style="cyan"))
        text = display_line(e)
        cap = max(60, (width - 20) * 2)  # the log line: at most ~2 wrapped lines (the file:line is never cut)
        t.add_row("", "", Text(text if len(text) <= cap else text[:cap - 1] + "…"))
    return t


def render(result: TriageResult, console: Console | None = None) -> None:
    """Print the one-screen summary of ``result`` to ``console`` (stdout by default)."""
    console = console or Console()
    v = result.verdict
    src = _sources(result)
    if v is None:
        if _nothing_recognised(result):
            lines = result.stats.get("lines")
            body = Text(f"No failure signature found: no line of {src} was recognised as a log record"
                        + (f" ({lines} line(s) read)" if lines is not None else "") + ".\n")
            body.append(f"understood: {UNDERSTOOD}\n", style="dim")
            body.append("collect next: ", style="bold")
            body.append("; ".join(COLLECT_WHEN_NOTHING))
        else:
            body = Text(f"No failure signature found in {len(result.events)} events ({src}).")
        console.print(Panel(body, title=Text("gpufield triage")))
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
    console.print(Panel(Group(*parts), title=Text(f"gpufield triage: {src}"), title_align="left"))
    if len(result.incidents) > 1:
        t = Table(title="other incidents (less likely roots)", title_justify="left", box=None)
        for col in ("class", "root cause", "conf", "blamed", "action"):
            t.add_column(col)
        for inc in result.incidents[1:6]:
            t.add_row(inc.cls, inc.root_cause, f"{inc.confidence:.2f}", Text(blamed(inc)), inc.action_kind)
        console.print(t)
    files = result.stats.get("files_read", "?")
    offs = ", ".join(f"{h} {o:+.1f}s" for h, o in result.clock_offsets_s.items() if abs(o) >= 0.5)
    console.print(Text(f"{len(result.events)} events from {files} file(s)"
                       + (f"; clock offsets corrected: {offs}" if offs else ""), style="dim"))
