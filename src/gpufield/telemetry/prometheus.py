"""Parser for the Prometheus text exposition format 0.0.4 (dcgm-exporter, node-exporter, vLLM).

Follows https://prometheus.io/docs/instrumenting/exposition_formats/ (text-based format, 0.0.4):
``# HELP name text`` (escapes ``\\\\`` and ``\\n``), ``# TYPE name counter|gauge|histogram|summary|untyped``
(at most once, before the metric's first sample), other ``#`` lines are comments, and samples
``name{label="value",...} value [timestamp_ms]`` with label-value escapes ``\\\\``, ``\\"``, ``\\n``, values as
Go ``ParseFloat`` reads them (``NaN``, ``+Inf``, ``-Inf``, ``1.5e+06``), an optional int64 timestamp in ms,
and an optional trailing comma in the label set. Histogram ``_bucket``/``_sum``/``_count`` and summary
``_sum``/``_count`` samples are grouped into their family.

:func:`iter_samples` streams over lines (a file object or a list), :func:`parse_text` groups families.
Every syntax error raises :class:`~gpufield.errors.InputError` with path, line, column and what was
expected. Example (dcgm-exporter, ``../shared/reference/triage.md`` section 2.6)::

    >>> from gpufield.telemetry import parse_text
    >>> fam = parse_text('DCGM_FI_DEV_GPU_TEMP{gpu="0",modelName="NVIDIA H200"} 41\\n')
    >>> fam["DCGM_FI_DEV_GPU_TEMP"].samples[0].value
    41.0
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from gpufield.errors import InputError

__all__ = ["PromSample", "MetricFamily", "iter_samples", "parse_text", "parse_file"]

TYPES = ("counter", "gauge", "histogram", "summary", "untyped")
_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_FLOAT = re.compile(r"[+-]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|[iI][nN][fF](?:[iI][nN][iI][tT][yY])?|[nN][aA][nN])")
_SUFFIXES = {"histogram": ("_bucket", "_sum", "_count"), "summary": ("_sum", "_count")}


@dataclass(frozen=True, slots=True)
class PromSample:
    """One exposition sample.

    Attributes:
        name: sample name as written (e.g. ``vllm:e2e_request_latency_seconds_bucket``).
        labels: label name -> unescaped value.
        value: float (NaN and +/-Inf allowed).
        timestamp_ms: optional int64 ms since the epoch.
        family: the family it belongs to (name without ``_bucket``/``_sum``/``_count`` for a declared
            histogram or summary, else ``name``).
        type: the family's declared type, ``"untyped"`` when undeclared.
        line: 1-based line number in the input.
    """

    name: str
    labels: dict[str, str]
    value: float
    timestamp_ms: int | None
    family: str
    type: str
    line: int


@dataclass(slots=True)
class MetricFamily:
    """All samples of one metric family, with its HELP text and TYPE.

    Attributes:
        name: family name.
        type: one of ``counter, gauge, histogram, summary, untyped``.
        help: the unescaped HELP text, ``""`` if none.
        samples: in input order.
    """

    name: str
    type: str = "untyped"
    help: str = ""
    samples: list[PromSample] = field(default_factory=list)


def _unescape(s: str, allowed: str) -> str:
    out, i = [], 0
    while i < len(s):
        c = s[i]
        if c == "\\" and i + 1 < len(s):
            nxt = s[i + 1]
            if nxt in allowed:
                out.append("\n" if nxt == "n" else nxt)
                i += 2
                continue
        out.append(c)  # like Prometheus, an unknown escape is kept verbatim
        i += 1
    return "".join(out)


def _parse_float(tok: str, what: str, path: str | None, line: int, col: int) -> float:
    if not _FLOAT.fullmatch(tok):
        raise InputError(f"invalid {what} {tok!r}: expected a float, NaN, +Inf or -Inf", path=path, line=line,
                         column=col)
    return float(tok)


class _Parser:
    def __init__(self, path: str | None) -> None:
        self.path = path
        self.types: dict[str, str] = {}
        self.helps: dict[str, str] = {}
        self.seen: set[str] = set()  # families that already have samples

    def err(self, msg: str, line: int, col: int | None = None) -> InputError:
        return InputError(msg, path=self.path, line=line, column=col)

    def comment(self, text: str, n: int) -> None:
        parts = text[1:].lstrip(" \t").split(None, 2)
        if not parts or parts[0] not in ("HELP", "TYPE"):
            return  # plain comment
        kw = parts[0]
        if len(parts) < 2:
            raise self.err(f"# {kw} needs a metric name", n)
        name = parts[1]
        if not _NAME.fullmatch(name):
            raise self.err(f"invalid metric name {name!r} in # {kw}: expected [a-zA-Z_:][a-zA-Z0-9_:]*", n)
        rest = parts[2] if len(parts) > 2 else ""
        if kw == "HELP":
            if name in self.helps:
                raise self.err(f"second # HELP for {name!r}: expected at most one", n)
            self.helps[name] = _unescape(rest, "\\n")
            return
        typ = rest.strip()
        if typ not in TYPES:
            raise self.err(f"unknown type {typ!r} for {name!r}: expected one of {', '.join(TYPES)}", n)
        if name in self.types:
            raise self.err(f"second # TYPE for {name!r}: expected at most one", n)
        if name in self.seen:
            raise self.err(f"# TYPE for {name!r} after its samples: expected it before the first sample", n)
        self.types[name] = typ

    def family_of(self, name: str) -> tuple[str, str]:
        if name in self.types and self.types[name] not in _SUFFIXES:
            return name, self.types[name]
        for suffix in ("_bucket", "_sum", "_count"):
            if name.endswith(suffix):
                base = name[: -len(suffix)]
                if suffix in _SUFFIXES.get(self.types.get(base, ""), ()):
                    return base, self.types[base]
        return name, self.types.get(name, "untyped")

    def sample(self, text: str, n: int) -> PromSample:
        m = _NAME.match(text)
        if not m:
            raise self.err(f"expected a metric name at {text[:20]!r}", n, 1)
        name, i = m.group(), m.end()
        labels: dict[str, str] = {}
        if i < len(text) and text[i] == "{":
            i = self.labels(text, i + 1, n, labels)
        rest = text[i:]
        if rest and rest[0] not in " \t":
            raise self.err(f"expected a space or '{{' after metric name {name!r}, got {rest[0]!r}", n, i + 1)
        toks = rest.split()
        if not toks:
            raise self.err(f"missing value for {name!r}: expected 'name[{{labels}}] value [timestamp]'", n,
                           len(text) + 1)
        if len(toks) > 2:
            raise self.err(f"unexpected text {' '.join(toks[2:])!r} after the timestamp", n)
        col = i + 1 + len(rest) - len(rest.lstrip())
        value = _parse_float(toks[0], "value", self.path, n, col)
        ts = None
        if len(toks) == 2:
            if not re.fullmatch(r"[+-]?\d+", toks[1]):
                raise self.err(f"invalid timestamp {toks[1]!r}: expected an integer (ms since epoch)", n)
            ts = int(toks[1])
        family, typ = self.family_of(name)
        if typ == "histogram" and name.endswith("_bucket") and "le" not in labels:
            raise self.err(f"histogram bucket {name!r} without an 'le' label", n)
        if typ == "summary" and name == family and "quantile" not in labels:
            raise self.err(f"summary sample {name!r} without a 'quantile' label", n)
        self.seen.add(family)
        return PromSample(name, labels, value, ts, family, typ, n)

    def labels(self, text: str, i: int, n: int, out: dict[str, str]) -> int:
        while True:
            while i < len(text) and text[i] in " \t":
                i += 1
            if i < len(text) and text[i] == "}":
                return i + 1
            name_col = i + 1
            m = _LABEL.match(text, i)
            if not m:
                got = text[i] if i < len(text) else "end of line"
                raise self.err(f"expected a label name or '}}', got {got!r}", n, i + 1)
            lname, i = m.group(), m.end()
            while i < len(text) and text[i] in " \t":
                i += 1
            if i >= len(text) or text[i] != "=":
                raise self.err(f"expected '=' after label name {lname!r}", n, i + 1)
            i += 1
            while i < len(text) and text[i] in " \t":
                i += 1
            if i >= len(text) or text[i] != '"':
                raise self.err(f"expected '\"' to open the value of label {lname!r}", n, i + 1)
            j, start = i + 1, i + 1
            while j < len(text) and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            if j >= len(text):
                raise self.err(f"unterminated value of label {lname!r}: expected a closing '\"'", n, start + 1)
            if lname in out:
                raise self.err(f"duplicate label {lname!r}", n, name_col)
            out[lname] = _unescape(text[start:j], '\\"n')
            i = j + 1
            while i < len(text) and text[i] in " \t":
                i += 1
            if i < len(text) and text[i] == ",":
                i += 1
                continue
            if i < len(text) and text[i] == "}":
                return i + 1
            raise self.err(f"expected ',' or '}}' after the value of label {lname!r}", n, i + 1)


def iter_samples(lines: Iterable[str], *, path: str | None = None) -> Iterator[PromSample]:
    """Stream samples from exposition lines.

    Args:
        lines: text lines split on ``\\n`` only (a file object opened with ``newline="\\n"`` works);
            a trailing ``\\n`` or ``\\r\\n`` is stripped.
        path: shown in error messages.

    Yields:
        :class:`PromSample` in input order.

    Raises:
        InputError: a malformed line; the message names ``path:line:column`` and what was expected.
    """
    yield from _iter(lines, _Parser(path))


def _iter(lines: Iterable[str], p: _Parser) -> Iterator[PromSample]:
    for n, raw in enumerate(lines, 1):
        text = raw.rstrip("\r\n")
        stripped = text.lstrip(" \t")
        if not stripped:
            continue
        if stripped.startswith("#"):
            p.comment(stripped, n)
            continue
        yield p.sample(stripped, n)


def _group(lines: Iterable[str], path: str | None) -> dict[str, MetricFamily]:
    p = _Parser(path)
    fams: dict[str, MetricFamily] = {}
    for s in _iter(lines, p):
        fam = fams.get(s.family)
        if fam is None:
            fam = fams[s.family] = MetricFamily(s.family, s.type)
        fam.samples.append(s)
    for name in [*p.types, *p.helps]:  # families declared without samples keep their metadata
        fam = fams.setdefault(name, MetricFamily(name))
        fam.type = p.types.get(name, fam.type)
        fam.help = p.helps.get(name, fam.help)
    return fams


def parse_text(text: str, *, path: str | None = None) -> dict[str, MetricFamily]:
    """Parse a whole exposition document into families keyed by family name.

    Args:
        text: the exposition text.
        path: shown in error messages.

    Returns:
        ``{family name: MetricFamily}`` in first-appearance order.

    Raises:
        InputError: a malformed line (see :func:`iter_samples`).
    """
    return _group(text.split("\n"), path)  # only \n ends a line (a label may hold \r or \u2028)


def parse_file(path: str) -> dict[str, MetricFamily]:
    """Parse an exposition file (streamed line by line).

    Args:
        path: file path.

    Returns:
        As :func:`parse_text`.

    Raises:
        InputError: a malformed line, naming ``path:line``.
        OSError: the file cannot be read.
    """
    with open(path, encoding="utf-8", newline="\n") as f:
        return _group(f, str(path))

