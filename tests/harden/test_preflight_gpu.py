"""GPU checks of preflight against the fake NVML: each fault the fake is given is found, healthy GPUs pass.

The fake (``gpufield.testing.FakeNvml``) returns pynvml's own types and error codes; the expected
outcomes follow NVIDIA's memory-error semantics and the clock-event bit table (triage.md 2.3-2.5).
"""

from __future__ import annotations

import time

import pynvml
import pytest

from gpufield.harden.preflight import PreflightConfig, PreflightContext, run_preflight
from gpufield.testing import FakeGpu, FakeNvml, h100, h200


def _run(nv, tmp_path, *, only=("gpu",), **cfg):
    ctx = PreflightContext(PreflightConfig(**cfg), root=tmp_path, environ={}, nvml=nv)
    rep = run_preflight(only=only, context=ctx)
    return {r.name: r for r in rep.results}, rep


def test_healthy_eight_h200_pass_every_gpu_check(tmp_path):
    nv = FakeNvml.spy([h200(i) for i in range(8)])
    res, rep = _run(nv, tmp_path, expected_gpu_count=8, expected_gpu_model="H200", expected_nvlinks=18)
    assert {n: r.status for n, r in res.items()} == {
        "gpu.visible": "pass", "gpu.ecc": "pass", "gpu.row_remap": "pass", "gpu.retired_pages": "pass",
        "gpu.pcie_link": "pass", "gpu.nvlink": "pass", "gpu.clock_events": "pass", "gpu.processes": "pass"}
    assert res["gpu.visible"].values["count"] == 8
    assert res["gpu.visible"].values["driver_version"] == "580.159.04"
    assert sum(g["up"] for g in res["gpu.nvlink"].values["gpus"]) == 8 * 18
    assert rep.status == "pass" and rep.exit_code() == 0 and not rep.nvml_wedged
    assert nv.setter_calls == []  # read-only


def test_count_and_model_mismatch_fail(tmp_path):
    res, _ = _run(FakeNvml([h200(0), h200(1)]), tmp_path, only=("gpu.visible",), expected_gpu_count=4)
    assert res["gpu.visible"].status == "fail" and "sees 2 GPU(s), expected 4" in res["gpu.visible"].reason
    res, _ = _run(FakeNvml([h200(0), h100(1)]), tmp_path, only=("gpu.visible",), expected_gpu_model="H200")
    r = res["gpu.visible"]
    assert r.status == "fail" and r.severity == "critical" and "GPU 1: NVIDIA H100 80GB HBM3" in r.reason


def test_lost_gpu_fails_visible(tmp_path):
    lost = h200(1, errors={"nvmlDeviceGetHandleByIndex": pynvml.NVML_ERROR_GPU_IS_LOST})
    res, _ = _run(FakeNvml([h200(0), lost]), tmp_path, only=("gpu.visible",))
    r = res["gpu.visible"]
    assert r.status == "fail" and "GPU 1: NVMLError_GpuIsLost" in r.reason
    assert r.values["count"] == 2 and r.values["opened"] == 1


def test_ecc_volatile_fails_aggregate_warns(tmp_path):
    # (error type, counter type): UNCORRECTED=1; VOLATILE=0, AGGREGATE=1 (nvml.h)
    nv = FakeNvml([h200(0), h200(1, ecc={(1, 0): 3, (1, 1): 3})])
    res, _ = _run(nv, tmp_path, only=("gpu.ecc",))
    r = res["gpu.ecc"]
    assert r.status == "fail" and "GPU 1: 3" in r.reason
    assert r.values["gpus"][1]["volatile_uncorrected"] == 3 and r.values["gpus"][0]["volatile_uncorrected"] == 0
    res, _ = _run(FakeNvml([h200(0, ecc={(1, 1): 2})]), tmp_path, only=("gpu.ecc",))
    assert res["gpu.ecc"].status == "warn" and "lifetime" in res["gpu.ecc"].reason
    res, _ = _run(FakeNvml([h200(0, ecc_mode=(0, 0))]), tmp_path, only=("gpu.ecc",))
    assert res["gpu.ecc"].status == "warn" and "ECC is disabled on GPU 0" in res["gpu.ecc"].reason


@pytest.mark.parametrize(("rows", "action", "want"), [
    ((2, 0, 1, 0), 0, "row remap pending on GPU 0"),
    ((0, 8, 0, 1), 0, "row remapping failed on GPU 0"),
    ((0, 0, 0, 0), 1, "driver asks for recovery (GPU 0: gpu_reset)"),
])
def test_row_remap_pending_failure_and_recovery_action_fail(tmp_path, rows, action, want):
    res, _ = _run(FakeNvml([h200(0, remapped_rows=rows, recovery_action=action)]), tmp_path, only=("gpu.row_remap",))
    assert res["gpu.row_remap"].status == "fail" and want in res["gpu.row_remap"].reason


def _v100(**kw):  # pre-Ampere: pages are retired, rows are not remapped
    return FakeGpu(name="Tesla V100-SXM2-32GB", unsupported={"nvmlDeviceGetRemappedRows"}, **kw)


def test_retired_pages_pending_on_a_pre_ampere_gpu(tmp_path):
    dbe = pynvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR
    g = _v100(retired_pages={dbe: [0x1000, 0x2000]}, retired_pages_pending=pynvml.NVML_FEATURE_ENABLED)
    res, _ = _run(FakeNvml([g]), tmp_path, only=("gpu.retired_pages",))
    r = res["gpu.retired_pages"]
    assert r.status == "fail" and r.values["gpus"][0] == {"index": 0, "sbe": 0, "dbe": 2, "pending": True}
    sbe = pynvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS
    res, _ = _run(FakeNvml([_v100(retired_pages={sbe: list(range(61))})]), tmp_path,
                  only=("gpu.retired_pages", "gpu.row_remap"))
    assert res["gpu.retired_pages"].status == "warn"
    assert res["gpu.row_remap"].status == "skip"  # the V100 has no row remapper


def test_retired_pages_skip_when_unsupported(tmp_path):
    unsup = {"nvmlDeviceGetRetiredPages", "nvmlDeviceGetRetiredPagesPendingStatus"}
    res, _ = _run(FakeNvml([h200(0, unsupported=unsup)]), tmp_path, only=("gpu.retired_pages",))
    assert res["gpu.retired_pages"].status == "skip" and "gpu.row_remap" in res["gpu.retired_pages"].reason


@pytest.mark.parametrize(("bits", "status", "named"), [
    (pynvml.nvmlClocksEventReasonHwSlowdown, "fail", "hw_slowdown"),
    (pynvml.nvmlClocksEventReasonHwThermalSlowdown, "fail", "hw_thermal_slowdown"),
    (pynvml.nvmlClocksEventReasonHwPowerBrakeSlowdown, "fail", "hw_power_brake_slowdown"),
    (pynvml.nvmlClocksEventReasonSwThermalSlowdown, "warn", "sw_thermal_slowdown"),
    (pynvml.nvmlClocksEventReasonSwPowerCap, "pass", None),
])
def test_clock_event_bits(tmp_path, bits, status, named):
    nv = FakeNvml([h200(0), h200(1, extra_clock_event_reasons=bits)])
    res, _ = _run(nv, tmp_path, only=("gpu.clock_events",))
    r = res["gpu.clock_events"]
    assert r.status == status
    assert r.values["gpus"][1]["mask"] & bits
    if named:
        assert f"GPU 1 {named}" in r.reason and "GPU 0" not in r.reason


def test_pcie_width_downgrade_warns_and_idle_gen_drop_does_not(tmp_path):
    res, _ = _run(FakeNvml([h200(0), h200(1, pcie_width=8)]), tmp_path, only=("gpu.pcie_link",))
    assert res["gpu.pcie_link"].status == "warn" and "GPU 1 x8 of x16" in res["gpu.pcie_link"].reason
    idle = FakeNvml([h200(0, pcie_gen=1)])  # load 0: the idle bit is set, gen 1 is power saving
    res, _ = _run(idle, tmp_path, only=("gpu.pcie_link",))
    assert res["gpu.pcie_link"].status == "pass" and "while idle" in res["gpu.pcie_link"].reason
    busy = FakeNvml([h200(0, pcie_gen=3, load=0.8, util_gpu_pct=90)])
    res, _ = _run(busy, tmp_path, only=("gpu.pcie_link",))
    assert res["gpu.pcie_link"].status == "warn" and "GPU 0 gen 3 of 5" in res["gpu.pcie_link"].reason


def test_nvlink_down_fails_and_pcie_only_skips(tmp_path):
    links = (1,) * 5 + (0,) + (1,) * 12
    res, _ = _run(FakeNvml([h200(0), h200(1, nvlink_states=links)]), tmp_path, only=("gpu.nvlink",))
    r = res["gpu.nvlink"]
    assert r.status == "fail" and "GPU 1 links [5] down" in r.reason
    assert r.values["gpus"][1] == {"index": 1, "up": 17, "down": [5], "error": None}
    res, _ = _run(FakeNvml([h200(0, nvlink_states=())]), tmp_path, only=("gpu.nvlink",))
    assert res["gpu.nvlink"].status == "skip"
    res, _ = _run(FakeNvml([h200(0, nvlink_states=(1,) * 12)]), tmp_path, only=("gpu.nvlink",), expected_nvlinks=18)
    assert res["gpu.nvlink"].status == "fail" and "12 of 18 up" in res["gpu.nvlink"].reason


def test_foreign_process_memory(tmp_path):
    nv = FakeNvml([h200(0), h200(1, processes=[(4242, 30 * 2**30)], mem_used_bytes=30 * 2**30)])
    res, _ = _run(nv, tmp_path, only=("gpu.processes",))
    r = res["gpu.processes"]
    assert r.status == "fail" and "pid 4242 on GPU 1" in r.reason
    assert r.values["gpus"][1]["processes"] == [{"pid": 4242, "used_mib": 30 * 1024.0}]
    small = FakeNvml([h200(0, processes=[(7, 100 * 2**20)], mem_used_bytes=100 * 2**20)])
    assert _run(small, tmp_path, only=("gpu.processes",))[0]["gpu.processes"].status == "pass"
    hidden = FakeNvml([h200(0, mem_used_bytes=20 * 2**30)])  # another container's process is invisible
    assert _run(hidden, tmp_path, only=("gpu.processes",))[0]["gpu.processes"].status == "warn"


def test_no_driver_skips_gpu_checks_unless_gpus_are_expected(tmp_path):
    res, rep = _run(FakeNvml(library_found=False), tmp_path)
    assert {r.status for r in res.values()} == {"skip"}
    assert all(r.reason.startswith("no NVIDIA driver / NVML not found") for r in res.values())
    assert rep.exit_code(strict=True) == 0
    res, rep = _run(FakeNvml(driver_loaded=False), tmp_path, only=("gpu.visible",), expected_gpu_count=8)
    assert res["gpu.visible"].status == "fail" and "kernel driver is not loaded" in res["gpu.visible"].reason
    assert rep.exit_code() == 1


@pytest.fixture
def hanging():
    made = []

    def make(*names, gpus=None):
        nv = FakeNvml(gpus or [h200(0), h200(1)], hang=set(names))
        made.append(nv)
        return nv
    yield make
    for nv in made:
        nv.release()


def test_hanging_nvml_call_fails_within_its_deadline(tmp_path, hanging):
    nv = hanging("nvmlDeviceGetRemappedRows")
    t0 = time.monotonic()
    res, rep = _run(nv, tmp_path, nvml_timeout_s=0.2)
    took = time.monotonic() - t0
    assert res["gpu.visible"].status == "pass"  # enumeration finished before the hang
    msg = "NVML call nvmlDeviceGetRemappedRows did not return within 0.2 s"
    for name in ("gpu.ecc", "gpu.row_remap", "gpu.retired_pages", "gpu.pcie_link", "gpu.nvlink",
                 "gpu.clock_events", "gpu.processes"):
        assert res[name].status == "fail" and res[name].reason == msg, name
    assert rep.nvml_wedged and rep.exit_code() == 1
    assert took < 30  # bounded (generous: the point is that it returns at all)
    # the call after the hang was never queued behind it
    assert [c[0] for c in nv.calls].count("nvmlDeviceGetRemappedRows") == 1


def test_hang_in_nvml_init_fails_gpu_visible(tmp_path, hanging):
    res, rep = _run(hanging("nvmlInit", "nvmlInitWithFlags"), tmp_path, only=("gpu.visible", "gpu.ecc"),
                    nvml_timeout_s=0.1)
    assert res["gpu.visible"].status == "fail"
    assert res["gpu.visible"].reason == "NVML call nvmlInit did not return within 0.1 s"
    assert res["gpu.ecc"].status == "fail" and rep.nvml_wedged


def test_gpu_not_granted_by_the_cgroup_is_not_lost(tmp_path):
    denied = h200(1, errors={"nvmlDeviceGetHandleByIndex": pynvml.NVML_ERROR_NO_PERMISSION})
    res, _ = _run(FakeNvml([h200(0), denied]), tmp_path, only=("gpu.visible",), expected_gpu_count=1)
    r = res["gpu.visible"]
    assert r.status == "pass" and r.values["not_permitted"] == [1] and r.values["lost"] == []


def test_bounded_nvml_forwards_errors_and_constants_and_stays_wedged(hanging):
    from gpufield.errors import NvmlTimeoutError
    from gpufield.telemetry.nvml_deadline import BoundedNvml

    nv = hanging("nvmlDeviceGetTemperature", gpus=[h200(0, unsupported={"nvmlDeviceGetPowerUsage"})])
    b = BoundedNvml(nv, timeout_s=0.1)
    b.nvmlInit()
    h = b.nvmlDeviceGetHandleByIndex(0)
    assert b.NVML_TEMPERATURE_GPU == pynvml.NVML_TEMPERATURE_GPU
    with pytest.raises(pynvml.NVMLError_NotSupported):  # the driver's own error class, through the worker
        b.nvmlDeviceGetPowerUsage(h)
    with pytest.raises(NvmlTimeoutError, match="nvmlDeviceGetTemperature did not return within 0.1 s"):
        b.nvmlDeviceGetTemperature(h, b.NVML_TEMPERATURE_GPU)
    with pytest.raises(NvmlTimeoutError, match="treated as wedged"):
        b.nvmlDeviceGetName(h)  # not queued behind the stuck call
    assert b.nvmlShutdown() is None
    assert [c[0] for c in nv.calls][-1] == "nvmlDeviceGetTemperature"
    with pytest.raises(ValueError):
        BoundedNvml(nv, timeout_s=0)
