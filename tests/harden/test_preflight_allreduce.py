"""The preflight all-reduce: a real gloo process group across 2 subprocesses, its bound, and busbw maths."""

from __future__ import annotations

import pytest

from gpufield.harden.preflight import (
    PreflightConfig,
    PreflightContext,
    bus_bandwidth,
    run_preflight,
)
from gpufield.harden.preflight.allreduce import AllReduce
from gpufield.testing import FakeNvml, h200


def test_bus_bandwidth_matches_nccl_tests_definition():
    # nccl-tests doc/PERFORMANCE.md: busbw = algbw * 2(n-1)/n for all-reduce; 8 ranks -> factor 1.75
    alg, bus = bus_bandwidth(2**30, 0.005, 8)
    assert alg == pytest.approx(2**30 / 0.005)
    assert bus == pytest.approx(alg * 1.75)
    assert bus_bandwidth(100, 1.0, 2) == (100.0, 100.0)
    with pytest.raises(ValueError):
        bus_bandwidth(100, 0.0, 2)


def test_real_gloo_allreduce_two_processes(tmp_path):
    cfg = PreflightConfig(allreduce_backend="gloo", allreduce_bytes=2**20, allreduce_iters=3, allreduce_timeout_s=120)
    ctx = PreflightContext(cfg, root=tmp_path, environ={})
    r = run_preflight(only=["comm.allreduce"], context=ctx).results[0]
    assert r.status == "pass", r.reason
    v = r.values
    assert v["backend"] == "gloo" and v["world_size"] == 2 and v["correct"] is True
    assert v["time_s"] > 0
    # busbw for 2 ranks equals algbw (factor 2(n-1)/n = 1), both from the measured time
    assert v["algbw_gb_per_s"] == pytest.approx(2**20 / v["time_s"] / 1e9, rel=1e-2, abs=1e-3)
    assert v["busbw_gb_per_s"] == pytest.approx(v["algbw_gb_per_s"], abs=1e-3)


def test_allreduce_that_cannot_finish_in_time_fails_and_kills_its_ranks(tmp_path):
    cfg = PreflightConfig(allreduce_backend="gloo", allreduce_timeout_s=0.05)
    r = AllReduce().run(PreflightContext(cfg, root=tmp_path, environ={}))
    assert r.status == "fail" and "did not finish within 0.05 s" in r.reason


def test_nccl_needs_two_gpus(tmp_path):
    cfg = PreflightConfig(allreduce_backend="nccl")
    r = AllReduce().run(PreflightContext(cfg, root=tmp_path, environ={}, nvml=FakeNvml([h200(0)])))
    assert r.status == "skip" and "needs >= 2 GPUs" in r.reason
    four = FakeNvml([h200(i) for i in range(4)])
    r = AllReduce().run(PreflightContext(cfg, root=tmp_path, environ={"CUDA_VISIBLE_DEVICES": "2"}, nvml=four))
    assert r.status == "skip" and "found 1" in r.reason


def test_gpu_bandwidth_compared_with_the_catalogue(tmp_path):
    """The comparison step alone (no GPU here): H200 one-direction NVLink = 900/2 GB/s from gpu_specs.json."""
    from gpufield.telemetry import gpu_spec

    ctx = PreflightContext(PreflightConfig(min_busbw_fraction=0.5), root=tmp_path, environ={},
                           nvml=FakeNvml([h200(0), h200(1)]))
    uni = gpu_spec("NVIDIA H200").nvlink_bandwidth_bytes_per_s / 2
    low = AllReduce()._compare(ctx, "x", 0.4 * uni, {})
    assert low.status == "warn" and low.values["busbw_fraction_of_spec"] == pytest.approx(0.4)
    ok = AllReduce()._compare(ctx, "x", 0.8 * uni, {})
    assert ok.status == "pass" and ok.values["spec_key"] == "H200-SXM"
