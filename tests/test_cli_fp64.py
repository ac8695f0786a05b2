"""`gpufield fp64` commands: model JSON matches the library; errors map to exit codes."""

from __future__ import annotations

import json

import pytest

from gpufield.cli import main


def test_model_json(capsys):
    assert main(["fp64", "model", "--gpu", "B300", "--gpu", "H200", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [r["gpu"] for r in out] == ["B300", "H200-SXM"]
    assert round(out[0]["without"]["emulated_s"][0] * 1e3) == 63
    assert out[1]["counts"]["measured"] and out[1]["with"]["c_conv"] == out[1]["counts"]["c_conv"]


def test_model_table(capsys):
    assert main(["fp64", "model", "--c-epi", "66"]) == 0
    out = capsys.readouterr().out
    assert "B300" in out and "remedies" in out


def test_model_unknown_gpu_exit_2(capsys):
    assert main(["fp64", "model", "--gpu", "nope"]) == 2


def test_fft_check_json(capsys):
    assert main(["fp64", "fft", "--shape", "8,16", "--backend", "int8", "--variant", "garner", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["reference"] == "long-double DFT" and out["num_moduli"] == 16
    assert out["rel_l2_emulated"] <= out["rel_l2_numpy"]
    assert out["round_trip_rel_l2"] < 4e-16


def test_fft_check_above_the_long_double_size_reports_no_numpy_error(capsys):
    """Above 32^3 points numpy.fft is the reference itself: its error is n/a, not a misleading 0."""
    assert main(["fp64", "fft", "--shape", "64,64,16"]) == 0
    out = capsys.readouterr().out
    assert "reference: numpy.fft (float64)" in out and "rel_l2_numpy: n/a" in out
    # the sampled long-double reference stays at every size: emulated and numpy errors on 8 samples
    vals = dict(line.split(": ", 1) for line in out.splitlines() if ": " in line)
    assert vals["samples"] == "8"
    assert float(vals["max_err_sampled_over_rms_emulated"]) < 1e-15
    assert 0 < float(vals["max_err_sampled_over_rms_numpy"]) < 1e-14


def test_fft_bad_shape_exit_2(capsys):
    assert main(["fp64", "fft", "--shape", "12"]) == 2


def test_model_table_is_readable_at_80_columns(capsys, monkeypatch):
    """The default table fits an 80-column terminal: no truncated cell ("…"), no line over 80."""
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["fp64", "model"]) == 0
    out = capsys.readouterr().out
    assert "…" not in out and max(len(line) for line in out.splitlines()) <= 80
    for header in ("GPU", "roof", "native", "c_epi", "emulated", "x roof", "x native"):
        assert f" {header} " in out
    assert "H200-SXM" in out and "216.46" in out and "--wide" in out


def test_model_table_wide_shows_every_column_untruncated(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["fp64", "model", "--wide"]) == 0
    out = capsys.readouterr().out
    assert "…" not in out and " floor T/s " in out and " TC int8/fp8 " in out and "131.94/11.54" in out


def test_model_json_is_the_library_rows(capsys):
    from gpufield.fp64.model import model_table
    from gpufield.fp64.model_counts import projection_rows

    assert main(["fp64", "model", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out == json.loads(json.dumps(projection_rows()))
    assert [r["without"] for r in out] == json.loads(json.dumps([r.to_dict() for r in model_table()]))


def test_fft_check_narrow_plan_from_the_options(capsys):
    """--input-bits / --twiddle-bits reach the plan: 40 + 40 bits need log2 M >= 40 + 40 + 5 + 3 = 88, the
    smallest INT8 moduli count whose product reaches it (computed here from the raw moduli), and the error
    grows to the 2^-40 quantisation level (numpy's stays ~1e-16)."""
    import math

    from gpufield.fp64.ozaki.moduli import RAW_MODULI

    assert main(["fp64", "fft", "--shape", "8,8", "--input-bits", "40", "--twiddle-bits", "40", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    want = next(r for r in range(2, 21) if math.log2(math.prod(RAW_MODULI["int8"][:r])) >= 88)
    assert (out["input_bits"], out["twiddle_bits"], out["num_moduli"]) == (40, 40, want)
    assert out["epilogue"] == "torch"  # the CPU backend
    assert 2.0**-46 < out["rel_l2_emulated"] < 2.0**-33 and out["rel_l2_numpy"] < 1e-15


def test_fft_check_bad_seed_and_epilogue_exit_2(capsys):
    assert main(["fp64", "fft", "--shape", "8,8", "--seed", "-1"]) == 2
    assert "seed must be >= 0" in capsys.readouterr().err
    assert main(["fp64", "fft", "--shape", "8,8", "--epilogue", "cuda"]) == 2
    assert "epilogue must be one of" in capsys.readouterr().err


def test_model_rejects_non_finite_c_epi_and_json_stays_valid(capsys):
    """--c-epi nan/inf once printed a row (emulated = the roof) and bare NaN/Infinity tokens in --json."""
    for bad in ("nan", "inf", "-1"):
        assert main(["fp64", "model", "--gpu", "H200", "--c-epi", bad, "--json"]) == 2
        assert "c_epi must be a finite number > 0" in capsys.readouterr().err


def test_model_vendor_prefixed_short_name(capsys):
    assert main(["fp64", "model", "--gpu", "NVIDIA H100", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["gpu"] == "H100-SXM"


def test_model_small_sizes_show_digits_not_zeros(capsys):
    """At n = 16 every time is below 1 ms: three significant digits instead of 0.00."""
    assert main(["fp64", "model", "--gpu", "H200", "--n", "16", "--json"]) == 0
    roof_ms = json.loads(capsys.readouterr().out)[0]["without"]["roof_s"] * 1e3
    assert main(["fp64", "model", "--gpu", "H200", "--n", "16"]) == 0
    out = capsys.readouterr().out
    assert f"{roof_ms:.3g}" in out and " 0.00 " not in out


def test_fft_shape_with_an_empty_field_or_too_many_axes_exit_2(capsys):
    for bad in ("8,,8", "8,", "2,2,2,2", "12"):
        assert main(["fp64", "fft", "--shape", bad]) == 2
        assert "expected 1 to 3 comma-separated powers of two" in capsys.readouterr().err


def test_model_says_where_emulation_loses_and_checks_the_measurement(capsys, monkeypatch):
    """One sentence per GPU from the ratios (B300's native FP64 is 1.25 TF: emulation wins there, also with the
    conversion term; on H200 and Rubin it loses); --measured prints the H200 check with the held-out form."""
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["fp64", "model", "--gpu", "B300", "--gpu", "Rubin", "--gpu", "H200", "--measured"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "B300: emulation beats native FP64 (0.49-0.68x" in out and "0.79-0.98x with the conversion term" in out
    assert "Rubin: emulation LOSES to native FP64" in out and "H200-SXM: emulation LOSES to native FP64" in out
    assert "329.65" in out and "-13.0%" in out and "-6.5%" in out and "gives overlapped" in out
    assert main(["fp64", "model", "--gpu", "H200", "--combine", "serialized", "--json", "--measured"]) == 0
    js = json.loads(capsys.readouterr().out)
    assert js["projections"][0]["with"]["combine"] == "serialized" and js["measured_check"]["holdout"] == 1024
    assert main(["fp64", "model", "--gpu", "H200", "--combine", "sum"]) == 2


def test_fft_refuses_a_size_that_does_not_fit_before_allocating(capsys, monkeypatch):
    """With 1 GiB available the 256^3 check (16 B x 2^24 = 256 MiB per array, 6 arrays + workspace) is refused
    with exit 2 and the byte counts; the 2048^3 of the issue is refused by the side limit. Nothing is
    allocated: numpy's generator is never called."""
    from gpufield.fp64.fft import check

    monkeypatch.setattr(check, "available_host_bytes", lambda: 2**30)
    monkeypatch.setattr(check.np.random, "default_rng", lambda *a: (_ for _ in ()).throw(AssertionError("alloc")))
    assert main(["fp64", "fft", "--shape", "256,256,256"]) == 2
    err = capsys.readouterr().err
    assert "does not fit" in err and "of 1.0 GiB available" in err and "nothing was allocated" in err
    assert main(["fp64", "fft", "--shape", "2048,2048,2048"]) == 2
    assert "power of two <= 1024" in capsys.readouterr().err


def test_fft_says_up_front_when_the_cpu_path_takes_minutes(capsys, monkeypatch):
    from gpufield.fp64.fft import check
    from gpufield.fp64.fft.stage import EmulatedFftPlan

    # the measured rates: a 256^3 check on the CPU path is minutes, a 16^3 one is not
    plan = EmulatedFftPlan(backend="cpu-exact", epilogue="torch")
    assert check.check_plan((256, 256, 256), plan, "cpu")["estimated_s"] > 600
    assert check.check_plan((16, 16, 16), plan, "cpu")["estimated_s"] < 60
    rates = check.cpu_rates()
    slow = {**rates, "seconds_per_point_stage": {k: 1.0 for k in rates["seconds_per_point_stage"]}}
    monkeypatch.setattr(check, "cpu_rates", lambda: slow)
    assert main(["fp64", "fft", "--shape", "8,8", "--json"]) == 0
    cap = capsys.readouterr()
    est = json.loads(cap.out)["plan"]["estimated_s"]
    assert est == pytest.approx(2 * 1.0 * 64 * 2 + 2 * 64 * rates["seconds_per_reference_point"])
    assert f"about {est / 60:.0f} min" in cap.err and "2-core" in cap.err


def test_fft_sampled_reference_is_the_dense_long_double_dft():
    """The O(N)-per-line sampled outputs equal the dense long-double DFT at their indices (1-3 axes)."""
    import numpy as np

    from gpufield.fp64.fft.check import sample_indices, sampled_dft_longdouble
    from gpufield.fp64.fft.reference import dft_longdouble

    for shape in ((32,), (8, 16), (4, 8, 16)):
        rng = np.random.default_rng(3)
        x = rng.standard_normal(shape) + 1j * rng.standard_normal(shape)
        idx = sample_indices(shape, 0)
        ref = dft_longdouble(x)
        got = sampled_dft_longdouble(x, idx)
        assert len(set(idx)) == len(idx) >= 4 and idx[0][0] == 0
        assert max(abs(g - ref[k]) for g, k in zip(got, idx, strict=True)) < 1e-16


def test_available_host_bytes_without_psutil(monkeypatch):
    import builtins

    from gpufield.fp64.fft.check import available_host_bytes

    real = builtins.__import__

    def no_psutil(name, *a, **k):
        if name == "psutil":
            raise ImportError(name)
        return real(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_psutil)
    assert available_host_bytes() > 2**20
