"""Extension points of the triage wing: :class:`LogParser` (+ :class:`RecordParser`) and :class:`Rule`.

A new log format is one class implementing :class:`LogParser` (and, when its records span several
lines, :class:`RecordParser` as well), added to the explicit table
``gpufield.triage.parsers.PARSERS``. Nothing else branches on formats.

How ingestion drives a parser (``gpufield.triage.ingest``):

1. Chunks of 32 lines are tested against all parsers' literal :attr:`LogParser.keywords` in one
   vectorised pass (Arrow's RE2 over a block of lines); the lines of chunks that hit are tested
   against the union of all :attr:`LogParser.prefilter` regexes, again vectorised. A line
   matching no prefilter is never decoded: this is what keeps ingestion above 100 MB/s.
2. A candidate line is offered, in table order, to each parser whose own prefilter matches it.
   If the parser is a :class:`RecordParser` and :meth:`RecordParser.opens_record` is true, the
   following lines (prefilter or not) are collected while :meth:`RecordParser.continues_record`
   says so, then :meth:`RecordParser.parse_record` turns the whole record into events. Otherwise
   :meth:`LogParser.parse_line` is called. The first parser that returns something wins.

Parsers are pure: no file IO, no clocks, no global state; everything they need about where the
line came from is in :class:`LineContext`.

A new diagnosis is one :class:`Rule` (usually a ``FnRule`` wrapping a function) added to the ordered
table ``gpufield.triage.engine.rules.RULES``; rules read only the engine's ``RuleContext``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from gpufield.triage.events import Event

if TYPE_CHECKING:  # the engine imports this module; these names are for annotations only
    from gpufield.triage.engine.model import Finding, Tier
    from gpufield.triage.engine.rules.base import RuleContext


@dataclass(frozen=True, slots=True)
class LineContext:
    """Where a line came from, handed to every parser call.

    Attributes:
        file: path of the input file as the user gave it (a member of a directory walk is
            the joined path).
        line: 1-based number of the (first) line in ``file``.
        year: year assumed for timestamps without one (syslog ``May 18 19:02:39``, glog
            ``E1218 20:27:21.4``). Ingestion takes it from
            ``IngestOptions.year``, else from the file's modification time (UTC).
        utc_offset_s: offset of the writer's local clock from UTC, applied to timestamps that
            carry no zone (syslog, glog, ``dmesg -T``, python logging). 0 = assume UTC.
        not_after_ns: latest plausible time of any line (the file's mtime, UTC ns) when the year
            was guessed from it; a year-less timestamp beyond it by over a day is taken to be from
            the previous year. None = no correction (the year was given explicitly).
    """

    file: str
    line: int
    year: int
    utc_offset_s: int = 0
    not_after_ns: int | None = None


@runtime_checkable
class LogParser(Protocol):
    """One log family (kernel, NCCL, torch, ...): lines in, :class:`Event` out.

    Attributes:
        name: short identifier, unique in the parser table (``"kernel"``).
        source: the :data:`gpufield.triage.events.SOURCES` value of most events it emits.
        prefilter: regular expression, in the common subset of Python ``re`` and RE2 (no
            look-around, no back-references), that every line this parser can turn into an
            event (or that opens one of its records) matches. It is searched (not anchored)
            in the raw line; ``^`` anchors at the line start. Keep it selective: ordinary
            training output must not match.
        keywords: literal substrings; every line the prefilter matches contains at least one of
            them (checked by tests on the corpus). They are the cheap first pass, so they should
            be rare in ordinary output.
    """

    name: str
    source: str
    prefilter: str
    keywords: tuple[str, ...]

    def parse_line(self, line: str, ctx: LineContext) -> Event | None:
        """Parse one line.

        Args:
            line: the line without its trailing newline, decoded as UTF-8 (bad bytes replaced).
            ctx: file, line number and clock assumptions.

        Returns:
            The event, or None when the line is not one of this parser's records.
        """
        ...


@runtime_checkable
class RecordParser(Protocol):
    """Optional capability of a :class:`LogParser`: records that span several lines.

    Examples: the fallen-off-the-bus kernel message (continuation lines indented), the torchrun
    ``ChildFailedError`` block with its ``[N]:`` entries, a PCIe AER report, an
    ``nvidia-smi -q`` GPU section, a p2p bandwidth matrix.
    """

    def opens_record(self, line: str) -> bool:
        """True when ``line`` is the first line of a multi-line record of this parser."""
        ...

    def continues_record(self, lines: Sequence[str], line: str) -> bool:
        """True when ``line`` belongs to the record whose lines so far are ``lines``.

        Called for each following line until it returns False; that line is then offered to
        the parsers on its own. Ingestion also stops a record at ``MAX_RECORD_LINES`` lines.
        """
        ...

    def parse_record(self, lines: Sequence[str], ctx: LineContext) -> list[Event]:
        """Turn a whole record (first line at ``ctx.line``) into zero or more events."""
        ...


#: longest record ingestion joins before it closes it anyway (an nvidia-smi -q GPU section of
#: a current driver is ~350 lines).
MAX_RECORD_LINES = 2000


class Rule(Protocol):
    """One entry of the ordered rule table (``gpufield.triage.engine.rules.RULES``).

    A rule reads the engine's ``RuleContext`` (events in skew-corrected time order, indexed by kind,
    plus phase marks) and returns findings that cite their evidence events. Rules never read files
    or clocks; a rule that does not fire returns an empty list.

    Attributes:
        name: stable identifier cited in reports.
        classes: the taxonomy classes (``gpufield.triage.engine.model.TAXONOMY``) this rule may emit.
        tier: causal tier (``gpufield.triage.engine.model.Tier``) of what it blames.
    """

    name: str
    classes: tuple[str, ...]
    tier: Tier

    def __call__(self, ctx: RuleContext) -> list[Finding]:
        """Return the findings this rule supports (empty when it does not fire)."""
        ...
