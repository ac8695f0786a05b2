"""VNN-LIB 1.0 parser: the shared mnist_fc files, whitespace-free and multi-box variants, and
errors that name file:line:column."""

from __future__ import annotations

import re

import numpy as np
import pytest

from gpufield.errors import SpecFormatError
from gpufield.verify import parse_vnnlib

DECL = "(declare-const X_0 Real)(declare-const X_1 Real)(declare-const Y_0 Real)(declare-const Y_1 Real)"


def test_mnist_files(shared_dir):
    d = shared_dir / "data/vnncomp2022/mnist_fc/vnnlib"
    files = sorted(d.glob("prop_*.vnnlib"))
    assert len(files) == 30
    for f in files:  # all 30: the declaration checks (sort Real, no duplicates) accept every real file
        text = f.read_text()
        label = int(re.search(r"label: (\d+)", text).group(1))
        p = parse_vnnlib(f)
        assert (p.n_inputs, p.n_outputs, len(p.cases)) == (784, 10, 1)
        case = p.cases[0]
        assert len(case.clauses) == 9
        assert (case.lo_N >= 0).all() and (case.hi_N <= 1).all() and (case.lo_N <= case.hi_N).all()
        others = [j for j in range(10) if j != label]
        for j, cl in zip(others, case.clauses, strict=True):  # (>= Y_j Y_label): Y_label − Y_j ≤ 0
            expect = np.zeros(10)
            expect[label], expect[j] = 1.0, -1.0
            np.testing.assert_array_equal(cl.A_KM, expect.reshape(1, 10))
            assert cl.b_K.tolist() == [0.0]
        # the box values are the literal numbers of the file
        m = re.search(r"\(assert \(<= X_121 ([^)]+)\)\)", text)
        assert case.hi_N[121] == float(m.group(1))


def test_no_whitespace_and_odd_layout():
    text = (DECL.replace(" Real", "\tReal") + "(assert(>= X_0 -1))(assert(<= X_0 1))"
            "(assert(and(>= X_1 0.5)(<= X_1 2e0)));c\n(assert(or(and(<= Y_0 Y_1)(>= Y_0 -3))(and(<= Y_1 -0.25))))")
    p = parse_vnnlib("t.vnnlib", text)
    (case,) = p.cases
    assert case.lo_N.tolist() == [-1.0, 0.5] and case.hi_N.tolist() == [1.0, 2.0]
    c0, c1 = case.clauses
    np.testing.assert_array_equal(c0.A_KM, [[1.0, -1.0], [-1.0, 0.0]])
    np.testing.assert_array_equal(c0.b_K, [0.0, 3.0])
    np.testing.assert_array_equal(c1.A_KM, [[0.0, 1.0]])
    np.testing.assert_array_equal(c1.b_K, [-0.25])


def test_disjunction_of_boxes_gives_cases_and_linear_terms():
    text = DECL + """
    (assert (or (and (>= X_0 0) (<= X_0 1) (>= X_1 0) (<= X_1 1))
                (and (>= X_0 2) (<= X_0 3) (>= X_1 0) (<= X_1 1))))
    (assert (<= (+ Y_0 (* 2 Y_1)) (- 4 Y_0)))
    """
    p = parse_vnnlib("t.vnnlib", text)
    assert len(p.cases) == 2
    assert [c.lo_N[0] for c in p.cases] == [0.0, 2.0]
    for c in p.cases:
        (cl,) = c.clauses
        np.testing.assert_array_equal(cl.A_KM, [[2.0, 2.0]])
        np.testing.assert_array_equal(cl.b_K, [4.0])


@pytest.mark.parametrize("text,line,col,what", [
    (DECL + "\n(assert (<= X_0 1)\n", 2, 1, "never closed"),
    (DECL + "\n(assert (<= X_0 1)))", 2, 20, "unbalanced"),
    (DECL + "\n(assert (<= X_0 1))\n  (assert (>= X_7 0))", 3, 15, "never declared"),
    (DECL + "\n(assert (<= X_0 abc))", 2, 17, "expected a number"),
    (DECL + "\n(assert (=> X_0 1))", 2, 10, "unknown connective"),
    (DECL + "\n(assert (<= X_0 Y_0))", 2, 10, "mixes input and output"),
    (DECL + "\n(assert (<= (+ X_0 X_1) 1))", 2, 10, "single variables"),
    (DECL + "\n(check-sat)", 2, 2, "unknown command"),
    (DECL + "\n((assert) (<= X_0 1))", 2, 2, "expected (declare-const ...) or (assert ...)"),
    # a misspelt / foreign sort is named at the sort itself (it used to be accepted silently)
    ("(declare-const X_0 Real)\n(declare-const X_1 Real)\n(declare-const X_2 Reel)", 3, 20,
     "X_2 has unknown sort 'Reel' (expected Real)"),
    ("(declare-const X_0 real)", 1, 20, "X_0 has unknown sort 'real' (expected Real)"),
    ("(declare-const Y_0 Int)", 1, 20, "Y_0 has unknown sort 'Int' (expected Real)"),
    ("(declare-const X_0 (_ BitVec 8))", 1, 20, "X_0 has unknown sort '(_ BitVec 8)' (expected Real)"),
    # a duplicate declaration is named where it happens, not as a later 'never declared' use
    ("(declare-const X_0 Real)\n(declare-const X_1 Real)\n  (declare-const X_1 Real)\n(declare-const Y_0 Real)"
     "\n(assert (<= X_2 1))", 3, 18, "X_1 declared twice (first at line 2)"),
    # a gap in the numbering names the missing index and where the higher one was declared
    ("(declare-const X_0 Real)\n(declare-const X_2 Real)\n(declare-const Y_0 Real)", 2, 16,
     "X_1 is not declared but X_2 is"),
    ("(declare-const X_0 Real)\n(declare-const Y_1 Real)", 2, 16, "Y_0 is not declared but Y_1 is"),
])
def test_errors_name_line_and_column(text, line, col, what):
    with pytest.raises(SpecFormatError) as e:
        parse_vnnlib("bad.vnnlib", text)
    assert (e.value.line, e.value.column) == (line, col), str(e.value)
    assert what in str(e.value) and str(e.value).startswith(f"bad.vnnlib:{line}:{col}: ")


def test_unbounded_input_is_an_error():
    with pytest.raises(SpecFormatError, match="X_1 has no finite"):
        parse_vnnlib("u.vnnlib", DECL + "(assert (<= X_0 1))(assert (>= X_0 0))(assert (<= X_1 1))(assert (<= Y_0 0))")


def test_misspelt_sort_in_a_real_file_is_an_error(shared_dir, tmp_path):
    """The new-user trial: X_2's sort misspelt in a real mnist_fc property used to parse (and prove unsat)."""
    text = (shared_dir / "data/vnncomp2022/mnist_fc/vnnlib/prop_0_0.03.vnnlib").read_text()
    lines = text.splitlines(keepends=True)
    (i,) = [k for k, ln in enumerate(lines) if ln.startswith("(declare-const X_2 Real)")]
    f = tmp_path / "typo.vnnlib"
    f.write_text("".join(lines[:i] + [lines[i].replace("Real", "Reel")] + lines[i + 1:]))
    with pytest.raises(SpecFormatError) as e:
        parse_vnnlib(f)
    assert str(e.value) == f"{f}:{i + 1}:20: X_2 has unknown sort 'Reel' (expected Real)"
    f.write_text("".join(lines[:i] + [lines[i].replace("X_2", "X_1")] + lines[i + 1:]))
    with pytest.raises(SpecFormatError) as e:
        parse_vnnlib(f)
    assert str(e.value) == f"{f}:{i + 1}:16: X_1 declared twice (first at line {i})"
