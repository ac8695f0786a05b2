"""Run benchmarks/power_twin_probe.py with the NVML calls that crashed in nvml_diag.py replaced by ones that
raise NVMLError(NOT_SUPPORTED), so the probe records them as absent instead of dying (run 72 died with SIGSEGV)."""
import json, runpy, sys
import pynvml

diag = json.load(open(sys.argv[1]))
FN = {"power": ["nvmlDeviceGetPowerUsage"], "energy": ["nvmlDeviceGetTotalEnergyConsumption"],
      "clock": ["nvmlDeviceGetClockInfo"], "temp": ["nvmlDeviceGetTemperature"],
      "reasons": ["nvmlDeviceGetCurrentClocksEventReasons"], "util": ["nvmlDeviceGetUtilizationRates"],
      "fieldvalues": ["nvmlDeviceGetFieldValues"]}
GPM = ["nvmlGpmQueryDeviceSupport"]
off = []
for step in diag["crashed"]:
    off += FN.get(step, GPM)
def _unsupported(*a, **k):
    raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
for name in sorted(set(off)):
    setattr(pynvml, name, _unsupported)
print("probe_safe: disabled", sorted(set(off)), flush=True)
sys.argv = ["benchmarks/power_twin_probe.py"] + sys.argv[2:]
runpy.run_path("benchmarks/power_twin_probe.py", run_name="__main__")
