"""A fake of the ``pynvml`` module (nvidia-ml-py 13.615.71) for tests and CPU-only machines.

:class:`FakeNvml` is drop-in where code takes an ``nvml`` module argument: it has the same
function names and signatures as ``pynvml`` for the calls gpufield uses, returns the same types
(the real ctypes structures ``nvmlPciInfo_t``, ``c_nvmlMemory_t``, ``c_nvmlUtilization_t``,
``c_nvmlViolationTime_t``, ``c_nvmlFieldValue_t``), and raises the real ``pynvml.NVMLError``
subclasses with the real codes. Every other attribute (constants such as ``NVML_CLOCK_SM``,
``nvmlClocksEventReasonSwPowerCap``, the error classes) is forwarded from the real module, so
``except nvml.NVMLError_NoPermission`` works the same with either.

Behaviour followed (``../shared/reference/power.md`` section 4, NVML API reference
https://docs.nvidia.com/deploy/nvml-api/group__nvmlDeviceCommands.html):

* every call before ``nvmlInit`` raises ``NVMLError_Uninitialized``; ``nvmlInit`` raises
  ``NVMLError_DriverNotLoaded`` / ``NVMLError_LibraryNotFound`` when configured so;
* setters need root (``root=False`` -> ``NVMLError_NoPermission``);
* ``nvmlDeviceSetPowerManagementLimit`` outside ``LimitConstraints`` -> ``NVMLError_InvalidArgument``;
  the enforced limit is ``min(requested, external_limit_mw)`` (out-of-band SMBPBI cap);
* ``nvmlDeviceSetGpuLockedClocks``: both bounds symbolic (``NVML_CLOCK_LIMIT_ID_*``) or both numeric,
  ``min <= max``, numeric values clamped into the supported graphics-clock range;
* the power model is a small deterministic toy, not physics (the power twin owns physics):
  ``P(f) = idle + load * (tdp - idle) * (f / f_max)^3``; the SM clock is the highest supported
  clock within the locked window whose power fits the enforced limit (reason ``SwPowerCap`` then set);
* time is a fake clock advanced by :meth:`FakeNvml.advance` (or an injected ``clock``); the energy
  counter integrates power exactly between changes; power-cap violation time accumulates in ns.

Spy mode (``read_only=True``): any setter (``nvmlDeviceSet*``, ``nvmlDeviceReset*``,
``nvmlDeviceClear*``, ...) raises ``AssertionError`` so a test fails on the first write.
Every call is recorded in :attr:`FakeNvml.calls` as ``(name, args)`` with handles shown as indices.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pynvml as _pynvml

from gpufield.testing._fake_nvml_device import DeviceCalls, _err
from gpufield.testing._fake_nvml_health import HealthCalls

__all__ = ["FakeGpu", "FakeNvml", "FakeHandle", "SETTER_PREFIXES", "h200", "h100", "b200"]

#: name prefixes of NVML calls that change device state (blocked in read-only/spy mode)
SETTER_PREFIXES = (
    "nvmlDeviceSet", "nvmlDeviceReset", "nvmlDeviceClear", "nvmlDeviceWorkloadPowerProfileSet",
    "nvmlDeviceWorkloadPowerProfileClear", "nvmlDeviceWorkloadPowerProfileUpdate", "nvmlSystemSet",
    "nvmlDeviceModify", "nvmlGpmSet",
)

_SW_POWER_CAP = _pynvml.nvmlClocksEventReasonSwPowerCap
_APP_CLOCKS = _pynvml.nvmlClocksEventReasonApplicationsClocksSetting
_IDLE = _pynvml.nvmlClocksEventReasonGpuIdle


@dataclass(kw_only=True)
class FakeGpu:
    """Configurable state of one fake GPU (mutable: tests change ``load`` or inject errors).

    Units are NVML's own (mW, mJ, MHz, ns) because this object stands for the driver's view.

    Attributes:
        name: NVML product name, e.g. ``"NVIDIA H200"``.
        uuid: ``GPU-...`` string.
        pci_bus_id: NVML form ``"00000000:1B:00.0"`` (8 hex digit domain, upper case).
        tdp_mw / idle_power_mw: power at full load and max clock / at idle.
        load: activity 0..1 that drives the toy power model; 0 means idle (clock parks low).
        min_limit_mw / max_limit_mw / default_limit_mw: ``LimitConstraints`` and default limit.
        power_limit_mw: the limit requested in-band; external_limit_mw: out-of-band cap (SMBPBI).
        mem_clocks_mhz: supported memory clocks, highest first (NVML order).
        graphics_clocks_mhz: supported graphics clocks, highest first.
        idle_sm_clock_mhz: SM clock when ``load == 0``.
        base_clock_mhz: what the symbolic ``NVML_CLOCK_LIMIT_ID_TDP`` resolves to (H100 SXM base 1590 MHz).
        temperature_c, util_gpu_pct, util_mem_pct, mem_total_bytes, mem_used_bytes: readings.
        ecc: ``{(error_type, counter_type): count}``; remapped_rows: ``(corr, unc, pending, failure)``.
        pcie_gen / pcie_width / pcie_max_gen / pcie_max_width: link state.
        retired_pages: ``{cause: [page addresses]}`` (``NVML_PAGE_RETIREMENT_CAUSE_*``);
            retired_pages_pending: ``NVML_FEATURE_ENABLED`` when a retirement awaits a reload.
        extra_clock_event_reasons: bits OR-ed into the modelled reasons (e.g. ``HwSlowdown`` 0x8).
        recovery_action: ``NVML_FI_DEV_GET_GPU_RECOVERY_ACTION`` value (0 none, 1 GPU reset, 2 node reboot...).
        nvlink_states: per-link ``NVML_FEATURE_ENABLED``/``DISABLED``; empty = no NVLink (not supported).
        ecc_mode: ``(current, pending)``; processes: ``[(pid, usedGpuMemory bytes or None)]``.
        unsupported: NVML function names or field ids that answer ``NVML_ERROR_NOT_SUPPORTED``.
        errors: function name -> NVML error code raised on every call (e.g. ``GPU_IS_LOST``).
        workload_profiles: workload power profile id -> priority (``NVML_POWER_PROFILE_*``; empty: the
            ``nvmlDeviceWorkloadPowerProfile*`` calls answer ``NOT_SUPPORTED``, as on Hopper).
        workload_conflicts: id -> ids it conflicts with. requested_profiles: the requested mask's ids;
            the enforced ones are the requested ids not in conflict with a requested id of lower
            priority number (a toy arbitration).
    """

    name: str = "NVIDIA H200"
    uuid: str = "GPU-00000000-0000-0000-0000-000000000000"
    pci_bus_id: str = "00000000:1B:00.0"
    serial: str = "0000000000000"
    tdp_mw: int = 700_000
    idle_power_mw: int = 80_400
    load: float = 0.0
    min_limit_mw: int = 200_000
    max_limit_mw: int = 700_000
    default_limit_mw: int = 700_000
    power_limit_mw: int | None = None
    external_limit_mw: int | None = None
    mem_clocks_mhz: tuple[int, ...] = (3201, 2201)
    graphics_clocks_mhz: tuple[int, ...] = tuple(range(1980, 344, -15))
    idle_sm_clock_mhz: int = 345
    base_clock_mhz: int = 1590
    temperature_c: int = 40
    util_gpu_pct: int = 0
    util_mem_pct: int = 0
    mem_total_bytes: int = 150_754_820_096
    mem_used_bytes: int = 0
    ecc: dict[tuple[int, int], int] = field(default_factory=dict)
    remapped_rows: tuple[int, int, int, int] = (0, 0, 0, 0)
    pcie_gen: int = 5
    pcie_width: int = 16
    pcie_max_gen: int = 5
    pcie_max_width: int = 16
    pcie_replay: int = 0
    persistence_mode: int = 0
    retired_pages: dict[int, list[int]] = field(default_factory=dict)
    retired_pages_pending: int = 0
    extra_clock_event_reasons: int = 0
    recovery_action: int = 0
    nvlink_states: tuple[int, ...] = ()
    ecc_mode: tuple[int, int] = (1, 1)
    processes: list[tuple[int, int | None]] = field(default_factory=list)
    unsupported: set[Any] = field(default_factory=set)
    errors: dict[str, int] = field(default_factory=dict)
    workload_profiles: dict[int, int] = field(default_factory=dict)
    workload_conflicts: dict[int, set[int]] = field(default_factory=dict)
    requested_profiles: set[int] = field(default_factory=set)
    # driver-owned state (changed by setters and the fake clock)
    locked_clocks_mhz: tuple[int, int] | None = None
    locked_mem_clocks_mhz: tuple[int, int] | None = None
    app_clocks_mhz: tuple[int, int] | None = None  # (mem, graphics)
    energy_mj: float = 0.0
    violation_power_ns: int = 0
    violation_thermal_ns: int = 0

    def __post_init__(self) -> None:
        if self.power_limit_mw is None:
            self.power_limit_mw = self.default_limit_mw
        if not (self.min_limit_mw <= self.default_limit_mw <= self.max_limit_mw):
            raise ValueError(
                f"limits must satisfy min({self.min_limit_mw}) <= default({self.default_limit_mw})"
                f" <= max({self.max_limit_mw}) mW")
        if not 0.0 <= self.load <= 1.0:
            raise ValueError(f"load must lie in [0, 1], got {self.load}")

    # --- the driver's derived state ------------------------------------------------------
    @property
    def enforced_limit_mw(self) -> int:
        """min(in-band limit, out-of-band limit) in mW, as NVML's ``EnforcedPowerLimit``."""
        lim = int(self.power_limit_mw)
        return lim if self.external_limit_mw is None else min(lim, self.external_limit_mw)

    def _power_at(self, f_mhz: float) -> float:
        fmax = self.graphics_clocks_mhz[0]
        return self.idle_power_mw + self.load * (self.tdp_mw - self.idle_power_mw) * (f_mhz / fmax) ** 3

    def operating_point(self) -> tuple[int, float, int]:
        """Return ``(sm_clock_mhz, power_mw, clock_event_reasons)`` of the toy model."""
        reasons = self.extra_clock_event_reasons
        if self.locked_clocks_mhz is not None or self.app_clocks_mhz is not None:
            reasons |= _APP_CLOCKS
        if self.load == 0.0:
            return self.idle_sm_clock_mhz, float(self.idle_power_mw), reasons | _IDLE
        lo, hi = self.locked_clocks_mhz or (self.graphics_clocks_mhz[-1], self.graphics_clocks_mhz[0])
        if self.app_clocks_mhz is not None:
            hi = min(hi, self.app_clocks_mhz[1])
        window = [f for f in self.graphics_clocks_mhz if lo <= f <= hi] or [lo]
        f = window[0]
        limit = self.enforced_limit_mw
        for cand in window:  # highest first
            f = cand
            if self._power_at(cand) <= limit:
                break
        power = self._power_at(f)
        if f < window[0]:
            reasons |= _SW_POWER_CAP
        return f, power, reasons

    def mem_clock_mhz(self) -> int:
        """Current memory clock in MHz (lock window or app clock applied to the supported set)."""
        if self.locked_mem_clocks_mhz is not None:
            lo, hi = self.locked_mem_clocks_mhz
            fits = [m for m in self.mem_clocks_mhz if lo <= m <= hi]
            return fits[0] if fits else lo
        if self.app_clocks_mhz is not None:
            return self.app_clocks_mhz[0]
        return self.mem_clocks_mhz[0]


def _gpu(**kw: Any) -> FakeGpu:
    return FakeGpu(**kw)


def h200(index: int = 0, **kw: Any) -> FakeGpu:
    """A fake H200 SXM with the values of the project's H200 probe (driver 580.159.04).

    Source: ``../shared/reference/h200-baseline.json`` and power.md section 4 (200-700 W limits,
    SM <= 1980 MHz, HBM 3201/2201 MHz, idle 80.4 W at 345 MHz, 143771 MiB).
    """
    base = dict(name="NVIDIA H200", uuid=f"GPU-7a0e2c3d-1f4b-4c7a-9d2e-{index:012x}",
                pci_bus_id=f"00000000:{0x18 + 0x10 * index:02X}:00.0", nvlink_states=(1,) * 18)
    return _gpu(**{**base, **kw})


def h100(index: int = 0, **kw: Any) -> FakeGpu:
    """A fake H100 SXM (80 GB HBM3): 700 W TDP, 200-700 W limits, SM <= 1980 MHz, HBM 2619 MHz."""
    base = dict(name="NVIDIA H100 80GB HBM3", uuid=f"GPU-3c1d9b2a-6e5f-4a1b-8c7d-{index:012x}",
                pci_bus_id=f"00000000:{0x18 + 0x10 * index:02X}:00.0", mem_clocks_mhz=(2619,),
                mem_total_bytes=85_520_809_984, idle_power_mw=70_000, nvlink_states=(1,) * 18)
    return _gpu(**{**base, **kw})


def b200(index: int = 0, **kw: Any) -> FakeGpu:
    """A fake B200: values of NVIDIA's mock NVML profile (a real capture, power.md section 6.1).

    1000 W default, 400-1200 W constraints (unverified on hardware), idle 130 W, SM 1965 -> 120 MHz
    in 7.5 MHz steps (rounded down to whole MHz as NVML reports), HBM 3996/3402 MHz.
    """
    clocks = tuple(sorted({int(1965 - 7.5 * k) for k in range(int((1965 - 120) / 7.5) + 1)},
                          reverse=True))
    base = dict(name="NVIDIA B200", uuid=f"GPU-9e8d7c6b-5a49-4837-a261-{index:012x}",
                pci_bus_id=f"00000000:{0x18 + 0x10 * index:02X}:00.0", tdp_mw=1_000_000,
                idle_power_mw=130_000, min_limit_mw=400_000, max_limit_mw=1_200_000,
                default_limit_mw=1_000_000, mem_clocks_mhz=(3996, 3402), graphics_clocks_mhz=clocks,
                idle_sm_clock_mhz=120, mem_total_bytes=191_514_411_008, nvlink_states=(1,) * 18)
    return _gpu(**{**base, **kw})


@dataclass(frozen=True)
class FakeHandle:
    """Opaque device handle of the fake (stands for ``pynvml.c_nvmlDevice_t``)."""

    index: int


class FakeNvml(DeviceCalls, HealthCalls):
    """Drop-in fake of the ``pynvml`` module (see the module docstring for the behaviour).

    Args:
        gpus: the fake devices, index order.
        root: whether setters are permitted (``False`` -> ``NVMLError_NoPermission``).
        read_only: spy mode; any setter call raises ``AssertionError``.
        driver_loaded: ``False`` makes ``nvmlInit`` raise ``NVMLError_DriverNotLoaded``.
        library_found: ``False`` makes ``nvmlInit`` raise ``NVMLError_LibraryNotFound``.
        driver_version: string returned by ``nvmlSystemGetDriverVersion``.
        clock: optional callable returning seconds; default is a manual clock moved by :meth:`advance`.
        hang: NVML function names that block (a wedged driver) until :meth:`release` is called.
    """

    def __init__(self, gpus: list[FakeGpu] | None = None, *, root: bool = True,
                 read_only: bool = False, driver_loaded: bool = True, library_found: bool = True,
                 driver_version: str = "580.159.04", clock: Callable[[], float] | None = None,
                 hang: set[str] | frozenset[str] = frozenset()) -> None:
        self.gpus: list[FakeGpu] = list(gpus) if gpus is not None else [h200(0)]
        self.root = root
        self.read_only = read_only
        self.driver_loaded = driver_loaded
        self.library_found = library_found
        self.driver_version = driver_version
        self.calls: list[tuple[str, tuple[Any, ...]]] = []
        self._manual_t = 0.0
        self._clock = clock or (lambda: self._manual_t)
        self._last_t = self._clock()
        self._init_count = 0
        self.hang = set(hang)
        self._released = threading.Event()

    def release(self) -> None:
        """Let every call blocked by ``hang`` return (and later ones not block); call in test teardown."""
        self._released.set()

    @classmethod
    def spy(cls, gpus: list[FakeGpu] | None = None, **kw: Any) -> FakeNvml:
        """A read-only fake: any setter call raises ``AssertionError`` (for read-only/dry-run tests)."""
        return cls(gpus, read_only=True, **kw)

    # --- plumbing ------------------------------------------------------------------------
    def __getattr__(self, name: str) -> Any:
        value = getattr(_pynvml, name)  # constants, error classes, structures: the real ones
        if callable(value) and name.startswith("nvml") and not isinstance(value, type):
            if name.startswith(SETTER_PREFIXES):
                def blocked(*args: Any, _n: str = name) -> Any:
                    self._enter(_n, args, setter=True)
                    raise _err(_pynvml.NVML_ERROR_NOT_SUPPORTED)
                return blocked

            def unsupported(*args: Any, _n: str = name) -> Any:
                self._enter(_n, args)
                raise _err(_pynvml.NVML_ERROR_NOT_SUPPORTED)
            return unsupported
        return value

    @property
    def setter_calls(self) -> list[tuple[str, tuple[Any, ...]]]:
        """The recorded calls that were setters."""
        return [c for c in self.calls if c[0].startswith(SETTER_PREFIXES)]

    def advance(self, dt_s: float) -> None:
        """Move the manual clock by ``dt_s`` seconds, integrating energy and violation time."""
        if dt_s < 0:
            raise ValueError(f"dt_s must be >= 0, got {dt_s}")
        self._sync()
        self._manual_t += dt_s
        self._sync()

    def set_load(self, index: int, load: float) -> None:
        """Change GPU ``index``'s activity (0..1), integrating energy up to now first."""
        self._sync()
        self.gpus[index].load = load

    def _sync(self) -> None:
        now = self._clock()
        dt = now - self._last_t
        if dt > 0:
            for g in self.gpus:
                _f, p_mw, reasons = g.operating_point()
                g.energy_mj += p_mw * dt
                if reasons & _SW_POWER_CAP:
                    g.violation_power_ns += round(dt * 1e9)
        self._last_t = now

    def _enter(self, name: str, args: tuple[Any, ...], *, setter: bool = False) -> FakeGpu | None:
        shown = tuple(a.index if isinstance(a, FakeHandle) else a for a in args)
        self.calls.append((name, shown))
        if name in self.hang:
            self._released.wait()
        if setter and self.read_only:
            raise AssertionError(f"NVML setter {name}{shown} called in read-only mode")
        if name not in ("nvmlInit", "nvmlInitWithFlags") and self._init_count == 0:
            raise _err(_pynvml.NVML_ERROR_UNINITIALIZED)
        gpu = None
        if args and isinstance(args[0], FakeHandle):
            if not 0 <= args[0].index < len(self.gpus):
                raise _err(_pynvml.NVML_ERROR_INVALID_ARGUMENT)
            gpu = self.gpus[args[0].index]
            if name in gpu.errors:
                raise _err(gpu.errors[name])
            if name in gpu.unsupported:
                raise _err(_pynvml.NVML_ERROR_NOT_SUPPORTED)
        elif args and not isinstance(args[0], (int, str, bytes)) and name.startswith("nvmlDevice"):
            raise _err(_pynvml.NVML_ERROR_INVALID_ARGUMENT)
        if setter and not self.root:
            raise _err(_pynvml.NVML_ERROR_NO_PERMISSION)
        self._sync()
        return gpu

    # --- init / system ---------------------------------------------------------------------
    def nvmlInitWithFlags(self, flags: int) -> None:
        """As ``pynvml.nvmlInitWithFlags``; raises what a machine without driver/library raises."""
        self._enter("nvmlInitWithFlags", (flags,))
        if not self.library_found:
            raise _err(_pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)
        if not self.driver_loaded:
            raise _err(_pynvml.NVML_ERROR_DRIVER_NOT_LOADED)
        self._init_count += 1

    def nvmlInit(self) -> None:
        """As ``pynvml.nvmlInit``."""
        self.nvmlInitWithFlags(0)

    def nvmlShutdown(self) -> None:
        """As ``pynvml.nvmlShutdown`` (reference counted like the real library)."""
        self._enter("nvmlShutdown", ())
        self._init_count -= 1

    def nvmlSystemGetDriverVersion(self) -> str:
        """Driver version string, e.g. ``"580.159.04"``."""
        self._enter("nvmlSystemGetDriverVersion", ())
        return self.driver_version

    def nvmlSystemGetNVMLVersion(self) -> str:
        """NVML library version string (``13.`` + driver version, as the real library reports)."""
        self._enter("nvmlSystemGetNVMLVersion", ())
        return "13." + self.driver_version

    def nvmlDeviceGetCount(self) -> int:
        """Number of fake GPUs."""
        self._enter("nvmlDeviceGetCount", ())
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeHandle:
        """Handle of GPU ``index``; out of range -> ``NVMLError_InvalidArgument``."""
        self._enter("nvmlDeviceGetHandleByIndex", (index,))
        if not 0 <= index < len(self.gpus):
            raise _err(_pynvml.NVML_ERROR_INVALID_ARGUMENT)
        g = self.gpus[index]
        if "nvmlDeviceGetHandleByIndex" in g.errors:
            raise _err(g.errors["nvmlDeviceGetHandleByIndex"])
        return FakeHandle(index)

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> FakeHandle:
        """Handle of the GPU with ``uuid``; unknown -> ``NVMLError_NotFound``."""
        self._enter("nvmlDeviceGetHandleByUUID", (uuid,))
        for i, g in enumerate(self.gpus):
            if g.uuid == uuid:
                return FakeHandle(i)
        raise _err(_pynvml.NVML_ERROR_NOT_FOUND)

