"""The twin probe's NVML sampler and aggregation on the repo's fake NVML, and the probe's CPU dry run."""

from __future__ import annotations

import importlib.util
import json
import sys
import time
from pathlib import Path

import numpy as np
import pynvml
import pytest

from gpufield.power.twin.probe import GPM_METRICS, ProbeNvml, ProbeSampler, aggregate_window
from gpufield.testing.fake_nvml import FakeNvml, h200

ROOT = Path(__file__).resolve().parents[2]


class _GpmFake(FakeNvml):
    """FakeNvml plus GPM: a sample remembers the fake time it was taken; metric ``id`` over two
    samples is ``id + 10 * (t2 - t1)``, except DRAM bandwidth, reported as failing."""

    def nvmlGpmQueryDeviceSupport(self, handle):
        self._enter("nvmlGpmQueryDeviceSupport", (handle,))
        s = pynvml.c_nvmlGpmSupport_t()
        s.version, s.isSupportedDevice = pynvml.NVML_GPM_SUPPORT_VERSION, 1
        return s

    def nvmlGpmSampleAlloc(self):
        self._enter("nvmlGpmSampleAlloc", ())
        return {"t": None}

    def nvmlGpmSampleGet(self, handle, sample):
        self._enter("nvmlGpmSampleGet", (handle,))
        sample["t"] = self._clock()
        return sample

    def nvmlGpmSampleFree(self, sample):
        self._enter("nvmlGpmSampleFree", ())

    def nvmlGpmMetricsGet(self, mg):
        self._enter("nvmlGpmMetricsGet", ())
        raise TypeError("replaced in the test")  # the real struct cannot hold dict samples


def _read_series(fake, sampler, loads_s):
    """Drive the fake through ``[(load, seconds)]``, one sampler read every 50 ms of fake time."""
    out = []
    for load, dur in loads_s:
        fake.set_load(0, load)
        for _ in range(int(round(dur / 0.05))):
            fake.advance(0.05)
            out.append(sampler.read())
    return out


def test_aggregate_window_matches_the_fake_gpu_power_model():
    fake = FakeNvml([h200(0)])
    fake.nvmlInit()
    h = fake.nvmlDeviceGetHandleByIndex(0)
    s = ProbeSampler(fake, h, clock=fake._clock)
    samples = _read_series(fake, s, [(0.0, 2.0), (1.0, 3.0), (0.0, 1.0)])
    g = fake.gpus[0]
    # independent: the fake's documented toy model P = idle + load*(tdp-idle) at f_max, capped at the limit
    p_load = min(g.idle_power_mw + (g.tdp_mw - g.idle_power_mw), g.enforced_limit_mw) / 1000
    agg = aggregate_window(samples, 2.2, 4.9)
    assert agg["n_samples"] == sum(1 for x in samples if 2.2 <= x["t_s"] <= 4.9) > 50
    assert agg["power_w_energy"] == pytest.approx(p_load, rel=1e-6)
    assert agg["power_w_median"] == pytest.approx(p_load)
    assert agg["sm_clock_mhz_median"] == 1980
    idle = aggregate_window(samples, 0.0, 1.9)
    assert idle["power_w_energy"] == pytest.approx(g.idle_power_mw / 1000, rel=1e-6)
    both = aggregate_window(samples, 1.5, 2.5)
    pw = np.array([x["power_w"] for x in samples if 1.5 <= x["t_s"] <= 2.5])
    assert both["power_w_p05"] == pytest.approx(np.percentile(pw, 5))
    assert both["power_w_p95"] == pytest.approx(np.percentile(pw, 95))
    # clock-event bits: fraction of samples with each bit, as counted here from the raw samples
    bits = [x["reasons"] for x in samples if 1.5 <= x["t_s"] <= 2.5]
    for b, frac in both["reasons_frac"].items():
        assert frac == pytest.approx(sum(1 for r in bits if r & int(b)) / len(bits))
    assert s.errors == {"gpm_support": "NVMLError_NotSupported"} and not s.gpm_supported
    assert agg["sm_util_pct_median"] is None  # absent, never zero
    with pytest.raises(ValueError):
        aggregate_window(samples, 3.0, 2.0)


def test_missing_readings_are_absent_not_zero():
    fake = FakeNvml([h200(0, unsupported={"nvmlDeviceGetTotalEnergyConsumption", "nvmlDeviceGetUtilizationRates"})])
    fake.nvmlInit()
    h = fake.nvmlDeviceGetHandleByIndex(0)
    s = ProbeSampler(fake, h, clock=fake._clock)
    samples = _read_series(fake, s, [(0.5, 1.0)])
    assert all(x["energy_j"] is None and x["util_gpu_pct"] is None for x in samples)
    assert s.errors["energy"] == "NVMLError_NotSupported" and s.errors["util"] == "NVMLError_NotSupported"
    agg = aggregate_window(samples, 0.0, 1.0)
    assert agg["power_w_energy"] is None and agg["util_gpu_pct_median"] is None
    assert agg["power_w_median"] is not None


def test_gpm_metrics_by_id_and_a_failing_metric_is_absent(monkeypatch):
    fake = _GpmFake([h200(0)])
    fake.nvmlInit()
    h = fake.nvmlDeviceGetHandleByIndex(0)
    s = ProbeSampler(fake, h, clock=fake._clock)
    assert s.gpm_supported

    class _Metric:
        def __init__(self):
            self.metricId, self.nvmlReturn, self.value = 0, 0, float("nan")

    class _Get:  # stands for c_nvmlGpmMetricsGet_t, which needs real sample pointers
        def __init__(self):
            self.metrics = [_Metric() for _ in range(8)]

    def metrics_get(mg):
        for m in mg.metrics[:mg.numMetrics]:
            if m.metricId == pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL:
                m.nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED
            else:
                m.value = m.metricId + 10 * (mg.sample2["t"] - mg.sample1["t"])
        return mg

    monkeypatch.setattr(fake, "c_nvmlGpmMetricsGet_t", _Get, raising=False)
    monkeypatch.setattr(fake, "nvmlGpmMetricsGet", metrics_get)
    a = s.gpm_snapshot()
    fake.advance(0.5)
    b = s.gpm_snapshot()
    m = s.gpm_metrics(a, b)
    assert m["dram_bw_util_pct"] is None
    for k, mid in GPM_METRICS.items():
        if k != "dram_bw_util_pct":
            assert m[k] == pytest.approx(mid + 5.0)
    assert "gpm_dram_bw_util_pct" in s.errors
    assert s.gpm_metrics(None, b) == {k: None for k in GPM_METRICS}
    # by default the sampler thread never calls GPM (run 72: SIGSEGV in nvmlGpmMetricsGet from it)
    n0 = sum(1 for name, _ in fake.calls if name.startswith("nvmlGpm"))
    with s:
        for _ in range(20):
            fake.advance(0.05)
            time.sleep(0.005)
    assert sum(1 for name, _ in fake.calls if name.startswith("nvmlGpm")) == n0
    assert s.samples and all(x["sm_util_pct"] is None for x in s.samples)


def test_probe_proxy_allows_reads_and_gpm_and_refuses_setters():
    fake = FakeNvml.spy([h200(0)])
    ro = ProbeNvml(fake)
    ro.nvmlInit()
    h = ro.nvmlDeviceGetHandleByIndex(0)
    assert ro.nvmlDeviceGetPowerUsage(h) > 0
    ro.nvmlGpmQueryDeviceSupport  # noqa: B018 (allowed: attribute access must not raise)
    for name in ("nvmlDeviceSetPowerManagementLimit", "nvmlDeviceSetGpuLockedClocks",
                 "nvmlDevicePowerSmoothingSetState", "nvmlDeviceCreateGpuInstance", "nvmlGpmSetStreamingEnabled"):
        with pytest.raises(PermissionError):
            getattr(ro, name)
    assert fake.setter_calls == []


def test_probe_dry_run_cpu_writes_every_case_with_checks(tmp_path, monkeypatch):
    mod = _load_probe_module(monkeypatch)
    rc = mod.main(["--dry-run-cpu", "--out", str(tmp_path), "--warm-s", "0.05", "--steady-s", "0.25",
                   "--idle-s", "0.2", "--interval-s", "0.02"])
    assert rc == 0
    doc = json.loads((tmp_path / "power_twin_probe.json").read_text())
    names = [c["name"] for c in doc["cases"]]
    assert names == list(mod.SPLIT)
    assert doc["meta"]["settings_unchanged"] and doc["meta"]["note"] == "complete"
    assert [c["rc"] for c in doc["meta"]["canaries"]] == [0]  # the GPM canary ran the sampler (fake NVML) and lived
    assert {c["split"] for c in doc["cases"]} == {"fit", "held_out"}
    for c in doc["cases"]:
        assert c["check"]["ok"], c
        assert c["nvml"]["n_samples"] >= 2 and c["nvml"]["power_w_energy"] is not None
        if c["kind"] == "gemm":  # rates are the counted work over the measured wall time
            p = c["params"]
            assert c["flop_per_s"] == pytest.approx(2 * p["m"] * p["n"] * p["k"] * c["launches"] / c["steady_wall_s"])
    loaded = {c["name"]: c["nvml"]["power_w_energy"] for c in doc["cases"]}
    assert loaded["gemm_8192"] > loaded["idle_ctx"]  # the fake's load follows the workload
    # the watchdog stands down when main() returns: called in-process (as here), a live one would os._exit(124)
    # the whole test session once the wall limit passed (it did, in a CI run of this suite)
    import threading

    for t in [t for t in threading.enumerate() if t.name == "watchdog"]:
        t.join(timeout=5)
        assert not t.is_alive()


def _load_probe_module(monkeypatch):
    spec = importlib.util.spec_from_file_location("power_twin_probe", ROOT / "benchmarks" / "power_twin_probe.py")
    mod = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "power_twin_probe", mod)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("rcs, expect", [
    ({"gpm": 0}, (True, True)),
    ({"gpm": -11, "field": 0}, (False, True)),  # a SIGSEGV with GPM: the probe goes on without it
    ({"gpm": -11, "field": -11, "plain": 0}, (False, False)),
])
def test_canary_crashes_turn_the_crashing_readings_off(monkeypatch, rcs, expect):
    import subprocess

    mod = _load_probe_module(monkeypatch)
    seen = []

    def run(cmd, **kw):
        stage = cmd[cmd.index("--canary") + 1]
        seen.append(stage)
        return subprocess.CompletedProcess(cmd, rcs[stage], stdout="", stderr="Fatal Python error: Segmentation fault")
    monkeypatch.setattr(mod.subprocess, "run", run)
    use_gpm, use_fv, recs = mod._canaries(0.05, fake=False)
    assert (use_gpm, use_fv) == expect
    assert seen == list(rcs) and [r["rc"] for r in recs] == list(rcs.values())
