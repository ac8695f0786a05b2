"""Helpers shared by the parser test modules (imported by name: pytest puts this folder on sys.path)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from gpufield.triage.ingest import IngestOptions, ingest

DATA = Path(__file__).parent / "data"


def by_line(path: Path) -> dict:
    """Events of one fixture file keyed by line number; fails on two events at one line."""
    out = {}
    for e in ingest([path], options=IngestOptions(year=2026)).events:
        assert e.line not in out, f"two events at {e.where}"
        out[e.line] = e
    return out


def ns(*args: int, us: int = 0) -> int:
    """UTC datetime fields -> ns since the epoch."""
    return int(datetime(*args, tzinfo=UTC).timestamp()) * 10**9 + us * 1000


def events_of_text(tmp_path: Path, text: str, name: str = "x.log"):
    """Events of ``text`` through the real ingestion path (keyword scan, prefilters, parser order)."""
    p = tmp_path / name
    p.write_text(text + "\n", encoding="utf-8")
    return ingest([p], options=IngestOptions(year=2026)).events


def top_incident_of_text(tmp_path: Path, text: str):
    """The engine's first incident for ``text`` written as one job log (``None`` when there is none)."""
    from gpufield.triage import analyze

    p = tmp_path / "job.log"
    p.write_text(text + "\n", encoding="utf-8")
    incs = analyze([str(p)]).incidents
    return incs[0] if incs else None


def check_dev_row(corpus: Path, case, url: str, *, blame: bool = True) -> None:
    """A dev row of a corpus is right on class, action (and blame) under its own label, and its INDEX line
    cites ``url`` (the thread the fix was written from)."""
    from gpufield.triage import analyze
    from gpufield.triage.evaluate import score

    assert case.split == "dev"  # never a test-half row
    line = (corpus / "INDEX.md").read_text(encoding="utf-8").split(f"| {case.number} |", 1)[1].split("\n", 1)[0]
    assert url in line
    res = analyze([str(corpus / p) for p in case.paths])
    top = res.incidents[0] if res.incidents else None
    r = score(case, [(i.cls, i.established, i.confidence) for i in res.incidents], top)
    assert r.correct, (case.number, r.predicted, case.label)
    if blame:
        assert r.blame_ok is not False, (case.number, top and (top.host, top.rank, top.gpu))
    assert r.action_ok is not False, (case.number, top and (top.action_kind, top.action, top.next_evidence))
