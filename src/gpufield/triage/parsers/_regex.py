"""Linear-time regular expressions for line matching: every parser pattern is compiled here (internal).

Python's ``re`` backtracks: a pattern such as ``[\\w-]+ <bus id>: AER:`` searched on a kernel line
with a 40 kB run of word characters restarts the ``[\\w-]+`` run at every position (quadratic:
103 s for one line, issue 24). Patterns compiled by :func:`compile` run on RE2 (google-re2, the
automata engine behind ``pyarrow.compute.match_substring_regex`` too), whose search time is linear
in the text for every pattern; RE2 refuses what it cannot do in linear time (back-references,
look-around), so such a pattern fails at import instead of hanging on a log.

The parsers use the small subset of ``re`` they need: ``search`` / ``match`` / ``fullmatch`` with
``pos``, ``finditer``, ``findall``, ``sub``, and match objects with ``m["name"]``, ``group``,
``groups``, ``groupdict``, ``start`` / ``end`` / ``span`` (by index or name) and ``re``.
Differences from ``re`` worth knowing: ``\\w \\d \\s \\b`` are ASCII classes (as with ``re.ASCII``),
and ``$`` matches only at the very end of the text (lines reach the parsers without their newline).

Line length: ingestion cuts a line to :data:`MAX_LINE_CHARS` before any pattern sees it and counts
the cut lines (``ScanCounters.truncated_lines``, with a warning naming the first one per file).
Source: https://github.com/google/re2 (syntax: https://github.com/google/re2/wiki/Syntax).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import re2
from re2 import _re2

__all__ = ["MAX_LINE_CHARS", "Pattern", "Match", "compile", "is_linear"]

#: longest line (characters) the patterns see; the rest of a longer line is not matched
MAX_LINE_CHARS = 1 << 16
_UNANCHORED, _START, _BOTH = _re2.RE2.Anchor.UNANCHORED, _re2.RE2.Anchor.ANCHOR_START, _re2.RE2.Anchor.ANCHOR_BOTH
_NULL = (-1, -1)
#: one-entry cache of the last text encoded for RE2 (parsers run ~10 patterns on the same line)
_last: list[Any] = [None, b""]


class Match:
    """A successful match (the part of ``re.Match`` the parsers use)."""

    __slots__ = ("_p", "_text", "_spans")

    def __init__(self, p: Pattern, text: str, spans: list[tuple[int, int]]) -> None:
        self._p, self._text, self._spans = p, text, spans

    def _index(self, group: int | str) -> int:
        if isinstance(group, int):
            if not 0 <= group <= self._p.groups:
                raise IndexError("no such group")
            return group
        try:
            return self._p.groupindex[group]
        except KeyError:
            raise IndexError(f"no such group: {group!r}") from None

    def __getitem__(self, group: int | str) -> str | None:
        try:  # names and group numbers alike, one dict look-up (the parsers call this ~10 times per line)
            s = self._spans[self._p._slot[group]]
        except (KeyError, TypeError):
            s = self._spans[self._index(group)]  # raises IndexError for an unknown group
        return None if s[0] < 0 else self._text[s[0]:s[1]]

    def __repr__(self) -> str:
        return f"<Match span={self.span()} match={self[0]!r}>"

    def group(self, *groups: int | str) -> Any:
        """Like ``re.Match.group``: one group as text (None when it did not take part), several as a tuple."""
        if not groups:
            return self[0]
        if len(groups) == 1:
            return self[groups[0]]
        return tuple(self[g] for g in groups)

    def groups(self, default: Any = None) -> tuple[Any, ...]:
        """Every group 1..n as text, ``default`` for those that did not take part."""
        return tuple(default if (v := self[i]) is None else v for i in range(1, self._p.groups + 1))

    def groupdict(self, default: Any = None) -> dict[str, Any]:
        """Named groups -> text (``default`` for those that did not take part)."""
        return {k: (default if (v := self[i]) is None else v) for k, i in self._p.groupindex.items()}

    def start(self, group: int | str = 0) -> int:
        """Start offset (characters) of ``group``, -1 when it did not take part."""
        return self._spans[self._index(group)][0]

    def end(self, group: int | str = 0) -> int:
        """End offset (characters) of ``group``, -1 when it did not take part."""
        return self._spans[self._index(group)][1]

    def span(self, group: int | str = 0) -> tuple[int, int]:
        """``(start, end)`` of ``group``."""
        return self._spans[self._index(group)]

    @property
    def re(self) -> Pattern:
        """The :class:`Pattern` that matched."""
        return self._p

    @property
    def string(self) -> str:
        """The text that was searched."""
        return self._text


class Pattern:
    """An RE2-compiled pattern with the ``re.Pattern`` methods the parsers use.

    Args:
        pattern: RE2 syntax (Python's, minus back-references and look-around).
        ignore_case: case-insensitive matching (``re.IGNORECASE``).

    Raises:
        ValueError: RE2 cannot compile ``pattern`` (the message says why).
    """

    __slots__ = ("pattern", "ignore_case", "groups", "groupindex", "_rx", "_raw", "_slot")

    def __init__(self, pattern: str, *, ignore_case: bool = False) -> None:
        opts = re2.Options()
        opts.case_sensitive = not ignore_case
        opts.log_errors = False
        try:
            rx = re2.compile(pattern, opts)
        except re2.error as e:
            raise ValueError(f"not a linear-time (RE2) pattern: {pattern!r}: {e}") from None
        self.pattern, self.ignore_case = pattern, ignore_case
        self._rx, self._raw = rx, rx._regexp
        self.groups: int = rx.groups
        self.groupindex: dict[str, int] = dict(rx.groupindex)
        #: group name or number -> index into a match's spans (``Match.__getitem__``)
        self._slot: dict[int | str, int] = {**{i: i for i in range(rx.groups + 1)}, **self.groupindex}

    def __repr__(self) -> str:
        return f"gpufield.triage.parsers._regex.compile({self.pattern!r})"

    def __reduce__(self):
        return (_rebuild, (self.pattern, self.ignore_case))

    def _run(self, anchor, text: str, pos: int | None, endpos: int | None) -> Match | None:
        if text.isascii():  # O(1) in CPython; byte offsets are character offsets
            if _last[0] is text:
                b = _last[1]
            else:
                b = text.encode("ascii")
                _last[0], _last[1] = text, b
            n = len(b)
            if pos is None:
                pos = 0
            elif pos > n:
                pos = n
            elif pos < 0:
                pos = 0
            endpos = n if endpos is None else max(0, min(endpos, n))
            if pos > endpos:
                return None
            spans = self._raw.Match(anchor, b, pos, endpos)
            return None if spans[0][0] < 0 else Match(self, text, spans)
        n = len(text)
        pos = 0 if pos is None else max(0, min(pos, n))
        endpos = n if endpos is None else max(0, min(endpos, n))
        if pos > endpos:
            return None
        m = next(self._rx._match(anchor, text, pos, endpos), None)  # maps UTF-8 offsets back to characters
        return None if m is None else Match(self, text, m._spans)

    def search(self, text: str, pos: int | None = None, endpos: int | None = None) -> Match | None:
        """First match anywhere in ``text[pos:endpos]``, or None."""
        if pos is None and endpos is None and text.isascii():  # the common call: the whole ASCII line
            if _last[0] is text:
                b = _last[1]
            else:
                b = text.encode("ascii")
                _last[0], _last[1] = text, b
            spans = self._raw.Match(_UNANCHORED, b, 0, len(b))
            return None if spans[0][0] < 0 else Match(self, text, spans)
        return self._run(_UNANCHORED, text, pos, endpos)

    def match(self, text: str, pos: int | None = None, endpos: int | None = None) -> Match | None:
        """Match starting exactly at ``pos``, or None."""
        if endpos is None and text.isascii():  # the prefix parser's call: match(line, pos)
            if _last[0] is text:
                b = _last[1]
            else:
                b = text.encode("ascii")
                _last[0], _last[1] = text, b
            n = len(b)
            if pos is None or pos < 0:
                pos = 0
            elif pos > n:
                pos = n
            spans = self._raw.Match(_START, b, pos, n)
            return None if spans[0][0] < 0 else Match(self, text, spans)
        return self._run(_START, text, pos, endpos)

    def fullmatch(self, text: str, pos: int | None = None, endpos: int | None = None) -> Match | None:
        """Match covering all of ``text[pos:endpos]``, or None."""
        return self._run(_BOTH, text, pos, endpos)

    def finditer(self, text: str, pos: int | None = None, endpos: int | None = None) -> Iterator[Match]:
        """Non-overlapping matches, left to right."""
        if not text.isascii():
            for m in self._rx.finditer(text, pos, endpos):
                yield Match(self, text, m._spans)
            return
        b = text.encode("ascii")
        n = len(b)
        pos = 0 if pos is None else max(0, min(pos, n))
        endpos = n if endpos is None else max(0, min(endpos, n))
        match = self._raw.Match
        while pos <= endpos:
            spans = match(_UNANCHORED, b, pos, endpos)
            if spans[0][0] < 0:
                return
            yield Match(self, text, spans)
            e = spans[0][1]
            pos = e + 1 if e == spans[0][0] else e  # an empty match: step over one character

    def findall(self, text: str, pos: int | None = None, endpos: int | None = None) -> list[Any]:
        """Like ``re.findall``: whole matches, the one group, or tuples of groups."""
        return self._rx.findall(text, pos, endpos)

    def sub(self, repl: str, text: str, count: int = 0) -> str:
        """Replace non-overlapping matches with ``repl`` (``\\1`` / ``\\g<name>`` allowed)."""
        return self._rx.sub(repl, text, count)


def _rebuild(pattern: str, ignore_case: bool) -> Pattern:
    return Pattern(pattern, ignore_case=ignore_case)


def compile(pattern: str, *, ignore_case: bool = False) -> Pattern:  # noqa: A001 (mirrors re.compile)
    """Compile ``pattern`` with RE2 (linear time in the searched text); see :class:`Pattern`."""
    return Pattern(pattern, ignore_case=ignore_case)


def is_linear(pattern: str) -> bool:
    """True when RE2 accepts ``pattern`` (no back-references or look-around)."""
    try:
        Pattern(pattern)
    except ValueError:
        return False
    return True


def _bytes_options(ignore_case: bool) -> re2.Options:
    opts = re2.Options()
    opts.case_sensitive = not ignore_case
    opts.log_errors = False
    opts.never_capture = True
    return opts


class ByteScanner:
    """An RE2 program run over raw byte blocks (many lines at once), reporting match offsets only.

    ``(?m)`` is implied: ``^`` and ``$`` match at line starts and ends inside the block.

    Args:
        pattern: RE2 syntax.
        ignore_case: case-insensitive matching.

    Raises:
        ValueError: RE2 cannot compile ``pattern``.
    """

    __slots__ = ("pattern", "_raw")

    def __init__(self, pattern: str, *, ignore_case: bool = False) -> None:
        raw = _re2.RE2(("(?m)" + pattern).encode(), _bytes_options(ignore_case))
        if not raw.ok():
            raise ValueError(f"not a linear-time (RE2) pattern: {pattern!r}: {raw.error()}")
        self.pattern, self._raw = pattern, raw

    def find(self, block: bytes, pos: int, end: int) -> int:
        """Offset of the first match in ``block[pos:end]``, or -1 (the block is not copied)."""
        return self._raw.Match(_UNANCHORED, block, pos, end)[0][0]


class ByteSet:
    """Which of several patterns match one byte string (one RE2::Set pass for all of them)."""

    __slots__ = ("patterns", "_set")

    def __init__(self, patterns: list[str], *, ignore_case: bool = False) -> None:
        self.patterns = list(patterns)
        self._set = _re2.Set(_UNANCHORED, _bytes_options(ignore_case))
        for p in self.patterns:
            if self._set.Add(("(?m)" + p).encode()) < 0:
                raise ValueError(f"not a linear-time (RE2) pattern: {p!r}")
        if not self._set.Compile():
            raise ValueError("RE2 could not compile the pattern set")

    def match(self, text: bytes) -> list[int]:
        """Indices (into :attr:`patterns`) of the patterns found in ``text``, in any order."""
        return self._set.Match(text) or []
