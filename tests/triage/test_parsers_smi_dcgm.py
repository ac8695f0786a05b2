"""nvidia-smi -q sections, p2p matrices and dcgm-exporter samples (real dumps and scrapes).

Bit meanings of the clock-event mask come from triage.md §2.3 (NVML constants): 0x08 HW
slowdown, 0x20 SW thermal slowdown.
"""

from __future__ import annotations

from pathlib import Path

from _triage_helpers import by_line

DATA = Path(__file__).parent / "data"




def test_full_h800_dump():
    ev = by_line(DATA / "nvidia_smi_q_h800.txt")
    clocks = {e.fields["reason"]: e.fields["active"] for e in ev.values() if e.kind == "clock_event"}
    assert clocks == {"Idle": True, "Applications Clocks Setting": False, "SW Power Cap": False,
                      "HW Slowdown": False, "HW Thermal Slowdown": False, "HW Power Brake Slowdown": False,
                      "Sync Boost": False, "SW Thermal Slowdown": False, "Display Clock Setting": False}
    assert ev[76].fields["reason"] == "Idle"                 # line numbers point at each reason line
    remap = [e for e in ev.values() if e.kind == "row_remap"]
    assert len(remap) == 1 and remap[0].line == 127
    assert {k: remap[0].fields[k] for k in ("correctable", "uncorrectable", "pending", "failure", "banks_max")} == \
        {"correctable": 0, "uncorrectable": 0, "pending": False, "failure": False, "banks_max": 2560}
    assert not [e for e in ev.values() if e.kind == "ecc_counter"]     # all N/A: ECC disabled
    for e in ev.values():
        assert (e.gpu_bdf, e.gpu_uuid, e.gpu_index) == ("0000:18:00.0", "GPU-34bf77d1-c686-6821-79a8-32d326c5039c", 0)


def test_a100_ecc_and_pending_remap():
    ev = by_line(DATA / "nvidia_smi_q_a100_ecc_excerpt.txt")
    ecc = {(e.fields["counter"], e.fields["volatile"]): e.fields["value"] for e in ev.values() if e.kind == "ecc_counter"}
    assert ecc[("Volatile DRAM Correctable", True)] == 177 and ecc[("Aggregate DRAM Correctable", False)] == 177
    assert ecc[("Volatile DRAM Uncorrectable", True)] == 0 and len(ecc) == 8
    (r,) = [e for e in ev.values() if e.kind == "row_remap"]
    assert (r.fields["correctable"], r.fields["pending"], r.fields["failure"], r.fields["banks_max"]) == (1, True, False, 639)
    assert r.severity == "error" and r.gpu_bdf == "0000:10:1c.0"


def test_clocks_event_reasons_new_name_and_counters():
    ev = by_line(DATA / "nvidia_smi_q_performance_new.txt")
    active = [e.fields["reason"] for e in ev.values() if e.fields.get("active")]
    assert active == ["SW Power Cap"]
    counters = {e.fields["reason"]: e.fields["counter_us"] for e in ev.values() if "counter_us" in e.fields}
    assert counters == {"SW Power Capping": 0, "Sync Boost": 0, "SW Thermal Slowdown": 0,
                        "HW Thermal Slowdown": 0, "HW Power Braking": 0}


def test_dcgm_exporter_scrape():
    ev = by_line(DATA / "dcgm_exporter_l4.prom")
    assert len(ev) == 13                                   # one per sample, none for # HELP / # TYPE
    temp = ev[12]
    assert (temp.kind, temp.fields["metric"], temp.fields["value"]) == ("metric_sample", "DCGM_FI_DEV_GPU_TEMP", 31.0)
    assert (temp.gpu_index, temp.gpu_bdf, temp.host) == (0, "0000:31:00.0", "i-030791dc5a37cd257")
    assert temp.gpu_uuid == "GPU-c2f76b33-7953-256e-8f33-1343419b1a1c"
    assert ev[15].fields["value"] == 16.365
    remap = {k: v for e in ev.values() if e.kind == "row_remap" for k, v in e.fields.items() if k != "metric"}
    assert remap == {"uncorrectable": 0, "correctable": 0, "failure": False}


def test_dcgm_throttle_mask_ecc_and_xid():
    ev = by_line(DATA / "dcgm_exporter_throttle_ecc.prom")
    assert ev[3].kind == "clock_event" and ev[3].fields["mask"] == 32 and ev[3].fields["reasons"] == ["sw_thermal_slowdown"]
    assert ev[4].fields["active"] is False and ev[4].fields["reasons"] == []
    assert ev[13].fields["reasons"] == ["hw_slowdown"] and ev[13].severity == "warning"
    assert ev[14].fields["reasons"] == ["sw_thermal_slowdown"]             # DCGM_FI_DEV_CLOCKS_EVENT_REASONS
    assert (ev[7].kind, ev[7].fields["counter"], ev[7].fields["value"], ev[7].gpu_index) == ("ecc_counter", "SBE volatile total", 5, 0)
    assert ev[11].fields["counter"] == "DBE volatile total" and ev[11].severity == "info"
    assert ev[17].fields["value"] == 2.0 and ev[17].severity == "warning"


def test_p2p_matrices_from_corpus(shared_dir):
    ev = by_line(shared_dir / "data/triage-cases/32-p2p-broken-bandwidth-collapse-hang.log")
    rows = {(e.fields["p2p_enabled"], e.gpu_index): e.fields["gb_per_s"] for e in ev.values() if e.kind == "p2p_bandwidth"}
    assert rows[(False, 0)] == [673.20, 13.15, 13.15] and rows[(True, 0)] == [673.49, 2.60, 1.58]
    assert rows[(True, 2)] == [2.12, 1.60, 673.78] and len(rows) == 6
    access = [(e.gpu_index, e.fields["peer"], e.fields["can_access"]) for e in ev.values() if e.kind == "p2p_access"]
    assert access == [(0, 1, True), (0, 2, True)]
