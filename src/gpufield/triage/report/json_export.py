"""JSON export of a :class:`~gpufield.triage.analyze.TriageResult` (for CI and dashboards).

Schema ``gpufield.triage.result/1``::

    {
      "schema": "gpufield.triage.result/1",
      "inputs": [str], "example": bool, "stats": {...}, "clock_offsets_s": {host: float},
      "verdict": {"class", "root_cause", "confidence", "action_kind", "action"} | null,
      "incidents": [              # most likely root first
        {"class": str,            # triage.md 5.3 taxonomy
         "root_cause": str,       # == class when established, else "UNKNOWN"
         "established": bool, "confidence": float,
         "action_kind": "RETRY|EXCLUDE_NODE|RESET_GPU|FIX_CONFIG|STOP", "action": str,
         "next_evidence": [str],
         "blamed": {"host", "gpu", "rank"},   # the entity the action targets (null: not identified)
         "root": {"host", "rank", "gpu", "gpu_bdf", "gpu_uuid", "file", "line", "time", "time_corrected",
                  "kind", "raw"},
         "cascade_count": int, "cascade_classes": [str], "rule": str, "note": str,
         "evidence": [{"role": "root|cascade", "file", "line", "host", "rank", "kind", "time",
                       "raw", "count", "ranks", "hosts"}]}
      ]
    }

Times are ISO 8601 UTC strings or null. ``time`` is always the time as logged (the same value for the
root line in ``root`` and in ``evidence``); ``root.time_corrected`` is the clock-skew corrected time
the engine ordered it by (equal to ``time`` when no offset was estimated for its host). ``root`` locates the
root evidence line (its host/rank fall back to the reporting event's); ``blamed`` is what the rules
blame, null where the logs do not name it (e.g. the victim side of a peer exit).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from gpufield.triage.engine.model import EvidenceLine, Incident

if TYPE_CHECKING:
    from gpufield.triage.analyze import TriageResult

SCHEMA = "gpufield.triage.result/1"


def iso(ts_ns: int | None) -> str | None:
    """ISO 8601 UTC text of a ns timestamp, or None."""
    if ts_ns is None:
        return None
    return datetime.fromtimestamp(ts_ns / 1e9, tz=UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _jsonable(v: Any) -> Any:
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, list | tuple | set | frozenset):
        return [_jsonable(x) for x in v]
    if isinstance(v, str | int | float | bool) or v is None:
        return v
    return str(v)


def evidence_dict(line: EvidenceLine) -> dict[str, Any]:
    """One evidence line as a JSON object."""
    e = line.event
    return {"role": line.role, "file": e.file, "line": e.line, "host": e.host, "rank": e.rank, "kind": e.kind,
            "time": iso(e.ts_ns), "raw": e.raw, "count": line.count, "ranks": list(line.ranks),
            "hosts": list(line.hosts)}


def incident_dict(inc: Incident) -> dict[str, Any]:
    """One incident as a JSON object (see the module docstring for the schema)."""
    r = inc.root
    return {
        "class": inc.cls, "root_cause": inc.root_cause, "established": inc.established,
        "confidence": inc.confidence, "action_kind": inc.action_kind, "action": inc.action,
        "next_evidence": list(inc.next_evidence),
        "blamed": {"host": inc.host, "gpu": inc.gpu, "rank": inc.rank},
        "root": {"host": inc.host or r.host, "rank": inc.rank if inc.rank is not None else r.rank,
                 "gpu": inc.gpu, "gpu_bdf": r.gpu_bdf, "gpu_uuid": r.gpu_uuid, "file": r.file, "line": r.line,
                 "time": iso(r.ts_ns), "time_corrected": iso(inc.t_ns), "kind": r.kind, "raw": r.raw},
        "cascade_count": inc.cascade_count, "cascade_classes": list(inc.cascade_classes), "rule": inc.rule,
        "note": inc.note, "evidence": [evidence_dict(x) for x in inc.evidence],
        "evidence_lines": list(inc.evidence_lines), "peer": inc.peer,
        "competitors": [c.to_dict() for c in inc.competitors],
    }


def to_dict(result: TriageResult) -> dict[str, Any]:
    """The whole result as a JSON-serialisable dict."""
    v = result.verdict
    return {
        "schema": SCHEMA, "inputs": list(result.inputs), "example": result.example,
        "stats": _jsonable(result.stats), "clock_offsets_s": dict(result.clock_offsets_s),
        "verdict": None if v is None else {"class": v.cls, "root_cause": v.root_cause, "confidence": v.confidence,
                                           "action_kind": v.action_kind, "action": v.action,
                                           "blamed": {"host": v.host, "rank": v.rank, "gpu": v.gpu, "peer": v.peer},
                                           "evidence_lines": list(v.evidence_lines)[:20],
                                           "beat": [c.to_dict() for c in v.competitors]},
        "incidents": [incident_dict(i) for i in result.incidents],
        "warnings": [{"message": m, "evidence": [e.where for e in ev[:20]], "count": len(ev)}
                     for m, ev in (result.engine.warnings if result.engine is not None else ())],
    }


def dumps(result: TriageResult, *, indent: int | None = 2) -> str:
    """JSON text of :func:`to_dict`."""
    return json.dumps(to_dict(result), indent=indent, ensure_ascii=False)
