"""``journalctl -o json`` export (one JSON object per line): the MESSAGE handed to the other parsers.

Fields (systemd.journal-fields(7), journalctl(1) "json" output): ``__REALTIME_TIMESTAMP``
(microseconds since the epoch, as a decimal string), ``_HOSTNAME``, ``MESSAGE``,
``SYSLOG_IDENTIFIER``, ``_TRANSPORT`` (``kernel`` for dmesg lines), ``PRIORITY`` (0-7),
``_SOURCE_MONOTONIC_TIMESTAMP`` (kernel messages: microseconds since boot, dmesg's ``[ 269.516977]``)
and ``_PID``. journalctl writes a value that is not printable UTF-8 as an array of byte values
(``"MESSAGE":[78,86,82,77,...]``), a field given twice as an array of values, and a value over its
size limit as ``null``; all three are handled (bytes decoded as UTF-8 with bad bytes replaced, the
first of several values, nothing).

The message is offered to every other parser of the table in order (their prefilter first) exactly
as a plain log line would be; the event it gives gets the entry's time, host, boot-time seconds and
pid where the message itself has none. ``raw`` is the MESSAGE text (the log record as journald
stored it; ``file:line`` still names the JSON line); ``fields["journal"]`` keeps identifier,
transport and priority.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace

from gpufield.triage.events import Event
from gpufield.triage.parsers import _regex as rx
from gpufield.triage.protocols import LineContext, LogParser, RecordParser

_BYTES_RE = rx.compile(r'"MESSAGE" ?: ?\[')


def _text(v: object) -> str | None:
    """A journal JSON value as text: str, byte array, or the first of repeated values."""
    if isinstance(v, str):
        return v
    if isinstance(v, list) and v:
        if all(isinstance(b, int) and 0 <= b < 256 for b in v):
            return bytes(v).decode("utf-8", "replace")
        return _text(v[0])
    return None


def _int(v: object) -> int | None:
    t = _text(v)
    return int(t) if t is not None and t.strip().isdigit() else None


class JournalJsonParser:
    """``journalctl -o json`` lines: decode the entry, parse its MESSAGE with the inner parsers."""

    name = "journal_json"
    source = "kernel"
    keywords = ("__REALTIME_TIMESTAMP",)

    def __init__(self, inner: Sequence[LogParser]) -> None:
        """``inner``: the parsers a MESSAGE is offered to, in order."""
        self.inner = tuple(inner)
        # anchored at the opening brace: on any other line the prefilter union fails at the first
        # byte, so plain logs pay nothing; a journal line is decoded only when one of the inner
        # parsers' keywords (or a byte-array MESSAGE, not searchable as text) is in it
        self.prefilter = '^[ \\t]*\\{.*"__REALTIME_TIMESTAMP"'
        self._kw = tuple(dict.fromkeys(k for p in self.inner for k in p.keywords))
        self._pre = [rx.compile(p.prefilter) for p in self.inner]

    def parse_line(self, line: str, ctx: LineContext) -> Event | None:
        """Parse one JSON entry; None when it is not one or no inner parser knows its message."""
        s = line.strip()
        if not s.startswith("{") or not (any(k in s for k in self._kw) or _BYTES_RE.search(s)):
            return None
        try:
            entry = json.loads(s)
        except ValueError:
            return None
        if not isinstance(entry, dict):
            return None
        msg = _text(entry.get("MESSAGE"))
        if not msg:
            return None
        msg = msg.rstrip("\n")
        ev = self._inner_event(msg.splitlines()[0] if "\n" in msg else msg, msg, ctx)
        if ev is None:
            return None
        us = _int(entry.get("__REALTIME_TIMESTAMP"))
        mono = _int(entry.get("_SOURCE_MONOTONIC_TIMESTAMP"))
        meta = {k: _text(entry.get(v)) for k, v in (("identifier", "SYSLOG_IDENTIFIER"), ("transport", "_TRANSPORT"),
                                                    ("priority", "PRIORITY"), ("unit", "_SYSTEMD_UNIT"))
                if entry.get(v) is not None}
        return replace(ev, raw=msg,
                       ts_ns=ev.ts_ns if ev.ts_ns is not None else (us * 1000 if us is not None else None),
                       host=ev.host or _text(entry.get("_HOSTNAME")),
                       mono_s=ev.mono_s if ev.mono_s is not None else (mono / 1e6 if mono is not None else None),
                       pid=ev.pid if ev.pid is not None else _int(entry.get("_PID")),
                       fields={**ev.fields, "journal": meta})

    def _inner_event(self, first: str, whole: str, ctx: LineContext) -> Event | None:
        for p, pre in zip(self.inner, self._pre, strict=True):
            if not pre.search(first):
                continue
            if isinstance(p, RecordParser) and p.opens_record(first):
                lines = whole.splitlines() or [first]
                evs = p.parse_record(lines, ctx)
                if evs:
                    return evs[0]
                continue
            ev = p.parse_line(first, ctx)
            if ev is not None:
                return ev
        return None
