"""VNN-LIB 1.0 property parser (https://www.vnnlib.org, the VNN-COMP 2021-2025 subset).

Tokenises on parentheses with no whitespace assumptions (VeriNet issue #2 style files parse),
builds s-expressions with 1-based line/column positions, and turns the conjunction of all
``assert`` s into a disjunctive normal form. Each conjunct splits into an input box (bounds on
single ``X_i``) and an output polytope ``A y ≤ b`` (atoms over ``Y_j``). Conjuncts sharing a box
form one :class:`Case`; the property is violated iff some case's box contains an ``x`` whose
output lies in one of its polytopes (the *unsafe* set). Strict inequalities are read as
non-strict (the closure), which is the conservative choice for proving ``unsat``.

Shape legend: N input variables, M output variables, K rows of one polytope.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gpufield.errors import SpecFormatError

_TOKEN = re.compile(r"\(|\)|[^\s();]+|;[^\n]*")
_VAR = re.compile(r"^([XY])_(\d+)$")


@dataclass(frozen=True, slots=True)
class Tok:
    """A token with its 1-based position."""

    text: str
    line: int
    col: int


@dataclass(frozen=True)
class Clause:
    """One polytope of the unsafe output set: ``A_KM @ y ≤ b_K``.

    Attributes:
        A_KM: float64 ``[K, M]`` (``K = 0`` means the whole box is unsafe).
        b_K: float64 ``[K]``.
    """

    A_KM: np.ndarray
    b_K: np.ndarray


@dataclass(frozen=True)
class Case:
    """One input box with the polytopes of the unsafe set attached to it.

    Attributes:
        lo_N, hi_N: float64 ``[N]`` box bounds.
        clauses: the disjunction of unsafe polytopes.
    """

    lo_N: np.ndarray
    hi_N: np.ndarray
    clauses: tuple[Clause, ...]


@dataclass(frozen=True)
class Property:
    """A parsed VNN-LIB property.

    Attributes:
        n_inputs: number of declared ``X_i``.
        n_outputs: number of declared ``Y_j``.
        cases: disjunction of (box, unsafe polytopes); the property holds (``unsat``) iff every
            clause of every case is infeasible.
        source: file path.
    """

    n_inputs: int
    n_outputs: int
    cases: tuple[Case, ...]
    source: str = ""


def tokenize(text: str, path: str = "<string>") -> list[Tok]:
    """Split VNN-LIB text into parentheses and atoms, dropping ``;`` comments."""
    toks, line, line_start = [], 1, 0
    for m in _TOKEN.finditer(text):
        s = m.start()
        nl = text.count("\n", line_start if s >= line_start else 0, s)
        if nl:
            line += nl
            line_start = text.rfind("\n", 0, s) + 1
        if m.group().startswith(";"):
            continue
        toks.append(Tok(m.group(), line, s - line_start + 1))
    return toks


def _sexprs(toks: list[Tok], path: str):
    stack: list[list] = [[]]
    opens: list[Tok] = []
    for t in toks:
        if t.text == "(":
            stack.append([t])
            opens.append(t)
        elif t.text == ")":
            if len(stack) == 1:
                raise SpecFormatError("unbalanced ')'", path=path, line=t.line, column=t.col)
            done = stack.pop()
            opens.pop()
            stack[-1].append(done)
        else:
            stack[-1].append(t)
    if opens:
        t = opens[-1]
        raise SpecFormatError("'(' is never closed", path=path, line=t.line, column=t.col)
    return stack[0]


def _show(e) -> str:
    """An s-expression back as text, for error messages: ``(_ BitVec 8)``."""
    if isinstance(e, Tok):
        return e.text
    return "(" + " ".join(_show(a) for a in e[1:]) + ")"


class _Parser:
    def __init__(self, path: str):
        self.path = path
        self.decl: dict[str, Tok] = {}  # name -> its token in the (first) declaration

    def err(self, msg, tok):
        return SpecFormatError(msg, path=self.path, line=tok.line, column=tok.col)

    def head(self, e) -> Tok:
        return e[0] if isinstance(e, list) else e

    def linear(self, e) -> tuple[dict[str, float], float]:
        """A term -> (coefficients by variable name, constant)."""
        if isinstance(e, Tok):
            if e.text in self.decl:
                return {e.text: 1.0}, 0.0
            if _VAR.match(e.text):
                raise self.err(f"{e.text} is used but never declared", e)
            try:
                return {}, float(e.text)
            except ValueError:
                raise self.err(f"expected a number or a declared variable, got {e.text!r}", e) from None
        op = e[1] if len(e) > 1 and isinstance(e[1], Tok) else self.head(e)
        args = [self.linear(a) for a in e[2:]]
        if op.text == "+" or (op.text == "-" and len(args) >= 1):
            co, k = dict(args[0][0]), args[0][1]
            if op.text == "-" and len(args) == 1:
                return {v: -c for v, c in co.items()}, -k
            for c2, k2 in args[1:]:
                s = 1.0 if op.text == "+" else -1.0
                for v, c in c2.items():
                    co[v] = co.get(v, 0.0) + s * c
                k += s * k2
            return co, k
        if op.text == "*" and len(args) == 2 and (not args[0][0] or not args[1][0]):
            (ca, ka), (cb, kb) = args if not args[0][0] else args[::-1]
            return {v: c * ka for v, c in cb.items()}, ka * kb
        raise self.err(f"expected a linear term (+, -, * by a constant), got {op.text!r}", op)

    def formula(self, e) -> list[list[tuple]]:
        """A formula -> DNF: list of conjunctions of atoms ``(coefs, const, tok)`` meaning ``Σ c v + k ≤ 0``."""
        if not isinstance(e, list) or len(e) < 2 or not isinstance(e[1], Tok):
            raise self.err("expected a formula such as (<= Y_0 Y_1), (and ...) or (or ...)", self.head(e))
        op = e[1]
        if op.text in ("and", "or"):
            parts = [self.formula(a) for a in e[2:]]
            if not parts:
                raise self.err(f"empty ({op.text})", op)
            if op.text == "or":
                return [c for p in parts for c in p]
            out = [[]]
            for p in parts:
                out = [a + b for a in out for b in p]
            return out
        if op.text in ("<=", ">=", "<", ">"):
            if len(e) != 4:
                raise self.err(f"({op.text} ...) takes exactly two terms", op)
            (ca, ka), (cb, kb) = self.linear(e[2]), self.linear(e[3])
            if op.text in (">=", ">"):
                (ca, ka), (cb, kb) = (cb, kb), (ca, ka)
            co = dict(ca)
            for v, c in cb.items():
                co[v] = co.get(v, 0.0) - c
            return [[(co, ka - kb, op)]]
        raise self.err(f"unknown connective {op.text!r} (expected and, or, <=, >=, <, >)", op)

    def declare(self, e, kw: Tok) -> None:
        """``(declare-const X_i Real)``: the name must be ``X_i``/``Y_j``, the sort ``Real``
        (VNN-LIB declares every input and output ``Real``), and no name may be declared twice."""
        if len(e) != 4 or not _VAR.match(e[2].text if isinstance(e[2], Tok) else ""):
            raise self.err("expected (declare-const X_i Real) or (declare-const Y_j Real)", kw)
        name, sort = e[2], e[3]
        if not isinstance(sort, Tok) or sort.text != "Real":
            raise self.err(f"{name.text} has unknown sort {_show(sort)!r} (expected Real)", self.head(sort))
        first = self.decl.get(name.text)
        if first is not None:
            raise self.err(f"{name.text} declared twice (first at line {first.line})", name)
        self.decl[name.text] = name

    def run(self, text: str) -> Property:
        dnf: list[list[tuple]] = [[]]
        for e in _sexprs(tokenize(text, self.path), self.path):
            if not isinstance(e, list) or len(e) < 2:
                raise self.err("expected (declare-const ...) or (assert ...)", self.head(e))
            kw = e[1]
            if not isinstance(kw, Tok):
                raise self.err("expected (declare-const ...) or (assert ...)", self.head(kw))
            if kw.text == "declare-const":
                self.declare(e, kw)
            elif kw.text == "assert":
                if len(e) != 3:
                    raise self.err("(assert ...) takes one formula", kw)
                f = self.formula(e[2])
                dnf = [a + b for a in dnf for b in f]
            else:
                raise self.err(f"unknown command {kw.text!r}", kw)
        nx = sum(1 for v in self.decl if v[0] == "X")
        ny = sum(1 for v in self.decl if v[0] == "Y")
        for kind in ("X", "Y"):  # indices 0..n-1 without a gap
            names = sorted((v for v in self.decl if v[0] == kind), key=lambda v: int(v[2:]))
            for i, v in enumerate(names):
                if int(v[2:]) != i:
                    top = names[-1]
                    raise self.err(f"{kind}_{i} is not declared but {top} is", self.decl[top])
        return Property(nx, ny, self.cases(dnf, nx, ny), self.path)

    def cases(self, dnf, nx, ny) -> tuple[Case, ...]:
        groups: dict[bytes, tuple[np.ndarray, np.ndarray, list[Clause]]] = {}
        for conj in dnf:
            lo, hi = np.full(nx, -np.inf), np.full(nx, np.inf)
            rows, rhs = [], []
            for co, k, tok in conj:
                co = {v: c for v, c in co.items() if c != 0.0}
                kinds = {v[0] for v in co}
                if kinds == {"X"}:
                    if len(co) != 1:
                        raise self.err("input constraints must bound single variables (boxes)", tok)
                    (v, c), = co.items()
                    i, bound = int(v[2:]), -k / c
                    if c > 0:
                        hi[i] = min(hi[i], bound)
                    else:
                        lo[i] = max(lo[i], bound)
                elif kinds == {"Y"}:
                    row = np.zeros(ny)
                    for v, c in co.items():
                        row[int(v[2:])] = c
                    rows.append(row)
                    rhs.append(-k)
                elif not kinds:
                    if k > 0:
                        rows.append(np.zeros(ny))
                        rhs.append(-k)
                else:
                    raise self.err("a constraint mixes input and output variables", tok)
            if not (np.isfinite(lo).all() and np.isfinite(hi).all()):
                i = int(np.flatnonzero(~(np.isfinite(lo) & np.isfinite(hi)))[0])
                raise SpecFormatError(f"X_{i} has no finite lower and upper bound", path=self.path)
            if (lo > hi).any():
                continue  # an empty box: this conjunct cannot be violated
            key = lo.tobytes() + hi.tobytes()
            A = np.array(rows, dtype=np.float64).reshape(len(rows), ny)
            groups.setdefault(key, (lo, hi, []))[2].append(Clause(A, np.array(rhs, dtype=np.float64)))
        return tuple(Case(lo, hi, tuple(cl)) for lo, hi, cl in groups.values())


def parse_vnnlib(path: str | Path, text: str | None = None) -> Property:
    """Parse a VNN-LIB 1.0 file (``.vnnlib`` or ``.vnnlib.gz``).

    Args:
        path: the file (also used in error messages).
        text: the file's contents, if already read.

    Returns:
        The :class:`Property`.

    Raises:
        SpecFormatError: syntax or semantic problems, with file:line:column.
    """
    p = str(path)
    if text is None:
        from gpufield._files import read_bytes

        try:
            raw = read_bytes(p)  # a truncated .gz is an InputError naming the file (not EOFError: "interrupted")
        except FileNotFoundError as e:
            raise SpecFormatError("property file not found", path=p) from e
        text = raw.decode("utf-8", errors="replace")
    return _Parser(p).run(text)
