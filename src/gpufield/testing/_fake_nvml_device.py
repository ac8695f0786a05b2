"""Device calls of :class:`gpufield.testing.fake_nvml.FakeNvml` (internal; split for size).

Each method mirrors the ``pynvml`` function of the same name (nvidia-ml-py 13.615.71): same
arguments, same return type, same NVML units (mW, mJ, MHz, ns, bytes), same ``NVMLError`` codes.
"""

from __future__ import annotations

from typing import Any

import pynvml as _p


def _err(code: int) -> _p.NVMLError:
    """The real ``pynvml`` error for ``code`` (``NVMLError(code)`` maps to its subclass)."""
    return _p.NVMLError(code)


_FIELD_U32 = {
    _p.NVML_FI_DEV_POWER_INSTANT, _p.NVML_FI_DEV_POWER_AVERAGE, _p.NVML_FI_DEV_POWER_MIN_LIMIT,
    _p.NVML_FI_DEV_POWER_MAX_LIMIT, _p.NVML_FI_DEV_POWER_DEFAULT_LIMIT,
    _p.NVML_FI_DEV_POWER_CURRENT_LIMIT, _p.NVML_FI_DEV_POWER_REQUESTED_LIMIT,
    _p.NVML_FI_DEV_MEMORY_TEMP, _p.NVML_FI_DEV_PCIE_REPLAY_COUNTER,
    _p.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION,
}
_FIELD_U64 = {
    _p.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION, _p.NVML_FI_DEV_ENERGY, _p.NVML_FI_DEV_PERF_POLICY_POWER,
    _p.NVML_FI_DEV_PERF_POLICY_THERMAL,
}
_POWER_FIELDS = {_p.NVML_FI_DEV_POWER_INSTANT, _p.NVML_FI_DEV_POWER_AVERAGE}


class DeviceCalls:
    """Mixin with the ``nvmlDevice*`` calls; relies on ``FakeNvml._enter`` and ``_sync``."""

    gpus: list[Any]
    _clock: Any

    # --- identity -----------------------------------------------------------------------
    def nvmlDeviceGetName(self, handle: Any) -> str:
        """Product name, e.g. ``"NVIDIA H200"``."""
        return self._enter("nvmlDeviceGetName", (handle,)).name

    def nvmlDeviceGetUUID(self, handle: Any) -> str:
        """``GPU-...`` UUID string."""
        return self._enter("nvmlDeviceGetUUID", (handle,)).uuid

    def nvmlDeviceGetSerial(self, handle: Any) -> str:
        """Board serial number."""
        return self._enter("nvmlDeviceGetSerial", (handle,)).serial

    def nvmlDeviceGetIndex(self, handle: Any) -> int:
        """Device ordinal."""
        self._enter("nvmlDeviceGetIndex", (handle,))
        return handle.index

    def nvmlDeviceGetPciInfo(self, handle: Any) -> _p.nvmlPciInfo_t:
        """``nvmlPciInfo_t`` with ``busId`` as bytes in NVML's ``00000000:1B:00.0`` form."""
        g = self._enter("nvmlDeviceGetPciInfo", (handle,))
        dom, bus, devfn = g.pci_bus_id.split(":")
        dev = devfn.split(".")[0]
        info = _p.nvmlPciInfo_t()
        info.busId = g.pci_bus_id.encode()
        info.busIdLegacy = g.pci_bus_id[-12:].encode()
        info.domain, info.bus, info.device = int(dom, 16), int(bus, 16), int(dev, 16)
        info.pciDeviceId = 0x233510DE
        return info

    nvmlDeviceGetPciInfo_v3 = nvmlDeviceGetPciInfo

    # --- power and energy -----------------------------------------------------------------
    def nvmlDeviceGetPowerUsage(self, handle: Any) -> int:
        """Board power in mW (the fake's average equals its instant power)."""
        g = self._enter("nvmlDeviceGetPowerUsage", (handle,))
        return int(round(g.operating_point()[1]))

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: Any) -> int:
        """Energy since driver load in mJ (integrated exactly from the toy power model)."""
        g = self._enter("nvmlDeviceGetTotalEnergyConsumption", (handle,))
        return int(g.energy_mj)

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: Any) -> int:
        """Enforced limit in mW: min(in-band, out-of-band)."""
        return self._enter("nvmlDeviceGetEnforcedPowerLimit", (handle,)).enforced_limit_mw

    def nvmlDeviceGetPowerManagementLimit(self, handle: Any) -> int:
        """In-band (requested) limit in mW."""
        return int(self._enter("nvmlDeviceGetPowerManagementLimit", (handle,)).power_limit_mw)

    def nvmlDeviceGetPowerManagementLimitConstraints(self, handle: Any) -> list[int]:
        """``[min_mW, max_mW]`` a limit may be set to."""
        g = self._enter("nvmlDeviceGetPowerManagementLimitConstraints", (handle,))
        return [g.min_limit_mw, g.max_limit_mw]

    def nvmlDeviceGetPowerManagementDefaultLimit(self, handle: Any) -> int:
        """Default limit in mW."""
        return self._enter("nvmlDeviceGetPowerManagementDefaultLimit", (handle,)).default_limit_mw

    def nvmlDeviceGetFieldValues(self, handle: Any, fieldIds: list[Any]) -> Any:
        """Array of ``c_nvmlFieldValue_t``; unsupported ids get ``nvmlReturn = NOT_SUPPORTED``.

        Supported: power instant/average (scope GPU or MODULE), limits 187-192, energy 83/191,
        perf-policy power/thermal 74/75 (ns), memory temperature 82, PCIe replay 94, recovery 230.
        """
        g = self._enter("nvmlDeviceGetFieldValues", (handle, tuple(fieldIds)))
        values = (_p.c_nvmlFieldValue_t * len(fieldIds))()
        f_mhz, p_mw, _r = g.operating_point()
        now_us = int(self._clock() * 1e6)
        for i, fid in enumerate(fieldIds):
            fid, scope = (fid if isinstance(fid, tuple) else (fid, 0))
            v = values[i]
            v.fieldId, v.scopeId, v.timestamp = fid, scope, now_us
            ok = fid in (_FIELD_U32 | _FIELD_U64) and fid not in g.unsupported
            if fid in _POWER_FIELDS and scope not in (_p.NVML_POWER_SCOPE_GPU, _p.NVML_POWER_SCOPE_MODULE):
                ok = False
            if not ok:
                v.nvmlReturn = _p.NVML_ERROR_NOT_SUPPORTED
                continue
            v.nvmlReturn = _p.NVML_SUCCESS
            val = {
                _p.NVML_FI_DEV_POWER_INSTANT: round(p_mw), _p.NVML_FI_DEV_POWER_AVERAGE: round(p_mw),
                _p.NVML_FI_DEV_POWER_MIN_LIMIT: g.min_limit_mw,
                _p.NVML_FI_DEV_POWER_MAX_LIMIT: g.max_limit_mw,
                _p.NVML_FI_DEV_POWER_DEFAULT_LIMIT: g.default_limit_mw,
                _p.NVML_FI_DEV_POWER_CURRENT_LIMIT: g.enforced_limit_mw,
                _p.NVML_FI_DEV_POWER_REQUESTED_LIMIT: g.power_limit_mw,
                _p.NVML_FI_DEV_MEMORY_TEMP: g.temperature_c + 5,
                _p.NVML_FI_DEV_PCIE_REPLAY_COUNTER: g.pcie_replay,
                _p.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION: g.recovery_action,
                _p.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION: int(g.energy_mj),
                _p.NVML_FI_DEV_ENERGY: int(g.energy_mj),
                _p.NVML_FI_DEV_PERF_POLICY_POWER: g.violation_power_ns,
                _p.NVML_FI_DEV_PERF_POLICY_THERMAL: g.violation_thermal_ns,
            }[fid]
            if fid in _FIELD_U64:
                v.valueType, v.value.ullVal = _p.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG, int(val)
            else:
                v.valueType, v.value.uiVal = _p.NVML_VALUE_TYPE_UNSIGNED_INT, int(val)
        return values

    def nvmlDeviceGetViolationStatus(self, device: Any, perfPolicyType: int) -> _p.c_nvmlViolationTime_t:
        """``c_nvmlViolationTime_t(referenceTime us, violationTime ns)`` for POWER or THERMAL."""
        g = self._enter("nvmlDeviceGetViolationStatus", (device, perfPolicyType))
        ns = {_p.NVML_PERF_POLICY_POWER: g.violation_power_ns,
              _p.NVML_PERF_POLICY_THERMAL: g.violation_thermal_ns}
        if perfPolicyType not in ns:
            raise _err(_p.NVML_ERROR_NOT_SUPPORTED)
        out = _p.c_nvmlViolationTime_t()
        out.referenceTime = int(self._clock() * 1e6)
        out.violationTime = ns[perfPolicyType]
        return out

    # --- clocks ---------------------------------------------------------------------------
    def nvmlDeviceGetClockInfo(self, handle: Any, type: int) -> int:  # noqa: A002 (pynvml name)
        """Current clock in MHz for ``NVML_CLOCK_GRAPHICS``/``SM``/``MEM``/``VIDEO``."""
        g = self._enter("nvmlDeviceGetClockInfo", (handle, type))
        if type in (_p.NVML_CLOCK_GRAPHICS, _p.NVML_CLOCK_SM, _p.NVML_CLOCK_VIDEO):
            return g.operating_point()[0]
        if type == _p.NVML_CLOCK_MEM:
            return g.mem_clock_mhz()
        raise _err(_p.NVML_ERROR_INVALID_ARGUMENT)

    def nvmlDeviceGetMaxClockInfo(self, handle: Any, type: int) -> int:  # noqa: A002
        """Maximum clock in MHz."""
        g = self._enter("nvmlDeviceGetMaxClockInfo", (handle, type))
        if type in (_p.NVML_CLOCK_GRAPHICS, _p.NVML_CLOCK_SM, _p.NVML_CLOCK_VIDEO):
            return g.graphics_clocks_mhz[0]
        if type == _p.NVML_CLOCK_MEM:
            return g.mem_clocks_mhz[0]
        raise _err(_p.NVML_ERROR_INVALID_ARGUMENT)

    def _app_clock(self, g: Any, type: int, *, default: bool) -> int:  # noqa: A002
        if type in (_p.NVML_CLOCK_GRAPHICS, _p.NVML_CLOCK_SM):
            return g.base_clock_mhz if default or g.app_clocks_mhz is None else g.app_clocks_mhz[1]
        if type == _p.NVML_CLOCK_MEM:
            return g.mem_clocks_mhz[0] if default or g.app_clocks_mhz is None else g.app_clocks_mhz[0]
        raise _err(_p.NVML_ERROR_INVALID_ARGUMENT)

    def nvmlDeviceGetApplicationsClock(self, handle: Any, type: int) -> int:  # noqa: A002
        """Application clock target in MHz (the default when none is set)."""
        g = self._enter("nvmlDeviceGetApplicationsClock", (handle, type))
        return self._app_clock(g, type, default=False)

    def nvmlDeviceGetDefaultApplicationsClock(self, handle: Any, type: int) -> int:  # noqa: A002
        """Default application clock in MHz (graphics: ``base_clock_mhz``; memory: highest)."""
        g = self._enter("nvmlDeviceGetDefaultApplicationsClock", (handle, type))
        return self._app_clock(g, type, default=True)

    def nvmlDeviceGetClock(self, handle: Any, type: int, id: int) -> int:  # noqa: A002
        """Clock in MHz by ``NVML_CLOCK_ID_*``: CURRENT, APP_CLOCK_TARGET, APP_CLOCK_DEFAULT, CUSTOMER_BOOST_MAX."""
        g = self._enter("nvmlDeviceGetClock", (handle, type, id))
        if id == _p.NVML_CLOCK_ID_CURRENT:
            if type == _p.NVML_CLOCK_MEM:
                return g.mem_clock_mhz()
            if type in (_p.NVML_CLOCK_GRAPHICS, _p.NVML_CLOCK_SM, _p.NVML_CLOCK_VIDEO):
                return g.operating_point()[0]
        elif id in (_p.NVML_CLOCK_ID_APP_CLOCK_TARGET, _p.NVML_CLOCK_ID_APP_CLOCK_DEFAULT):
            return self._app_clock(g, type, default=id == _p.NVML_CLOCK_ID_APP_CLOCK_DEFAULT)
        elif id == _p.NVML_CLOCK_ID_CUSTOMER_BOOST_MAX:
            if type in (_p.NVML_CLOCK_GRAPHICS, _p.NVML_CLOCK_SM):
                return g.graphics_clocks_mhz[0]
            if type == _p.NVML_CLOCK_MEM:
                return g.mem_clocks_mhz[0]
        raise _err(_p.NVML_ERROR_INVALID_ARGUMENT)

    def nvmlDeviceGetSupportedMemoryClocks(self, handle: Any) -> list[int]:
        """Supported memory clocks in MHz, highest first."""
        return list(self._enter("nvmlDeviceGetSupportedMemoryClocks", (handle,)).mem_clocks_mhz)

    def nvmlDeviceGetSupportedGraphicsClocks(self, handle: Any, memoryClockMHz: int) -> list[int]:
        """Supported graphics clocks in MHz for a memory clock; unknown memory clock -> InvalidArgument."""
        g = self._enter("nvmlDeviceGetSupportedGraphicsClocks", (handle, memoryClockMHz))
        if memoryClockMHz not in g.mem_clocks_mhz:
            raise _err(_p.NVML_ERROR_INVALID_ARGUMENT)
        return list(g.graphics_clocks_mhz)

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: Any) -> int:
        """Clock-event reason bitmask (``nvmlClocksEventReason*``)."""
        return self._enter("nvmlDeviceGetCurrentClocksEventReasons", (handle,)).operating_point()[2]

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: Any) -> int:
        """Deprecated name of :meth:`nvmlDeviceGetCurrentClocksEventReasons` (same bits)."""
        return self._enter("nvmlDeviceGetCurrentClocksThrottleReasons", (handle,)).operating_point()[2]

    # --- thermals, utilisation, memory, health -------------------------------------------------
    def nvmlDeviceGetTemperature(self, handle: Any, sensor: int) -> int:
        """GPU temperature in degrees C (sensor ``NVML_TEMPERATURE_GPU`` only)."""
        g = self._enter("nvmlDeviceGetTemperature", (handle, sensor))
        if sensor != _p.NVML_TEMPERATURE_GPU:
            raise _err(_p.NVML_ERROR_INVALID_ARGUMENT)
        return g.temperature_c

    def nvmlDeviceGetUtilizationRates(self, handle: Any) -> _p.c_nvmlUtilization_t:
        """``c_nvmlUtilization_t(gpu %, memory %)``."""
        g = self._enter("nvmlDeviceGetUtilizationRates", (handle,))
        u = _p.c_nvmlUtilization_t()
        u.gpu, u.memory = g.util_gpu_pct, g.util_mem_pct
        return u

    def nvmlDeviceGetMemoryInfo(self, handle: Any, version: Any = None) -> Any:
        """``c_nvmlMemory_t(total, free, used)`` in bytes (``_v2_t`` when ``version`` is given)."""
        g = self._enter("nvmlDeviceGetMemoryInfo", (handle,))
        m = _p.c_nvmlMemory_v2_t() if version else _p.c_nvmlMemory_t()
        m.total, m.used = g.mem_total_bytes, g.mem_used_bytes
        m.free = g.mem_total_bytes - g.mem_used_bytes
        return m

    def nvmlDeviceGetTotalEccErrors(self, handle: Any, errorType: int, counterType: int) -> int:
        """ECC error count for (CORRECTED|UNCORRECTED, VOLATILE|AGGREGATE)."""
        g = self._enter("nvmlDeviceGetTotalEccErrors", (handle, errorType, counterType))
        if errorType not in (0, 1) or counterType not in (0, 1):
            raise _err(_p.NVML_ERROR_INVALID_ARGUMENT)
        return g.ecc.get((errorType, counterType), 0)

    def nvmlDeviceGetRemappedRows(self, device: Any) -> tuple[int, int, int, int]:
        """``(corrRows, uncRows, isPending, failureOccurred)``."""
        return tuple(self._enter("nvmlDeviceGetRemappedRows", (device,)).remapped_rows)

    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle: Any) -> int:
        """Current PCIe generation."""
        return self._enter("nvmlDeviceGetCurrPcieLinkGeneration", (handle,)).pcie_gen

    def nvmlDeviceGetCurrPcieLinkWidth(self, handle: Any) -> int:
        """Current PCIe lane count."""
        return self._enter("nvmlDeviceGetCurrPcieLinkWidth", (handle,)).pcie_width

    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle: Any) -> int:
        """Maximum PCIe generation."""
        return self._enter("nvmlDeviceGetMaxPcieLinkGeneration", (handle,)).pcie_max_gen

    def nvmlDeviceGetMaxPcieLinkWidth(self, handle: Any) -> int:
        """Maximum PCIe lane count."""
        return self._enter("nvmlDeviceGetMaxPcieLinkWidth", (handle,)).pcie_max_width

    def nvmlDeviceGetPcieReplayCounter(self, handle: Any) -> int:
        """PCIe replay counter."""
        return self._enter("nvmlDeviceGetPcieReplayCounter", (handle,)).pcie_replay

    def nvmlDeviceGetPersistenceMode(self, handle: Any) -> int:
        """``NVML_FEATURE_ENABLED`` (1) or ``DISABLED`` (0)."""
        return self._enter("nvmlDeviceGetPersistenceMode", (handle,)).persistence_mode

    def nvmlDeviceGetPerformanceState(self, handle: Any) -> int:
        """P-state: 0 under load, 8 when idle (toy)."""
        g = self._enter("nvmlDeviceGetPerformanceState", (handle,))
        return 0 if g.load > 0 else 8

    # --- workload power profiles (ctypes structures passed with ctypes.byref, as pynvml's callers do) ---
    @staticmethod
    def _set_mask(mask: Any, ids: Any) -> None:
        for w in range(len(mask.mask)):
            mask.mask[w] = 0
        for i in ids:
            mask.mask[i // 32] |= 1 << (i % 32)

    @staticmethod
    def _mask_ids(mask: Any) -> set[int]:
        return {w * 32 + b for w in range(len(mask.mask)) for b in range(32) if (mask.mask[w] >> b) & 1}

    def _wpp(self, name: str, handle: Any, *, setter: bool = False) -> Any:
        g = self._enter(name, (handle,), setter=setter)
        if not g.workload_profiles:
            raise _err(_p.NVML_ERROR_NOT_SUPPORTED)
        return g

    def nvmlDeviceWorkloadPowerProfileGetProfilesInfo(self, device: Any, profilesInfo: Any) -> int:
        """Fill ``c_nvmlWorkloadPowerProfileProfilesInfo_v1_t``: offered ids, priorities, conflicts."""
        g = self._wpp("nvmlDeviceWorkloadPowerProfileGetProfilesInfo", device)
        info = profilesInfo._obj
        self._set_mask(info.perfProfilesMask, g.workload_profiles)
        for k, (pid, prio) in enumerate(sorted(g.workload_profiles.items())):
            info.perfProfile[k].profileId = pid
            info.perfProfile[k].priority = prio
            self._set_mask(info.perfProfile[k].conflictingmask, g.workload_conflicts.get(pid, ()))
        return _p.NVML_SUCCESS

    def nvmlDeviceWorkloadPowerProfileGetCurrentProfiles(self, device: Any, currentProfiles: Any) -> int:
        """Fill ``c_nvmlWorkloadPowerProfileCurrentProfiles_v1_t`` (perf = offered, requested, enforced)."""
        g = self._wpp("nvmlDeviceWorkloadPowerProfileGetCurrentProfiles", device)
        cur = currentProfiles._obj
        req = g.requested_profiles
        enforced = {i for i in req if not any(j in req and g.workload_profiles[j] < g.workload_profiles[i]
                                              for j in g.workload_conflicts.get(i, ()))}
        self._set_mask(cur.perfProfilesMask, g.workload_profiles)
        self._set_mask(cur.requestedProfilesMask, req)
        self._set_mask(cur.enforcedProfilesMask, enforced)
        return _p.NVML_SUCCESS

    def nvmlDeviceWorkloadPowerProfileSetRequestedProfiles(self, device: Any, requestedProfiles: Any) -> int:
        """Add the mask's ids to the requested ones (an id the GPU does not offer: ``INVALID_ARGUMENT``)."""
        g = self._wpp("nvmlDeviceWorkloadPowerProfileSetRequestedProfiles", device, setter=True)
        ids = self._mask_ids(requestedProfiles._obj.requestedProfilesMask)
        if not ids <= set(g.workload_profiles):
            raise _err(_p.NVML_ERROR_INVALID_ARGUMENT)
        g.requested_profiles |= ids
        return _p.NVML_SUCCESS

    def nvmlDeviceWorkloadPowerProfileClearRequestedProfiles(self, device: Any, requestedProfiles: Any) -> int:
        """Remove the mask's ids from the requested ones."""
        g = self._wpp("nvmlDeviceWorkloadPowerProfileClearRequestedProfiles", device, setter=True)
        g.requested_profiles -= self._mask_ids(requestedProfiles._obj.requestedProfilesMask)
        return _p.NVML_SUCCESS

    # --- setters (root only; blocked in read-only mode) -----------------------------------------
    def nvmlDeviceSetPowerManagementLimit(self, handle: Any, limit: int) -> None:
        """Set the in-band limit in mW; outside ``LimitConstraints`` -> ``NVMLError_InvalidArgument``."""
        g = self._enter("nvmlDeviceSetPowerManagementLimit", (handle, limit), setter=True)
        if not isinstance(limit, int) or not g.min_limit_mw <= limit <= g.max_limit_mw:
            raise _err(_p.NVML_ERROR_INVALID_ARGUMENT)
        g.power_limit_mw = limit

    def nvmlDeviceSetGpuLockedClocks(self, handle: Any, minGpuClockMHz: int, maxGpuClockMHz: int) -> None:
        """Lock the SM clock window (MHz or ``NVML_CLOCK_LIMIT_ID_TDP/UNLIMITED``, both or neither)."""
        g = self._enter("nvmlDeviceSetGpuLockedClocks", (handle, minGpuClockMHz, maxGpuClockMHz),
                        setter=True)
        sym = [v >= _p.NVML_CLOCK_LIMIT_ID_RANGE_START for v in (minGpuClockMHz, maxGpuClockMHz)]
        if sym[0] != sym[1]:
            raise _err(_p.NVML_ERROR_INVALID_ARGUMENT)
        fmin, fmax = g.graphics_clocks_mhz[-1], g.graphics_clocks_mhz[0]
        if sym[0]:
            def resolve(v: int, unlimited: int) -> int:
                if v == _p.NVML_CLOCK_LIMIT_ID_TDP:
                    return g.base_clock_mhz
                if v == _p.NVML_CLOCK_LIMIT_ID_UNLIMITED:
                    return unlimited
                raise _err(_p.NVML_ERROR_INVALID_ARGUMENT)
            lo, hi = resolve(minGpuClockMHz, fmin), resolve(maxGpuClockMHz, fmax)
            g.locked_clocks_mhz = None if (lo, hi) == (fmin, fmax) else (lo, hi)
            return
        if minGpuClockMHz > maxGpuClockMHz:
            raise _err(_p.NVML_ERROR_INVALID_ARGUMENT)
        g.locked_clocks_mhz = (min(max(minGpuClockMHz, fmin), fmax), min(max(maxGpuClockMHz, fmin), fmax))

    def nvmlDeviceResetGpuLockedClocks(self, handle: Any) -> None:
        """Remove the SM clock lock."""
        self._enter("nvmlDeviceResetGpuLockedClocks", (handle,), setter=True).locked_clocks_mhz = None

    def nvmlDeviceSetMemoryLockedClocks(self, handle: Any, minMemClockMHz: int, maxMemClockMHz: int) -> None:
        """Lock the memory clock window in MHz; ``min > max`` -> InvalidArgument."""
        g = self._enter("nvmlDeviceSetMemoryLockedClocks", (handle, minMemClockMHz, maxMemClockMHz),
                        setter=True)
        if minMemClockMHz > maxMemClockMHz:
            raise _err(_p.NVML_ERROR_INVALID_ARGUMENT)
        g.locked_mem_clocks_mhz = (minMemClockMHz, maxMemClockMHz)

    def nvmlDeviceResetMemoryLockedClocks(self, handle: Any) -> None:
        """Remove the memory clock lock."""
        self._enter("nvmlDeviceResetMemoryLockedClocks", (handle,), setter=True).locked_mem_clocks_mhz = None

    def nvmlDeviceSetApplicationsClocks(self, handle: Any, maxMemClockMHz: int, maxGraphicsClockMHz: int) -> None:
        """Set application clocks; both must be a supported pair, else InvalidArgument."""
        g = self._enter("nvmlDeviceSetApplicationsClocks", (handle, maxMemClockMHz, maxGraphicsClockMHz),
                        setter=True)
        if maxMemClockMHz not in g.mem_clocks_mhz or maxGraphicsClockMHz not in g.graphics_clocks_mhz:
            raise _err(_p.NVML_ERROR_INVALID_ARGUMENT)
        g.app_clocks_mhz = (maxMemClockMHz, maxGraphicsClockMHz)

    def nvmlDeviceResetApplicationsClocks(self, handle: Any) -> None:
        """Restore default application clocks."""
        self._enter("nvmlDeviceResetApplicationsClocks", (handle,), setter=True).app_clocks_mhz = None

    def nvmlDeviceSetPersistenceMode(self, handle: Any, mode: int) -> None:
        """Enable (1) or disable (0) persistence mode; other values -> InvalidArgument."""
        g = self._enter("nvmlDeviceSetPersistenceMode", (handle, mode), setter=True)
        if mode not in (0, 1):
            raise _err(_p.NVML_ERROR_INVALID_ARGUMENT)
        g.persistence_mode = mode

