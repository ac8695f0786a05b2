"""The VNN-LIB 1.0 parser proper (internal): s-expressions -> :class:`~.vnnlib.Property`.

Terms and formulas are evaluated with explicit stacks (no recursion limit on nesting). A formula
becomes a disjunctive normal form over *atom ids* (tuples of ints, never copies of atoms);
conjunctions first concatenate their single-conjunct parts and multiply out only the real
disjunctions, with the product's size checked against the cap before it is built. The same is
done across the top-level ``assert`` s, so the hundreds of box bounds of a typical file are
applied once, not once per disjunct.
"""

from __future__ import annotations

import math

import numpy as np

from gpufield.errors import SpecFormatError
from gpufield.verify.io.vnnlib import (
    _NUM,
    _VAR,
    Case,
    Clause,
    Property,
    Tok,
    _head,
    _sexprs,
    _show,
    tokenize,
)

_CMP = ("<=", ">=", "<", ">")
_FALSE = ("F", None, None)  # the constant-false atom: row 0·y ≤ −1


class _Parser:
    def __init__(self, path: str, max_disjuncts: int):
        self.path, self.cap = path, max_disjuncts
        self.decl: dict[str, Tok] = {}  # name -> its token in the (first) declaration
        self.atoms: list[tuple] = [_FALSE]  # (kind, data, tok); id 0 is the constant false

    def err(self, msg, tok):
        return SpecFormatError(msg, path=self.path, line=tok.line, column=tok.col)

    # ---- terms -------------------------------------------------------------------------------
    def leaf(self, e: Tok) -> tuple[dict[str, float], float]:
        if e.text in self.decl:
            return {e.text: 1.0}, 0.0
        if _VAR.match(e.text):
            raise self.err(f"{e.text} is used but never declared", e)
        if not _NUM.match(e.text):
            hint = " (numbers are finite decimals)" if e.text.lstrip("+-").lower() in ("nan", "inf", "infinity") else ""
            raise self.err(f"expected a number or a declared variable, got {e.text!r}{hint}", e)
        v = float(e.text)
        if not math.isfinite(v):
            raise self.err(f"number {e.text} is outside the float64 range", e)
        return {}, v

    def linear(self, root) -> tuple[dict[str, float], float]:
        """A term -> (coefficients by variable name, constant), without recursion."""
        work, vals = [(root, False)], []
        while work:
            e, ready = work.pop()
            if isinstance(e, Tok):
                vals.append(self.leaf(e))
                continue
            op = e[1] if len(e) > 1 and isinstance(e[1], Tok) else _head(e)
            if not ready:
                if op.text not in ("+", "-", "*") or len(e) < 3:
                    raise self.err(f"expected a linear term (+, -, * by a constant), got {_show(e)[:60]!r}", op)
                work.append((e, True))
                work.extend((a, False) for a in reversed(e[2:]))
                continue
            n = len(e) - 2
            args, vals[-n:] = vals[-n:], []
            vals.append(self.combine_terms(op, args))
        return vals[0]

    def combine_terms(self, op: Tok, args):
        if op.text == "-" and len(args) == 1:
            co, k = args[0]
            return {v: -c for v, c in co.items()}, -k
        if op.text in ("+", "-"):
            co, k = dict(args[0][0]), args[0][1]
            s = 1.0 if op.text == "+" else -1.0
            for c2, k2 in args[1:]:
                for v, c in c2.items():
                    co[v] = co.get(v, 0.0) + s * c
                k += s * k2
            return co, k
        var = [a for a in args if a[0]]
        if len(var) > 1:
            raise self.err("a product of two variable terms is not linear", op)
        scale = math.prod(a[1] for a in args if not a[0])
        co, k = var[0] if var else ({}, 1.0)
        return {v: c * scale for v, c in co.items()}, k * scale

    # ---- formulas ----------------------------------------------------------------------------
    def atom(self, e, op: Tok) -> list[tuple[int, ...]]:
        if len(e) != 4:
            raise self.err(f"({op.text} ...) takes exactly two terms", op)
        (ca, ka), (cb, kb) = self.linear(e[2]), self.linear(e[3])
        if op.text in (">=", ">"):
            (ca, ka), (cb, kb) = (cb, kb), (ca, ka)
        co = dict(ca)
        for v, c in cb.items():
            co[v] = co.get(v, 0.0) - c
        k, strict = ka - kb, op.text in ("<", ">")  # the atom: Σ co·v + k ≤ 0 (< 0 if strict)
        if not (math.isfinite(k) and all(math.isfinite(c) for c in co.values())):
            raise self.err(f"({op.text} ...) overflows float64", op)
        co = {v: c for v, c in co.items() if c != 0.0}
        kinds = {v[0] for v in co}
        if not kinds:  # a constant: true drops out of its conjunction, false is the infeasible row
            return [()] if (k < 0 or (k == 0 and not strict)) else [(0,)]
        if kinds == {"X"}:
            if len(co) != 1:
                raise self.err("input constraints must bound single variables (boxes)", op)
            (v, c), = co.items()
            self.atoms.append(("X", (int(v[2:]), -k / c, c > 0, strict), op))
        elif kinds == {"Y"}:
            self.atoms.append(("Y", ({int(v[2:]): c for v, c in co.items()}, -k, strict), op))
        else:
            raise self.err("a constraint mixes input and output variables", op)
        return [(len(self.atoms) - 1,)]

    def conj(self, parts, tok: Tok, toks: list[Tok] | None = None, *, split: bool = False):
        """The DNF of a conjunction of DNFs, size-checked before it is built (the error names
        ``tok``, or the part of ``toks`` where the product passes the cap). With ``split`` the
        atoms common to every conjunct come back apart: ``(common, conjuncts without them)``."""
        common = tuple(a for p in parts if len(p) == 1 for a in p[0])
        multi = [p for p in parts if len(p) != 1]
        n = 1
        for i, p in enumerate(parts):
            n *= max(len(p), 1)
            if n > self.cap:
                tok = toks[i] if toks else tok
                size = math.prod(len(q) for q in multi)
                raise self.err(f"the disjunctive normal form has {size} conjuncts, more than the limit "
                               f"of {self.cap} (max_disjuncts)", tok)
        out = [() if split else common]
        for p in multi:
            out = [a + b for a in out for b in p]
        return (common, out) if split else out

    def formula(self, root) -> list[tuple[int, ...]]:
        """A formula -> DNF: a list of conjunctions of atom ids, without recursion."""
        work, vals = [(root, False)], []
        while work:
            e, ready = work.pop()
            if not isinstance(e, list) or len(e) < 2 or not isinstance(e[1], Tok):
                raise self.err("expected a formula such as (<= Y_0 Y_1), (and ...) or (or ...)", _head(e))
            op = e[1]
            if op.text in _CMP:
                vals.append(self.atom(e, op))
            elif op.text not in ("and", "or"):
                raise self.err(f"unknown connective {op.text!r} (expected and, or, <=, >=, <, >)", op)
            elif len(e) < 3:
                raise self.err(f"empty ({op.text})", op)
            elif not ready:
                work.append((e, True))
                work.extend((a, False) for a in reversed(e[2:]))
            else:
                n = len(e) - 2
                parts, vals[-n:] = vals[-n:], []
                if op.text == "and":
                    vals.append(self.conj(parts, op))
                else:
                    if sum(len(p) for p in parts) > self.cap:
                        raise self.err(f"the disjunction has {sum(len(p) for p in parts)} conjuncts, more than "
                                       f"the limit of {self.cap} (max_disjuncts)", op)
                    vals.append([c for p in parts for c in p])
        return vals[0]

    # ---- commands ----------------------------------------------------------------------------
    def declare(self, e, kw: Tok) -> None:
        """``(declare-const X_i Real)``: the name must be ``X_i``/``Y_j``, the sort ``Real``
        (VNN-LIB declares every input and output ``Real``), and no name may be declared twice."""
        if len(e) != 4 or not _VAR.match(e[2].text if isinstance(e[2], Tok) else ""):
            raise self.err("expected (declare-const X_i Real) or (declare-const Y_j Real)", kw)
        name, sort = e[2], e[3]
        if not isinstance(sort, Tok) or sort.text != "Real":
            raise self.err(f"{name.text} has unknown sort {_show(sort)!r} (expected Real)", _head(sort))
        first = self.decl.get(name.text)
        if first is not None:
            raise self.err(f"{name.text} declared twice (first at line {first.line})", name)
        self.decl[name.text] = name

    def run(self, text: str) -> Property:
        parts, toks = [], []
        for e in _sexprs(tokenize(text, self.path), self.path):
            if not isinstance(e, list) or len(e) < 2:
                raise self.err("expected (declare-const ...) or (assert ...)", _head(e))
            kw = e[1]
            if not isinstance(kw, Tok):
                raise self.err("expected (declare-const ...) or (assert ...)", _head(kw))
            if kw.text == "declare-const":
                self.declare(e, kw)
            elif kw.text == "assert":
                if len(e) != 3:
                    raise self.err("(assert ...) takes one formula", kw)
                parts.append(self.formula(e[2]))
                toks.append(kw)
            else:
                raise self.err(f"unknown command {kw.text!r}", kw)
        common, dnf = self.conj(parts, toks[0], toks, split=True) if parts else ((), [()])
        nx = sum(1 for v in self.decl if v[0] == "X")
        ny = sum(1 for v in self.decl if v[0] == "Y")
        for kind in ("X", "Y"):  # indices 0..n-1 without a gap
            names = sorted((v for v in self.decl if v[0] == kind), key=lambda v: int(v[2:]))
            for i, v in enumerate(names):
                if int(v[2:]) != i:
                    top = names[-1]
                    raise self.err(f"{kind}_{i} is not declared but {top} is", self.decl[top])
        return Property(nx, ny, self.cases(common, dnf, nx, ny), self.path)

    # ---- boxes and polytopes -----------------------------------------------------------------
    def apply(self, box, xs) -> None:
        """Tighten ``box = (lo, hi, lo_strict, hi_strict, lo_tok, hi_tok)`` in place by X atoms."""
        lo, hi, ls, hs, lt, ht = box
        for a in xs:
            (i, b, upper, strict), tok = self.atoms[a][1], self.atoms[a][2]
            v, s, t = (hi, hs, ht) if upper else (lo, ls, lt)
            if (b < v[i]) if upper else (b > v[i]):
                v[i], s[i], t[i] = b, strict, tok
            elif b == v[i] and strict and not s[i]:
                s[i], t[i] = True, tok

    def check(self, box) -> tuple:
        lo, hi, ls, hs, lt, ht = box
        bad = ~(np.isfinite(lo) & np.isfinite(hi))
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise SpecFormatError(f"X_{i} has no finite lower and upper bound", path=self.path)
        empty = (lo > hi) | ((lo == hi) & (ls | hs))
        if empty.any():
            i = int(np.flatnonzero(empty)[0])
            later = max(lt[i], ht[i], key=lambda t: (t.line, t.col))
            raise self.err(f"the input range of X_{i} is empty: lower bound {float(lo[i])!r} "
                           f"{'(strict) ' if ls[i] else ''}from line {lt[i].line} against upper bound "
                           f"{float(hi[i])!r} {'(strict) ' if hs[i] else ''}from line {ht[i].line}", later)
        return lo, hi, ls, hs

    def rows(self, ys, ny):
        A, b, st = np.zeros((len(ys), ny)), np.zeros(len(ys)), np.zeros(len(ys), bool)
        for r, a in enumerate(ys):
            kind, data, _ = self.atoms[a]
            if kind == "F":
                b[r] = -1.0
                continue
            row, b[r], st[r] = data
            for j, c in row.items():
                A[r, j] += c
        return A, b, st

    def cases(self, common, dnf, nx, ny) -> tuple[Case, ...]:
        """Group the conjuncts (each ``common`` + its own atoms) by input box into cases; the
        common atoms are applied once, not once per conjunct."""
        is_x = [k == "X" for k, _, _ in self.atoms]
        base = (np.full(nx, -np.inf), np.full(nx, np.inf), np.zeros(nx, bool), np.zeros(nx, bool), {}, {})
        self.apply(base, [a for a in common if is_x[a]])
        A0, b0, s0 = self.rows([a for a in common if not is_x[a]], ny)
        groups: dict[bytes, tuple[tuple, list[Clause]]] = {}
        boxes: dict[tuple[int, ...], tuple] = {}
        for conj in dnf:
            xs = tuple(sorted({a for a in conj if is_x[a]}))
            if xs not in boxes:
                bx = tuple(v.copy() for v in base) if xs else base
                self.apply(bx, xs)
                boxes[xs] = self.check(bx)
            bx = boxes[xs]
            A, b, st = self.rows([a for a in conj if not is_x[a]], ny)
            key = b"".join(v.tobytes() for v in bx)
            groups.setdefault(key, (bx, []))[1].append(
                Clause(np.concatenate([A0, A]), np.concatenate([b0, b]), np.concatenate([s0, st])))
        return tuple(Case(lo, hi, tuple(cl), ls, hs) for (lo, hi, ls, hs), cl in groups.values())
