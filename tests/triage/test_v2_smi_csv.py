"""nvidia-smi ``--query-gpu --format=csv`` and NVML sampler CSVs (issue 23): GPU map joins, slowdowns, ECC."""

from __future__ import annotations

from gpufield.triage import analyze
from gpufield.triage.ingest import IngestOptions, ingest

# real output quoted in https://github.com/YoRyan/nuxhash/pull/10 (name, pci.bus, index, uuid)
NUXHASH = """name, pci.bus, index, uuid
GeForce GTX 1060 6GB, 0x01, 0, GPU-f3da2e71-6e43-729a-e3ae-f731ed96d50c
GeForce GTX 1080 Ti, 0x02, 1, GPU-15ea7bf9-1a0e-2d7f-9c62-c28e5ca1aaf1
"""
# the documented --query-gpu field names (nvidia-smi --help-query-gpu) in nvidia-smi's CSV layout
QUERY = """timestamp, index, pci.bus_id, uuid, clocks_event_reasons.hw_slowdown, ecc.errors.uncorrected.volatile.total
2026/03/21 01:30:00.123, 0, 00000000:3B:00.0, GPU-6b2e3b2d-0e2c-7d5a-33e1-d0a6b3f6b0c1, Not Active, 0
2026/03/21 01:30:00.123, 1, 00000000:5E:00.0, GPU-0c1d2e3f-4a5b-6c7d-8e9f-a0b1c2d3e4f5, Active, 2
"""
# an NVML sampler CSV (csv.DictWriter of pynvml values)
NVML = """time_s,host,gpu_uuid,bus_id,power_w,sm_clock_mhz
1774056600.0,node-b,GPU-6b2e3b2d-0e2c-7d5a-33e1-d0a6b3f6b0c1,00000000:3B:00.0,612.5,1980
"""


def test_query_csv_rows_become_gpu_maps_slowdowns_and_ecc(tmp_path):
    (tmp_path / "smi.csv").write_text(NUXHASH + "\n" + QUERY, encoding="utf-8")
    evs = ingest([tmp_path / "smi.csv"], options=IngestOptions(year=2026)).events
    maps = [e for e in evs if e.kind == "gpu_map"]
    assert [(e.gpu_index, e.gpu_uuid, e.gpu_bdf) for e in maps[:2]] == [
        (0, "GPU-f3da2e71-6e43-729a-e3ae-f731ed96d50c", None), (1, "GPU-15ea7bf9-1a0e-2d7f-9c62-c28e5ca1aaf1", None)]
    assert maps[2].gpu_bdf == "0000:3b:00.0" and maps[3].gpu_bdf == "0000:5e:00.0"
    (slow,) = [e for e in evs if e.kind == "clock_event"]
    (ecc,) = [e for e in evs if e.kind == "ecc_counter"]
    assert slow.gpu_bdf == "0000:5e:00.0" and "HW" in slow.fields["reason"]
    assert ecc.fields["value"] == 2 and ecc.fields["volatile"] is True


def test_uuid_only_error_is_blamed_on_the_bus_id_from_the_nvml_csv(tmp_path):
    # a dcgm-exporter sample with dcgm-exporter's default labels (gpu, UUID, device, modelName, Hostname: no bus id)
    (tmp_path / "nvml.csv").write_text(NVML, encoding="utf-8")
    (tmp_path / "dcgm.prom").write_text(
        'DCGM_FI_DEV_XID_ERRORS{gpu="0",UUID="GPU-6b2e3b2d-0e2c-7d5a-33e1-d0a6b3f6b0c1",device="nvidia0",'
        'modelName="NVIDIA H100 80GB HBM3",Hostname="node-b"} 79\n', encoding="utf-8")
    v = analyze([str(tmp_path)]).verdict
    assert v.cls == "GPU_FELL_OFF_BUS" and v.host == "node-b" and v.gpu == "0000:3b:00.0"
