"""FakeNvml behaves like nvidia-ml-py: real error classes/codes, driver-like setters, spy mode."""

from __future__ import annotations

import pynvml
import pytest

from gpufield.testing import FakeGpu, FakeNvml, b200, h100, h200


@pytest.fixture
def nvml():
    n = FakeNvml([h200(0, load=1.0), h200(1)])
    n.nvmlInit()
    return n


def test_same_names_and_arity_as_pynvml(nvml):
    import inspect

    for name in dir(type(nvml)):
        if name.startswith("nvml"):
            real = getattr(pynvml, name)
            fake_params = list(inspect.signature(getattr(nvml, name)).parameters)
            real_params = list(inspect.signature(real).parameters)
            assert fake_params == real_params, name


def test_uninitialized_raises_real_error():
    n = FakeNvml()
    with pytest.raises(pynvml.NVMLError_Uninitialized) as e:
        n.nvmlDeviceGetCount()
    assert e.value.value == pynvml.NVML_ERROR_UNINITIALIZED


@pytest.mark.parametrize(("kw", "cls"), [
    ({"driver_loaded": False}, pynvml.NVMLError_DriverNotLoaded),
    ({"library_found": False}, pynvml.NVMLError_LibraryNotFound),
])
def test_init_failures(kw, cls):
    with pytest.raises(cls):
        FakeNvml(**kw).nvmlInit()


def test_identity_and_types(nvml):
    h = nvml.nvmlDeviceGetHandleByIndex(1)
    assert nvml.nvmlDeviceGetCount() == 2
    assert nvml.nvmlDeviceGetName(h) == "NVIDIA H200"
    pci = nvml.nvmlDeviceGetPciInfo(h)
    assert isinstance(pci, pynvml.nvmlPciInfo_t)
    assert pci.busId == "00000000:28:00.0" and pci.bus == 0x28  # _PrintableStructure decodes
    assert isinstance(nvml.nvmlDeviceGetMemoryInfo(h), pynvml.c_nvmlMemory_t)
    assert nvml.nvmlDeviceGetHandleByUUID(nvml.nvmlDeviceGetUUID(h)) == h
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        nvml.nvmlDeviceGetHandleByIndex(2)
    with pytest.raises(pynvml.NVMLError_NotFound):
        nvml.nvmlDeviceGetHandleByUUID("GPU-nope")


def test_idle_gpu_reads_probe_values(nvml):
    h = nvml.nvmlDeviceGetHandleByIndex(1)
    assert nvml.nvmlDeviceGetPowerUsage(h) == 80_400
    assert nvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM) == 345
    assert nvml.nvmlDeviceGetCurrentClocksEventReasons(h) == pynvml.nvmlClocksEventReasonGpuIdle
    assert nvml.nvmlDeviceGetCurrentClocksThrottleReasons(h) == pynvml.nvmlClocksThrottleReasonGpuIdle


def test_power_cap_lowers_clock_and_sets_swpowercap(nvml):
    h = nvml.nvmlDeviceGetHandleByIndex(0)
    assert nvml.nvmlDeviceGetPowerUsage(h) == 700_000
    nvml.nvmlDeviceSetPowerManagementLimit(h, 400_000)
    assert nvml.nvmlDeviceGetEnforcedPowerLimit(h) == 400_000
    p = nvml.nvmlDeviceGetPowerUsage(h)
    f = nvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM)
    assert p <= 400_000 and f < 1980
    # the model: P = idle + (tdp-idle)(f/fmax)^3, the highest 15 MHz step under the cap
    assert p == round(80_400 + 619_600 * (f / 1980) ** 3)
    assert 80_400 + 619_600 * ((f + 15) / 1980) ** 3 > 400_000
    assert nvml.nvmlDeviceGetCurrentClocksEventReasons(h) & pynvml.nvmlClocksEventReasonSwPowerCap


@pytest.mark.parametrize("limit", [199_999, 700_001, 0])
def test_out_of_range_limit_is_invalid_argument(nvml, limit):
    h = nvml.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        nvml.nvmlDeviceSetPowerManagementLimit(h, limit)
    assert nvml.nvmlDeviceGetPowerManagementLimit(h) == 700_000


def test_external_limit_wins():
    n = FakeNvml([h200(external_limit_mw=500_000)])
    n.nvmlInit()
    h = n.nvmlDeviceGetHandleByIndex(0)
    n.nvmlDeviceSetPowerManagementLimit(h, 600_000)
    assert n.nvmlDeviceGetPowerManagementLimit(h) == 600_000
    assert n.nvmlDeviceGetEnforcedPowerLimit(h) == 500_000


def test_non_root_gets_no_permission():
    n = FakeNvml([h200()], root=False)
    n.nvmlInit()
    h = n.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(pynvml.NVMLError_NoPermission):
        n.nvmlDeviceSetGpuLockedClocks(h, 1000, 1500)
    assert n.nvmlDeviceGetPowerUsage(h) == 80_400


def test_locked_clocks(nvml):
    h = nvml.nvmlDeviceGetHandleByIndex(0)
    nvml.nvmlDeviceSetGpuLockedClocks(h, 900, 1200)
    assert nvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM) == 1200
    assert nvml.nvmlDeviceGetCurrentClocksEventReasons(h) & pynvml.nvmlClocksEventReasonApplicationsClocksSetting
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        nvml.nvmlDeviceSetGpuLockedClocks(h, 1500, 1200)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):  # mixed symbolic / numeric
        nvml.nvmlDeviceSetGpuLockedClocks(h, pynvml.NVML_CLOCK_LIMIT_ID_TDP, 1500)
    nvml.nvmlDeviceSetGpuLockedClocks(h, 100, 5000)  # clamped into the supported range
    assert nvml.gpus[0].locked_clocks_mhz == (345, 1980)
    nvml.nvmlDeviceSetGpuLockedClocks(h, pynvml.NVML_CLOCK_LIMIT_ID_UNLIMITED, pynvml.NVML_CLOCK_LIMIT_ID_TDP)
    assert nvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM) == 1590
    nvml.nvmlDeviceResetGpuLockedClocks(h)
    assert nvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM) == 1980
    assert nvml.nvmlDeviceGetCurrentClocksEventReasons(h) == 0


def test_memory_and_application_clocks(nvml):
    h = nvml.nvmlDeviceGetHandleByIndex(0)
    assert nvml.nvmlDeviceGetSupportedMemoryClocks(h) == [3201, 2201]
    assert nvml.nvmlDeviceGetSupportedGraphicsClocks(h, 3201)[0] == 1980
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        nvml.nvmlDeviceGetSupportedGraphicsClocks(h, 1234)
    nvml.nvmlDeviceSetMemoryLockedClocks(h, 2201, 2201)
    assert nvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM) == 2201
    nvml.nvmlDeviceResetMemoryLockedClocks(h)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        nvml.nvmlDeviceSetApplicationsClocks(h, 3201, 1981)
    nvml.nvmlDeviceSetApplicationsClocks(h, 2201, 1500)
    assert nvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM) == 2201
    assert nvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM) == 1500
    nvml.nvmlDeviceSetPersistenceMode(h, 1)
    assert nvml.nvmlDeviceGetPersistenceMode(h) == 1
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        nvml.nvmlDeviceSetPersistenceMode(h, 2)


def test_energy_counter_integrates_power_exactly(nvml):
    h = nvml.nvmlDeviceGetHandleByIndex(0)
    e0 = nvml.nvmlDeviceGetTotalEnergyConsumption(h)
    nvml.advance(2.0)  # 700 W for 2 s = 1400 J
    nvml.set_load(0, 0.0)
    nvml.advance(1.0)  # 80.4 W for 1 s
    assert nvml.nvmlDeviceGetTotalEnergyConsumption(h) - e0 == 1_400_000 + 80_400


def test_violation_time_accumulates_while_capped(nvml):
    h = nvml.nvmlDeviceGetHandleByIndex(0)
    nvml.nvmlDeviceSetPowerManagementLimit(h, 300_000)
    nvml.advance(0.5)
    v = nvml.nvmlDeviceGetViolationStatus(h, pynvml.NVML_PERF_POLICY_POWER)
    assert v.violationTime == 500_000_000
    fv = nvml.nvmlDeviceGetFieldValues(h, [pynvml.NVML_FI_DEV_PERF_POLICY_POWER])
    assert fv[0].value.ullVal == 500_000_000


def test_field_values_and_scopes(nvml):
    h = nvml.nvmlDeviceGetHandleByIndex(0)
    fv = nvml.nvmlDeviceGetFieldValues(h, [
        (pynvml.NVML_FI_DEV_POWER_INSTANT, pynvml.NVML_POWER_SCOPE_GPU),
        (pynvml.NVML_FI_DEV_POWER_INSTANT, pynvml.NVML_POWER_SCOPE_MEMORY),
        pynvml.NVML_FI_DEV_POWER_MIN_LIMIT, 12345])
    assert (fv[0].nvmlReturn, fv[0].value.uiVal) == (pynvml.NVML_SUCCESS, 700_000)
    assert fv[1].nvmlReturn == pynvml.NVML_ERROR_NOT_SUPPORTED
    assert fv[2].value.uiVal == 200_000
    assert fv[3].nvmlReturn == pynvml.NVML_ERROR_NOT_SUPPORTED


def test_unsupported_and_injected_errors():
    n = FakeNvml([h100(unsupported={"nvmlDeviceGetRemappedRows"},
                       errors={"nvmlDeviceGetTemperature": pynvml.NVML_ERROR_GPU_IS_LOST})])
    n.nvmlInit()
    h = n.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        n.nvmlDeviceGetRemappedRows(h)
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        n.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU)
    with pytest.raises(pynvml.NVMLError_NotSupported):  # a call the fake does not model
        n.nvmlDeviceGetBoardId(h)


def test_spy_mode_fails_on_any_setter_and_records_calls():
    n = FakeNvml([h200()], read_only=True)
    n.nvmlInit()
    h = n.nvmlDeviceGetHandleByIndex(0)
    n.nvmlDeviceGetPowerUsage(h)
    for call, args in [("nvmlDeviceSetPowerManagementLimit", (h, 500_000)),
                       ("nvmlDeviceResetGpuLockedClocks", (h,)),
                       ("nvmlDeviceSetAPIRestriction", (h, 0, 0))]:  # not modelled: still blocked
        with pytest.raises(AssertionError, match=call):
            getattr(n, call)(*args)
    assert n.gpus[0].power_limit_mw == 700_000
    assert ("nvmlDeviceGetPowerUsage", (0,)) in n.calls
    assert [c[0] for c in n.setter_calls] == [
        "nvmlDeviceSetPowerManagementLimit", "nvmlDeviceResetGpuLockedClocks", "nvmlDeviceSetAPIRestriction"]


def test_b200_preset_clock_table():
    g = b200()
    assert g.graphics_clocks_mhz[0] == 1965 and g.graphics_clocks_mhz[-1] == 120
    assert len(g.graphics_clocks_mhz) == 247  # (1965-120)/7.5 + 1
    with pytest.raises(ValueError):
        FakeGpu(min_limit_mw=500_000, default_limit_mw=400_000)


def test_clock_ids_and_application_clocks(nvml):
    h = nvml.nvmlDeviceGetHandleByIndex(0)
    clk = nvml.nvmlDeviceGetClock
    assert clk(h, pynvml.NVML_CLOCK_SM, pynvml.NVML_CLOCK_ID_CURRENT) == 1980
    assert clk(h, pynvml.NVML_CLOCK_SM, pynvml.NVML_CLOCK_ID_CUSTOMER_BOOST_MAX) == 1980
    assert clk(h, pynvml.NVML_CLOCK_MEM, pynvml.NVML_CLOCK_ID_APP_CLOCK_DEFAULT) == 3201
    nvml.nvmlDeviceSetApplicationsClocks(h, 3201, 1410)
    assert nvml.nvmlDeviceGetApplicationsClock(h, pynvml.NVML_CLOCK_GRAPHICS) == 1410
    assert clk(h, pynvml.NVML_CLOCK_GRAPHICS, pynvml.NVML_CLOCK_ID_APP_CLOCK_TARGET) == 1410
    assert nvml.nvmlDeviceGetDefaultApplicationsClock(h, pynvml.NVML_CLOCK_GRAPHICS) == 1590
    nvml.nvmlDeviceResetApplicationsClocks(h)
    assert nvml.nvmlDeviceGetApplicationsClock(h, pynvml.NVML_CLOCK_GRAPHICS) == 1590
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        clk(h, pynvml.NVML_CLOCK_SM, 99)
