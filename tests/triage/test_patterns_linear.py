"""Every pattern the parsers match lines with runs in linear time (issue 24).

The guarantee is structural, not a stopwatch: each pattern is an RE2 program (``parsers._regex``),
so its search time is linear in the line for any input; RE2 refuses back-references and
look-around, so a pattern that needs backtracking cannot be compiled at all. The tests check

* that the patterns are collected from the parser modules themselves (no hand-kept list) and that
  none of those modules compiles or calls Python's backtracking ``re`` (AST check);
* that each pattern gives the same match (span and every group) as Python's ``re`` on every line
  of the fixtures and of the shared corpus (RE2 changed the engine, not what is matched);
* that each pattern survives 40 kB adversarial lines (runs of word characters, colons, spaces,
  digits, and the pattern's own literals repeated) and gives the same answer as ``re`` where ``re``
  finishes quickly (short versions of the same lines);
* that ingestion cuts lines at :data:`MAX_LINE_CHARS` for matching and says so, and that the 40 kB
  kernel line of the issue (103 s before) is parsed.
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
import re
from pathlib import Path

import pytest

import gpufield.triage.parsers as parsers_pkg
from gpufield.triage.ingest import ingest
from gpufield.triage.parsers import PARSERS, _regex
from gpufield.triage.parsers._regex import MAX_LINE_CHARS, Pattern

DATA = Path(__file__).parent / "data"
MODULES = sorted(m.name for m in pkgutil.iter_modules(parsers_pkg.__path__) if m.name != "_regex")


def _patterns() -> dict[str, Pattern]:
    out: dict[str, Pattern] = {}
    for name in MODULES:
        mod = importlib.import_module(f"gpufield.triage.parsers.{name}")
        for attr, v in vars(mod).items():
            if isinstance(v, Pattern):
                out.setdefault(v.pattern, v)  # several modules share a pattern object by import
            assert not isinstance(v, re.Pattern), f"{name}.{attr} is a backtracking stdlib pattern"
    for p in PARSERS:
        out.setdefault(p.prefilter, _regex.compile(p.prefilter))  # matched by pyarrow's RE2 too
    return out


PATTERNS = _patterns()


def test_patterns_are_collected_from_every_parser_module():
    assert {"kernel", "nccl", "torch", "torchrun", "cuda", "train", "smi", "dcgm", "python", "_prefix"} <= set(MODULES)
    # at least the patterns the issue named, found by content, not by name
    texts = list(PATTERNS)
    for needle in ("AER: ", "SXid", "NCCL WARN", "loss"):
        assert any(needle in t for t in texts), needle
    assert len(PATTERNS) > 80


@pytest.mark.parametrize("name", MODULES)
def test_no_stdlib_regex_in_parser_modules(name):
    src = Path(parsers_pkg.__path__[0], f"{name}.py").read_text()
    tree = ast.parse(src)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            assert all(a.name != "re" for a in node.names), f"{name}.py imports re"
        if isinstance(node, ast.ImportFrom):
            assert node.module != "re", f"{name}.py imports from re"
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                isinstance(node.func.value, ast.Name) and node.func.value.id == "re":
            pytest.fail(f"{name}.py:{node.lineno} calls re.{node.func.attr}")


def test_re2_refuses_backtracking_constructs():
    for bad in (r"(a)\1", r"foo(?=bar)", r"(?<!x)y", r"(?>a+)b"):
        with pytest.raises(ValueError, match="not a linear-time"):
            _regex.compile(bad)
        assert not _regex.is_linear(bad)
    assert _regex.is_linear(r"(?P<agent>[\w-]+) x")


def _std(p: Pattern) -> re.Pattern[str]:
    return re.compile(p.pattern, re.ASCII | (re.IGNORECASE if p.ignore_case else 0))


def _same(p: Pattern, std: re.Pattern[str], line: str) -> None:
    a, b = p.search(line), std.search(line)
    assert (a is None) == (b is None), (p.pattern, line[:200])
    if a is not None:
        assert a.span() == b.span(), (p.pattern, line[:200])
        assert a.groups() == b.groups(), (p.pattern, line[:200])
        assert a.groupdict() == b.groupdict()
        assert {k: a[k] for k in p.groupindex} == {k: b[k] for k in std.groupindex}  # by name
    for pos in (0, len(line) // 3):  # match at a position (the prefix parser's call)
        a, b = p.match(line, pos), std.match(line, pos)
        assert (a is None) == (b is None), (p.pattern, pos, line[:200])
        if a is not None:
            assert a.span() == b.span() and a.groups() == b.groups(), (p.pattern, pos, line[:200])


def _corpus_lines(shared: Path | None) -> list[str]:
    files = sorted(DATA.rglob("*.log")) + sorted(DATA.rglob("*.txt"))
    if shared is not None:
        files += sorted((shared / "data" / "triage-cases").glob("*.log"))
    lines: list[str] = []
    for f in files:
        lines.extend(f.read_text(errors="replace").splitlines())
    return lines


def test_same_matches_as_stdlib_on_real_lines(request):
    shared = Path(__file__).resolve().parents[2].parent / "shared"
    lines = _corpus_lines(shared if shared.is_dir() else None)
    assert len(lines) > 300
    hits = 0
    for p in PATTERNS.values():
        std = _std(p)
        for line in lines:
            _same(p, std, line)
        hits += sum(1 for line in lines if p.search(line))
    assert hits > 1000  # the patterns do match the corpus: the comparison is not vacuous


def _literals(pattern: str) -> list[str]:
    """Runs of plain characters in ``pattern`` (its literal words), longest first."""
    bare = re.sub(r"\(\?(?:P<\w+>|[:i]+\)?)", "(", pattern)  # drop group names and flags
    runs = re.findall(r"(?:\\.|[^\\()\[\]{}|?*+.^$])+", bare)
    out = {re.sub(r"\\(.)", r"\1", r) for r in runs}
    return sorted((x for x in out if len(x) >= 3), key=len, reverse=True)[:4]


def adversarial(pattern: str, n: int) -> list[str]:
    """Lines of about ``n`` characters that make backtracking engines go quadratic or worse."""
    base = ["a" * n, "_-" * (n // 2), ":" * n, " " * n, "0" * n, "a " * (n // 2), "0:" * (n // 2),
            "x" * n + " AER: ", "NCCL WARN " + ":" * n, "loss" + " " * n + "x", "\t" * n + "=" * 8]
    for lit in _literals(pattern):
        base.append((lit * (n // len(lit) + 1))[:n])
        base.append((lit + " ") * (n // (len(lit) + 1)))
    return base


def test_adversarial_lines_agree_with_stdlib_when_short():
    # stdlib finishes on 300-character lines; the answers must be the same as RE2's
    for p in PATTERNS.values():
        std = _std(p)
        for line in adversarial(p.pattern, 300):
            _same(p, std, line)


def test_adversarial_lines_at_max_length_run():
    # RE2: linear by construction; this runs every pattern on every 40 kB adversarial line (with
    # Python's re the AER pattern alone took 103 s on one such line)
    n = 40_000
    assert n <= MAX_LINE_CHARS
    ran = 0
    for p in PATTERNS.values():
        for line in adversarial(p.pattern, n):
            p.search(line)
            p.match(line)
            ran += 1
    assert ran > 1000


def test_match_object_api_matches_stdlib():
    p = _regex.compile(r"(?P<a>\w+)=(?P<b>\d+)?(?P<c>x)?")
    m, s = p.search("  key=12"), re.compile(p.pattern).search("  key=12")
    assert m["a"] == s["a"] and m.group("b", "c") == s.group("b", "c") and m.group() == s.group()
    assert (m.start("a"), m.end("b"), m.span("c"), m.span()) == (s.start("a"), s.end("b"), s.span("c"), s.span())
    assert m.re is p and m.string == "  key=12"
    assert p.match("  key=1") is None and p.match("  key=1", 2)["a"] == "key"
    assert p.fullmatch("k=1x")["c"] == "x" and p.fullmatch("k=1x ") is None
    assert p.findall("a=1 b=2") == re.compile(p.pattern).findall("a=1 b=2")
    assert [x["a"] for x in p.finditer("a=1 b=2", 1)] == [x["a"] for x in re.compile(p.pattern).finditer("a=1 b=2", 1)]
    assert p.sub("#", "a=1 b=2") == "# #"
    # non-ASCII text: offsets are characters, as in re
    u = "é€ key=7"
    assert p.search(u).span() == re.compile(p.pattern, re.ASCII).search(u).span()
    assert _regex.compile("KEY", ignore_case=True).search(u).span() == (3, 6)


def test_long_kernel_line_is_parsed_and_cut_lines_are_counted(tmp_path):
    # issue 24: one kernel line with a 40 kB run of word characters took 103 s (AER patterns)
    slow = "pcieport " + "w" * 40_000 + " 0000:00:03.0: AER: Corrected error received: 0000:00:03.0"
    xid = "[ 100.000001] NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus. " + "z" * 100_000
    aer = "pcieport 0000:00:03.0: AER: Corrected error received: 0000:00:03.0"
    f = tmp_path / "kern.log"
    f.write_text("\n".join([slow, xid, aer, "plain line"]) + "\n")
    res = ingest([f])
    kinds = [(e.kind, e.line) for e in res.events]
    assert ("xid", 2) in kinds and ("pcie_aer", 3) in kinds
    assert res.stats.truncated_lines == 1  # only the 100 kB line exceeds MAX_LINE_CHARS
    assert any(w.line == 2 and "only its first" in w.message for w in res.stats.warnings)
    xid_ev = next(e for e in res.events if e.kind == "xid")
    assert xid_ev.code == "79" and len(xid_ev.raw) <= MAX_LINE_CHARS
