"""Run each read-only NVML call the twin probe uses in its own child process; print which ones crash.

Prints one JSON line: {"crashed": [names], "results": {name: "ok"|"error: ..."|"signal N"}}.
"""
import json, subprocess, sys

STEPS = {
    "power": "n.nvmlDeviceGetPowerUsage(h)",
    "energy": "n.nvmlDeviceGetTotalEnergyConsumption(h)",
    "clock": "n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM)",
    "temp": "n.nvmlDeviceGetTemperature(h, n.NVML_TEMPERATURE_GPU)",
    "reasons": "n.nvmlDeviceGetCurrentClocksEventReasons(h)",
    "util": "n.nvmlDeviceGetUtilizationRates(h)",
    "fieldvalues": "n.nvmlDeviceGetFieldValues(h, [(186, 0)])",
    "gpm_support": "n.nvmlGpmQueryDeviceSupport(h)",
    "gpm_alloc": "s=n.nvmlGpmSampleAlloc(); n.nvmlGpmSampleFree(s)",
    "gpm_get": "s=n.nvmlGpmSampleAlloc(); n.nvmlGpmSampleGet(h, s); n.nvmlGpmSampleFree(s)",
    "gpm_metrics": ("import time\ns1=n.nvmlGpmSampleAlloc(); s2=n.nvmlGpmSampleAlloc(); n.nvmlGpmSampleGet(h, s1); time.sleep(0.2); "
                    "n.nvmlGpmSampleGet(h, s2)\nmg=n.c_nvmlGpmMetricsGet_t(); mg.version=n.NVML_GPM_METRICS_GET_VERSION; "
                    "mg.numMetrics=2; mg.sample1=s1; mg.sample2=s2; mg.metrics[0].metricId=2; mg.metrics[1].metricId=10\n"
                    "r=n.nvmlGpmMetricsGet(mg); print([(m.metricId, int(m.nvmlReturn), m.value) for m in r.metrics[:2]])"),
}
res, crashed = {}, []
for name, code in STEPS.items():
    src = f"import pynvml as n\nn.nvmlInit()\nh=n.nvmlDeviceGetHandleByIndex(0)\n{code}\nprint('ok')"
    p = subprocess.run([sys.executable, "-X", "faulthandler", "-c", src], capture_output=True, text=True, timeout=30)
    if p.returncode < 0:
        res[name] = f"signal {-p.returncode}: {p.stderr[-300:]}"; crashed.append(name)
    elif p.returncode:
        res[name] = "error: " + p.stderr.strip().splitlines()[-1][:200]
    else:
        res[name] = "ok " + p.stdout.strip()[:200]
print(json.dumps({"crashed": crashed, "results": res}, indent=1))
