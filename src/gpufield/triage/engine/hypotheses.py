"""Competing hypotheses: why the root of an incident beat the other classes the evidence suggested.

Every finding is a hypothesis (a class, its evidence, its causal tier, whether the logs establish it).
:func:`~gpufield.triage.engine.incidents.build_incidents` orders them (established first, then causal
tier, time, confidence) and folds those a root explains into its cascade; a rule may also *reject* a
hypothesis outright when evidence speaks against it (a SeqNum mismatch whose lagging rank's watchdog
ran for 14x its timeout is a stalled rank, not a desync). This module turns that into the
``competitors`` of each incident: for every other hypothesis, its class, verdict (``explained``,
``outranked`` or ``rejected``), the reason in words and its evidence lines (``file:line``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gpufield.triage.engine.model import Finding, Tier


@dataclass(frozen=True, slots=True)
class Competitor:
    """A hypothesis the incident's root beat.

    Attributes:
        cls: its class.
        confidence: its own confidence (0..1).
        established: whether the logs established it on its own.
        verdict: ``"explained"`` (folded into this incident as a cascade), ``"outranked"`` (its own
            incident, ranked below) or ``"rejected"`` (a rule found evidence against it).
        why: the reason, one sentence.
        evidence: ``file:line`` of its evidence (at most 5).
    """

    cls: str
    confidence: float
    established: bool
    verdict: str
    why: str
    evidence: tuple[str, ...]

    def to_dict(self) -> dict:
        """JSON form."""
        return {"class": self.cls, "confidence": self.confidence, "established": self.established,
                "verdict": self.verdict, "why": self.why, "evidence": list(self.evidence)}


@dataclass(frozen=True, slots=True)
class Rejected:
    """A hypothesis a rule refused because of evidence against it (see :meth:`RuleContext.reject`)."""

    cls: str
    why: str
    evidence: tuple[str, ...]


def _where(f: Finding) -> tuple[str, ...]:
    return tuple(e.where for e in f.evidence[:5])


def beat_reason(root: Finding, other: Finding, *, explained: bool) -> str:
    """Why ``root`` ranks above (or explains) ``other``, in words."""
    if explained:
        if other.tier >= Tier.NCCL:
            return (f"{other.cls} is a cascade-level symptom ({other.tier.name.lower()} tier) that any earlier root "
                    f"produces on victims; {root.cls} ({root.tier.name.lower()} tier) accounts for it")
        if root.tier < other.tier:
            return (f"the {root.tier.name.lower()}-tier fault {root.cls} causes {other.tier.name.lower()}-tier "
                    f"symptoms like {other.cls} on the same entity, and it came first")
        return f"{other.cls} is not established on its own and is consistent with {root.cls} (same entity, same episode)"
    if root.established and not other.established:
        return f"{root.cls} is established by its evidence, {other.cls} is not"
    if root.tier < other.tier:
        return f"causal tier: {root.tier.name.lower()} ({root.cls}) before {other.tier.name.lower()} ({other.cls})"
    if root.t_ns is not None and other.t_ns is not None and root.t_ns < other.t_ns:
        return f"same tier; {root.cls} happened first ({(other.t_ns - root.t_ns) / 1e9:.0f} s earlier)"
    if root.confidence > other.confidence:
        return f"same tier and time; higher confidence ({root.confidence:.2f} vs {other.confidence:.2f})"
    return "ordered after it (performance finding, hint or outside the failure episode)"


def competitors(root: Finding, cascades: Sequence[Finding], later: Sequence[Finding],
                rejected: Sequence[Rejected]) -> tuple[Competitor, ...]:
    """The competitors of one incident: its cascades, the roots ranked below it, and rejected hypotheses."""
    out = [Competitor(c.cls, round(c.confidence, 2), c.established, "explained",
                      beat_reason(root, c, explained=True), _where(c)) for c in cascades if c.cls != root.cls]
    seen = {c.cls for c in out} | {root.cls}
    for o in later:
        if o.cls in seen:
            continue
        seen.add(o.cls)
        out.append(Competitor(o.cls, round(o.confidence, 2), o.established, "outranked",
                              beat_reason(root, o, explained=False), _where(o)))
    out += [Competitor(r.cls, 0.0, False, "rejected", r.why, r.evidence) for r in rejected if r.cls != root.cls]
    return tuple(out)
