"""Wrong command-line input ends with one error line and exit status 2, never a Python traceback.

Options are checked where they are parsed (choices, ranges, paths that must exist); any other
ValueError / OSError / re.error a command raises becomes ``gpufield: error: <message>`` (status 2),
with the traceback back under ``GPUFIELD_DEBUG=1``.
"""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
import typing
from importlib.metadata import version

import pytest

from gpufield.cli import main


def _run(capsys, *args: str) -> tuple[int, str, str]:
    rc = main(list(args))
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def _usage_error(rc: int, err: str, *names: str) -> str:
    """Status 2, no traceback, exactly one error line, and it names every one of ``names``."""
    assert rc == 2, err
    assert "Traceback" not in err
    lines = [ln for ln in err.splitlines() if ln.startswith(("Error:", "gpufield: error:"))]
    assert len(lines) == 1, err
    for name in names:
        assert name in lines[0], err
    return lines[0]


def _gpufield(*args: str, env: dict | None = None, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gpufield", *args], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **(env or {})}, cwd=cwd)


# --- 1. verify run: --method, --dtype, --branching, --timeout -------------------------------------------

@pytest.mark.parametrize(("option", "value"), [("--method", "foo"), ("--dtype", "float16"),
                                               ("--branching", "nope"), ("--timeout", "-5"), ("--timeout", "0"),
                                               ("--timeout", "nan"), ("--timeout", "inf"),
                                               ("--alpha-iterations", "-1")])
def test_verify_run_rejects_a_bad_option_value(capsys, tmp_path, option, value):
    model, prop, out = tmp_path / "net.onnx", tmp_path / "p.vnnlib", tmp_path / "r.txt"
    rc, _, err = _run(capsys, "verify", "run", str(model), str(prop), "--out", str(out), option, value)
    _usage_error(rc, err, option, *([value] if option in ("--method", "--dtype", "--branching", "--timeout")
                                    and value not in ("nan", "inf") else []))
    assert not out.exists()  # rejected before anything was written


def test_verify_run_bad_method_as_a_process_has_no_traceback(tmp_path):
    p = _gpufield("verify", "run", "m.onnx", "p.vnnlib", "--out", "r.txt", "--method", "foo", cwd=tmp_path)
    _usage_error(p.returncode, p.stderr, "--method", "'foo'")
    assert list(tmp_path.iterdir()) == []


def test_the_cli_choices_are_the_library_ones():
    from gpufield.cli import power as power_cli
    from gpufield.cli import verify as verify_cli
    from gpufield.power import Mode
    from gpufield.verify.mip_solvers import SOLVERS
    from gpufield.verify.refine import BRANCHING
    from gpufield.verify.runner import _DTYPES, METHODS

    def choices(annotated):
        return tuple(typing.get_args(typing.get_args(annotated)[0]))

    assert choices(verify_cli.Method) == tuple(METHODS)
    assert choices(verify_cli.Dtype) == tuple(_DTYPES)
    assert set(choices(verify_cli.Branching)) == set(BRANCHING)
    assert choices(verify_cli.MipSolver) == SOLVERS
    mode = typing.get_type_hints(power_cli.calibrate)["mode"]
    assert set(typing.get_args(mode)) <= {m.value for m in Mode}


# --- 2-4. verify bench: missing directory / instances.csv / --reference, bad --select ------------------

def test_verify_bench_missing_directory(capsys, tmp_path):
    rc, _, err = _run(capsys, "verify", "bench", "/no/such/dir", "--out", str(tmp_path / "x.csv"))
    _usage_error(rc, err, "/no/such/dir")


def test_verify_bench_directory_without_instances_csv(capsys, tmp_path):
    rc, _, err = _run(capsys, "verify", "bench", str(tmp_path), "--out", str(tmp_path / "x.csv"))
    line = _usage_error(rc, err, "instances.csv")
    assert line.startswith("gpufield: error: ")


def test_verify_bench_missing_reference(capsys, tmp_path):
    rc, _, err = _run(capsys, "verify", "bench", str(tmp_path), "--out", str(tmp_path / "x.csv"),
                      "--reference", str(tmp_path / "nope.csv"))
    _usage_error(rc, err, "--reference", "nope.csv")


def test_verify_bench_bad_select_regex(capsys, tmp_path):
    rc, _, err = _run(capsys, "verify", "bench", str(tmp_path), "--out", str(tmp_path / "x.csv"), "--select", "(")
    _usage_error(rc, err, "--select", "'('")


@pytest.mark.parametrize(("option", "value"), [("--max-instance-s", "0"), ("--total-s", "-1"), ("--limit", "-2"),
                                               ("--max-instance-s", "inf"), ("--total-s", "inf")])
def test_verify_bench_rejects_non_positive_budgets(capsys, tmp_path, option, value):
    rc, _, err = _run(capsys, "verify", "bench", str(tmp_path), "--out", str(tmp_path / "x.csv"), option, value)
    _usage_error(rc, err, option)


# --- 5. triage: --skew-tolerance-s, --min-accuracy -------------------------------------------------------

@pytest.mark.parametrize("args", [("job-logs",), ("analyze",), ()], ids=["shorthand", "analyze", "bare"])
def test_triage_negative_skew_tolerance(capsys, args):
    rc, _, err = _run(capsys, "triage", *args, "--skew-tolerance-s", "-3")
    _usage_error(rc, err, "--skew-tolerance-s")


@pytest.mark.parametrize("value", ["1.5", "-0.1"])
def test_triage_eval_min_accuracy_outside_0_1(capsys, tmp_path, value):
    rc, _, err = _run(capsys, "triage", "eval", str(tmp_path), "--min-accuracy", value)
    _usage_error(rc, err, "--min-accuracy")


@pytest.mark.parametrize(("umask", "mode"), [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_triage_html_report_mode_follows_the_umask(capsys, tmp_path, umask, mode):
    out = tmp_path / "report.html"
    old = os.umask(umask)
    try:
        rc, _, err = _run(capsys, "triage", "--quiet", "--html", str(out))
    finally:
        os.umask(old)
    assert rc == 0, err
    assert stat.S_IMODE(out.stat().st_mode) == mode


# --- 6-7. power: --duration, --mode, --out that is a file, restore's flags -------------------------------

@pytest.mark.parametrize("value", ["-5", "0"])
def test_power_simulate_non_positive_duration(capsys, value):
    rc, _, err = _run(capsys, "power", "simulate", "moe-agentic-b200", "--duration", value)
    _usage_error(rc, err, "--duration")


def test_power_calibrate_unknown_mode(capsys, tmp_path):
    rc, _, err = _run(capsys, "power", "calibrate", "moe-agentic-b200", "--out", str(tmp_path / "prof"),
                      "--mode", "turbo")
    _usage_error(rc, err, "--mode", "'turbo'")
    assert not (tmp_path / "prof").exists()


def test_power_calibrate_out_is_an_existing_file(capsys, tmp_path):
    sim = tmp_path / "sim.json"
    sim.write_text("{}")
    rc, _, err = _run(capsys, "power", "calibrate", "moe-agentic-b200", "--out", str(sim))
    _usage_error(rc, err, "--out", "sim.json")
    assert sim.read_text() == "{}"


@pytest.mark.parametrize(("args", "names"), [
    ((), ("--allow", "--i-own-this-gpu")),
    (("--allow", "GPU-1234"), ("--i-own-this-gpu",)),
    (("--i-own-this-gpu",), ("--allow",)),
    (("--allow", "foo", "--i-own-this-gpu"), ("--allow", "foo")),
])
def test_power_restore_checks_its_flags_before_nvml(capsys, monkeypatch, args, names):
    import gpufield.power

    def no_nvml(*a, **k):
        raise AssertionError("NVML touched before the flags were checked")

    monkeypatch.setattr(gpufield.power, "NvmlActuator", no_nvml)
    rc, _, err = _run(capsys, "power", "restore", *args)
    _usage_error(rc, err, *names)


# --- 8. fp64 fft --shape -----------------------------------------------------------------------------------

@pytest.mark.parametrize("shape", ["a,b", "16,x", "", "-4", "0,8", "1.5", "12", "8,,8", "2,2,2,2"])
def test_fp64_fft_shape_not_integers(capsys, shape):
    rc, _, err = _run(capsys, "fp64", "fft", "--shape", shape)
    line = _usage_error(rc, err, "--shape", repr(shape))
    assert "expected 1 to 3 comma-separated powers of two" in line


# --- the handler in main: any other ValueError / OSError / re.error ---------------------------------------

@pytest.mark.parametrize(("exc", "expected"), [
    (ValueError("bad thing\nsecond line"), "gpufield: error: bad thing; second line"),
    (PermissionError(13, "Permission denied", "/x/y.csv"), "gpufield: error: /x/y.csv: Permission denied"),
    (FileExistsError(17, "File exists", "/x/d"), "gpufield: error: /x/d: File exists"),
    (IsADirectoryError(21, "Is a directory", "/x/d"), "gpufield: error: /x/d: Is a directory"),
    (OSError("no errno"), "gpufield: error: no errno"),
    (re.error("missing ), unterminated subpattern", "(", 0),
     "gpufield: error: invalid regular expression '(': missing ), unterminated subpattern"),
])
def test_plain_exceptions_become_one_line_status_2(capsys, monkeypatch, exc, expected):
    import gpufield.power

    def boom():
        raise exc

    monkeypatch.delenv("GPUFIELD_DEBUG", raising=False)
    monkeypatch.setattr(gpufield.power, "bundled_scenarios", boom)
    rc, out, err = _run(capsys, "power", "scenarios")
    assert (rc, out, err) == (2, "", expected + "\n")


@pytest.mark.parametrize("exc", [ValueError("x"), FileNotFoundError(2, "No such file or directory", "f"),
                                 re.error("x")])
def test_gpufield_debug_gives_the_traceback(capsys, monkeypatch, exc):
    import gpufield.power

    def boom():
        raise exc

    monkeypatch.setenv("GPUFIELD_DEBUG", "1")
    monkeypatch.setattr(gpufield.power, "bundled_scenarios", boom)
    with pytest.raises(type(exc)):
        main(["power", "scenarios"])


def test_gpufield_debug_as_a_process(tmp_path):
    args = ("verify", "bench", str(tmp_path), "--out", str(tmp_path / "x.csv"))
    p = _gpufield(*args)
    _usage_error(p.returncode, p.stderr, "instances.csv")
    p = _gpufield(*args, env={"GPUFIELD_DEBUG": "1"})
    assert p.returncode == 1 and "Traceback" in p.stderr and "FileNotFoundError" in p.stderr


def test_input_error_keeps_its_status(capsys):
    rc, _, err = _run(capsys, "fp64", "fft", "--shape", "2048")  # a library InputError: status 2, as before
    assert rc == 2 and err.startswith("gpufield: error: ") and "power of two <= 1024" in err


def test_the_module_docstring_documents_gpufield_debug():
    import gpufield.cli

    assert "GPUFIELD_DEBUG" in gpufield.cli.__doc__


# --- --version ---------------------------------------------------------------------------------------------

def test_version(capsys):
    rc, out, err = _run(capsys, "--version")
    assert (rc, out, err) == (0, f"gpufield {version('gpufield')}\n", "")
    p = _gpufield("--version")
    assert p.returncode == 0 and p.stdout == f"gpufield {version('gpufield')}\n"


# --- issue 24: non-finite options, bad devices, undecodable and truncated inputs ------------------------

@pytest.mark.parametrize("value", ["inf", "nan", "-inf", "1e308", "1e10"])
def test_triage_non_finite_skew_tolerance(capsys, value):
    rc, _, err = _run(capsys, "triage", "--skew-tolerance-s", value)
    _usage_error(rc, err, "--skew-tolerance-s", "finite")


@pytest.mark.parametrize("device", ["tpu", "cuda:x", "gpu0", ""])
def test_verify_bad_device(capsys, tmp_path, device):
    rc, _, err = _run(capsys, "verify", "run", "m.onnx", "p.vnnlib", "--out", str(tmp_path / "r.txt"),
                      "--device", device)
    _usage_error(rc, err, "--device", "expected cpu, cuda or cuda:N")
    rc, _, err = _run(capsys, "verify", "bench", str(tmp_path), "--out", str(tmp_path / "x.csv"), "--device", device)
    _usage_error(rc, err, "--device")


BAD_UTF8 = b"\xff\xfe bad \xc3\x28"


def _bad_utf8_line(err: str, path, line: int) -> None:
    """One error line naming the file and line, what was expected, no bare codec message."""
    assert "Traceback" not in err and "codec can't decode" not in err, err
    first = [ln for ln in err.splitlines() if ln.startswith("gpufield: error:")]
    assert len(first) == 1, err
    assert f"{path}:{line}:" in first[0] and "invalid UTF-8" in first[0] and "expected" in first[0], err


def test_verify_bench_instances_csv_invalid_utf8(capsys, tmp_path):
    (tmp_path / "instances.csv").write_bytes(b"onnx/a.onnx,vnnlib/a.vnnlib,60\n" + BAD_UTF8 + b",x,1\n")
    rc, _, err = _run(capsys, "verify", "bench", str(tmp_path), "--out", str(tmp_path / "res.csv"))
    assert rc == 2
    _bad_utf8_line(err, tmp_path / "instances.csv", 2)
    assert not (tmp_path / "res.csv").exists()


def test_verify_bench_reference_csv_invalid_utf8(capsys, tmp_path):
    (tmp_path / "instances.csv").write_text("")
    ref = tmp_path / "ref.csv"
    ref.write_bytes(b"mnist,onnx/a.onnx,vnnlib/a.vnnlib,0.1,unsat,1.0\n" + BAD_UTF8 + b"\n")
    rc, _, err = _run(capsys, "verify", "bench", str(tmp_path), "--out", str(tmp_path / "res.csv"),
                      "--reference", str(ref))
    assert rc == 2
    _bad_utf8_line(err, ref, 2)


def test_triage_eval_index_invalid_utf8(capsys, tmp_path):
    (tmp_path / "INDEX.md").write_bytes(b"# cases\n\n| # | Case file | Expected class |\n" + BAD_UTF8 + b"\n")
    rc, _, err = _run(capsys, "triage", "eval", str(tmp_path))
    assert rc == 2
    _bad_utf8_line(err, tmp_path / "INDEX.md", 4)


def test_power_scenario_invalid_utf8(capsys, tmp_path):
    sc = tmp_path / "sc.json"
    sc.write_bytes(b'{"name": "x",\n "description": "' + BAD_UTF8 + b'"}\n')
    rc, _, err = _run(capsys, "power", "simulate", str(sc))
    assert rc == 2
    _bad_utf8_line(err, sc, 2)


def test_verify_run_truncated_vnnlib_gz_is_bad_input_not_interrupted(capsys, tmp_path):
    import gzip

    pytest.importorskip("torch")
    pytest.importorskip("onnx")
    import numpy as np
    from tests.verify.nets import mlp, save  # a real Gemm/Relu ONNX model built with onnx.helper

    model = tmp_path / "net.onnx"
    save(mlp(np.random.default_rng(0), [2, 3, 2])[0], model)
    text = "".join(f"(declare-const X_{i} Real)\n" for i in range(2))
    text += "(declare-const Y_0 Real)\n(declare-const Y_1 Real)\n(assert (<= X_0 1))\n(assert (>= X_0 0))\n"
    text += "(assert (<= X_1 1))\n(assert (>= X_1 0))\n" + "(assert (<= Y_0 Y_1))\n" * 20
    data = gzip.compress(text.encode())
    prop = tmp_path / "p.vnnlib.gz"
    prop.write_bytes(data[: len(data) // 2])
    out = tmp_path / "r.txt"
    rc, _, err = _run(capsys, "verify", "run", str(model), str(prop), "--out", str(out))
    assert rc == 2, err
    assert "interrupted" not in err and "Traceback" not in err
    line = [ln for ln in err.splitlines() if ln.startswith("gpufield: error:")]
    assert len(line) == 1 and "p.vnnlib.gz" in line[0] and "truncated gzip" in line[0], err
    assert out.read_text().split("\n")[0] == "error"


# --- new-user pass (docs/cli-errors.md): a FIFO input never hangs any wing's reader ------------------------

@pytest.fixture
def fifo(tmp_path, monkeypatch):
    """A named pipe nobody writes to; the no-writer wait cut to 0.2 s."""
    from gpufield import _files

    monkeypatch.setattr(_files, "FIFO_WAIT_S", 0.2)
    p = tmp_path / "pipe"
    os.mkfifo(p)
    return p


def test_read_bytes_refuses_a_fifo_without_writer(fifo):
    from gpufield._files import read_bytes, read_text
    from gpufield.errors import InputError

    for read in (read_bytes, read_text):
        with pytest.raises(InputError, match="named pipe .FIFO. with no writer") as e:
            read(fifo)
        assert e.value.path == str(fifo)


def test_read_bytes_reads_a_fifo_that_has_a_writer(fifo):
    import threading

    from gpufield._files import read_bytes

    def write():
        with open(fifo, "wb") as fh:
            fh.write(b"a,b\n1,2\n")

    t = threading.Thread(target=write)
    t.start()
    try:
        assert read_bytes(fifo) == b"a,b\n1,2\n"
    finally:
        t.join(5)


@pytest.mark.parametrize("which", ["telemetry", "vnnlib"])
def test_cli_fifo_input_is_an_error_not_a_hang(capsys, tmp_path, fifo, which):
    log = tmp_path / "k.log"
    log.write_text("[  1.0] NVRM: Xid (PCI:0000:17:00): 79, pid=1, GPU has fallen off the bus.\n")
    if which == "telemetry":
        args = ["triage", str(log), "--telemetry", str(fifo), "--quiet"]
    else:
        pytest.importorskip("onnx")
        import numpy as np
        from tests.verify.nets import mlp, save

        model = tmp_path / "net.onnx"
        save(mlp(np.random.default_rng(0), [2, 3, 2])[0], model)
        args = ["verify", "run", str(model), str(fifo), "--out", str(tmp_path / "r.txt")]
    rc, _, err = _run(capsys, *args)
    line = _usage_error(rc, err, str(fifo))
    assert "no writer" in line


@pytest.mark.parametrize("kind", ["empty", "truncated-gz"])
def test_verify_onnx_empty_or_truncated_gz_is_named_once(capsys, tmp_path, kind):
    import gzip

    pytest.importorskip("onnx")
    from gpufield.errors import ModelFormatError
    from gpufield.verify.io.onnx_load import load_onnx

    if kind == "empty":
        model = tmp_path / "net.onnx"
        model.write_bytes(b"")
        expect = "empty file; expected an ONNX model"
    else:
        import numpy as np
        from tests.verify.nets import mlp, save

        save(mlp(np.random.default_rng(0), [2, 3, 2])[0], tmp_path / "full.onnx")
        data = gzip.compress((tmp_path / "full.onnx").read_bytes())
        model = tmp_path / "net.onnx.gz"
        model.write_bytes(data[: len(data) // 2])
        expect = "truncated gzip file"
    with pytest.raises(ModelFormatError if kind == "empty" else Exception) as e:
        load_onnx(model)
    msg = str(e.value)
    assert msg.startswith(f"{model}: ") and expect in msg and msg.count(str(model)) == 1, msg


@pytest.mark.parametrize("value", [1e308, 1e10, -1.0, float("nan"), True, "30"])
def test_analyze_refuses_a_skew_tolerance_that_overflows_the_timeline(value):
    from gpufield.triage import analyze

    with pytest.raises(ValueError, match=r"skew_tolerance_s: expected a finite number of seconds in \[0, 1e\+09\]"):
        analyze(["unused.log"], skew_tolerance_s=value)


@pytest.mark.parametrize("kind", ["dir", "fifo", "missing"])
def test_power_scenario_path_that_is_no_file_says_what_it_is(tmp_path, kind):
    from gpufield.errors import InputError
    from gpufield.power.scenario import load_scenario

    p = tmp_path / "sc.json"
    if kind == "dir":
        p.mkdir()
    elif kind == "fifo":
        os.mkfifo(p)
    want = {"dir": "is a directory", "fifo": "is not a regular file", "missing": "scenario file not found"}[kind]
    with pytest.raises(InputError, match=want) as e:
        load_scenario(p)
    assert e.value.path == str(p)


@pytest.mark.parametrize("kind", ["fifo", "utf8", "list"])
def test_power_profile_read_names_the_file_and_never_blocks(tmp_path, monkeypatch, kind):
    import dataclasses

    from gpufield import _files
    from gpufield.errors import InputError
    from gpufield.power.profiles import ProfileKey, load_profile

    monkeypatch.setattr(_files, "FIFO_WAIT_S", 0.2)
    p = tmp_path / "prof.json"
    if kind == "fifo":
        os.mkfifo(p)
    else:
        p.write_bytes(b'{"schema": "x",\n "key": "' + BAD_UTF8 + b'"}' if kind == "utf8" else b"[1, 2]")
    key = ProfileKey(**{f.name: (1 if f.type in (int, "int") else "x") for f in dataclasses.fields(ProfileKey)})
    want = {"fifo": "no writer", "utf8": "invalid UTF-8", "list": "expected a JSON object"}[kind]
    with pytest.raises(InputError, match=want) as e:
        load_profile(p, key)
    assert e.value.path == str(p) and (kind != "utf8" or e.value.line == 2)


@pytest.mark.parametrize(("content", "want"), [
    (b"5", "expected a JSON object"),
    (b'{"schema":1,"device":"x","key":"h","provenance":{},"entries":[5]}', "entry 0: expected an object"),
    (b'{"schema":1,"device":"x","key":"h","provenance":{},"entries":[{"op":"matmul","M":"a","K":2,"N":3,'
     b'"paths":{}}]}', "M, K, N must be positive integers"),
    (b'{"schema":1,"device":"x","key":"h","provenance":{},"entries":[{"op":"matmul","M":1,"K":2,"N":3,'
     b'"paths":{"native":{"time_s":NaN}}}]}', "'time_s' must be a finite number"),
    (b'{"schema": 1,\n "device": "' + BAD_UTF8 + b'"}', "invalid UTF-8"),
    (b'{"schema": 1,\n', "invalid JSON"),
])
def test_fp64_crossover_table_errors_name_the_file(capsys, tmp_path, content, want):
    table = tmp_path / "t.json"
    table.write_bytes(content)
    rc, _, err = _run(capsys, "fp64", "crossover", "--table", str(table), "--gpu", "h200")
    line = _usage_error(rc, err, str(table))
    assert want in line


def test_fp64_crossover_table_fifo_is_refused(capsys, fifo):
    rc, _, err = _run(capsys, "fp64", "crossover", "--table", str(fifo), "--gpu", "h200")
    assert "no writer" in _usage_error(rc, err, str(fifo))


def test_a_device_given_as_an_input_file_is_refused_not_read_forever(capsys, tmp_path):
    from gpufield._files import read_bytes
    from gpufield.errors import InputError

    with pytest.raises(InputError, match="is a character device; expected a regular file"):
        read_bytes("/dev/zero")  # endless: was read until memory ran out
    rc, _, err = _run(capsys, "fp64", "crossover", "--table", "/dev/zero", "--gpu", "h200")
    _usage_error(rc, err, "/dev/zero", "character device")
    rc, _, err = _run(capsys, "preflight", "--only", "kernel", "--kernel-log", "/dev/zero")
    _usage_error(rc, err, "/dev/zero", "not a regular file")


@pytest.mark.parametrize("cmd", ["run", "bench"])
def test_verify_report_without_shard_is_a_usage_error_not_ignored(capsys, tmp_path, cmd):
    rep = tmp_path / "rep.json"
    args = (["run", "m.onnx", "p.vnnlib", "--out", str(tmp_path / "r.txt")] if cmd == "run"
            else ["bench", str(tmp_path), "--out", str(tmp_path / "r.csv")])
    rc, _, err = _run(capsys, "verify", *args, "--report", str(rep))
    _usage_error(rc, err, "--report", "--shard")
    assert not rep.exists() and not (tmp_path / "r.txt").exists()


def test_power_calibrate_out_under_a_file_is_refused_before_the_work(capsys, tmp_path):
    sim = tmp_path / "sim.json"
    sim.write_text("{}")
    rc, _, err = _run(capsys, "power", "calibrate", "moe-agentic-b200", "--out", str(sim / "profiles"))
    line = _usage_error(rc, err, str(sim))
    assert "is a file" in line and "not writable" not in line
    assert sim.read_text() == "{}"
