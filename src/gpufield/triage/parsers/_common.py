"""Event construction shared by the parsers (internal)."""

from __future__ import annotations

from typing import Any

from gpufield.triage.events import Event
from gpufield.triage.parsers._prefix import Prefix, find_uuid, norm_bdf, split_prefix
from gpufield.triage.protocols import LineContext


def at_line(ctx: LineContext, offset: int) -> LineContext:
    """The context of the line ``offset`` lines after ``ctx.line`` (a record's inner line)."""
    return LineContext(ctx.file, ctx.line + offset, ctx.year, ctx.utc_offset_s, ctx.not_after_ns)


def prefix_of(line: str, ctx: LineContext) -> Prefix:
    """:func:`split_prefix` with the context's year and UTC offset."""
    return split_prefix(line, ctx.year, ctx.utc_offset_s, ctx.not_after_ns)


def event(
    source: str,
    kind: str,
    ctx: LineContext,
    raw: str,
    pre: Prefix,
    *,
    code: Any = None,
    severity: str = "error",
    bdf: str | None = None,
    uuid: str | None = None,
    gpu_index: int | None = None,
    rank: int | None = None,
    host: str | None = None,
    pid: int | None = None,
    ts_ns: int | None = None,
    fields: dict[str, Any] | None = None,
) -> Event:
    """Build an :class:`Event`, filling time/host/rank/pid/GPU from ``pre`` where not given.

    ``bdf`` is normalised with :func:`norm_bdf`; a ``GPU-<uuid>`` anywhere in ``raw`` fills
    ``gpu_uuid`` when ``uuid`` is not given. ``None`` values are dropped from ``fields``; the
    prefix's glog level and torchrun local rank are added to ``fields`` as ``level`` and
    ``local_rank``; an unreadable timestamp prefix (:attr:`Prefix.bad_ts`) becomes
    ``bad_timestamp`` when no time was found.
    """
    f = {k: v for k, v in (fields or {}).items() if v is not None}
    if pre.level and "level" not in f:
        f["level"] = pre.level
    if pre.local_rank is not None and "local_rank" not in f:
        f["local_rank"] = pre.local_rank
    if pre.bad_ts is not None and ts_ns is None and pre.ts_ns is None:
        f["bad_timestamp"] = pre.bad_ts  # ingestion warns; the timeline keeps the event untimed
    return Event(
        source=source,
        kind=kind,
        file=ctx.file,
        line=ctx.line,
        raw=raw,
        ts_ns=ts_ns if ts_ns is not None else pre.ts_ns,
        mono_s=pre.mono_s,
        host=host if host is not None else pre.host,
        rank=rank if rank is not None else pre.rank,
        pid=pid if pid is not None else pre.pid,
        gpu_bdf=norm_bdf(bdf) if bdf else None,
        gpu_uuid=uuid if uuid is not None else (find_uuid(raw) if "GPU-" in raw else None),
        gpu_index=gpu_index if gpu_index is not None else pre.gpu_index,
        code=None if code is None else str(code),
        severity=severity,  # type: ignore[arg-type]
        fields=f,
    )


def to_int(text: str | None) -> int | None:
    """``int(text)`` or None for None / non-numeric text (``'<unknown>'``)."""
    if text is None:
        return None
    text = text.strip().strip("'\"")
    try:
        return int(text, 0) if text.lower().startswith("0x") else int(text)
    except ValueError:
        return None


def to_float(text: str | None) -> float | None:
    """``float(text)`` (accepts ``nan``/``inf``) or None."""
    if text is None:
        return None
    try:
        return float(text.strip().rstrip(",;"))
    except ValueError:
        return None


_UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40,
          "KB": 1000, "MB": 1000**2, "GB": 1000**3, "TB": 1000**4, "bytes": 1}


def to_bytes(num: str | None, unit: str | None) -> int | None:
    """``938.00`` + ``MiB`` -> 983564288 (binary units as PyTorch prints them), else None."""
    if num is None or unit is None or unit not in _UNITS:
        return None
    try:
        return int(round(float(num) * _UNITS[unit]))
    except ValueError:
        return None
