"""NvmlReader against FakeNvml (exact unit conversions), the no-driver path, and the spy."""

from __future__ import annotations

import pynvml
import pytest

from gpufield.errors import InputError, NvmlUnavailableError, TelemetryError
from gpufield.telemetry import (
    NvmlReader,
    clock_event_reason_table,
    decode_clock_event_reasons,
    normalize_bdf,
    nvml_status,
)
from gpufield.testing import FakeNvml, b200, h100, h200


def _reader(nvml):
    return NvmlReader(nvml, clock_ns=lambda: int(round(nvml._clock() * 1e9)))


def test_real_pynvml_without_driver_raises_clean_error():
    # this development machine has nvidia-ml-py but no libnvidia-ml.so.1
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        pass
    else:  # pragma: no cover - only on a GPU host
        pynvml.nvmlShutdown()
        pytest.skip("a real NVIDIA driver is present")
    with pytest.raises(NvmlUnavailableError, match="not found"):
        with NvmlReader():
            pass
    assert nvml_status().startswith("NVML unavailable: ")


@pytest.mark.parametrize(("kw", "match"), [
    ({"driver_loaded": False}, "driver is not loaded"),
    ({"library_found": False}, "libnvidia-ml.so.1 not found"),
    ({"gpus": []}, "sees no NVIDIA GPU"),
])
def test_unavailable_reasons(kw, match):
    with pytest.raises(NvmlUnavailableError, match=match):
        with NvmlReader(FakeNvml(**kw)):
            pass
    assert match in nvml_status(FakeNvml(**kw))


def test_inventory_and_status():
    n = FakeNvml([h200(0), h200(1), b200(2)])
    with NvmlReader(n) as r:
        assert [g.pci_bdf for g in r.gpus] == ["0000:18:00.0", "0000:28:00.0", "0000:38:00.0"]
        assert r.gpus[2].name == "NVIDIA B200" and r.gpus[0].uuid.startswith("GPU-")
        assert r.driver_version == "580.159.04"
    assert n._init_count == 0  # shut down on exit
    assert nvml_status(n) == "NVML ok: driver 580.159.04, 3 GPU(s): 2x NVIDIA H200, 1x NVIDIA B200"
    with NvmlReader(FakeNvml([h200(0), h200(1)]), indices=[1]) as r:
        assert [g.index for g in r.gpus] == [1]
    with pytest.raises(NvmlUnavailableError, match="index 5"):
        with NvmlReader(FakeNvml([h200()]), indices=[5]):
            pass


def test_sample_converts_units_exactly():
    g = h200(0, load=1.0, temperature_c=63, util_gpu_pct=97, util_mem_pct=41, mem_used_bytes=12_345_678_901,
             ecc={(0, 0): 3, (1, 0): 1, (0, 1): 30, (1, 1): 2}, remapped_rows=(2, 1, 1, 0), pcie_gen=4)
    n = FakeNvml([g], read_only=True)
    with _reader(n) as r:
        n.nvmlDeviceGetCount()  # (calls while open are fine)
        g.power_limit_mw = 450_000  # as if an admin capped it out of band of this reader
        n.advance(2.5)
        (s,) = r.sample()
    f, p_mw, reasons = g.operating_point()
    assert s.ts_ns == 2_500_000_000
    assert s.power_w == round(p_mw) / 1000 and s.power_avg_w == s.power_w
    assert s.energy_j == int(p_mw * 2.5) / 1000
    assert s.sm_clock_hz == f * 1_000_000 and s.mem_clock_hz == 3_201_000_000
    assert s.enforced_power_limit_w == 450.0
    assert s.clock_event_reasons == reasons == pynvml.nvmlClocksEventReasonSwPowerCap
    assert s.clock_event_reason_names == ("sw_power_cap",)
    assert s.violation_power_s == 2.5 and s.violation_thermal_s == 0.0
    assert (s.temperature_c, s.memory_temperature_c) == (63.0, 68.0)
    assert (s.util_gpu, s.util_mem) == (0.97, 0.41)
    assert (s.mem_used_bytes, s.mem_total_bytes) == (12_345_678_901, 150_754_820_096)
    assert (s.ecc_volatile_corrected, s.ecc_volatile_uncorrected) == (3, 1)
    assert (s.ecc_aggregate_corrected, s.ecc_aggregate_uncorrected) == (30, 2)
    assert (s.remapped_rows_correctable, s.remapped_rows_uncorrectable, s.remap_pending, s.remap_failure) == (2, 1, True, False)
    assert (s.pcie_gen, s.pcie_width, s.pcie_max_gen) == (4, 16, 5)
    assert s.errors == {}
    assert n.setter_calls == []  # the reader never writes
    m = s.metrics()
    assert m["power_w"] == s.power_w and m["remap_pending"] == 1.0 and "uuid" not in m


def test_instant_power_preferred_and_average_fallback():
    g = h100(0, load=0.5)
    n = FakeNvml([g])
    with _reader(n) as r:
        g.unsupported.add(pynvml.NVML_FI_DEV_POWER_INSTANT)
        g.unsupported.add("nvmlDeviceGetPowerUsage")
        (s,) = r.sample()
        assert s.power_w is None and s.power_avg_w is None
        g.unsupported.discard("nvmlDeviceGetPowerUsage")
        (s,) = r.sample()
        assert s.power_w == s.power_avg_w == n.nvmlDeviceGetPowerUsage(n.nvmlDeviceGetHandleByIndex(0)) / 1000


def test_unsupported_fields_are_none_and_lost_gpu_is_reported():
    g = h100(0, unsupported={"nvmlDeviceGetRemappedRows", "nvmlDeviceGetTotalEccErrors",
                             "nvmlDeviceGetFieldValues", "nvmlDeviceGetCurrentClocksEventReasons"},
             errors={"nvmlDeviceGetTemperature": pynvml.NVML_ERROR_GPU_IS_LOST})
    with NvmlReader(FakeNvml([g])) as r:
        (s,) = r.sample()
    assert s.remapped_rows_correctable is None and s.remap_failure is None
    assert s.ecc_volatile_uncorrected is None
    assert s.clock_event_reasons == pynvml.nvmlClocksEventReasonGpuIdle  # via the old Throttle name
    assert s.violation_power_s == 0.0  # via nvmlDeviceGetViolationStatus when fields are unsupported
    assert s.memory_temperature_c is None
    assert s.temperature_c is None and s.errors == {"temperature_c": "NVMLError_GpuIsLost"}
    assert s.power_w == 70.0  # fell back to GetPowerUsage


def test_sample_outside_with_block():
    with pytest.raises(TelemetryError, match="outside"):
        NvmlReader(FakeNvml()).sample()


@pytest.mark.parametrize(("raw", "bdf"), [
    ("00000000:1B:00.0", "0000:1b:00.0"), (b"00000000:1B:00.0", "0000:1b:00.0"),
    ("0000:1b:00", "0000:1b:00.0"), ("1b:00.0", "0000:1b:00.0"), ("0001:C3:1F.7", "0001:c3:1f.7"),
])
def test_normalize_bdf(raw, bdf):
    assert normalize_bdf(raw) == bdf


@pytest.mark.parametrize("bad", ["", "GPU-123", "1b:00.8", "100000000:1b:00.0", "zz:00.0"])
def test_normalize_bdf_rejects(bad):
    with pytest.raises(InputError, match="PCI bus id"):
        normalize_bdf(bad)


def test_reason_table_matches_pynvml_constants():
    table = clock_event_reason_table()
    for r in table:  # independent oracle: the constants in nvidia-ml-py itself
        assert getattr(pynvml, r["nvml_constant"]) == r["bit"], r
    bits = [r["bit"] for r in table]
    assert bits == sorted(bits) and len(set(bits)) == len(bits)
    assert sum(r["bit"] for r in table if r["nvml_constant"].startswith("nvmlClocksEvent")) == pynvml.nvmlClocksEventReasonAll


def test_decode_reasons():
    assert decode_clock_event_reasons(0) == ()
    assert decode_clock_event_reasons(0x4 | 0x40) == ("sw_power_cap", "hw_thermal_slowdown")
    assert decode_clock_event_reasons(0x1 | 0x1000) == ("gpu_idle", "unknown_0x1000")


def test_lost_gpu_is_skipped_and_listed():
    lost = h200(1, errors={"nvmlDeviceGetHandleByIndex": pynvml.NVML_ERROR_GPU_IS_LOST})
    with NvmlReader(FakeNvml([h200(0), lost, h200(2)])) as r:
        assert [g.index for g in r.gpus] == [0, 2]
        assert r.unavailable == [(1, "NVMLError_GpuIsLost")]
        assert [s.index for s in r.sample()] == [0, 2]
    with pytest.raises(NvmlUnavailableError, match="GPU 0: NVMLError_GpuIsLost"):
        with NvmlReader(FakeNvml([h200(0, errors={"nvmlDeviceGetHandleByIndex": pynvml.NVML_ERROR_GPU_IS_LOST})])):
            pass


def test_reader_is_read_only_under_the_spy():
    n = FakeNvml.spy([h200(0, load=0.7), b200(1)])
    with NvmlReader(n) as r:
        r.sample()
        r.sample()
    names = {c[0] for c in n.calls}
    assert n.setter_calls == [] and "nvmlDeviceGetTotalEnergyConsumption" in names
    with pytest.raises(AssertionError):
        n.nvmlInit()
        n.nvmlDeviceSetPersistenceMode(n.nvmlDeviceGetHandleByIndex(0), 1)


def test_reason_catalogue_names_its_upstream_artifact():
    import hashlib
    import json
    from importlib import metadata, resources

    meta = json.loads(resources.files("gpufield.telemetry").joinpath("data", "clock_event_reasons.json").read_text())["_meta"]
    if metadata.version("nvidia-ml-py") != meta["upstream_version"]:
        pytest.skip("a different nvidia-ml-py is installed; the bit values are still checked above")
    assert hashlib.sha256(open(pynvml.__file__, "rb").read()).hexdigest() == meta["upstream_sha256"]


def test_samples_and_specs_are_hashable():
    from gpufield.telemetry import gpu_spec

    with NvmlReader(FakeNvml([h200()])) as r:
        (s,) = r.sample()
    assert len({s, s, gpu_spec("H200"), gpu_spec("NVIDIA H200")}) == 2
