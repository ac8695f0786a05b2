"""`gpufield verify run`: inputs are checked before --out, and the retry rule of --out.

--out is never overwritten without --force, except a result that an earlier `gpufield verify run`
of the same model and property wrote (unchanged since) and that decides nothing: error, unknown,
timeout.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from gpufield.cli import main

UNSAT = ("(declare-const X_0 Real)(declare-const X_1 Real)(declare-const Y_0 Real)(declare-const Y_1 Real)\n"
         "(assert (>= X_0 0.0))(assert (<= X_0 1.0))(assert (>= X_1 0.0))(assert (<= X_1 1.0))\n"
         "(assert (>= Y_0 5.0))\n")  # y = x on [0, 1]^2 never reaches 5


def _model(path: Path) -> Path:
    """y = I x + 0: a 2-in 2-out Gemm, proven by IBP at once."""
    g = helper.make_graph(
        [helper.make_node("Gemm", ["x", "W", "b"], ["y"], transB=1)], "id",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2])],
        [numpy_helper.from_array(np.eye(2, dtype=np.float32), "W"),
         numpy_helper.from_array(np.zeros(2, dtype=np.float32), "b")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, str(path))
    return path


@pytest.fixture
def inst(tmp_path):
    model, prop = tmp_path / "net.onnx", tmp_path / "prop.vnnlib"
    prop.write_text(UNSAT)
    return model, prop, tmp_path / "r.txt"


def verify(capsys, model, prop, out, *extra):
    rc = main(["verify", "run", str(model), str(prop), "--out", str(out), "--timeout", "60", "--method", "ibp",
               *extra])
    return rc, capsys.readouterr().err


def sidecar(out: Path) -> Path:
    return out.with_name(f".{out.name}.gpufield.json")


def test_a_bad_input_is_reported_before_the_existing_result_file(capsys, inst):
    model, prop, out = inst  # the model does not exist yet
    rc, err = verify(capsys, model, prop, out)
    assert rc == 2 and "model file not found" in err and out.read_text() == "error\n"
    rc, err = verify(capsys, model, prop, out)  # same bad input again: the input error, not "exists"
    assert rc == 2 and "model file not found" in err and "--force" not in err


def test_a_retry_replaces_our_own_error_result(capsys, inst):
    model, prop, out = inst
    assert verify(capsys, model, prop, out)[0] == 2 and out.read_text() == "error\n"
    assert sidecar(out).is_file()
    _model(model)  # the user fixes the input and runs the same command again
    rc, err = verify(capsys, model, prop, out)
    assert rc == 0, err
    assert out.read_text() == "unsat\n" and not sidecar(out).exists()
    rc, err = verify(capsys, model, prop, out)  # a decided result is never replaced without --force
    assert rc == 2 and "holds 'unsat'" in err and "--force" in err and out.read_text() == "unsat\n"
    assert verify(capsys, model, prop, out, "--force")[0] == 0


def test_a_retry_replaces_our_own_timeout_result(capsys, inst):
    model, prop, out = inst
    _model(model)
    rc, err = verify(capsys, model, prop, out, "--timeout", "1e-9")
    assert rc == 0 and out.read_text() == "timeout\n", err
    rc, err = verify(capsys, model, prop, out)
    assert rc == 0 and out.read_text() == "unsat\n", err


@pytest.mark.parametrize("text", ["my notes\n", "error\n", "timeout\n"])
def test_a_file_gpufield_did_not_write_is_never_replaced(capsys, inst, text):
    model, prop, out = inst
    out.write_text(text)  # the user's own file, even one that looks like a result
    rc, err = verify(capsys, model, prop, out)  # bad input (no model): the input error; file untouched
    assert rc == 2 and "model file not found" in err and out.read_text() == text
    _model(model)
    rc, err = verify(capsys, model, prop, out)
    assert rc == 2 and "result file exists" in err and "--force" in err
    assert out.read_text() == text and not sidecar(out).exists()
    assert verify(capsys, model, prop, out, "--force")[0] == 0 and out.read_text() == "unsat\n"


def test_our_error_result_edited_since_is_the_users(capsys, inst):
    model, prop, out = inst
    assert verify(capsys, model, prop, out)[0] == 2
    out.write_text("error\n(kept: first attempt, wrong path)\n")
    _model(model)
    rc, err = verify(capsys, model, prop, out)
    assert rc == 2 and "result file exists" in err and out.read_text().startswith("error\n(kept")


def test_our_timeout_result_of_another_instance_is_not_replaced(capsys, inst, tmp_path):
    model, prop, out = inst
    _model(model)
    assert verify(capsys, model, prop, out, "--timeout", "1e-9")[0] == 0 and out.read_text() == "timeout\n"
    other = tmp_path / "other.vnnlib"
    other.write_text(UNSAT)
    rc, err = verify(capsys, model, other, out)
    assert rc == 2 and "another instance (net.onnx, prop.vnnlib)" in err and out.read_text() == "timeout\n"
    assert verify(capsys, model, other, out, "--force")[0] == 0 and out.read_text() == "unsat\n"


def test_the_help_states_the_rule():
    from typer.testing import CliRunner

    from gpufield.cli import app

    r = CliRunner().invoke(app, ["verify", "run", "--help"], env={"COLUMNS": "200"})
    assert r.exit_code == 0
    text = " ".join(r.output.split())
    assert "never overwritten without --force" in text and "error, unknown or timeout" in text


def test_a_retry_replaces_our_own_unknown_result_after_ctrl_c(capsys, inst, monkeypatch):
    import gpufield.verify.runner as runner

    model, prop, out = inst
    _model(model)
    real = runner.verify_instance

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(runner, "verify_instance", interrupted)
    rc, err = verify(capsys, model, prop, out)
    assert rc == 130 and out.read_text() == "unknown\n" and sidecar(out).is_file()
    # typer alone exits 130 without a word; the message says what was left behind
    assert "verify run interrupted after" in err and f"wrote 'unknown' to {out}" in err, err
    monkeypatch.setattr(runner, "verify_instance", real)
    rc, err = verify(capsys, model, prop, out)
    assert rc == 0 and out.read_text() == "unsat\n", err


def test_a_retry_with_the_path_fixed_replaces_our_bad_input_error(capsys, inst, tmp_path):
    """The 'error' of inputs that could not be read belongs to no instance: a corrected path may replace it."""
    model, prop, out = inst
    _model(model)
    rc, err = verify(capsys, model, tmp_path / "prop.vnlib", out)  # mistyped property path
    assert rc == 2 and "property file not found" in err and out.read_text() == "error\n"
    rc, err = verify(capsys, model, prop, out)
    assert rc == 0 and out.read_text() == "unsat\n", err


def test_an_out_that_is_a_folder_is_named_as_such(capsys, inst, tmp_path):
    model, prop, _ = inst
    _model(model)
    folder = tmp_path / "results"
    folder.mkdir()
    for extra in ((), ("--force",)):
        rc, err = verify(capsys, model, prop, folder, *extra)
        assert rc == 2 and "is a folder; --out names the result file" in err and str(folder) in err, err
        assert list(folder.iterdir()) == []


def test_gurobi_without_gurobipy_is_one_line_naming_the_extra(capsys, inst, monkeypatch):
    import builtins

    model, prop, out = inst
    _model(model)
    real = builtins.__import__

    def no_gurobi(name, *a, **k):
        if name == "gurobipy":
            raise ImportError("No module named 'gurobipy'")
        return real(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_gurobi)
    rc, err = verify(capsys, model, prop, out, "--mip-solver", "gurobi")
    assert rc == 2 and 'pip install "gpufield[mip]"' in err and len(err.strip().splitlines()) == 1, err


def test_a_timeout_while_attacking_reports_the_bound_reached(tmp_path, monkeypatch):
    """y = x on [0, 1]^2 does reach y_0 >= 0.5 (the property is sat), but with the attack made to
    run past the deadline the answer is an honest timeout that names the float64 bound (-0.5)."""
    import time as _time

    from gpufield.verify import runner

    model, prop = _model(tmp_path / "net.onnx"), tmp_path / "sat.vnnlib"
    prop.write_text(UNSAT.replace("(>= Y_0 5.0)", "(>= Y_0 0.5)"))
    calls = []

    def slow_attack(*a, deadline_s, **k):
        calls.append(1)
        if len(calls) > 1:  # the cheap first round passes; a later one runs out the clock
            _time.sleep(max(0.0, deadline_s - _time.monotonic()) + 0.05)
        return None

    monkeypatch.setattr(runner, "pgd_attack", slow_attack)
    res = runner.verify_instance(model, prop, timeout_s=3.0, config=runner.VerifyConfig(refine=None))
    assert res.verdict == "timeout" and "while attacking (best lower bound -0.5)" in res.message, res.message


def test_ctrl_c_anywhere_says_so(capsys, inst, monkeypatch):
    """Ctrl-C before the command's own handler (loading the model) and in ``bench``: one line on
    stderr and exit 130, where typer alone exits 130 silently."""
    import gpufield.verify as v
    import gpufield.verify.runner as runner

    model, prop, out = inst
    _model(model)

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(runner, "load_instance", interrupted)
    rc, err = verify(capsys, model, prop, out)
    assert rc == 130 and err.strip() == "gpufield: interrupted", err
    monkeypatch.setattr(v, "bench", interrupted)
    rc = main(["verify", "bench", str(model.parent), "--out", str(out.parent / "b.csv")])
    err = capsys.readouterr().err
    assert rc == 130 and "verify bench interrupted" in err and "--resume" in err, err


def test_progress_off_a_terminal_is_plain_lines_on_stderr(capsys):
    """Piped to a log, a run was silent for minutes (rich draws its status line only on a
    terminal): off a terminal each phase is one line and the BaB line comes every ``every_s``."""
    from gpufield.verify.runner import _live

    with _live(True, every_s=0.0) as cb:
        cb.note("MIP refinement of layer 1 (54 unstable neurons, gurobi, 80 s left of its budget)")
        cb(12, -0.25, 3.0)
    with _live(True, every_s=3600.0) as cb:
        cb(7, -0.5, 1.0)  # within the interval: nothing
    err = capsys.readouterr().err.splitlines()
    assert err == ["MIP refinement of layer 1 (54 unstable neurons, gurobi, 80 s left of its budget)",
                   "BaB: 12 domains left, global lower bound -0.25, 3.0 rounds/s"], err


def test_verify_run_names_each_phase_before_branch_and_bound_and_loads_once(capsys, inst, monkeypatch):
    """Before, nothing showed until branch and bound (attack and alpha-CROWN can take minutes on a
    busy CPU): off a terminal each phase is a line on stderr, the result line stays on stdout. The
    inputs are loaded (and checked against onnxruntime) once, not once to check and once to run."""
    import gpufield.verify.runner as runner

    model, prop, out = inst
    _model(model)
    calls = []
    real = runner.load_instance
    monkeypatch.setattr(runner, "load_instance", lambda *a, **k: calls.append(a) or real(*a, **k))
    rc, err = verify(capsys, model, prop, out)
    assert rc == 0 and out.read_text() == "unsat\n", err
    assert len(calls) == 1, calls
    assert err.splitlines()[:2] == ["PGD attack", "bounds: IBP"], err
    rc, err = verify(capsys, model, prop, out, "--method", "alpha", "--force")
    assert rc == 0 and "bounds: IBP, CROWN, alpha-CROWN (100 iterations)" in err.splitlines(), err
