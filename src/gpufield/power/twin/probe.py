"""Read-only NVML sampling and per-workload aggregation for the twin's H200 power probe.

The GPU script ``benchmarks/power_twin_probe.py`` runs workloads; this module is the part that is
tested on the CPU with the repo's fake NVML: a sampler thread reading every ``interval_s`` (default
50 ms) power (``nvmlDeviceGetPowerUsage``, mW, and the instant-power field 186 where present), the
total energy counter (mJ), SM and memory clocks (MHz), GPU temperature (C), the clock-event
(throttle) reason bits and ``nvmlDeviceGetUtilizationRates``; and, where
``nvmlGpmQueryDeviceSupport`` says the device supports GPM, GPM snapshots from which SM activity,
SM occupancy, DRAM bandwidth utilisation and tensor activity are computed with
``nvmlGpmMetricsGet`` (NVML API reference, "GPM" group:
https://docs.nvidia.com/deploy/nvml-api/group__nvmlGpmFunctions.html). Every call is guarded; a
reading that fails is recorded as absent (``None``) with the error's name, never as zero.

NVML access goes through :class:`ProbeNvml`, an allow-list proxy: the read calls of
:data:`gpufield.power.actuators.dryrun.NVML_READ_CALLS` plus the GPM read calls (sample
alloc/get/free and metric computation touch host buffers and read counters; nothing is set).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gpufield.power.actuators.dryrun import NVML_READ_CALLS

__all__ = ["ProbeNvml", "ProbeSampler", "aggregate_window", "GPM_METRICS"]

#: GPM metric ids (pynvml ``NVML_GPM_METRIC_*``) recorded by the probe, by the name used in its JSON
GPM_METRICS = {"sm_util_pct": 2, "sm_occupancy_pct": 3, "any_tensor_util_pct": 5,
               "hmma_tensor_util_pct": 7, "dram_bw_util_pct": 10}
_GPM_CALLS = frozenset({"nvmlGpmQueryDeviceSupport", "nvmlGpmSampleAlloc", "nvmlGpmSampleGet",
                        "nvmlGpmSampleFree", "nvmlGpmMetricsGet"})
_FI_POWER_INSTANT = 186  # NVML_FI_DEV_POWER_INSTANT


class ProbeNvml:
    """Allow-list proxy of a ``pynvml``-like module for the probe (see the module docstring).

    Raises:
        PermissionError: on any callable ``nvml*`` attribute outside the allow-list.
    """

    def __init__(self, nvml: Any) -> None:
        object.__setattr__(self, "_nvml", nvml)

    def __getattr__(self, name: str) -> Any:
        value = getattr(object.__getattribute__(self, "_nvml"), name)
        if (callable(value) and not isinstance(value, type) and name.startswith("nvml")
                and name not in NVML_READ_CALLS and name not in _GPM_CALLS):
            raise PermissionError(f"{name} is not on the probe's read-only NVML allow-list")
        return value

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("ProbeNvml is immutable")


def _try(errors: dict[str, str], key: str, fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except Exception as e:  # any NVML error (or a refused call) = reading absent
        errors.setdefault(key, type(e).__name__)
        return None


@dataclass
class ProbeSampler:
    """Background NVML sampler of one GPU (use as a context manager).

    Args:
        nvml: a ``pynvml``-like module, already initialised (wrapped here in :class:`ProbeNvml`).
        handle: the device handle.
        interval_s: sampling period (s).
        gpm_every: take a GPM snapshot in the sampler thread every ``gpm_every`` samples (GPM
            metrics need two snapshots; 10 x 50 ms = 0.5 s windows); 0 (default) = never: on the H200
            of run 72 ``nvmlGpmMetricsGet`` called from this thread crashed the process (SIGSEGV),
            so the probe takes GPM snapshots only from its main thread, at window edges.
        clock: monotonic time source in seconds (tests pass the fake NVML's clock).
        use_gpm / use_field_values: ``False`` leaves GPM / the instant-power field out (the probe
            turns them off when a canary subprocess that used them crashed).

    Attributes:
        samples: one dict per tick (keys ``t_s``, ``power_w``, ``power_instant_w``, ``energy_j``,
            ``sm_clock_mhz``, ``mem_clock_mhz``, ``temp_c``, ``reasons``, ``util_gpu_pct``,
            ``util_mem_pct`` and the :data:`GPM_METRICS` names over the last GPM window).
        errors: first error name per reading that failed.
        gpm_supported: whether GPM was reported supported.
    """

    nvml: Any
    handle: Any
    interval_s: float = 0.05
    gpm_every: int = 0
    clock: Any = time.monotonic
    use_gpm: bool = True
    use_field_values: bool = True
    samples: list[dict] = field(default_factory=list)
    errors: dict[str, str] = field(default_factory=dict)
    gpm_supported: bool = False

    def __post_init__(self) -> None:
        if not self.interval_s > 0 or self.gpm_every < 0:
            raise ValueError("interval_s must be > 0 and gpm_every >= 0")
        self.nvml = ProbeNvml(self.nvml)
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        if not self.use_gpm:
            self.errors["gpm_support"] = "disabled"
            return
        sup = _try(self.errors, "gpm_support", self.nvml.nvmlGpmQueryDeviceSupport, self.handle)
        self.gpm_supported = bool(sup is not None and getattr(sup, "isSupportedDevice", 0))

    # --- GPM ------------------------------------------------------------------------------
    def gpm_snapshot(self) -> Any:
        """A GPM sample taken now, or ``None`` (unsupported or failed); free it with :meth:`gpm_free`."""
        if not self.gpm_supported:
            return None
        s = _try(self.errors, "gpm_alloc", self.nvml.nvmlGpmSampleAlloc)
        if s is None:
            return None
        if _try(self.errors, "gpm_get", self.nvml.nvmlGpmSampleGet, self.handle, s) is None:
            self.gpm_free(s)
            return None
        return s

    def gpm_free(self, sample: Any) -> None:
        """Free a GPM sample (``None`` is ignored)."""
        if sample is not None:
            _try(self.errors, "gpm_free", self.nvml.nvmlGpmSampleFree, sample)

    def gpm_metrics(self, s1: Any, s2: Any) -> dict[str, float | None]:
        """GPM metrics between two snapshots; each metric ``None`` where it failed or is absent."""
        out: dict[str, float | None] = {k: None for k in GPM_METRICS}
        if s1 is None or s2 is None:
            return out
        n = self.nvml
        try:
            mg = n.c_nvmlGpmMetricsGet_t()
            mg.version, mg.numMetrics, mg.sample1, mg.sample2 = n.NVML_GPM_METRICS_GET_VERSION, len(GPM_METRICS), s1, s2
            for i, mid in enumerate(GPM_METRICS.values()):
                mg.metrics[i].metricId = mid
        except Exception as e:
            self.errors.setdefault("gpm_metrics", type(e).__name__)
            return out
        res = _try(self.errors, "gpm_metrics", n.nvmlGpmMetricsGet, mg)
        if res is None:
            return out
        for i, k in enumerate(GPM_METRICS):
            m = res.metrics[i]
            if int(m.nvmlReturn) == 0 and np.isfinite(m.value):
                out[k] = float(m.value)
            else:
                self.errors.setdefault(f"gpm_{k}", f"nvmlReturn {int(m.nvmlReturn)}")
        return out

    # --- one tick -------------------------------------------------------------------------
    def read(self) -> dict:
        """One sample (see ``samples``) without the GPM window metrics."""
        n, h, e = self.nvml, self.handle, self.errors
        t = float(self.clock())
        p = _try(e, "power", n.nvmlDeviceGetPowerUsage, h)
        en = _try(e, "energy", n.nvmlDeviceGetTotalEnergyConsumption, h)
        sm = _try(e, "sm_clock", n.nvmlDeviceGetClockInfo, h, n.NVML_CLOCK_SM)
        mem = _try(e, "mem_clock", n.nvmlDeviceGetClockInfo, h, n.NVML_CLOCK_MEM)
        temp = _try(e, "temp", n.nvmlDeviceGetTemperature, h, n.NVML_TEMPERATURE_GPU)
        rs = _try(e, "reasons", n.nvmlDeviceGetCurrentClocksEventReasons, h)
        ut = _try(e, "util", n.nvmlDeviceGetUtilizationRates, h)
        fv = None
        if self.use_field_values:
            fv = _try(e, "power_instant", n.nvmlDeviceGetFieldValues, h, [(_FI_POWER_INSTANT, 0)])
        else:
            e.setdefault("power_instant", "disabled")
        inst = None
        if fv is not None and int(fv[0].nvmlReturn) == 0:
            inst = int(fv[0].value.uiVal) / 1000.0
        elif fv is not None:
            e.setdefault("power_instant", f"nvmlReturn {int(fv[0].nvmlReturn)}")
        return {"t_s": t, "power_w": None if p is None else p / 1000.0,
                "power_instant_w": inst, "energy_j": None if en is None else en / 1000.0,
                "sm_clock_mhz": sm, "mem_clock_mhz": mem, "temp_c": temp, "reasons": rs,
                "util_gpu_pct": None if ut is None else int(ut.gpu),
                "util_mem_pct": None if ut is None else int(ut.memory)}

    def _run(self) -> None:
        threaded_gpm = self.gpm_supported and self.gpm_every > 0
        prev, k = (self.gpm_snapshot() if threaded_gpm else None), 0
        gpm = {name: None for name in GPM_METRICS}
        while not self._stop.is_set():
            t0 = time.monotonic()
            s = self.read()
            k += 1
            if threaded_gpm and k % self.gpm_every == 0:
                cur = self.gpm_snapshot()
                gpm = self.gpm_metrics(prev, cur)
                self.gpm_free(prev)
                prev = cur
            s.update(gpm)
            with self._lock:
                self.samples.append(s)
            self._stop.wait(max(0.0, self.interval_s - (time.monotonic() - t0)))
        self.gpm_free(prev)

    def __enter__(self) -> ProbeSampler:
        self._thread = threading.Thread(target=self._run, name="probe-sampler", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)

    def snapshot(self) -> list[dict]:
        """A copy of the samples so far (thread-safe)."""
        with self._lock:
            return list(self.samples)


def _med(vals: list) -> float | None:
    v = [x for x in vals if x is not None]
    return float(np.median(v)) if v else None


def aggregate_window(samples: list[dict], t0_s: float, t1_s: float) -> dict:
    """Summarise the samples with ``t0_s <= t_s <= t1_s`` (one workload's steady part).

    Returns:
        dict with ``n_samples``; ``power_w_median`` / ``power_w_p05`` / ``power_w_p95``;
        ``power_w_energy`` = energy-counter difference / time between the first and last sample
        in the window (the exact mean over it, ``None`` with fewer than two counter readings);
        medians of ``power_instant_w``, ``sm_clock_mhz``, ``mem_clock_mhz``, ``temp_c``,
        ``util_gpu_pct``, ``util_mem_pct`` and the GPM metrics; ``reasons_any`` (OR of the
        reason bits) and ``reasons_frac`` (``{bit: fraction of samples}``).

    Raises:
        ValueError: ``t1_s < t0_s``.
    """
    if t1_s < t0_s:
        raise ValueError(f"window end {t1_s} before start {t0_s}")
    w = [s for s in samples if t0_s <= s["t_s"] <= t1_s]
    out: dict[str, Any] = {"n_samples": len(w), "t0_s": t0_s, "t1_s": t1_s}
    pw = [s["power_w"] for s in w if s["power_w"] is not None]
    out["power_w_median"] = float(np.median(pw)) if pw else None
    out["power_w_p05"] = float(np.percentile(pw, 5)) if pw else None
    out["power_w_p95"] = float(np.percentile(pw, 95)) if pw else None
    en = [(s["t_s"], s["energy_j"]) for s in w if s["energy_j"] is not None]
    out["power_w_energy"] = ((en[-1][1] - en[0][1]) / (en[-1][0] - en[0][0])
                             if len(en) >= 2 and en[-1][0] > en[0][0] else None)
    for k in ("power_instant_w", "sm_clock_mhz", "mem_clock_mhz", "temp_c", "util_gpu_pct",
              "util_mem_pct", *GPM_METRICS):
        out[f"{k}_median"] = _med([s.get(k) for s in w])
    bits = [s["reasons"] for s in w if s["reasons"] is not None]
    out["reasons_any"] = int(np.bitwise_or.reduce(bits)) if bits else None
    out["reasons_frac"] = ({str(1 << b): sum(1 for r in bits if r >> b & 1) / len(bits)
                            for b in range(64) if any(r >> b & 1 for r in bits)} if bits else {})
    return out
