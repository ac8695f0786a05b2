"""Line prefixes: timestamps, host, rank and pid in front of a log record (internal).

Formats stripped, in any nesting order (``../shared/reference/triage.md`` §2.2, §2.7-2.9, §5.5)::

    May 18 19:02:39 host kernel: [16450076.435595] NVRM: ...        # syslog (+ kernel monotonic)
    May 18 19:02:39.123456 host kernel: ...                          # journalctl -o short-precise
    2026-05-18T19:02:39.123456+0200 host kernel: ...                 # journalctl -o short-iso(-precise)
    [ 1843.308145] NVRM: ...                                         # dmesg
    [ 1843.308145] node-7 kernel: NVRM: ...                          # journalctl -o short-monotonic
    [  +0.000316] pcieport ...                                       # dmesg --reltime/-d delta
    [Fri Mar  3 04:27:08 2023] NVRM: ...                             # dmesg -T
    <4>1 2026-08-11T03:00:00.123456+00:00 hB kernel - - - NVRM: ...  # RFC 5424 syslog (rsyslog/syslog-ng forwarders)
    <4>Aug 11 03:00:00 hB kernel: NVRM: ...                          # RFC 3164 with its <PRI>
    kernel: [16450076.435595] NVRM: ...
    [rank0]:[E321 02:07:08.408271257 ProcessGroupNCCL.cpp:607] ...   # torch rank prefix + glog
    [default0]:...                                                   # torchrun --tee (local rank)
    [gpu187:1]:...                                                   # launcher tee: host and local rank
    E1129 11:57:07.249000 29471 torch/distributed/elastic/multiprocessing/api.py:869] ...
    [E ProcessGroupNCCL.cpp:737] ...                                 # old torch, no time
    [2022-02-16 01:23:00,852] [INFO] ...                             # python logging / DeepSpeed
    host:946:988 [0] transport/net_ib.cc:839 NCCL WARN ...           # NCCL (the [0] is cudaDev)

Timestamps without a year take :attr:`LineContext.year` (the previous year when that would put
them more than a day after :attr:`LineContext.not_after_ns`, the file's mtime: a log that spans New
Year); timestamps without a zone are read as
local time ``LineContext.utc_offset_s`` away from UTC (default: UTC). ``dmesg -T`` is derived by
dmesg from boot time + monotonic seconds and can drift; it is kept as given.
"""

from __future__ import annotations

from calendar import timegm
from dataclasses import dataclass

from gpufield.triage.parsers import _regex as rx

_MONTH_INITIALS = frozenset("JFMASOND")
_MONTHS = {m: i for i, m in enumerate(
    ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"), 1)}

# node-7 [stderr] ...   (multi-node launchers that tag each forwarded line with the node and stream)
LAUNCHER_RE = rx.compile(r"(?P<host>[^\s\[\]:]+) \[(?:stdout|stderr)\] ")
# [rank0]:   [rank144]:   [default0]:   [trainer3]:  (torch TORCH_LOGS rank / torchrun --tee role prefix)
RANK_PREFIX_RE = rx.compile(r"\[(?:(?P<rank>rank)|(?P<role>[A-Za-z_]\w*?))(?P<n>\d+)\]:")
# [gpu187:1]:   (a launcher's per-process tee prefix naming the host and the process's local rank on every
# forwarded line, huggingface/accelerate#1519 under Slurm: "[gpu187:1]:torch.cuda.OutOfMemoryError ... (GPU 1; ...")
HOST_RANK_PREFIX_RE = rx.compile(r"\[(?P<host>[A-Za-z][\w.-]*):(?P<n>\d{1,3})\]:")
# May 18 19:02:39 host kernel: / Aug 29 16:58:38 <host-A> kernel: / Dec  2 10:43:35.123 h kernel:
SYSLOG_RE = rx.compile(
    r"(?P<mon>Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) +(?P<day>\d{1,2}) "
    r"(?P<hms>\d\d:\d\d:\d\d)(?:\.(?P<frac>\d+))? (?:(?P<host>[^\s:]+) )?(?P<tag>[^\s:\[]+)(?:\[(?P<pid>\d+)\])?: ")
# 2026-05-18T19:02:39.123456+02:00 host kernel:  /  2022-02-16 01:23:00,852  /  [2025-06-12 22:45:44]
ISO_RE = rx.compile(
    r"\[?(?P<date>\d{4}-\d\d-\d\d)[T _](?P<hms>\d\d:\d\d:\d\d)(?:[.,](?P<frac>\d+))?"
    r"(?P<tz>Z|[+-]\d\d:?\d\d)?\]? ?")
# ... host kernel:   (after an ISO time with a zone or a 'T': journalctl -o short-iso)
ISO_HOST_RE = rx.compile(r"(?:(?P<host>[^\s\[\]:]+) (?P<tag>[^\s:\[]+)|(?P<bare>kernel))(?:\[(?P<pid>\d+)\])?: ")
# <4>1 2026-08-11T03:00:00.123456+00:00 hB kernel - - - msg  (RFC 5424: PRI VERSION TIMESTAMP HOSTNAME
# APP-NAME PROCID MSGID STRUCTURED-DATA MSG; "-" = nil value)   /   <4>  (a bare PRI before an RFC 3164 line)
RFC5424_RE = rx.compile(
    r"<(?P<pri>\d{1,3})>(?:(?P<ver>\d{1,2}) (?P<ts>\S+) (?P<host>\S+) (?P<app>\S+) (?P<procid>\S+) (?P<msgid>\S+) "
    r"(?P<sd>-|(?:\[[^\]]*\])+) ?)?")
# [Fri Mar  3 04:27:08 2023]   (dmesg -T)
DMESG_T_RE = rx.compile(
    r"\[(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) (?P<mon>\w{3}) +(?P<day>\d{1,2}) (?P<hms>\d\d:\d\d:\d\d) (?P<year>\d{4})\] ?")
# [ 1843.308145]   kernel: [16450076.435595]   [  +0.000316]
MONO_RE = rx.compile(r"(?:kernel: )?\[\s*(?P<delta>\+)?(?P<mono>\d+\.\d+)\] ?")
# [ 1843.308145] node-7 kernel:   (journalctl -o short-monotonic)
MONO_HOST_RE = rx.compile(r"(?P<host>[^\s\[\]:]+) kernel: ")
# E1218 20:27:21.426415540 1234 file.cc:12]   [E1218 20:27:21.426415540 ProcessGroupNCCL.cpp:629]   [E ProcessGroupNCCL.cpp:737]
GLOG_RE = rx.compile(
    r"(?P<br>\[)?(?P<lvl>[IWEF])(?:(?P<mm>\d{1,2})(?P<dd>\d\d) (?P<hms>\d\d:\d\d:\d\d)\.(?P<frac>\d+))?"
    r"(?: +(?P<tid>\d+))? (?P<src>[\w./<>-]+:\d+)\] ?")
# host:946:988 [0]    (NCCL debug prefix; [N] = cudaDev)
NCCL_PREFIX_RE = rx.compile(r"(?P<host>[^\s:\[\]]+):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>\d+)\] ")
# [Rank 0]  [PG 1 Rank 0]  [PG ID 0 PG GUID 0(default_pg) Rank 1]
TORCH_RANK_RE = rx.compile(
    r"\[(?:PG (?:ID )?(?P<pg>\d+) (?:PG GUID (?P<guid>\S+) )?)?Rank (?P<rank>\d+)\]")
# 2026-12-02 04:06:52,039 INFO [rank1] train: ...   /   [INFO] [rank1] ...   (a python logging format with the
# rank in brackets after the level: the tag opens the record's body, so it names the rank that logged it)
BODY_RANK_RE = rx.compile(r"^(?:\[?(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)\]?\s*[-:]?\s*)?\[[Rr]ank ?(?P<rank>\d+)\]")
# rank=3   (key=value loggers; "local_rank=3" does not match: no word boundary after "_")
KV_RANK_RE = rx.compile(r"\brank=(?P<rank>\d+)\b")
# 0000:3b:00  0000:b3:00.0  00000000:1B:00.0  (PCI bus id)
BDF_RE = rx.compile(r"(?P<dom>[0-9a-fA-F]{4,8}):(?P<bus>[0-9a-fA-F]{2}):(?P<dev>[0-9a-fA-F]{2})(?:\.(?P<fn>[0-7]))?")
UUID_RE = rx.compile(r"\bGPU-[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b|\bGPU-<[\w-]+>")


@dataclass(slots=True)
class Prefix:
    """What the leading prefixes of a line said.

    Attributes:
        body: the line after the recognised prefixes.
        ts_ns: absolute UTC time in ns, or None.
        bad_ts: the text of a timestamp prefix that was recognised by its shape but is not a valid
            date/time (``Mar 99 99:99:99``): ``ts_ns`` is then None; else None.
        mono_s: kernel monotonic seconds, or None.
        host, pid, rank, local_rank, gpu_index, level: as found, else None.
    """

    body: str
    ts_ns: int | None = None
    bad_ts: str | None = None
    mono_s: float | None = None
    host: str | None = None
    pid: int | None = None
    rank: int | None = None
    local_rank: int | None = None
    gpu_index: int | None = None
    level: str | None = None


def _ns(year: int, mon: int, day: int, hms: str, frac: str | None, offset_s: int) -> int | None:
    try:
        h, m, s = (int(x) for x in hms.split(":"))
        secs = timegm((year, mon, day, h, m, s, 0, 0, 0)) - offset_s
    except (ValueError, OverflowError):
        return None
    if not (1 <= mon <= 12 and 1 <= day <= 31 and h < 24 and m < 60 and s < 61):
        return None
    ns = 0
    if frac:
        ns = int(frac[:9].ljust(9, "0"))
    return secs * 1_000_000_000 + ns


def _tz_seconds(tz: str | None, default: int) -> int:
    if not tz:
        return default
    if tz == "Z":
        return 0
    sign = -1 if tz[0] == "-" else 1
    digits = tz[1:].replace(":", "")
    return sign * (int(digits[:2]) * 3600 + int(digits[2:4]) * 60)


def _yearless(year: int, mon: int, day: int, hms: str, frac: str | None, off: int, not_after_ns: int | None) -> int | None:
    """A timestamp without a year: ``year``, or the year before when that would lie after
    ``not_after_ns`` by more than a day (a December line in a file last written in January)."""
    ns = _ns(year, mon, day, hms, frac, off)
    if ns is not None and not_after_ns is not None and ns > not_after_ns + 86_400 * 10**9:
        return _ns(year - 1, mon, day, hms, frac, off)
    return ns


def _check(p: Prefix, text: str) -> None:
    """Remember ``text`` as an unreadable timestamp when the one just parsed gave no time."""
    if p.ts_ns is None and p.bad_ts is None:
        p.bad_ts = text


def split_prefix(line: str, year: int, utc_offset_s: int = 0, not_after_ns: int | None = None) -> Prefix:
    """Strip the known prefixes from the start of ``line`` (in any order, up to 6 of them).

    Args:
        line: raw line without newline.
        year: year for timestamps that lack one.
        not_after_ns: latest plausible time (the file's mtime); a year-less timestamp later than
            this by over a day is moved to the previous year.
        utc_offset_s: writer's UTC offset for zone-less timestamps (seconds east of UTC).

    Returns:
        A :class:`Prefix`; ``body`` is ``line`` itself when nothing was recognised.
    """
    p = Prefix(body=line)
    pos = line.rfind("\r") + 1  # tqdm redraws with \r: the record starts after the last one
    for _ in range(6):
        if pos >= len(line):
            break
        c = line[pos]  # cheap first-character dispatch: only the formats that can start here
        bracket, digit = c == "[", c.isdigit()
        m = RFC5424_RE.match(line, pos) if c == "<" else None
        if m:
            if m["ver"]:
                t = ISO_RE.fullmatch(m["ts"]) if m["ts"] != "-" else None
                if t:
                    y, mo, d = (int(x) for x in t["date"].split("-"))
                    p.ts_ns = _ns(y, mo, d, t["hms"], t["frac"], _tz_seconds(t["tz"], utc_offset_s))
                    _check(p, m["ts"])
                if m["host"] != "-":
                    p.host = m["host"]
                if m["procid"].isdigit() and m["app"] != "kernel":
                    p.pid = int(m["procid"])
            pos = m.end()
            continue
        m = LAUNCHER_RE.match(line, pos) if not bracket and " [std" in line[pos:pos + 80] else None
        if m:
            p.host = m["host"]
            pos = m.end()
            continue
        m = RANK_PREFIX_RE.match(line, pos) if bracket else None
        if m:
            if m["rank"]:
                p.rank = int(m["n"])
            else:
                p.local_rank = int(m["n"])
            pos = m.end()
            continue
        m = HOST_RANK_PREFIX_RE.match(line, pos) if bracket else None
        if m:
            p.host, p.local_rank = m["host"], int(m["n"])
            pos = m.end()
            continue
        m = SYSLOG_RE.match(line, pos) if c in _MONTH_INITIALS and line[pos:pos + 3] in _MONTHS else None
        if m:
            p.ts_ns = _yearless(year, _MONTHS[m["mon"]], int(m["day"]), m["hms"], m["frac"], utc_offset_s, not_after_ns)
            _check(p, line[m.start("mon"):m.end("frac") if m["frac"] else m.end("hms")])
            p.host = m["host"]  # None for a journal line without a hostname ("Jan 21 10:00:00 kernel: ...")
            if m["pid"] and m["tag"] != "kernel":
                p.pid = int(m["pid"])
            pos = m.end()
            continue
        m = DMESG_T_RE.match(line, pos) if bracket else None
        if m and m["mon"] in _MONTHS:
            p.ts_ns = _ns(int(m["year"]), _MONTHS[m["mon"]], int(m["day"]), m["hms"], None, utc_offset_s)
            _check(p, m.group(0).strip())
            pos = m.end()
            continue
        m = MONO_RE.match(line, pos) if bracket or c == "k" else None
        if m:
            if not m["delta"]:
                p.mono_s = float(m["mono"])
            pos = m.end()
            h = MONO_HOST_RE.match(line, pos)
            if h:
                p.host, pos = h["host"], h.end()
            continue
        m = ISO_RE.match(line, pos) if bracket or digit else None
        if m:
            y, mo, d = (int(x) for x in m["date"].split("-"))
            p.ts_ns = _ns(y, mo, d, m["hms"], m["frac"], _tz_seconds(m["tz"], utc_offset_s))
            _check(p, m.group(0).strip())
            pos = m.end()
            if m["tz"] or "T" in m.group(0):
                h = ISO_HOST_RE.match(line, pos)
                if h:
                    p.host = h["host"]
                    if h["pid"] and h["tag"] not in (None, "kernel"):
                        p.pid = int(h["pid"])
                    pos = h.end()
            continue
        m = GLOG_RE.match(line, pos) if bracket or c in "IWEF" else None
        if m:
            p.level = m["lvl"]
            if m["mm"]:
                p.ts_ns = _yearless(year, int(m["mm"]), int(m["dd"]), m["hms"], m["frac"], utc_offset_s, not_after_ns)
                _check(p, line[m.start("mm"):m.end("frac")])
            if m["tid"] and not m["br"]:
                p.pid = int(m["tid"])  # glog's field is the thread id; torchrun writes the pid there
            pos = m.end()
            continue
        # (the host part is followed by ':', so a line with no ':' after pos cannot match)
        m = NCCL_PREFIX_RE.match(line, pos) if not bracket and c not in " \t" and line.find(":", pos) > pos else None
        if m:
            p.host, p.pid, p.gpu_index = m["host"], int(m["pid"]), int(m["dev"])
            pos = m.end()
            continue
        break
    p.body = line[pos:] if pos else line
    if p.rank is None:
        m = TORCH_RANK_RE.search(line) if "Rank " in line else None
        if m is not None:
            if m["pg"] is None or m["pg"] == "0":
                p.rank = int(m["rank"])
        elif "rank=" in line:
            k = KV_RANK_RE.search(line)
            p.rank = int(k["rank"]) if k else None
        if p.rank is None and pos and p.local_rank is None and "ank" in p.body[:24]:  # after a time/level prefix
            b = BODY_RANK_RE.match(p.body)
            if b is not None:
                p.rank = int(b["rank"])
    return p


def torch_pg(line: str) -> tuple[int | None, int | None]:
    """``(pg, rank_in_pg)`` from a ``[PG 1 Rank 0]`` tag, or ``(None, rank)`` from ``[Rank 0]``."""
    m = TORCH_RANK_RE.search(line)
    if not m:
        return None, None
    return (int(m["pg"]) if m["pg"] is not None else None), int(m["rank"])


def norm_bdf(text: str) -> str | None:
    """Normalise a PCI bus id to ``dddd:bb:dd.f`` lower-case (``.0`` added when missing).

    ``00000000:1B:00.0`` (nvidia-smi / DCGM, 8-digit domain) becomes ``0000:1b:00.0``.
    Returns None when ``text`` holds no bus id.
    """
    m = BDF_RE.search(text)
    if not m:
        return None
    dom = m["dom"][-4:].lower()
    return f"{dom}:{m['bus'].lower()}:{m['dev'].lower()}.{m['fn'] or '0'}"


def bus_id_to_bdf(bus: str) -> str:
    """NCCL ``busId`` -> ``dddd:bb:dd.f`` (lower-case).

    NCCL prints ``busIdToInt64`` of the PCI id in hex with leading zeros dropped (``ab000`` is
    ``0000:ab:00.0``, ``30`` is ``0000:00:03.0``, ``11b000`` is ``0001:1b:00.0``); NVIDIA/nccl
    ``src/misc/utils.cc``.
    """
    d = bus.lower().rjust(9, "0")[-9:]
    return f"{d[0:4]}:{d[4:6]}:{d[6:8]}.{d[8]}"


def find_uuid(text: str) -> str | None:
    """The first ``GPU-<uuid>`` in ``text`` (also the corpus' redacted ``GPU-<uuid-N>``)."""
    m = UUID_RE.search(text)
    return m.group(0) if m else None


def parse_date_time(text: str, utc_offset_s: int = 0) -> int | None:
    """UTC ns from ``2023-09-14_01:45:50`` / ``2023-09-14 01:45:50,123`` / ISO 8601, else None."""
    m = ISO_RE.match(text.strip())
    if not m:
        return None
    y, mo, d = (int(x) for x in m["date"].split("-"))
    return _ns(y, mo, d, m["hms"], m["frac"], _tz_seconds(m["tz"], utc_offset_s))
