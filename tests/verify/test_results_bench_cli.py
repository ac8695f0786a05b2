"""VNN-COMP files, the bench runner (gz inputs, reference scoring, interruption and resume) and
the `gpufield verify` CLI on small generated instances."""

from __future__ import annotations

import gzip
import re

import numpy as np
import pytest
import torch

from gpufield.cli import main
from gpufield.errors import InputError
from gpufield.verify import bench, load_onnx, read_instances, read_results, write_result_file
from gpufield.verify.attack import Counterexample, into_box_f32
from gpufield.verify.propagate import ibp

from . import nets


def _instance(tmp_path, name, kind, seed=0):
    """A 3-4-4-2 MLP with a property that IBP proves (kind='unsat') or whose box centre violates
    (kind='sat'); thresholds come from IBP / the exact forward of this very net."""
    rng = np.random.default_rng(seed)
    model, _ = nets.mlp(rng, [3, 4, 4, 2])
    onnx_p = tmp_path / f"{name}.onnx"
    nets.save(model, onnx_p)
    lo, hi = np.full(3, -0.1), np.full(3, 0.1)
    g = load_onnx(onnx_p)
    if kind == "unsat":
        low, _ = ibp(g.cast(torch.float64), torch.tensor(lo).reshape(1, 3), torch.tensor(hi).reshape(1, 3))[g.output_name]
        out = f"(assert (<= Y_0 {float(low[0, 0]) - 1.0!r}))"
    else:
        with torch.no_grad():
            y0 = float(g.forward(torch.zeros(1, 3))[0, 0])
        out = f"(assert (>= Y_0 {y0 - 0.05!r}))"
    text = "".join(f"(declare-const X_{i} Real)" for i in range(3)) + "(declare-const Y_0 Real)(declare-const Y_1 Real)\n"
    text += "".join(f"(assert (>= X_{i} {lo[i]}))(assert (<= X_{i} {hi[i]}))\n" for i in range(3)) + out
    vnn_p = tmp_path / f"{name}.vnnlib"
    vnn_p.write_text(text)
    return onnx_p, vnn_p


def test_result_file_roundtrip_and_no_overwrite(tmp_path):
    x = np.array([0.1, np.float32(0.3)], dtype=np.float64)
    y = np.array([-1.5, 2e-9])
    p = tmp_path / "r.txt"
    write_result_file(p, "sat", Counterexample(x, y, 0))
    text = p.read_text()
    assert text.startswith("sat\n((X_0 ")
    vals = {k: float(v) for k, v in re.findall(r"\((\w+_\d+) ([^()\s]+)\)", text)}
    assert vals == {"X_0": x[0], "X_1": x[1], "Y_0": y[0], "Y_1": y[1]}
    with pytest.raises(InputError, match="exists"):
        write_result_file(p, "unsat")
    write_result_file(p, "unsat", force=True)
    assert p.read_text() == "unsat\n"


def test_into_box_f32_never_leaves_the_box():
    # float32(0.1) > 0.1 and float32(0.7) < 0.7: plain rounding would leave these boxes
    lo, hi = np.array([0.0, 0.1, 0.7]), np.array([0.1, 0.2, 0.8])
    assert float(np.float32(0.1)) > 0.1 and float(np.float32(0.7)) < 0.7
    x = into_box_f32(np.array([0.1, 0.1, 0.7]), lo, hi)
    assert x.dtype == np.float32
    assert (x.astype(np.float64) >= lo).all() and (x.astype(np.float64) <= hi).all()


def test_published_abcrown_counts_on_shared_instances(shared_dir):
    d = shared_dir / "data/vnncomp2022"
    ref = read_results(d / "results/alpha_beta_crown_mnist_fc_results.csv")
    insts = read_instances(d / "mnist_fc/instances.csv")
    from gpufield.verify.io.results import instance_key

    counts = {}
    for i in insts:
        r = ref[instance_key("mnist_fc", i.onnx, i.vnnlib)]
        counts[r] = counts.get(r, 0) + 1
    assert len(insts) == 60 and counts == {"unsat": 44, "sat": 15, "timeout": 1}


def _bench_dir(tmp_path):
    d = tmp_path / "bench"
    (d / "onnx").mkdir(parents=True)
    (d / "vnnlib").mkdir()
    rows = []
    for name, kind in (("a", "unsat"), ("b", "sat"), ("c", "unsat")):
        o, v = _instance(d / "onnx", name, kind, seed=ord(name))
        (d / "vnnlib" / v.name).write_bytes(v.read_bytes())
        v.unlink()
        gz = d / "vnnlib" / (v.name + ".gz")  # a gzipped property listed without .gz
        gz.write_bytes(gzip.compress((d / "vnnlib" / v.name).read_bytes()))
        (d / "vnnlib" / v.name).unlink()
        rows.append(f"onnx/{o.name},vnnlib/{v.name},30")
    (d / "instances.csv").write_text("\n".join(rows) + "\n")
    ref = tmp_path / "ref.csv"
    ref.write_text("benchmark,onnx,vnnlib,prepare_time,result,run_time\n"
                   "test,./benchmarks/test/test_nano.onnx,./x.vnnlib,0,sat,0\n"
                   "bench,./onnx/a.onnx,./vnnlib/a.vnnlib,0,unsat,1\n"
                   "bench,./onnx/b.onnx,./vnnlib/b.vnnlib,0,unsat,1\n"
                   "bench,./onnx/c.onnx,./vnnlib/c.vnnlib,0,timeout,1\n")
    return d, ref


def test_bench_counts_and_reference_scoring(tmp_path):
    d, ref = _bench_dir(tmp_path)
    out = tmp_path / "res.csv"
    s = bench(d, out, reference=ref, progress=False)
    assert [r[2] for r in s.rows] == ["unsat", "sat", "unsat"]
    assert s.counts == {"unsat": 2, "sat": 1}
    assert (s.agree, s.wrong) == (1, 1) and s.wrong_instances == ["onnx/b.onnx,vnnlib/b.vnnlib"]
    assert s.reference_counts == {"unsat": 2, "timeout": 1}
    # per-row diagnostics: the unsat rows carry the float64 bound that proved them (> 0); the
    # sat one was found by the attack before any bound
    assert len(s.margins) == 3 and s.margins[0]["float64"] > 0 and s.margins[2]["float64"] > 0
    assert "float64" not in s.margins[1]
    lines = out.read_text().splitlines()
    assert lines[0] == "benchmark,onnx,vnnlib,prepare_time,result,run_time" and len(lines) == 4
    with pytest.raises(InputError, match="--resume or --force"):
        bench(d, out, progress=False)


def test_interrupted_bench_keeps_rows_and_resumes(tmp_path, monkeypatch):
    import sys

    B = sys.modules["gpufield.verify.bench"]

    d, _ = _bench_dir(tmp_path)
    out = tmp_path / "res.csv"
    real, calls = B.verify_instance, []

    def flaky(*a, **k):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*a, **k)

    monkeypatch.setattr(B, "verify_instance", flaky)
    with pytest.raises(KeyboardInterrupt):
        bench(d, out, progress=False)
    assert len(out.read_text().splitlines()) == 2  # header + the finished row
    monkeypatch.setattr(B, "verify_instance", real)
    s = bench(d, out, resume=True, progress=False)
    assert s.counts == {"unsat": 2, "sat": 1}
    assert len(out.read_text().splitlines()) == 4


def test_cli_run_exit_codes_and_files(tmp_path, capsys):
    o, v = _instance(tmp_path, "n", "unsat")
    res = tmp_path / "out.txt"
    args = ["verify", "run", str(o), str(v), "--timeout", "30", "--out", str(res)]
    assert main(args) == 0 and res.read_text() == "unsat\n"
    assert main(args) == 2  # never overwrite without --force
    assert main(args + ["--force", "--method", "ibp"]) == 0
    bad = tmp_path / "bad.vnnlib"
    bad.write_text("(declare-const X_0 Real)\n(assert (<= X_0 1)")
    res2 = tmp_path / "out2.txt"
    assert main(["verify", "run", str(o), str(bad), "--timeout", "5", "--out", str(res2)]) == 2
    assert res2.read_text() == "error\n"
    assert "bad.vnnlib:2:1" in capsys.readouterr().err
    o2, v2 = _instance(tmp_path, "s", "sat")
    res3 = tmp_path / "out3.txt"
    assert main(["verify", "run", str(o2), str(v2), "--timeout", "30", "--out", str(res3)]) == 0
    assert res3.read_text().startswith("sat\n((X_0 ")


def test_ctrl_c_writes_unknown(tmp_path, monkeypatch):
    import gpufield.verify.runner as runner

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(runner, "verify_instance", interrupted)
    out = tmp_path / "res.txt"
    with pytest.raises(KeyboardInterrupt):
        runner.run_instance("m.onnx", "p.vnnlib", out, timeout_s=1)
    assert out.read_text().strip() == "unknown"


def test_bench_instance_timeout_override(tmp_path, monkeypatch):
    """``instance_s`` replaces the CSV timeout (30 s here) and ``max_instance_s`` still caps it."""
    import sys

    B = sys.modules["gpufield.verify.bench"]
    d, _ = _bench_dir(tmp_path)
    real, seen = B.verify_instance, []

    def spy(*a, timeout_s, **k):
        seen.append(timeout_s)
        return real(*a, timeout_s=timeout_s, **k)

    monkeypatch.setattr(B, "verify_instance", spy)
    bench(d, tmp_path / "a.csv", progress=False, limit=1, instance_s=500.0)
    bench(d, tmp_path / "b.csv", progress=False, limit=1, instance_s=500.0, max_instance_s=120.0)
    bench(d, tmp_path / "c.csv", progress=False, limit=1)
    assert seen == [500.0, 120.0, 30.0]
