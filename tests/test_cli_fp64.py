"""`gpufield fp64` commands: model JSON matches the library; errors map to exit codes."""

from __future__ import annotations

import json

from gpufield.cli import main


def test_model_json(capsys):
    assert main(["fp64", "model", "--gpu", "B300", "--gpu", "H200", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [r["gpu"] for r in out] == ["B300", "H200-SXM"]
    assert round(out[0]["emulated_s"][0] * 1e3) == 63


def test_model_table(capsys):
    assert main(["fp64", "model", "--c-epi", "66"]) == 0
    out = capsys.readouterr().out
    assert "B300" in out and "remedies" in out


def test_model_unknown_gpu_exit_2(capsys):
    assert main(["fp64", "model", "--gpu", "nope"]) == 2
