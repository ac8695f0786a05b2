"""`gpufield fp64` commands: model JSON matches the library; errors map to exit codes."""

from __future__ import annotations

import json

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
