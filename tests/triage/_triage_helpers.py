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
