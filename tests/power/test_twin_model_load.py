"""Cost model (MoE expert formula, parameter split) and load generators (Mooncake format, sessions)."""

from __future__ import annotations

import numpy as np
import pytest

from gpufield.errors import InputError
from gpufield.power.scenario import bundled_scenarios, load_scenario
from gpufield.power.twin.engine import prefix_new_tokens
from gpufield.power.twin.load import agentic_sessions, poisson, read_mooncake
from gpufield.power.twin.model import EngineSpec, ModelSpec


def _qwen480() -> ModelSpec:
    return load_scenario("moe-agentic-b200").model


def test_expected_experts_touched_matches_monte_carlo_routing():
    m = _qwen480()
    rng = np.random.default_rng(0)
    for b in (1, 8, 64):
        # each token picks top_k distinct experts uniformly (the formula's assumption)
        touched = [len({e for _ in range(b) for e in rng.choice(m.n_experts, m.top_k, replace=False)})
                   for _ in range(300)]
        assert float(m.experts_touched(b)) == pytest.approx(np.mean(touched), rel=0.03)
    # power.md 1.3: 160 experts, top-8, batch 64 -> ~154 experts (~96%)
    assert float(m.experts_touched(64)) == pytest.approx(154, abs=1)


def test_moe_parameter_split_reproduces_total_and_active():
    m = _qwen480()
    assert m.dense_params + m.expert_params == pytest.approx(480e9)
    assert m.dense_params + m.expert_params * m.top_k / m.n_experts == pytest.approx(35e9)
    # KV bytes per token: 2 (K,V) x 62 layers x 8 KV heads x 128 x 1 byte (fp8 cache)
    assert m.kv_bytes_per_token == 2 * 62 * 8 * 128 * 1


def test_decode_weight_bytes_per_gpu_match_the_design_note():
    # power.md 1.3: at b=64 a TP4 lane reads ~115 GB of FP8 weights per GPU per step
    m = _qwen480()
    assert float(m.weight_bytes(64)) / 4 / 1e9 == pytest.approx(115, rel=0.03)


def test_dense_model_streams_all_weights_every_step():
    m = load_scenario("dense-agentic-b200").model
    assert m.expert_params == 0 and float(m.weight_bytes(1)) == float(m.weight_bytes(256))


def test_modelspec_rejects_inconsistent_counts():
    with pytest.raises(ValueError, match="active_params"):
        ModelSpec(name="x", total_params=1e9, active_params=2e9, n_layers=1, n_q_heads=1, n_kv_heads=1, head_dim=1)


def test_read_mooncake_real_format_and_errors(tmp_path):
    p = tmp_path / "trace.jsonl"
    p.write_text('{"timestamp": 27482, "input_length": 6955, "output_length": 52, "hash_ids": [46, 47, 48]}\n'
                 '{"timestamp": 0, "input_length": 1024, "output_length": 8, "hash_ids": [46, 47]}\n')
    w = read_mooncake(p)
    assert list(w.arrival_s) == [0.0, 27.482]
    assert list(w.input_tokens) == [1024, 6955] and w.hash_ids[1] == (46, 47, 48)
    new = prefix_new_tokens(w, EngineSpec())
    assert list(new) == [1024, 6955 - 2 * 512]  # second request reuses the two cached blocks
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"timestamp": 1, "input_length": 5, "output_length": 1}\n{"timestamp": 2}\n')
    with pytest.raises(InputError) as e:
        read_mooncake(bad)
    assert e.value.line == 2 and "input_length" in str(e.value)


def test_agentic_sessions_grow_context_and_reuse_prefixes():
    w = agentic_sessions(session_rate_per_s=0.5, duration_s=120, turns_mean=6, system_prompt_tokens=4096,
                         first_input_mean=2000, tool_output_mean=1000, output_mean=200, tool_gap_mean_s=2.0,
                         itl_guess_s=0.03, seed=3)
    assert np.all(np.diff(w.arrival_s) >= 0)
    new = prefix_new_tokens(w, EngineSpec())
    hit_rate = 1 - new.sum() / w.input_tokens.sum()
    assert hit_rate > 0.5  # multi-turn agents re-send their context
    p = poisson(rate_per_s=2.0, duration_s=200, input_mean=1000, output_mean=100, seed=1)
    assert len(p) / 200 == pytest.approx(2.0, rel=0.15)
    assert prefix_new_tokens(p, EngineSpec()).sum() == p.input_tokens.sum()  # no reuse


def test_bundled_scenarios_load_and_unknown_names_fail():
    assert {"moe-agentic-b200", "dense-agentic-b200"} <= set(bundled_scenarios())
    with pytest.raises(InputError, match="unknown scenario"):
        load_scenario("nope")
