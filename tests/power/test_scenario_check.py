"""Scenario files with wrong types, NaN or huge values give an InputError naming file, key and expectation."""

from __future__ import annotations

import json
from importlib import resources

import pytest

from gpufield.cli import main
from gpufield.errors import InputError
from gpufield.power.scenario import load_scenario
from gpufield.power.scenario_check import MAX_REQUESTS


def _base() -> dict:
    return json.loads(resources.files("gpufield.power.data").joinpath("scenarios", "moe-agentic-b200.json")
                      .read_text())


def _write(tmp_path, d, raw: str | None = None):
    p = tmp_path / "bad.json"
    p.write_text(raw if raw is not None else json.dumps(d))
    return p


def _set(d, dotted, value):
    *head, last = dotted.split(".")
    for k in head:
        d = d[k]
    d[last] = value


@pytest.mark.parametrize("key, value, expect", [
    ("control_period_s", "5", "control_period_s: expected a number in [0.1, 3600], got the string '5'"),
    ("slo.itl_p99_s", "0.05", "slo.itl_p99_s: expected a number in (0, 60], got the string '0.05'"),
    ("lanes.decode_gpus", 4.5, "lanes.decode_gpus: expected an integer"),
    ("lanes.decode_gpus", 3, "lanes.decode_gpus (3) must be a multiple of lanes.decode_tp (4)"),
    ("model.n_layers", "62", "model.n_layers: expected an integer in [0, 1e+15], got the string '62'"),
    ("model.fp8_compute", "yes", "model.fp8_compute: expected true or false"),
    ("load.kind", "burst", "load.kind: expected one of agentic, mooncake, poisson, got 'burst'"),
    ("load.session_rate_per_s", 0, "load.session_rate_per_s: expected a number in (0, 1e+09], got 0"),
    ("seed", True, "seed: expected an integer"),
])
def test_each_bad_value_names_file_key_and_expectation(tmp_path, key, value, expect):
    d = _base()
    _set(d, key, value)
    p = _write(tmp_path, d)
    with pytest.raises(InputError) as e:
        load_scenario(p)
    assert expect in str(e.value) and str(p) in str(e.value)


def test_nan_and_infinity_are_refused(tmp_path):
    raw = json.dumps(_base()).replace('"control_period_s": 5.0', '"control_period_s": NaN')
    with pytest.raises(InputError, match="control_period_s: expected a number in .*got nan"):
        load_scenario(_write(tmp_path, None, raw))
    raw = json.dumps(_base()).replace('"itl_p99_s": 0.05', '"itl_p99_s": Infinity')
    with pytest.raises(InputError, match="slo.itl_p99_s: .*got inf"):
        load_scenario(_write(tmp_path, None, raw))


def test_huge_rates_are_refused_before_any_array_is_allocated(tmp_path):
    d = _base()
    d["load"] = {"kind": "poisson", "rate_per_s": 1e8, "duration_s": 600, "input_mean": 1000, "output_mean": 200}
    with pytest.raises(InputError, match=r"load.rate_per_s x load.duration_s .* ~6.9e\+10 requests"):
        load_scenario(_write(tmp_path, d))
    d["load"]["rate_per_s"] = 2.0
    sc = load_scenario(_write(tmp_path, d))  # fine on its own ...
    with pytest.raises(InputError, match=f"at most {MAX_REQUESTS:,}"):
        sc.workload(duration_s=1e7)  # ... but not with a duration override that explodes it
    with pytest.raises(InputError, match="duration override"):
        sc.workload(duration_s=float("nan"))


def test_cli_reports_a_bad_scenario_without_a_traceback(tmp_path, capsys):
    d = _base()
    d["control_period_s"] = "5"
    p = _write(tmp_path, d)
    assert main(["power", "simulate", str(p), "--no-oracle"]) == 2
    err = capsys.readouterr().err
    assert "control_period_s" in err and str(p) in err and "Traceback" not in err
