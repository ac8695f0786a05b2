"""Cross-host correlation: clock-skew correction, file-order times, topology and dedupe.

Ordering drives root selection (triage.md 5.5/5.6), so times are made comparable first:

1. *Clock skew.* Ranks that time out on the same collective (same process group and SeqNum) fire
   their watchdogs at nearly the same true time (same start within arrival skew, same timeout), so
   the median difference of those watchdog timestamps between two hosts estimates their clock
   offset. Hosts without such anchors keep offset 0 and are compared with a tolerance instead.
2. *File order.* An event without a timestamp takes the corrected time of the previous timed event
   of the same file, so "events without time keep file order".
3. *Topology.* ``NVRM: GPU at PCI:<bdf>: GPU-<uuid>`` lines join PCI bus ids to UUIDs per host.
4. *Dedupe.* Copies of the same message from many ranks collapse to one line with counts
   (NVRx L0 style), keyed by kind plus the text with ranks, numbers and NCCL prefixes removed.
"""

from __future__ import annotations

import re
import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

from gpufield.triage.engine.model import EvidenceLine
from gpufield.triage.engine.topology import Topology, from_events
from gpufield.triage.events import Event

_NCCL_PREFIX = re.compile(r"^\s*(?:\[[^\]]*\]\s*)?[^\s:]+:\d+:\d+ \[\d+\]\s*")
_RANK_PREFIX = re.compile(r"\[(?:rank|Rank|PG[^\]]*Rank)\s*\d+\]:?")
_NUMBERS = re.compile(r"0x[0-9a-fA-F]+|\d+(?:\.\d+)?")
_GLOG = re.compile(r"\b[IWEF]\d{4} \S+")


def signature(e: Event) -> tuple[str, str]:
    """Dedupe key of an event: its kind and its text with ranks, numbers and prefixes removed.

    Watchdog timeouts keep their SeqNum and OpType so that a desync (different SeqNum) is never
    collapsed into one line.
    """
    if e.kind in ("watchdog_timeout", "desync"):
        f = e.fields
        return e.kind, f"{f.get('pg')}|{f.get('seq')}|{f.get('op_type')}"
    text = e.raw.splitlines()[0] if e.raw else ""
    text = _NCCL_PREFIX.sub("", text)
    text = _RANK_PREFIX.sub("", text)
    text = _GLOG.sub("", text)
    if e.host:
        text = text.replace(e.host, "<host>")
    return e.kind, _NUMBERS.sub("#", text).strip()


def dedupe(events: Iterable[Event], role: str) -> list[EvidenceLine]:
    """Collapse same-signature events into :class:`EvidenceLine` rows, first copy kept, order kept."""
    groups: dict[tuple[str, str], list[Event]] = {}
    for e in events:
        groups.setdefault(signature(e), []).append(e)
    out = []
    for copies in groups.values():
        ranks = tuple(sorted({c.rank for c in copies if c.rank is not None}))
        hosts = tuple(sorted({c.host for c in copies if c.host}))
        out.append(EvidenceLine(copies[0], len(copies), ranks, hosts, role))
    return out


@dataclass(slots=True)
class Timeline:
    """Events in analysis order with skew-corrected times.

    Attributes:
        events: all events, sorted by corrected time (untimed events keep file order).
        t_ns: corrected time per event (``id(event)`` keyed), or None when unknown.
        offsets_ns: estimated clock offset per host (host clock minus reference clock), ns.
        skew_tolerance_ns: events on different hosts closer than this are treated as concurrent.
        gpu_uuid: ``(host, bdf) -> GPU-uuid`` from NVRM map lines.
        gpu_rank: ``(host, bdf) -> rank`` from events that carry both (e.g. NCCL ``Init COMPLETE``
            lines with ``busId``): the join between host-side and job-side evidence.
        ip_host: ``ip -> hostname`` (see :mod:`gpufield.triage.engine.topology`).
    """

    events: list[Event]
    t_ns: dict[int, int | None]
    offsets_ns: dict[str, int]
    skew_tolerance_ns: int
    gpu_uuid: dict[tuple[str | None, str], str] = field(default_factory=dict)
    gpu_rank: dict[tuple[str | None, str], int] = field(default_factory=dict)
    ip_host: dict[str, str] = field(default_factory=dict)

    def t(self, e: Event) -> int | None:
        """Corrected time of ``e`` in ns since the epoch, or None."""
        return self.t_ns.get(id(e))

    def before(self, a: Event, b: Event) -> bool | None:
        """True if ``a`` is clearly before ``b`` (beyond the skew tolerance), None if unordered.

        Events of the same untimed file compare by line number; an event with no time at all
        is unordered against a timed one.
        """
        ta, tb = self.t(a), self.t(b)
        if ta is not None and tb is not None:
            if a.host == b.host and a.file == b.file:
                return ta < tb or (ta == tb and a.line < b.line)
            if abs(ta - tb) <= self.skew_tolerance_ns:
                return None
            return ta < tb
        if ta is None and tb is None and a.file == b.file:
            return a.line < b.line  # an untimed file: file order is the only order
        return None  # one side has no time at all (e.g. pasted output above a syslog excerpt)


#: larger "offsets" are not clock skew but a coincidence of keys (e.g. SeqNums restarting after an
#: elastic restart): they are ignored
MAX_OFFSET_S = 3600.0


def estimate_offsets(events: Sequence[Event]) -> dict[str, int]:
    """Per-host clock offsets (ns) from watchdog timeouts of the same collective on several hosts.

    Args:
        events: all events; only ``watchdog_timeout`` events with ``ts_ns``, ``host`` and ``seq``
            are used.

    Returns:
        ``host -> offset_ns`` relative to the reference host (the host with most anchors); hosts
        without a shared anchor are absent (treated as offset 0).
    """
    by_key: dict[tuple, dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
    for e in events:
        if e.kind == "watchdog_timeout" and e.ts_ns is not None and e.host and "seq" in e.fields:
            key = (e.fields.get("pg"), e.fields.get("seq"), e.fields.get("op_type"))
            by_key[key][e.host].append(e.ts_ns)
    hosts_count: dict[str, int] = defaultdict(int)
    for per_host in by_key.values():
        if len(per_host) > 1:
            for h in per_host:
                hosts_count[h] += 1
    if not hosts_count:
        return {}
    ref = max(sorted(hosts_count), key=lambda h: hosts_count[h])
    diffs: dict[str, list[int]] = defaultdict(list)
    for per_host in by_key.values():
        if ref not in per_host:
            continue
        t_ref = statistics.median(per_host[ref])
        for h, ts in per_host.items():
            if h != ref:
                diffs[h].append(int(statistics.median(ts) - t_ref))
    offsets = {h: int(statistics.median(d)) for h, d in diffs.items()
               if abs(statistics.median(d)) <= MAX_OFFSET_S * 1e9}
    offsets[ref] = 0
    return offsets


_BULK = frozenset({"metric_sample"})  # one per sample: left as they are (cost); loss lines are thinned at ingest


def infer_hosts(events: Sequence[Event]) -> list[Event]:
    """Fill ``host`` of host-less events from their file.

    A file whose host-bearing events all name one host (NCCL ``host:pid:tid`` prefixes, syslog
    hostnames, torchrun ``host :`` fields) belongs to that host; otherwise a path component equal
    to a known hostname (``logs/node-b/train.log``) names it. Other events are left as they are.
    """
    per_file: dict[str, set[str]] = defaultdict(set)
    for e in events:
        if e.host:
            per_file[e.file].add(e.host)
    known = set().union(*per_file.values()) if per_file else set()
    file_host: dict[str, str] = {}
    for e in events:
        if e.file in file_host or e.host:
            continue
        hosts = per_file.get(e.file, set())
        if len(hosts) == 1:
            file_host[e.file] = next(iter(hosts))
        else:
            parts = [p for p in re.split(r"[\\/]", e.file) if p in known]
            if parts and not hosts:
                file_host[e.file] = parts[-1]
    return [replace(e, host=file_host[e.file]) if not e.host and e.file in file_host and e.kind not in _BULK else e
            for e in events]


def build_timeline(events: Sequence[Event], *, skew_tolerance_s: float = 30.0,
                   topology: Topology | None = None) -> Timeline:
    """Order events by skew-corrected time; untimed events inherit the previous time in their file.

    An event whose timestamp prefix was unreadable (``fields["bad_timestamp"]``, e.g. ``Mar 99
    99:99:99``) inherits nothing and stays untimed: it sorts after every timed event, and a finding
    rooted on it ranks after timed findings of the same group and tier (see
    :func:`~gpufield.triage.engine.incidents.order_key`), so a broken stamp never moves it ahead.

    Host-less events first get their file's host (:func:`infer_hosts`).

    Args:
        events: parsed events in ingestion order (file by file, line by line).
        skew_tolerance_s: cross-host clock uncertainty in seconds after correction (default 30 s,
            typical of NTP-less clusters; chrony-synced clusters are within milliseconds).
        topology: extra IP and GPU->rank maps that override those built from the events' NCCL init
            lines (:func:`gpufield.triage.engine.topology.from_events`); None = the events' only.

    Returns:
        A :class:`Timeline`.

    Raises:
        ValueError: ``skew_tolerance_s`` is negative.
    """
    if skew_tolerance_s < 0:
        raise ValueError(f"skew_tolerance_s must be >= 0, got {skew_tolerance_s}")
    events = infer_hosts(events)
    offsets = estimate_offsets(events)
    t_ns: dict[int, int | None] = {}
    last_in_file: dict[str, int | None] = {}
    for e in events:
        if e.ts_ns is not None:
            t = e.ts_ns - offsets.get(e.host or "", 0)
            last_in_file[e.file] = t
        elif "bad_timestamp" in e.fields:
            t = None  # its own stamp is unreadable: no time, rather than a neighbour's that may be far earlier
        else:
            t = last_in_file.get(e.file)
        t_ns[id(e)] = t
    # stable sort: timed events by time; untimed events stay next to their file neighbours
    keyed = []
    for order, e in enumerate(events):
        t = t_ns[id(e)]
        keyed.append((0 if t is not None else 1, t if t is not None else 0, e.file, e.line, order, e))
    keyed.sort(key=lambda k: k[:5])
    gpu_uuid: dict[tuple[str | None, str], str] = {}
    topo = from_events(events)
    if topology is not None:  # given maps win over what the events say
        topo.ip_host = {**topo.ip_host, **topology.ip_host}
        topo.gpu_rank = {**topo.gpu_rank, **topology.gpu_rank}
    gpu_rank: dict[tuple[str | None, str], int] = dict(topo.gpu_rank)
    for e in events:
        if e.kind == "gpu_map" and e.gpu_bdf and e.gpu_uuid:
            gpu_uuid[(e.host, e.gpu_bdf)] = e.gpu_uuid
        if e.gpu_bdf and e.rank is not None and e.host:
            gpu_rank.setdefault((e.host, e.gpu_bdf), e.rank)
    return Timeline(
        events=[k[-1] for k in keyed],
        t_ns=t_ns,
        offsets_ns=offsets,
        skew_tolerance_ns=int(skew_tolerance_s * 1e9),
        gpu_uuid=gpu_uuid,
        gpu_rank=gpu_rank,
        ip_host=topo.ip_host,
    )
