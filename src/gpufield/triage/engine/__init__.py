"""The triage engine: events in, incidents out (internal; the public entry is ``gpufield.triage.analyze``).

Pipeline: :func:`~gpufield.triage.engine.correlate.build_timeline` (skew-corrected order) ->
every rule of :data:`~gpufield.triage.engine.rules.RULES` -> findings ->
:func:`~gpufield.triage.engine.incidents.build_incidents` (root vs cascade, actions).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gpufield.triage.engine import echo
from gpufield.triage.engine.correlate import Timeline, build_timeline
from gpufield.triage.engine.incidents import build_incidents
from gpufield.triage.engine.model import Finding, Incident
from gpufield.triage.engine.phases import PhaseMark
from gpufield.triage.engine.rules import RULES, Rule, RuleContext
from gpufield.triage.engine.topology import Topology
from gpufield.triage.events import Event


@dataclass(frozen=True, slots=True)
class EngineResult:
    """Output of :func:`run_engine`.

    Attributes:
        incidents: most likely root first.
        findings: every rule finding (for debugging and the HTML report).
        timeline: the corrected timeline the rules saw.
        warnings: ``(message, evidence events)`` that are not failures (e.g. NaN grad-norm with a
            finite loss); a run with only warnings has no incident.
    """

    incidents: list[Incident]
    findings: list[Finding]
    timeline: Timeline
    warnings: tuple[tuple[str, tuple[Event, ...]], ...] = ()


def run_engine(events: Sequence[Event], *, phases: Sequence[PhaseMark] = (), skew_tolerance_s: float = 30.0,
               topology: Topology | None = None, rules: Sequence[Rule] = RULES) -> EngineResult:
    """Classify ``events`` into incidents.

    Args:
        events: parsed events, in ingestion order.
        phases: phase markers found in the same inputs (see :mod:`.phases`).
        skew_tolerance_s: cross-host clock uncertainty after correction, seconds.
        topology: extra IP and GPU->rank maps overriding those built from the ``nccl_init`` /
            ``nccl_bootstrap`` events (see :mod:`.topology`); None = from the events only.
        rules: the rule table (default :data:`RULES`); tests may pass a subset.

    Events that quote messages instead of reporting them (echoed commands, argument dumps, help text,
    config banners: :mod:`.echo`) are dropped before the rules and named in a warning.

    Returns:
        An :class:`EngineResult`; no incidents when no rule fired.

    Raises:
        ValueError: ``skew_tolerance_s`` < 0, or a rule emitted a class outside the taxonomy.
    """
    echoed = [e for e in events if echo.is_echo(e.raw)]
    if echoed:
        events = [e for e in events if not echo.is_echo(e.raw)]
    tl = build_timeline(events, skew_tolerance_s=skew_tolerance_s, topology=topology)
    ctx = RuleContext(tl, phases)
    if echoed:
        ctx.warnings.append((f"{len(echoed)} echoed command / argument / banner line(s) quote log messages; "
                             "ignored as evidence (first: " + echoed[0].where + ")", echoed))
    findings: list[Finding] = []
    for rule in rules:
        found = rule(ctx)
        ctx.cite(found)
        findings.extend(found)
    incidents = build_incidents(findings, tl, progress=ctx.kinds("loss"), rejected=ctx.rejected)
    return EngineResult(incidents=incidents, findings=findings, timeline=tl,
                        warnings=tuple((m, tuple(ev)) for m, ev in ctx.warnings))


__all__ = ["EngineResult", "Incident", "Finding", "run_engine"]
