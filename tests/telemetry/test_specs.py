"""GPU spec catalogue: internal consistency, sources, and agreement with the project's H200 probe."""

from __future__ import annotations

import json
import math
from dataclasses import fields

import pytest

from gpufield.errors import InputError
from gpufield.telemetry import GpuSpec, gpu_spec, gpu_specs

NUMERIC = [f.name for f in fields(GpuSpec) if f.name.endswith(("_hz", "_bytes", "_s", "_w", "_count", "_sm"))]


def test_catalogue_has_the_required_skus():
    keys = {s.key for s in gpu_specs()}
    assert {"H100-SXM", "H200-SXM", "B200", "B300", "Rubin"} <= keys
    assert gpu_spec("Rubin").projected and not gpu_spec("H200").projected


@pytest.mark.parametrize(("name", "key"), [
    ("NVIDIA H200", "H200-SXM"), ("NVIDIA H100 80GB HBM3", "H100-SXM"), ("NVIDIA B200", "B200"),
    ("nvidia  b300 sxm6 ac", "B300"), ("NVIDIA B300 SXM6 AC rev2", "B300"), ("h200_sxm", "H200-SXM"),
    ("NVIDIA H100", "H100-SXM"), ("NVIDIA Rubin", "Rubin"),
])
def test_lookup_by_nvml_name(name, key):
    assert gpu_spec(name).key == key


@pytest.mark.parametrize("name", ["NVIDIA H100 PCIe", "NVIDIA H100 NVL", "NVIDIA A100-SXM4-80GB", "",
                                  "NVIDIA H100 CNX", "NVIDIA H100 94GB"])
def test_unknown_or_variant_names_refused(name):
    with pytest.raises(InputError, match="unknown GPU"):
        gpu_spec(name)


def test_unknown_name_error_lists_the_short_keys_users_type():
    with pytest.raises(InputError, match=r"H100-SXM \('NVIDIA H100 80GB HBM3'\).*B300 \('NVIDIA B300'\)"):
        gpu_spec("A100")


@pytest.mark.parametrize("spec", gpu_specs(), ids=lambda s: s.key)
def test_every_entry_is_sourced_and_every_gap_explained(spec):
    assert spec.sources
    for src in spec.sources:
        assert src["url"].startswith(("https://", "file:"))
        assert src["retrieved"][:4].isdigit() or src["retrieved"].startswith("unverified: ")
        assert src["fields"]
    sourced = {f for src in spec.sources for f in src["fields"]} | set(spec.derived)
    for name in NUMERIC:
        value = getattr(spec, name)
        if value is None:
            assert name in spec.notes, f"{spec.key}.{name} is null without a note"
        else:
            assert value > 0, f"{spec.key}.{name}"
            if name not in ("int32_lanes_per_sm",):
                assert name in sourced or name in spec.notes, f"{spec.key}.{name} has no source"
    if spec.projected:
        assert "projected" in spec.notes


@pytest.mark.parametrize("spec", gpu_specs(), ids=lambda s: s.key)
def test_derived_rates_match_their_parts(spec):
    parts = spec.int32_ops_per_s_from_parts
    if parts is not None:
        assert math.isclose(spec.int32_ops_per_s, parts, rel_tol=0.01)
    if "fp32_flops_per_s" in spec.derived:  # 128 FP32 FMA lanes per SM, 2 flop each
        assert math.isclose(spec.fp32_flops_per_s, spec.sm_count * 128 * 2 * spec.max_sm_clock_hz, rel_tol=1e-9)
    # ordering every datasheet shares: FP8 >= BF16 >= FP32, tensor FP64 >= vector FP64
    if None not in (spec.fp8_flops_per_s, spec.bf16_flops_per_s, spec.fp32_flops_per_s):
        assert spec.fp8_flops_per_s >= spec.bf16_flops_per_s >= spec.fp32_flops_per_s
    if None not in (spec.fp64_tensor_flops_per_s, spec.fp64_flops_per_s):
        assert spec.fp64_tensor_flops_per_s >= spec.fp64_flops_per_s
    if None not in (spec.tdp_w, spec.min_power_limit_w):
        assert spec.min_power_limit_w < spec.tdp_w


def test_unverified_fields_are_listed():
    """Fields whose only source was not checked are visible, so a reader knows what to verify."""
    unverified = {(s.key, f) for s in gpu_specs() for src in s.sources
                  if src["retrieved"].startswith("unverified") for f in src["fields"]}
    assert ("B300", "tdp_w") in unverified and ("H200-SXM", "tdp_w") not in unverified
    assert gpu_spec("B300").unverified_fields == ("bf16_flops_per_s", "nvlink_bandwidth_bytes_per_s", "tdp_w")
    assert gpu_spec("H200").unverified_fields == ("bf16_flops_per_s", "fp32_flops_per_s")


def test_hopper_fp64_rates_follow_from_sm_count_and_clock():
    s = gpu_spec("H100-SXM")  # 64 FP64 FMA per SM per clock (vector), twice that on tensor cores
    assert math.isclose(s.fp64_flops_per_s, s.sm_count * 64 * 2 * s.max_sm_clock_hz, rel_tol=0.005)
    assert math.isclose(s.fp64_tensor_flops_per_s, 2 * s.fp64_flops_per_s, rel_tol=0.005)


def test_fp64_md_hardware_table_values():
    """Numbers the fp64 model reads, as fp64.md sections 1.4 / 3.2 state them."""
    assert gpu_spec("B300").hbm_bandwidth_bytes_per_s == 8e12
    assert math.isclose(gpu_spec("B300").int32_ops_per_s, 41.6e12, rel_tol=0.01)
    assert gpu_spec("Rubin").hbm_bandwidth_bytes_per_s == 22e12
    assert gpu_spec("Rubin").int32_ops_per_s == 67e12
    assert gpu_spec("H200").hbm_bandwidth_bytes_per_s == 4.8e12
    assert math.isclose(gpu_spec("H100-SXM").int32_ops_per_s, 16.7e12, rel_tol=0.01)


def test_h200_entry_agrees_with_the_probe(shared_dir):
    probe = json.loads((shared_dir / "reference" / "h200-baseline.json").read_text())
    s = gpu_spec(probe["gpu"])
    assert s.max_sm_clock_hz == probe["max_sm_clock"] * 1e6
    assert s.max_mem_clock_hz == max(probe["supported_mem_clocks"]) * 1e6
    assert s.min_power_limit_w == probe["power_limit_constraints"][0] / 1e3
    assert s.tdp_w == probe["power_limit_constraints"][1] / 1e3 == probe["enforced_limit"] / 1e3
    assert abs(s.idle_power_w - probe["power_mw"] / 1e3) < 0.05
    # measured ceilings lie below the datasheet peaks
    assert probe["bf16_tflops"] * 1e12 < s.bf16_flops_per_s
    assert probe["fp8_tflops"] * 1e12 < s.fp8_flops_per_s
    assert probe["int8_tops"] * 1e12 < s.int8_ops_per_s
    assert probe["fp64_tflops"] * 1e12 < s.fp64_tensor_flops_per_s
    assert probe["copy_tb_s_rw"] * 1e12 < s.hbm_bandwidth_bytes_per_s
