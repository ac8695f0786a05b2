"""Read-only NVML reader over nvidia-ml-py (``pynvml``): GPU inventory and samples in SI units.

This is the one place (with ``power/actuators/nvml.py``) where NVML's mW, mJ, MHz and ns appear;
everything leaving this module is W, J, Hz, s, bytes and fractions. The reader never calls an NVML
setter (tested against :class:`gpufield.testing.FakeNvml` in spy mode).

Calls and units follow nvidia-ml-py 13.615.71 (``../shared/reference/power.md`` section 4.1 and
``triage.md`` sections 2.3-2.5, 5.4). A field the GPU or driver does not support reads as None.

Example::

    from gpufield.telemetry import NvmlReader
    with NvmlReader() as r:                     # NvmlUnavailableError on a machine without a driver
        for s in r.sample():
            print(s.index, s.power_w, s.sm_clock_hz, s.clock_event_reason_names)
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from gpufield.errors import DependencyError, NvmlUnavailableError, TelemetryError
from gpufield.telemetry._ids import (
    clock_event_reason_table,
    decode_clock_event_reasons,
    normalize_bdf,
)

__all__ = [
    "GpuInfo", "GpuSample", "NvmlReader", "normalize_bdf", "decode_clock_event_reasons",
    "clock_event_reason_table", "nvml_status",
]

@dataclass(frozen=True, kw_only=True, slots=True)
class GpuInfo:
    """Identity of one GPU as NVML enumerates it.

    Attributes:
        index: NVML device index.
        uuid: ``GPU-...``.
        name: product name, e.g. ``"NVIDIA H200"``.
        pci_bdf: ``dddd:bb:dd.f`` lower case (see :func:`normalize_bdf`).
    """

    index: int
    uuid: str
    name: str
    pci_bdf: str


@dataclass(frozen=True, kw_only=True, slots=True)
class GpuSample:
    """One reading of one GPU, in SI units; None where the GPU/driver does not support the field.

    Attributes:
        ts_ns: wall-clock time of the reading, ns since the epoch (UTC).
        index, uuid, name, pci_bdf: identity (see :class:`GpuInfo`).
        power_w: instantaneous power (field 186) if supported, else the ~1 s average.
        power_avg_w: ``nvmlDeviceGetPowerUsage`` (1 s average on Ampere+ except GA100).
        energy_j: energy since driver load (``nvmlDeviceGetTotalEnergyConsumption``).
        sm_clock_hz / mem_clock_hz: current clocks.
        clock_event_reasons: raw bitmask; clock_event_reason_names: decoded names.
        enforced_power_limit_w: min of all limiters (in-band, out-of-band).
        temperature_c / memory_temperature_c: GPU and HBM temperature, degrees C.
        util_gpu / util_mem: fractions 0..1 ("any kernel running", not load).
        mem_used_bytes / mem_total_bytes: framebuffer memory.
        ecc_volatile_corrected / ecc_volatile_uncorrected / ecc_aggregate_corrected /
            ecc_aggregate_uncorrected: ECC error counts.
        remapped_rows_correctable / remapped_rows_uncorrectable: counts; remap_pending /
            remap_failure: flags.
        violation_power_s / violation_thermal_s: cumulative time clocks were held by power/thermal.
        pcie_gen / pcie_width / pcie_max_gen / pcie_max_width: PCIe link state (downtraining check).
        pcie_replay_count: cumulative PCIe replays.
        errors: field -> NVML error name for failures other than "not supported"
            (e.g. ``{"power_avg_w": "NVMLError_GpuIsLost"}``).
    """

    ts_ns: int
    index: int
    uuid: str
    name: str
    pci_bdf: str
    power_w: float | None = None
    power_avg_w: float | None = None
    energy_j: float | None = None
    sm_clock_hz: float | None = None
    mem_clock_hz: float | None = None
    clock_event_reasons: int | None = None
    clock_event_reason_names: tuple[str, ...] = ()
    enforced_power_limit_w: float | None = None
    temperature_c: float | None = None
    memory_temperature_c: float | None = None
    util_gpu: float | None = None
    util_mem: float | None = None
    mem_used_bytes: int | None = None
    mem_total_bytes: int | None = None
    ecc_volatile_corrected: int | None = None
    ecc_volatile_uncorrected: int | None = None
    ecc_aggregate_corrected: int | None = None
    ecc_aggregate_uncorrected: int | None = None
    remapped_rows_correctable: int | None = None
    remapped_rows_uncorrectable: int | None = None
    remap_pending: bool | None = None
    remap_failure: bool | None = None
    violation_power_s: float | None = None
    violation_thermal_s: float | None = None
    pcie_gen: int | None = None
    pcie_width: int | None = None
    pcie_max_gen: int | None = None
    pcie_max_width: int | None = None
    pcie_replay_count: int | None = None
    errors: dict[str, str] = field(default_factory=dict, hash=False)

    def metrics(self) -> dict[str, float]:
        """The numeric readings as ``{metric: value}`` (None omitted; flags as 0/1), for a store."""
        out: dict[str, float] = {}
        for name in self.__slots__:
            if name in _IDENTITY:
                continue
            v = getattr(self, name)
            if isinstance(v, bool):
                out[name] = float(v)
            elif isinstance(v, (int, float)):
                out[name] = float(v)
        return out


_IDENTITY = frozenset({"ts_ns", "index", "uuid", "name", "pci_bdf", "clock_event_reason_names", "errors"})

_UNAVAILABLE = {  # NVML init error name -> human reason
    "NVMLError_LibraryNotFound": "NVML library libnvidia-ml.so.1 not found (no NVIDIA driver installed here)",
    "NVMLError_DriverNotLoaded": "NVIDIA kernel driver is not loaded",
    "NVMLError_LibRmVersionMismatch": "NVML library and kernel driver versions differ (reload the driver or reboot)",
    "NVMLError_NoPermission": "no permission to open the NVIDIA device files (/dev/nvidia*)",
    "NVMLError_InsufficientPower": "a GPU reports insufficient external power",
    "NVMLError_GpuIsLost": "a GPU has fallen off the bus (NVML_ERROR_GPU_IS_LOST)",
}


class NvmlReader:
    """Context manager that opens NVML, enumerates GPUs and samples them (read-only).

    Args:
        nvml: a ``pynvml``-like module; default the real ``pynvml`` (inject ``FakeNvml`` in tests).
        indices: only these device indices (default all).
        clock_ns: wall clock for sample timestamps (default ``time.time_ns``).
        call_timeout_s: deadline of every NVML call in seconds (``nvml`` is wrapped in
            :class:`~gpufield.telemetry.nvml_deadline.BoundedNvml`); None = no deadline.

    A GPU that NVML counts but cannot open (``NVML_ERROR_GPU_IS_LOST``, ...) is skipped and listed in
    :attr:`unavailable`, so one lost GPU does not hide the others (triage.md section 5.4).

    Raises:
        NvmlUnavailableError: on enter, when there is no driver, no library, no permission, no GPU,
            or no GPU could be opened.
        DependencyError: nvidia-ml-py is not installed.
        NvmlTimeoutError: (with ``call_timeout_s``) an NVML call missed its deadline, here or in
            :meth:`sample` / :meth:`health`.
    """

    def __init__(self, nvml: ModuleType | Any | None = None, *, indices: Sequence[int] | None = None,
                 clock_ns: Callable[[], int] = time.time_ns, call_timeout_s: float | None = None) -> None:
        self._nvml = nvml
        self._call_timeout_s = call_timeout_s
        self._indices = None if indices is None else tuple(indices)
        self._clock_ns = clock_ns
        self._handles: list[tuple[GpuInfo, Any]] = []
        self._open = False
        self.driver_version: str | None = None
        #: ``(index, NVML error name)`` of GPUs NVML counts but could not open (e.g. ``NVMLError_GpuIsLost``)
        self.unavailable: list[tuple[int, str]] = []

    def __enter__(self) -> NvmlReader:
        nv = self._nvml if self._nvml is not None else _import_pynvml()
        if self._call_timeout_s is not None and type(nv).__name__ != "BoundedNvml":
            from gpufield.telemetry.nvml_deadline import BoundedNvml

            nv = BoundedNvml(nv, timeout_s=self._call_timeout_s)
        self._nvml = nv
        try:
            nv.nvmlInit()
        except nv.NVMLError as e:
            name = type(e).__name__
            raise NvmlUnavailableError(_UNAVAILABLE.get(name, f"nvmlInit failed: {name}: {e}")) from e
        self._open = True
        try:
            self.driver_version = _text(self._try(nv.nvmlSystemGetDriverVersion)[0])
            count = nv.nvmlDeviceGetCount()
            if count == 0:
                raise NvmlUnavailableError("NVML is loaded but sees no NVIDIA GPU")
            wanted = range(count) if self._indices is None else self._indices
            for i in wanted:
                if not 0 <= i < count:
                    raise NvmlUnavailableError(f"GPU index {i} requested but NVML sees {count} GPU(s)")
                try:
                    h = nv.nvmlDeviceGetHandleByIndex(i)
                    bdf = normalize_bdf(_text(nv.nvmlDeviceGetPciInfo(h).busId))
                    info = GpuInfo(index=i, uuid=_text(nv.nvmlDeviceGetUUID(h)),
                                   name=_text(nv.nvmlDeviceGetName(h)), pci_bdf=bdf)
                except nv.NVMLError as e:  # one lost/unreachable GPU must not hide the others
                    if isinstance(e, nv.NVMLError_Uninitialized):
                        raise
                    self.unavailable.append((i, type(e).__name__))
                    continue
                self._handles.append((info, h))
            if not self._handles:
                lost = ", ".join(f"GPU {i}: {err}" for i, err in self.unavailable)
                raise NvmlUnavailableError(f"no GPU could be opened ({lost})")
        except nv.NVMLError as e:
            self.close()
            raise NvmlUnavailableError(_UNAVAILABLE.get(type(e).__name__, f"enumerating GPUs failed: {e}")) from e
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Shut NVML down (idempotent)."""
        if self._open:
            self._open = False
            try:
                self._nvml.nvmlShutdown()
            except self._nvml.NVMLError:
                pass
            if type(self._nvml).__name__ == "BoundedNvml":
                self._nvml.close()  # stop its worker thread

    @property
    def gpus(self) -> list[GpuInfo]:
        """The enumerated GPUs, index order."""
        return [info for info, _h in self._handles]

    def _try(self, fn: Callable[..., Any], *args: Any) -> tuple[Any, str | None]:
        """Call ``fn``; ``(value, None)``, or ``(None, error-name)`` (``None`` name for not-supported)."""
        nv = self._nvml
        try:
            return fn(*args), None
        except nv.NVMLError as e:
            quiet = (nv.NVMLError_NotSupported, nv.NVMLError_FunctionNotFound)
            return None, (None if isinstance(e, quiet) else type(e).__name__)

    def sample(self) -> list[GpuSample]:
        """Read every enumerated GPU once.

        Returns:
            One :class:`GpuSample` per GPU, index order. Never raises for an unsupported or failing
            field: the field is None and failures other than not-supported land in ``errors``.

        Raises:
            TelemetryError: the reader is not open.
        """
        if not self._open:
            raise TelemetryError("NvmlReader.sample() called outside its 'with' block")
        return [self._sample_one(info, h) for info, h in self._handles]

    def _sample_one(self, info: GpuInfo, h: Any) -> GpuSample:
        nv = self._nvml
        errors: dict[str, str] = {}
        ts_ns = self._clock_ns()

        def get(key: str, fn_name: str, *args: Any) -> Any:
            fn = getattr(nv, fn_name, None)
            if fn is None:  # an old nvidia-ml-py without this call
                return None
            value, err = self._try(fn, h, *args)
            if err is not None:
                errors[key] = err
            return value

        fv = self._fields(h, errors)
        power_avg_mw = get("power_avg_w", "nvmlDeviceGetPowerUsage")
        power_mw = fv.get(nv.NVML_FI_DEV_POWER_INSTANT, power_avg_mw)
        energy_mj = get("energy_j", "nvmlDeviceGetTotalEnergyConsumption")
        reasons = get("clock_event_reasons", "nvmlDeviceGetCurrentClocksEventReasons")
        if reasons is None and "clock_event_reasons" not in errors:
            reasons = get("clock_event_reasons", "nvmlDeviceGetCurrentClocksThrottleReasons")
        sm = get("sm_clock_hz", "nvmlDeviceGetClockInfo", nv.NVML_CLOCK_SM)
        mem = get("mem_clock_hz", "nvmlDeviceGetClockInfo", nv.NVML_CLOCK_MEM)
        util = get("util_gpu", "nvmlDeviceGetUtilizationRates")
        meminfo = get("mem_used_bytes", "nvmlDeviceGetMemoryInfo")
        rows = get("remapped_rows_correctable", "nvmlDeviceGetRemappedRows")
        v_pow_ns = fv.get(nv.NVML_FI_DEV_PERF_POLICY_POWER)
        v_th_ns = fv.get(nv.NVML_FI_DEV_PERF_POLICY_THERMAL)
        if v_pow_ns is None:
            v = get("violation_power_s", "nvmlDeviceGetViolationStatus", nv.NVML_PERF_POLICY_POWER)
            v_pow_ns = None if v is None else v.violationTime
        if v_th_ns is None:
            v = get("violation_thermal_s", "nvmlDeviceGetViolationStatus", nv.NVML_PERF_POLICY_THERMAL)
            v_th_ns = None if v is None else v.violationTime
        ecc = {}
        for key, et, ct in (("ecc_volatile_corrected", 0, 0), ("ecc_volatile_uncorrected", 1, 0),
                            ("ecc_aggregate_corrected", 0, 1), ("ecc_aggregate_uncorrected", 1, 1)):
            ecc[key] = get(key, "nvmlDeviceGetTotalEccErrors", et, ct)
        limit_mw = get("enforced_power_limit_w", "nvmlDeviceGetEnforcedPowerLimit")
        temp = get("temperature_c", "nvmlDeviceGetTemperature", nv.NVML_TEMPERATURE_GPU)
        return GpuSample(
            ts_ns=ts_ns, index=info.index, uuid=info.uuid, name=info.name, pci_bdf=info.pci_bdf,
            power_w=_scale(power_mw, 1e-3), power_avg_w=_scale(power_avg_mw, 1e-3),
            energy_j=_scale(energy_mj, 1e-3), sm_clock_hz=_scale(sm, 1e6), mem_clock_hz=_scale(mem, 1e6),
            clock_event_reasons=reasons,
            clock_event_reason_names=() if reasons is None else decode_clock_event_reasons(reasons),
            enforced_power_limit_w=_scale(limit_mw, 1e-3),
            temperature_c=None if temp is None else float(temp),
            memory_temperature_c=_scale(fv.get(nv.NVML_FI_DEV_MEMORY_TEMP), 1.0),
            util_gpu=None if util is None else util.gpu / 100.0,
            util_mem=None if util is None else util.memory / 100.0,
            mem_used_bytes=None if meminfo is None else int(meminfo.used),
            mem_total_bytes=None if meminfo is None else int(meminfo.total),
            **ecc,
            remapped_rows_correctable=None if rows is None else int(rows[0]),
            remapped_rows_uncorrectable=None if rows is None else int(rows[1]),
            remap_pending=None if rows is None else bool(rows[2]),
            remap_failure=None if rows is None else bool(rows[3]),
            violation_power_s=_scale(v_pow_ns, 1e-9), violation_thermal_s=_scale(v_th_ns, 1e-9),
            pcie_gen=get("pcie_gen", "nvmlDeviceGetCurrPcieLinkGeneration"),
            pcie_width=get("pcie_width", "nvmlDeviceGetCurrPcieLinkWidth"),
            pcie_max_gen=get("pcie_max_gen", "nvmlDeviceGetMaxPcieLinkGeneration"),
            pcie_max_width=get("pcie_max_width", "nvmlDeviceGetMaxPcieLinkWidth"),
            pcie_replay_count=get("pcie_replay_count", "nvmlDeviceGetPcieReplayCounter"),
            errors=errors,
        )

    def health(self) -> list[Any]:
        """Retired pages, recovery action, NVLink states, ECC mode and processes of every GPU.

        Returns:
            One :class:`gpufield.telemetry.nvml_health.GpuHealth` per GPU, index order.

        Raises:
            TelemetryError: the reader is not open.
        """
        from gpufield.telemetry.nvml_health import read_health

        if not self._open:
            raise TelemetryError("NvmlReader.health() called outside its 'with' block")
        return [read_health(self._nvml, info, h, self._try) for info, h in self._handles]

    def _fields(self, h: Any, errors: dict[str, str]) -> dict[int, int]:
        """Field values in NVML units keyed by field id; absent when unsupported."""
        nv = self._nvml
        ids = [(nv.NVML_FI_DEV_POWER_INSTANT, nv.NVML_POWER_SCOPE_GPU), nv.NVML_FI_DEV_PERF_POLICY_POWER,
               nv.NVML_FI_DEV_PERF_POLICY_THERMAL, nv.NVML_FI_DEV_MEMORY_TEMP]
        values, err = self._try(nv.nvmlDeviceGetFieldValues, h, ids)
        if values is None:
            if err is not None:
                errors["field_values"] = err
            return {}
        out = {}
        for v in values:
            if v.nvmlReturn != nv.NVML_SUCCESS:
                continue
            vt = v.valueType
            out[int(v.fieldId)] = {
                nv.NVML_VALUE_TYPE_DOUBLE: v.value.dVal, nv.NVML_VALUE_TYPE_UNSIGNED_INT: v.value.uiVal,
                nv.NVML_VALUE_TYPE_UNSIGNED_LONG: v.value.ulVal,
                nv.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: v.value.ullVal,
                nv.NVML_VALUE_TYPE_SIGNED_LONG_LONG: v.value.sllVal, nv.NVML_VALUE_TYPE_SIGNED_INT: v.value.siVal,
            }.get(vt, v.value.ullVal)
        return out


def _import_pynvml() -> ModuleType:
    """Import the official ``pynvml`` (nvidia-ml-py); refuse the unofficial pre-12 ``pynvml`` package."""
    from importlib import metadata

    try:
        import pynvml
    except ImportError as e:
        raise DependencyError("NVML bindings missing: pip install nvidia-ml-py==13.615.71") from e
    try:
        metadata.version("nvidia-ml-py")
    except metadata.PackageNotFoundError:
        try:
            old = metadata.version("pynvml")
        except metadata.PackageNotFoundError:
            old = None
        if old is not None and int(old.split(".")[0]) < 12:
            raise DependencyError(
                f"the unofficial 'pynvml' {old} package provides pynvml here; it lacks current NVML calls."
                " pip uninstall pynvml && pip install nvidia-ml-py==13.615.71") from None
    return pynvml


def _scale(value: float | None, factor: float) -> float | None:
    return None if value is None else value * factor


def _text(value: Any) -> str:
    if value is None:
        return ""
    return value.decode() if isinstance(value, bytes) else str(value)


def nvml_status(nvml: ModuleType | Any | None = None) -> str:
    """One line saying whether NVML works here, e.g. for ``gpufield doctor``.

    Args:
        nvml: a ``pynvml``-like module (default the real one).

    Returns:
        ``"NVML ok: driver 580.159.04, 8 GPU(s): 8x NVIDIA H200"`` or
        ``"NVML unavailable: <reason>"``. Never raises for an unavailable NVML.
    """
    try:
        with NvmlReader(nvml) as r:
            names: dict[str, int] = {}
            for g in r.gpus:
                names[g.name] = names.get(g.name, 0) + 1
            kinds = ", ".join(f"{n}x {name}" for name, n in names.items())
            return f"NVML ok: driver {r.driver_version or '?'}, {len(r.gpus)} GPU(s): {kinds}"
    except (NvmlUnavailableError, DependencyError) as e:
        return f"NVML unavailable: {e}"
