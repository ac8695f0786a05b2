"""bench input hygiene (issue 26): the decompression cache follows its sources, reference rows
match on (benchmark, onnx, vnnlib), and non-finite timeouts are refused. Verdicts are checked
against onnxruntime evaluations of the very models, or the published VNN-COMP 2022 results."""

from __future__ import annotations

import gzip

import numpy as np
import onnxruntime as ort
import pytest

from gpufield.errors import InputError
from gpufield.verify import bench, read_instances, read_results
from gpufield.verify.io.results import instance_key

from .test_results_bench_cli import _instance


def _gz_bench(tmp_path, model_name):
    """A one-instance benchmark directory with a gzipped model listed without .gz."""
    d = tmp_path / "bench"
    (d / "onnx").mkdir(parents=True)
    (d / "vnnlib").mkdir()
    o, v = _instance(tmp_path, model_name, "unsat", seed=3)
    (d / "vnnlib" / "p.vnnlib").write_bytes(v.read_bytes())
    (d / "onnx" / "m.onnx.gz").write_bytes(gzip.compress(o.read_bytes()))
    (d / "instances.csv").write_text("onnx/m.onnx,vnnlib/p.vnnlib,20\n")
    return d, v


def _violates_at_centre(onnx_bytes, vnn_text) -> bool:
    """onnxruntime's Y_0 at the box centre (x = 0) against the property's one output atom
    ``(<= Y_0 t)``: True when the centre violates the property's negation, i.e. is a witness."""
    s = ort.InferenceSession(onnx_bytes, providers=["CPUExecutionProvider"])
    y0 = s.run(None, {s.get_inputs()[0].name: np.zeros((1, 3), np.float32)})[0].reshape(-1)[0]
    t = float(vnn_text.rsplit("(<= Y_0 ", 1)[1].split(")")[0])
    return float(y0) <= t


def test_replaced_gz_model_is_decompressed_again(tmp_path):
    d, v = _gz_bench(tmp_path, "first")
    vnn = v.read_text()
    first = gzip.decompress((d / "onnx/m.onnx.gz").read_bytes())
    assert not _violates_at_centre(first, vnn)  # the property's witness set misses the centre
    s = bench(d, tmp_path / "r1.csv", progress=False)
    assert s.counts == {"unsat": 1}
    # replace the model by one whose Y_0 is shifted down by 100: the centre becomes a witness
    import onnx
    from onnx import numpy_helper

    m = onnx.load_from_string(first)
    last = [t for t in m.graph.initializer if t.name.startswith("b")][-1]
    last.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(last) - np.float32(100), last.name))
    second = m.SerializeToString()
    assert _violates_at_centre(second, vnn)
    (d / "onnx/m.onnx.gz").write_bytes(gzip.compress(second))
    s = bench(d, tmp_path / "r1.csv", progress=False, force=True)
    assert s.counts == {"sat": 1}
    # a cached copy edited behind bench's back is not trusted either
    (cached,) = [f for f in (tmp_path / "r1_inputs").rglob("m.onnx") if f.is_file()]  # stale copies pruned
    cached.write_bytes(first)
    s = bench(d, tmp_path / "r1.csv", progress=False, force=True)
    assert s.counts == {"sat": 1} and cached.read_bytes() == second


def test_truncated_gz_is_an_input_error_row(tmp_path, capsys):
    d, _ = _gz_bench(tmp_path, "t")
    data = (d / "onnx/m.onnx.gz").read_bytes()
    (d / "onnx/m.onnx.gz").write_bytes(data[: len(data) // 2])
    s = bench(d, tmp_path / "r.csv", progress=False)
    assert s.counts == {"error": 1} and "cannot decompress onnx/m.onnx" in capsys.readouterr().err
    assert not list((tmp_path / "r_inputs").rglob("*.part"))


def test_reference_rows_match_on_benchmark_and_paths(tmp_path, capsys):
    d, _ = _gz_bench(tmp_path, "k")
    ref = tmp_path / "ref.csv"
    ref.write_text("benchmark,onnx,vnnlib,prepare_time,result,run_time\n"  # same file names, other benchmark
                   "other,./benchmarks/other/onnx/m.onnx,./benchmarks/other/vnnlib/p.vnnlib,0,sat,1\n"
                   "bench,./benchmarks/bench/onnx/m.onnx.gz,./benchmarks/bench/vnnlib/p.vnnlib,0,unsat,1\n")
    s = bench(d, tmp_path / "r.csv", reference=ref, progress=False)
    assert (s.agree, s.wrong, s.reference_counts) == (1, 0, {"unsat": 1})
    ref.write_text("benchmark,onnx,vnnlib,prepare_time,result,run_time\n"
                   "other,./onnx/m.onnx,./vnnlib/p.vnnlib,0,sat,1\n")
    s = bench(d, tmp_path / "r.csv", reference=ref, progress=False, force=True)
    assert (s.agree, s.wrong, s.reference_counts) == (0, 0, {})
    assert "no instance of benchmark 'bench' is in the reference" in capsys.readouterr().err
    ref.write_text("a,x.onnx,p.vnnlib,0,sat,1\na,./x.onnx,p.vnnlib.gz,0,unsat,1\n")
    with pytest.raises(InputError, match="listed twice with different results"):
        read_results(ref)


def test_published_results_keys_cover_every_shared_instance(shared_dir):
    """Each shared benchmark's instances.csv rows find exactly one alpha-beta-CROWN 2022 row."""
    data = shared_dir / "data/vnncomp2022"
    for b in ("acasxu", "mnist_fc", "oval21", "reach_prob_density", "collins_rul_cnn"):
        ref = read_results(data / f"results/alpha_beta_crown_{b}_results.csv")
        insts = read_instances(data / b / "instances.csv")
        keys = {instance_key(b, i.onnx, i.vnnlib) for i in insts}
        assert keys <= set(ref), b
        other = {instance_key("x" + b, i.onnx, i.vnnlib) for i in insts}
        assert not other & set(ref)


@pytest.mark.parametrize("value", ["nan", "inf", "-5", " NaN "])
def test_non_finite_timeout_is_refused_with_its_line(tmp_path, value):
    p = tmp_path / "instances.csv"
    p.write_text(f"onnx/a.onnx,vnnlib/a.vnnlib,30\nonnx/a.onnx,vnnlib/b.vnnlib,{value}\n")
    with pytest.raises(InputError) as e:
        read_instances(p)
    assert e.value.line == 2 and "not a finite number of seconds" in str(e.value)


def test_non_finite_caps_are_refused(tmp_path):
    d, _ = _gz_bench(tmp_path, "c")
    for kw in ({"max_instance_s": float("nan")}, {"instance_s": float("inf")}, {"total_budget_s": -1.0}):
        with pytest.raises(InputError, match="must be a finite number of seconds"):
            bench(d, tmp_path / "r.csv", progress=False, **kw)
