"""VNN-LIB 1.0 property parser (https://www.vnnlib.org, the VNN-COMP 2021-2025 subset).

Tokenises on parentheses with no whitespace assumptions (VeriNet issue #2 style files parse) in
linear time, builds s-expressions with 1-based line/column positions without recursion (any
nesting depth), and turns the conjunction of all ``assert`` s into a disjunctive normal form.
Each conjunct splits into an input box (bounds on single ``X_i``) and an output polytope
``A y ≤ b`` (atoms over ``Y_j``). Conjuncts sharing a box form one :class:`Case`; the property is
violated iff some case's box contains an ``x`` whose output lies in one of its polytopes (the
*unsafe* set).

Strict inequalities: the bounds (proofs of ``unsat``) work on the closure, which is the
conservative side; the strictness is kept (``Clause.strict_K``, ``Case.lo_strict_N`` /
``hi_strict_N``) so that a counterexample is accepted only if it satisfies the atoms as written
(:meth:`Clause.contains`, :func:`gpufield.verify.attack.validate`).

Inputs refused with an error naming file, line and column (never a silent proof):

* an empty input range (``lo > hi``, or ``lo == hi`` with a strict bound). The official VNN-COMP
  reader (``read_vnnlib_simple`` in ChristopherBrix/vnncomp2022_results, ``SCORING/vnnlib.py``)
  asserts ``X_i range is empty`` there as well; an empty box is a swapped-bounds mistake in
  practice, and dropping its disjunct used to turn such a file into a "proof".
* numbers that are not finite decimals (``nan``, ``inf``, ``1e999``) and terms that overflow.
* a disjunctive normal form with more than ``max_disjuncts`` conjuncts (``(and (or a b) (or c
  d) ...)`` multiplies out): the count is computed before anything is built, so five ``(or ...)``
  of nine atoms (59049 conjuncts) fail at once instead of filling gigabytes.

Constant atoms (``(< 0 0)``) are evaluated: a true one drops out of its conjunction, a false one
becomes the always-infeasible row ``0·y ≤ −1`` (so the conjunct is provably empty; a sound
``unsat`` by the SMT-LIB semantics of ``assert``, and never a counterexample).

Box bounds are the float64 values nearest to the literals: for float32 or float64 inputs the
representable points of that box are exactly those of the written box (a representable point
beyond the nearest float64 would be nearer).

Shape legend: N input variables, M output variables, K rows of one polytope.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import numpy as np

from gpufield.errors import SpecFormatError

_TOKEN = re.compile(r"\(|\)|[^\s();]+|;[^\n]*")
_VAR = re.compile(r"^([XY])_(\d+)$")
_NUM = re.compile(r"^[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?$")
MAX_DISJUNCTS = 10_000


@dataclass(frozen=True, slots=True)
class Tok:
    """A token with its 1-based position."""

    text: str
    line: int
    col: int


@dataclass(frozen=True)
class Clause:
    """One polytope of the unsafe output set: ``A_KM @ y ≤ b_K`` (``<`` where ``strict_K``).

    Attributes:
        A_KM: float64 ``[K, M]`` (``K = 0`` means the whole box is unsafe).
        b_K: float64 ``[K]``.
        strict_K: bool ``[K]``, rows written with ``<``/``>``; None means all non-strict.
    """

    A_KM: np.ndarray
    b_K: np.ndarray
    strict_K: np.ndarray | None = None

    def contains(self, y_M: np.ndarray) -> bool:
        """Whether ``y`` lies in this polytope as written (strict rows strictly).

        Float64 decides the rows whose slack ``b − A y`` is clear of its rounding-error bound;
        the others are decided in exact rational arithmetic on the float64 values. A non-finite
        ``y`` is never contained.

        Args:
            y_M: float ``[M]`` outputs.
        """
        y = np.asarray(y_M, dtype=np.float64).reshape(-1)
        if not np.isfinite(y).all():
            return False
        if len(self.b_K) == 0:
            return True
        strict = np.zeros(len(self.b_K), bool) if self.strict_K is None else self.strict_K
        slack = self.b_K - self.A_KM @ y
        err = 4.0 * (len(y) + 2) * np.finfo(np.float64).eps * (np.abs(self.A_KM) @ np.abs(y) + np.abs(self.b_K))
        for k in np.flatnonzero(np.abs(slack) <= err):  # too close to call in float64
            exact = Fraction(self.b_K[k]) - sum(Fraction(a) * Fraction(v) for a, v in zip(self.A_KM[k], y, strict=True) if a)
            slack[k], err[k] = (1.0 if exact > 0 else -1.0 if exact < 0 else 0.0), 0.0
        ok = np.where(strict, slack > err, slack >= -err)
        return bool(ok.all())


@dataclass(frozen=True)
class Case:
    """One input box with the polytopes of the unsafe set attached to it.

    Attributes:
        lo_N, hi_N: float64 ``[N]`` box bounds (the closure of the written set).
        clauses: the disjunction of unsafe polytopes.
        lo_strict_N, hi_strict_N: bool ``[N]``, bounds written with ``<``/``>`` (None: none).
    """

    lo_N: np.ndarray
    hi_N: np.ndarray
    clauses: tuple[Clause, ...]
    lo_strict_N: np.ndarray | None = None
    hi_strict_N: np.ndarray | None = None

    def contains_input(self, x_N: np.ndarray) -> bool:
        """Whether ``x`` (float64 ``[N]``) lies in the box as written (strict bounds strictly)."""
        x = np.asarray(x_N, dtype=np.float64).reshape(-1)
        if not np.isfinite(x).all() or (x < self.lo_N).any() or (x > self.hi_N).any():
            return False
        if self.lo_strict_N is not None and (self.lo_strict_N & (x == self.lo_N)).any():
            return False
        return not (self.hi_strict_N is not None and (self.hi_strict_N & (x == self.hi_N)).any())


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
    """Split VNN-LIB text into parentheses and atoms, dropping ``;`` comments (linear time)."""
    toks, line, line_start, pos = [], 1, 0, 0
    for m in _TOKEN.finditer(text):
        s = m.start()
        nl = text.count("\n", pos, s)  # only the gap since the previous token
        if nl:
            line += nl
            line_start = text.rfind("\n", pos, s) + 1
        pos = m.end()
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
    """An s-expression back as text, for error messages: ``(_ BitVec 8)`` (no recursion)."""
    out, work = [], [e]
    while work:
        x = work.pop()
        if isinstance(x, str):
            out.append(x)
        elif isinstance(x, Tok):
            out.append(x.text)
        else:
            work.append(")")
            for i, a in enumerate(reversed(x[1:])):
                work.append(a)
                if i < len(x) - 2:
                    work.append(" ")
            work.append("(")
    return "".join(out)


def _head(e) -> Tok:
    return e[0] if isinstance(e, list) else e


def parse_vnnlib(path: str | Path, text: str | None = None, *, max_disjuncts: int = MAX_DISJUNCTS) -> Property:
    """Parse a VNN-LIB 1.0 file (``.vnnlib`` or ``.vnnlib.gz``).

    Args:
        path: the file (also used in error messages).
        text: the file's contents, if already read.
        max_disjuncts: most conjuncts the disjunctive normal form may have (an error beyond).

    Returns:
        The :class:`Property`.

    Raises:
        SpecFormatError: syntax or semantic problems (see the module doc), with file:line:column.
    """
    from gpufield.verify.io._vnnlib_build import _Parser

    p = str(path)
    if text is None:
        from gpufield._files import read_bytes

        try:
            raw = read_bytes(p)  # a truncated .gz is an InputError naming the file (not EOFError: "interrupted")
        except FileNotFoundError as e:
            raise SpecFormatError("property file not found", path=p) from e
        text = raw.decode("utf-8", errors="replace")
    return _Parser(p, max_disjuncts).run(text)
