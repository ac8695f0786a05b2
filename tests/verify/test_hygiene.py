"""Input hygiene (issue 26): strict inequalities, empty boxes, non-finite numbers, DNF size,
tokeniser positions, nesting depth and DOUBLE models — each answer checked against onnxruntime
or exact rational arithmetic, never against the verifier itself."""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from gpufield.errors import ModelFormatError, SpecFormatError
from gpufield.verify import VerifyConfig, parse_vnnlib, verify_instance
from gpufield.verify.io.vnnlib import Clause, tokenize

from . import nets

D2 = "(declare-const X_0 Real)(declare-const X_1 Real)(declare-const Y_0 Real)(declare-const Y_1 Real)\n"
BOX = "(assert (>= X_0 0))(assert (<= X_0 1))(assert (>= X_1 0))(assert (<= X_1 1))\n"
FAST = VerifyConfig(attack_rounds=2, refine=None)


def _linear_net(path, W, b, dtype=TensorProto.FLOAT):
    """y = W x + b as one Gemm (float32 or float64 throughout)."""
    npt = np.float64 if dtype == TensorProto.DOUBLE else np.float32
    g = helper.make_graph([helper.make_node("Gemm", ["x", "W", "b"], ["y"], transB=1)], "lin",
                          [helper.make_tensor_value_info("x", dtype, [1, W.shape[1]])],
                          [helper.make_tensor_value_info("y", dtype, [1, W.shape[0]])],
                          [numpy_helper.from_array(np.asarray(W, npt), "W"), numpy_helper.from_array(np.asarray(b, npt), "b")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return nets.save(m, path)


def _ort(path, x, dtype=np.float32):
    s = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return s.run(None, {"x": np.asarray(x, dtype).reshape(1, -1)})[0].reshape(-1).astype(np.float64)


def _run(tmp_path, onnx_p, prop, cfg=FAST, timeout_s=10.0):
    v = tmp_path / "p.vnnlib"
    v.write_text(prop)
    return verify_instance(onnx_p, v, timeout_s=timeout_s, config=cfg)


# ---- strictness --------------------------------------------------------------------------------

def test_strict_output_on_equal_outputs_is_never_sat(tmp_path):
    """Y_0 = Y_1 exactly (identical Gemm rows): (> Y_0 Y_1) has no witness; the closure does."""
    W = np.array([[0.5, -0.25], [0.5, -0.25]])
    onnx_p = _linear_net(tmp_path / "eq.onnx", W, np.array([0.125, 0.125]))
    rng = np.random.default_rng(0)
    for x in rng.random((20, 2)):  # the independent oracle agrees the outputs coincide
        y = _ort(onnx_p, x)
        assert y[0] == y[1]
    r = _run(tmp_path, onnx_p, D2 + BOX + "(assert (> Y_0 Y_1))")
    assert r.verdict in ("unknown", "timeout") and r.counterexample is None, r
    r = _run(tmp_path, onnx_p, D2 + BOX + "(assert (>= Y_0 Y_1))")  # the non-strict one is violated
    assert r.verdict == "sat"
    y = _ort(onnx_p, r.counterexample.x_N)
    assert Fraction(y[0]) >= Fraction(y[1])


def test_strict_output_witness_satisfies_the_strict_atom(tmp_path):
    """Y_0 − Y_1 = x_0 on [0, 1]: (> Y_0 Y_1) holds for x_0 > 0 only; the witness is strict."""
    onnx_p = _linear_net(tmp_path / "d.onnx", np.array([[1.0, 0.0], [0.0, 0.0]]), np.zeros(2))
    r = _run(tmp_path, onnx_p, D2 + BOX + "(assert (> Y_0 Y_1))")
    assert r.verdict == "sat"
    y = _ort(onnx_p, r.counterexample.x_N)
    np.testing.assert_array_equal(y, r.counterexample.y_M)
    assert Fraction(y[0]) > Fraction(y[1])


def test_constant_false_assert_is_unsat_never_sat(tmp_path):
    """(< 0 0) is false in exact arithmetic, so the conjunction of the asserts is empty."""
    assert not Fraction(0) < Fraction(0)
    onnx_p = _linear_net(tmp_path / "c.onnx", np.eye(2), np.zeros(2))
    r = _run(tmp_path, onnx_p, D2 + BOX + "(assert (< 0 0))(assert (<= Y_0 5))")
    assert r.verdict == "unsat" and r.counterexample is None
    r = _run(tmp_path, onnx_p, D2 + BOX + "(assert (<= 0 0))(assert (<= Y_0 5))")  # true: drops out
    assert r.verdict == "sat"


def test_strict_input_bound_is_respected(tmp_path):
    """Y_0 = X_0 with X_0 < 0.5 strictly: (>= Y_0 0.5) has no witness (the closure has x_0 = 0.5)."""
    onnx_p = _linear_net(tmp_path / "i.onnx", np.eye(2), np.zeros(2))
    prop = D2 + "(assert (>= X_0 0))(assert (< X_0 0.5))(assert (>= X_1 0))(assert (<= X_1 1))(assert (>= Y_0 0.5))"
    r = _run(tmp_path, onnx_p, prop)
    assert r.counterexample is None and r.verdict != "sat"
    (case,) = parse_vnnlib("p.vnnlib", prop).cases
    assert case.hi_strict_N.tolist() == [True, False] and not case.lo_strict_N.any()


def test_clause_contains_agrees_with_exact_arithmetic():
    """Near-ties (b = float64 of the exact A·y) decided like Fraction arithmetic on the same floats."""
    rng = np.random.default_rng(1)
    for _ in range(300):
        A = rng.normal(0, 1, (3, 7))
        y = rng.normal(0, 1, 7).astype(np.float32).astype(np.float64)
        exact = [sum(Fraction(a) * Fraction(v) for a, v in zip(row, y, strict=True)) for row in A]
        b = np.array([float(e) for e in exact])  # rounding makes b − A·y tiny and of either sign
        strict = rng.random(3) < 0.5
        want = all((Fraction(bk) - e > 0) if s else (Fraction(bk) - e >= 0)
                   for bk, e, s in zip(b, exact, strict, strict=True))
        assert Clause(A, b, strict).contains(y) == want
    assert not Clause(np.ones((1, 2)), np.zeros(1)).contains(np.array([np.nan, 0.0]))


# ---- refused inputs ----------------------------------------------------------------------------

@pytest.mark.parametrize("prop,line,what", [
    (D2 + "(assert (>= X_0 0.7))\n(assert (<= X_0 0.2))(assert (>= X_1 0))(assert (<= X_1 1))(assert (<= Y_0 0))",
     3, "input range of X_0 is empty: lower bound 0.7 from line 2 against upper bound 0.2 from line 3"),
    (D2 + BOX + "(assert (or (and (>= X_1 2)) (and (<= X_1 0.5))))\n(assert (<= Y_0 0))",
     3, "input range of X_1 is empty: lower bound 2.0 from line 3 against upper bound 1.0 from line 2"),  # one disjunct empty: an error, not a dropped disjunct
    (D2 + "(assert (>= X_0 0.5))(assert (< X_0 0.5))(assert (>= X_1 0))(assert (<= X_1 1))\n(assert (<= Y_0 0))",
     2, "upper bound 0.5 (strict) from line 2"),
    (D2 + BOX + "(assert (<= Y_0 nan))", 3, "got 'nan' (numbers are finite decimals)"),
    (D2 + BOX + "\n(assert (or (<= Y_0 1) (>= Y_1 inf)))", 4, "got 'inf'"),
    (D2 + BOX + "(assert (<= Y_0 1e999))", 3, "number 1e999 is outside the float64 range"),
    (D2 + BOX + "(assert (<= (* 1e300 1e300 Y_0) 1))", 3, "overflows float64"),
])
def test_refused_properties_name_the_line(prop, line, what):
    with pytest.raises(SpecFormatError) as e:
        parse_vnnlib("bad.vnnlib", prop)
    assert e.value.line == line and what in str(e.value), str(e.value)
    assert str(e.value).startswith(f"bad.vnnlib:{line}:")


def test_dnf_size_is_capped_before_expansion_and_exact_below_the_cap():
    ors = [f"(assert (or {' '.join(f'(<= Y_0 {9 * j + i})' for i in range(9))}))\n" for j in range(5)]
    prop = D2 + BOX + "".join(ors)
    with pytest.raises(SpecFormatError) as e:
        parse_vnnlib("big.vnnlib", prop)  # 9^5 = 59049 > 10000: refused at once, naming the assert
    assert "59049 conjuncts" in str(e.value) and e.value.line == 7
    p = parse_vnnlib("three.vnnlib", D2 + BOX + "".join(ors[:3]))  # 729: built, equal to the product
    (case,) = p.cases
    got = sorted(tuple(cl.b_K) for cl in case.clauses)
    want = sorted(itertools.product(range(0, 9), range(9, 18), range(18, 27)))
    assert got == [tuple(map(float, w)) for w in want]


def test_tokeniser_positions_on_a_one_line_file(shared_dir):
    f = shared_dir / "data/vnncomp2022/mnist_fc/vnnlib/prop_3_0.05.vnnlib"
    lines = f.read_text().splitlines()
    one = " ".join(ln for ln in lines if not ln.startswith(";"))
    a, b = parse_vnnlib(f), parse_vnnlib("one.vnnlib", one)
    np.testing.assert_array_equal(a.cases[0].lo_N, b.cases[0].lo_N)
    np.testing.assert_array_equal(a.cases[0].hi_N, b.cases[0].hi_N)
    text = "\n".join(lines[:200]) + "\n\n  ; c (x)\n" + one[:3000]  # line/col from first principles
    for t in tokenize(text):
        s = text.index(t.text, sum(len(x) + 1 for x in text.split("\n")[:t.line - 1]) + t.col - 1)
        assert (t.line, t.col) == (text.count("\n", 0, s) + 1, s - (text.rfind("\n", 0, s) + 1) + 1)


def test_deep_nesting_parses_like_flat():
    deep = D2 + BOX + "(assert " + "(and " * 3000 + "(<= Y_0 " + "(+ " * 500 + "Y_1" + " 1)" * 500 + ")" * 3002
    flat = D2 + BOX + "(assert (<= Y_0 (+ Y_1 500)))"
    (c1,), (c2,) = parse_vnnlib("d.vnnlib", deep).cases, parse_vnnlib("f.vnnlib", flat).cases
    np.testing.assert_array_equal(c1.clauses[0].A_KM, c2.clauses[0].A_KM)
    np.testing.assert_array_equal(c1.clauses[0].b_K, c2.clauses[0].b_K)


# ---- DOUBLE models -----------------------------------------------------------------------------

def test_double_model_sat_and_unsat_against_onnxruntime(tmp_path):
    W = np.array([[0.1, 0.7], [1 / 3, -1.0]])  # not float32-representable: kept in float64
    onnx_p = _linear_net(tmp_path / "dbl.onnx", W, np.array([0.2, 0.0]), TensorProto.DOUBLE)
    top = float(_ort(onnx_p, [1.0, 1.0], np.float64)[0])  # max of Y_0 over the box (W_0 > 0)
    r = _run(tmp_path, onnx_p, D2 + BOX + f"(assert (>= Y_0 {top!r}))")
    assert r.verdict == "sat" and _ort(onnx_p, r.counterexample.x_N, np.float64)[0] >= top
    r = _run(tmp_path, onnx_p, D2 + BOX + f"(assert (> Y_0 {top!r}))")
    assert r.verdict != "sat"


def test_integer_input_model_is_a_clear_error(tmp_path):
    g = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "int",
                          [helper.make_tensor_value_info("x", TensorProto.INT64, [1, 2])],
                          [helper.make_tensor_value_info("y", TensorProto.INT64, [1, 2])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    p = nets.save(m, tmp_path / "int.onnx")
    with pytest.raises(ModelFormatError, match="element type INT64; only FLOAT and DOUBLE"):
        _run(tmp_path, p, D2 + BOX + "(assert (<= Y_0 0))")
