"""The conversion term of the floor model: counts recounted from the committed SASS listings, times from the
committed run log, the model's arithmetic redone by hand from the catalogue's H200 numbers."""

from __future__ import annotations

import gzip
import json
import re
import statistics
import sys
from pathlib import Path

import pytest

from gpufield.errors import InputError
from gpufield.fp64.model import fft_floor_model
from gpufield.fp64.model_counts import (
    conversion_counts,
    conversion_data,
    measured_check,
    projection_rows,
)

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))  # fp64_sass_count: a tool, out of src/ (issue 30)
H200_P_INT = 132 * 64 * 1.98e9  # SMs x INT32 lanes x max SM clock (fp64.md 3.2)
H200_BW = 4.8e12


@pytest.mark.parametrize("k", [16, 32])
def test_counts_are_the_committed_listing_recounted(k):
    """Each per-thread phase count in the data file is what sass_phases finds in the listing it names, and the
    listing's total is the one its README states (2862 / 5955 SASS per thread)."""
    from fp64_sass_count import _sass_ops, sass_phases

    st = conversion_data()["gpus"]["H200-SXM"]["stages"][str(k)]
    text = gzip.open(ROOT / st["listing"], "rt").read()
    ph = sass_phases(text)
    assert {"conversion": ph["residues"], "fold": ph["fold"], "finish": ph["finish"]} == st["per_thread"]
    readme = (ROOT / st["listing"]).parent.joinpath("README.txt").read_text()
    total = int(re.search(rf"N = {k} (\d+)(?: SASS per thread)? \(", readme).group(1))
    assert len(_sass_ops(text)) == total == sum(st["per_thread"].values())
    assert f"REG:{st['registers']}" in text


def test_measured_times_are_the_run_log_medians():
    meas = conversion_data()["gpus"]["H200-SXM"]["measured_transform_s"]
    log = (ROOT / "benchmarks/results/h200-run65/bits.log").read_text().splitlines()
    for line in log:
        n, payload = line.split(" ", 1)
        d = json.loads(payload)
        assert meas["emulated"][n] == pytest.approx(statistics.median(d["58/56_ms"]) / 1e3, rel=1e-9)
        assert meas["cufft"][n] == pytest.approx(d["cufft_ms"] / 1e3, rel=1e-9)


def test_counts_per_real_output_and_the_mixed_512_transform():
    """256 threads per program, 64 rows x k outputs x (re, im): N = 16 1212/8 residues, N = 32 2025/16; 512^3 has
    one N = 32 and one N = 16 stage per axis, so its count is their mean."""
    c16, c32, c512 = (conversion_counts("H200", n) for n in (256, 1024, 512))
    assert (c16.c_conv, c16.c_epi) == (1212 / 8, (1094 + 556) / 8)
    assert (c32.c_conv, c32.c_epi) == (2025 / 16, (2560 + 1370) / 16)
    assert c512.stage_lengths == (32, 16) and c512.c_conv == (c16.c_conv + c32.c_conv) / 2
    assert c16.measured and "gluon_f64_n16.sass.gz @ 4417c60" in c16.sources[0]
    b300 = conversion_counts("B300", 1024)
    assert not b300.measured and b300.source_gpu == "H200-SXM" and "FP64 pipe" in b300.why


def test_measured_check_by_hand():
    """Model = Q/B (+ or max) c N_out / P_INT at the catalogue's H200 numbers; nothing calibrated."""
    chk = measured_check("H200")
    for r in chk["rows"]:
        n = r["n"]
        q = 3 * 32 * n**3
        instr = (r["c_conv"] + r["c_epi"]) * 3 * 2 * 2 * n**3 / H200_P_INT
        assert r["serialized_s"] == pytest.approx(q / H200_BW + instr)
        assert r["overlapped_s"] == pytest.approx(max(q / H200_BW, instr))
        assert r["serialized_err"] == pytest.approx(r["serialized_s"] / r["measured_s"] - 1)
        stages = 1 if n <= 32 else 2  # the plan: every DFT-GEMM stage reads and writes the array once
        assert r["serialized_plan_s"] == pytest.approx(3 * stages * 32 * n**3 / H200_BW + instr)
    errs = {r["n"]: (r["overlapped_err"], r["serialized_err"], r["serialized_plan_err"]) for r in chk["rows"]}
    # what the report states: overlapped -3/-4/-13 %, serialized +4.3/+3.5/-6.5 %, with the plan's bytes
    # +11.8/+10.8/-0.0 % (against run 65's times)
    assert [round(100 * e[0]) for e in errs.values()] == [-3, -4, -13]
    assert [round(100 * e[1]) for e in errs.values()] == [4, 3, -7]
    assert [round(100 * e[2]) for e in errs.values()] == [12, 11, 0]
    # held out 1024^3, the two smaller sizes pick the overlapped form, which then misses by 13 %
    assert chk["choice"] == "overlapped" and chk["holdout_err"] == errs[1024][0]
    with pytest.raises(InputError, match="holdout"):
        measured_check("H200", holdout=128)
    with pytest.raises(InputError, match="no measured transform times"):
        measured_check("B300")


def test_projections_with_and_without_the_term():
    rows = {r["gpu"]: r for r in projection_rows(["B300", "Rubin", "H200"])}
    b = rows["B300"]
    assert [round(t * 1e3) for t in b["without"]["emulated_s"]] == [63, 87]  # the paper's abstract
    c = conversion_counts("B300", 1024).c_conv
    for ce, t in zip((203, 281), b["with"]["emulated_s"], strict=True):
        assert t == pytest.approx((ce + c) * 12 * 2**30 / b["with"]["int32_instr_per_s"])
    assert b["loses"] == [False, False]  # B300 native FP64 is 1.25 TF: 128.8 ms
    assert all(rows["Rubin"]["loses"]) and all(rows["H200-SXM"]["loses"])
    assert projection_rows(["H200"], n=64)[0]["with"] is None  # stage length 8 has no listing


@pytest.mark.parametrize("bad", [-1, float("nan"), float("inf"), "x"])
def test_bad_c_conv(bad):
    with pytest.raises(InputError, match="c_conv must be a finite number >= 0"):
        fft_floor_model("H200", c_conv=bad)


def test_bad_combine_and_missing_stage_listing():
    with pytest.raises(InputError, match="combine"):
        fft_floor_model("H200", combine="sum")
    with pytest.raises(InputError, match=r"stage length\(s\) \[8\]"):
        conversion_counts("H200", 64)
