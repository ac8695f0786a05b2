"""Load spikes in twin scenarios: arrivals at the stated rate, own prefix blocks, validation."""

from __future__ import annotations

import json
from importlib import resources

import numpy as np
import pytest

from gpufield.errors import InputError
from gpufield.power.scenario import load_scenario


def _scenario(tmp_path, load: dict, name="spiky"):
    d = json.loads(resources.files("gpufield.power.data").joinpath("scenarios", "dense-agentic-h200.json").read_text())
    d["name"], d["load"] = name, load
    p = tmp_path / f"{name}.json"
    p.write_text(json.dumps(d))
    return p


def test_poisson_spike_arrives_at_factor_times_the_rate(tmp_path):
    load = {"kind": "poisson", "rate_per_s": 2.0, "duration_s": 600, "input_mean": 1000, "output_mean": 200,
            "spikes": [{"start_s": 200, "duration_s": 60, "rate_factor": 3.0}]}
    sc = load_scenario(_scenario(tmp_path, load))
    w = sc.workload()
    a = w.arrival_s
    inside = np.sum((a >= 200) & (a < 260))
    outside = len(a) - inside
    # Poisson counts: expected 2 x 3 x 60 = 360 inside, 2 x 540 = 1080 outside; 5 sigma bands
    assert abs(inside - 360) < 5 * np.sqrt(360)
    assert abs(outside - 1080) < 5 * np.sqrt(1080)
    assert np.all(np.diff(a) >= 0)
    calm = sc.workload(spikes=False)
    assert abs(np.sum((calm.arrival_s >= 200) & (calm.arrival_s < 260)) - 120) < 5 * np.sqrt(120)
    # the base requests are the same with and without the spike (the spike only adds)
    assert set(np.round(calm.arrival_s, 9)) <= set(np.round(a, 9))


def test_agentic_spike_sessions_share_only_the_system_prompt_blocks(tmp_path):
    load = {"kind": "agentic", "session_rate_per_s": 0.3, "duration_s": 400, "turns_mean": 4,
            "system_prompt_tokens": 2048, "first_input_mean": 1000, "tool_output_mean": 500, "output_mean": 100,
            "tool_gap_mean_s": 2.0, "itl_guess_s": 0.02,
            "spikes": [{"start_s": 100, "duration_s": 100, "rate_factor": 4.0}]}
    sc = load_scenario(_scenario(tmp_path, load))
    base, spiked = sc.workload(spikes=False), sc.workload()
    assert len(spiked) > len(base) * 1.5  # +3x the session rate over a quarter of the run
    base_ids = {h for ids in base.hash_ids for h in ids}
    extra = [ids for ids in spiked.hash_ids if ids not in set(base.hash_ids)]
    assert extra
    shared = {h for ids in extra for h in ids} & base_ids
    assert shared and all(h < 1_000_000 for h in shared)  # only system-prompt blocks


@pytest.mark.parametrize("spikes, expect", [
    ([{"start_s": 10, "duration_s": 5, "rate_factor": "2"}], "load.spikes[0].rate_factor: expected a number"),
    ([{"start_s": 10, "duration_s": 5, "rate_factor": 0.5}], "load.spikes[0].rate_factor: expected a number in [1, 100]"),
    ([{"start_s": 10, "duration_s": 5}], "load.spikes[0]: expected an object with exactly"),
    ({"start_s": 10}, "load.spikes: expected a list"),
])
def test_bad_spikes_name_the_key(tmp_path, spikes, expect):
    load = {"kind": "poisson", "rate_per_s": 2.0, "duration_s": 60, "input_mean": 100, "output_mean": 20,
            "spikes": spikes}
    with pytest.raises(InputError) as e:
        load_scenario(_scenario(tmp_path, load))
    assert expect in str(e.value)


def test_spikes_count_toward_the_request_budget(tmp_path):
    load = {"kind": "poisson", "rate_per_s": 1000.0, "duration_s": 1000, "input_mean": 100, "output_mean": 20,
            "spikes": [{"start_s": 0, "duration_s": 1000, "rate_factor": 3.0}]}
    with pytest.raises(InputError, match="would generate"):
        load_scenario(_scenario(tmp_path, load))  # 1e6 base requests pass alone; 3e6 with the spike do not
