"""Workload power profiles (NVML ``nvmlDeviceWorkloadPowerProfile*``): read them, and request Max-Q / Max-P
as a third decode actuator where the driver has them (power.md 2.1).

**Reading** (:func:`read_workload_profiles`, allow-listed read-only calls of
:data:`~gpufield.power.actuators.dryrun.NVML_READ_CALLS`):
``nvmlDeviceWorkloadPowerProfileGetProfilesInfo`` (the profiles this GPU offers, each with its
priority and conflicting mask) and ``nvmlDeviceWorkloadPowerProfileGetCurrentProfiles`` (the
performance, *requested* and *enforced* masks after the firmware's arbitration). Masks are NVML's
255-bit ``c_nvmlMask255_t`` (8 x uint32, bit ``i`` in word ``i // 32``). A pynvml without the calls,
or a driver that answers ``NOT_SUPPORTED`` / ``FUNCTION_NOT_FOUND`` (Hopper and older; some
Blackwell drivers), gives :attr:`WorkloadProfiles.supported` ``False`` with the reason, never an error.

**Writing** (:class:`WorkloadProfileActuator`): an :class:`~gpufield.power.protocols.Actuator` wrapper
that adds :meth:`~WorkloadProfileActuator.set_workload_profile`. Writes go through
``nvmlDeviceWorkloadPowerProfileSetRequestedProfiles`` only when the inner actuator's ``may_write``
allows the GPU (``--write --allow UUID`` in the CLI); the requested mask is saved before the first
write and put back on :meth:`~WorkloadProfileActuator.restore_defaults` (clearing only the bits this
actuator added, ``...ClearRequestedProfiles``), and every write is read back (the requested mask
must hold the bit; the enforced mask is reported, since arbitration may let another profile win).
With a read-only inner actuator (shadow: :class:`~gpufield.power.actuators.dryrun.DryRunActuator`)
the request is logged as an intent ``workload_profile`` and nothing is called.
"""

from __future__ import annotations

import contextlib
import ctypes
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from gpufield.errors import ActuationError
from gpufield.power.types import GpuCaps, GpuState, Intent

__all__ = ["PROFILE_IDS", "WorkloadProfiles", "WorkloadProfileActuator", "mask_bits", "read_workload_profiles",
           "with_profiles"]

#: profile names -> NVML ids (nvidia-ml-py 13.615.71 ``NVML_POWER_PROFILE_*``; power.md 2.1)
PROFILE_IDS = {"max-p": 0, "max-q": 1, "compute": 2, "memory-bound": 3, "network": 4, "balanced": 5,
               "llm-inference": 6, "llm-training": 7}
_WORDS = 8


def mask_bits(mask: Any) -> list[int]:
    """Set bits of a ``c_nvmlMask255_t`` (or any object with ``mask`` = 8 uint32 words), ascending."""
    words = list(mask.mask)
    return [w * 32 + b for w in range(len(words)) for b in range(32) if (int(words[w]) >> b) & 1]


def _mask(nvml: Any, bits: list[int]) -> Any:
    m = nvml.c_nvmlMask255_t()
    for i in bits:
        if not 0 <= i < 32 * _WORDS:
            raise ValueError(f"profile id {i} outside the 255-bit mask")
        m.mask[i // 32] |= 1 << (i % 32)
    return m


@dataclass(frozen=True, kw_only=True, slots=True)
class WorkloadProfiles:
    """What a GPU's workload power profiles look like now.

    Attributes:
        supported: the driver answered both queries. reason: why not (error name), else "".
        available: profile ids the GPU offers. priority / conflicts: per id (lower priority number
            wins, NVML's convention) and the ids it conflicts with.
        requested / enforced / performance: the current masks' ids.
    """

    supported: bool
    reason: str = ""
    available: tuple[int, ...] = ()
    priority: dict[int, int] = field(default_factory=dict)
    conflicts: dict[int, tuple[int, ...]] = field(default_factory=dict)
    requested: tuple[int, ...] = ()
    enforced: tuple[int, ...] = ()
    performance: tuple[int, ...] = ()


def _unsupported(nvml: Any, e: BaseException) -> bool:
    names = ("NVMLError_NotSupported", "NVMLError_FunctionNotFound", "NVMLError_InvalidArgument",
             "NVMLError_ArgumentVersionMismatch")
    return any(isinstance(e, getattr(nvml, n)) for n in names if isinstance(getattr(nvml, n, None), type))


def read_workload_profiles(nvml: Any, handle: Any) -> WorkloadProfiles:
    """Query one GPU's profiles with read-only calls (module docstring).

    Args:
        nvml: a ``pynvml``-like module (a :class:`~gpufield.power.actuators.dryrun.ReadOnlyNvml` is fine).
        handle: the device handle.

    Returns:
        :class:`WorkloadProfiles`; ``supported=False`` with the reason when the calls are absent or unsupported.

    Raises:
        NVMLError: any other NVML failure (GPU lost, ...). NvmlTimeoutError: through a bounded proxy.
    """
    try:
        get_info = nvml.nvmlDeviceWorkloadPowerProfileGetProfilesInfo
        get_cur = nvml.nvmlDeviceWorkloadPowerProfileGetCurrentProfiles
        info = nvml.c_nvmlWorkloadPowerProfileProfilesInfo_v1_t()
        cur = nvml.c_nvmlWorkloadPowerProfileCurrentProfiles_v1_t()
    except AttributeError as e:
        return WorkloadProfiles(supported=False, reason=f"pynvml has no workload power profile API ({e})")
    try:
        get_info(handle, ctypes.byref(info))
        get_cur(handle, ctypes.byref(cur))
    except nvml.NVMLError as e:
        if _unsupported(nvml, e):
            return WorkloadProfiles(supported=False, reason=f"{type(e).__name__}: {e}")
        raise
    avail = tuple(mask_bits(info.perfProfilesMask))
    prio, conf = {}, {}
    for i in range(len(info.perfProfile)):
        p = info.perfProfile[i]
        if p.profileId in avail and p.profileId not in prio:
            prio[int(p.profileId)] = int(p.priority)
            conf[int(p.profileId)] = tuple(mask_bits(p.conflictingmask))
    return WorkloadProfiles(supported=True, available=avail, priority=prio, conflicts=conf,
                            requested=tuple(mask_bits(cur.requestedProfilesMask)),
                            enforced=tuple(mask_bits(cur.enforcedProfilesMask)),
                            performance=tuple(mask_bits(cur.perfProfilesMask)))


class WorkloadProfileActuator:
    """An :class:`~gpufield.power.protocols.Actuator` plus workload power profiles (module docstring).

    Args:
        inner: an entered actuator with ``_nvml``, ``_h(gpu)`` and ``may_write`` (``NvmlActuator``,
            ``DryRunActuator``); every Actuator method is delegated to it.

    Attributes:
        intents: requests logged while the GPU may not be written (shadow).
    """

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self._saved: dict[str, tuple[int, ...]] = {}
        self._added: dict[str, set[int]] = {}
        self._shadow: dict[str, int] = {}  # shadow: the profile id last "requested"
        self.intents: list[Intent] = []

    def __getattr__(self, name: str) -> Any:
        """Everything else (``gpus``, ``restore_all``, ``lock_takeover``, ...) is the inner actuator's."""
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)

    # --- the Actuator protocol, delegated ---------------------------------------------------
    def capabilities(self, gpu: str) -> GpuCaps:
        """The inner actuator's caps."""
        return self.inner.capabilities(gpu)

    def read(self, gpu: str) -> GpuState:
        """The inner actuator's read."""
        return self.inner.read(gpu)

    def set_power_limit(self, gpu: str, power_w: float, *, lane: str = "", reason: str = "") -> float:
        """Delegated (W)."""
        return self.inner.set_power_limit(gpu, power_w, lane=lane, reason=reason)

    def set_clock_window(self, gpu: str, lo_mhz: int, hi_mhz: int, *, lane: str = "", reason: str = "") -> tuple[int, int]:
        """Delegated (MHz)."""
        return self.inner.set_clock_window(gpu, lo_mhz, hi_mhz, lane=lane, reason=reason)

    def reset_clocks(self, gpu: str, *, lane: str = "", reason: str = "") -> None:
        """Delegated."""
        self.inner.reset_clocks(gpu, lane=lane, reason=reason)

    def may_write(self, gpu: str) -> bool:
        """The inner actuator's interlock."""
        may = getattr(self.inner, "may_write", None)
        return bool(may(gpu)) if may is not None else False

    def restore_defaults(self, gpu: str) -> None:
        """Clear the profile bits this actuator requested, then restore the inner actuator's settings."""
        self._clear(gpu)
        self._saved.pop(gpu, None)
        self.inner.restore_defaults(gpu)

    def restore_all(self) -> None:
        """Clear every profile bit this actuator requested, then the inner actuator's ``restore_all``."""
        errors = []
        for gpu in list(self._added):
            try:
                self._clear(gpu)
            except ActuationError as e:
                errors.append(str(e))
        self.inner.restore_all()
        if errors:
            raise ActuationError("restore failed for " + "; ".join(errors))

    def _clear(self, gpu: str) -> bool:
        added = self._added.pop(gpu, set())
        if not added:
            return False
        nv = self.inner._nvml
        req = nv.c_nvmlWorkloadPowerProfileRequestedProfiles_v1_t()
        req.requestedProfilesMask = _mask(nv, sorted(added))
        try:
            nv.nvmlDeviceWorkloadPowerProfileClearRequestedProfiles(self.inner._h(gpu), ctypes.byref(req))
        except nv.NVMLError as e:
            self._added[gpu] = added
            raise ActuationError(f"{gpu}: clearing workload power profiles {sorted(added)} failed: "
                                 f"{type(e).__name__}") from e
        return True

    def clear_workload_profile(self, gpu: str, *, lane: str = "", reason: str = "") -> bool:
        """Withdraw the profile this actuator requested on ``gpu`` (shadow: log it); True if there was one."""
        if gpu in self._shadow:
            pid = self._shadow.pop(gpu)
            self.intents.append(Intent(t_s=time.time(), lane=lane, gpu=gpu, action="workload_profile_clear",
                                       value=pid, reason=reason))
            return True
        return self._clear(gpu)

    # --- the third actuator -------------------------------------------------------------------
    def profiles(self, gpu: str) -> WorkloadProfiles:
        """Read ``gpu``'s workload power profiles (read-only calls)."""
        return read_workload_profiles(self.inner._nvml, self.inner._h(gpu))

    def set_workload_profile(self, gpu: str, profile: str, *, lane: str = "", reason: str = "") -> tuple[int, ...]:
        """Request ``profile`` (``"max-q"``, ``"max-p"``, ... of :data:`PROFILE_IDS`) on ``gpu``.

        Returns:
            The enforced profile ids read back after the request (shadow: the current enforced ids).

        Raises:
            ValueError: an unknown profile name.
            ActuationError: the GPU does not offer it, the request failed or did not read back.
        """
        if profile not in PROFILE_IDS:
            raise ValueError(f"profile must be one of {', '.join(PROFILE_IDS)}, got {profile!r}")
        pid = PROFILE_IDS[profile]
        cur = self.profiles(gpu)
        if not cur.supported:
            raise ActuationError(f"{gpu}: workload power profiles not available ({cur.reason})")
        if pid not in cur.available:
            raise ActuationError(f"{gpu}: profile {profile} (id {pid}) not offered; available ids {list(cur.available)}")
        if not self.may_write(gpu):
            self._shadow[gpu] = pid
            self.intents.append(Intent(t_s=time.time(), lane=lane, gpu=gpu, action="workload_profile",
                                       value=pid, reason=reason))
            return cur.enforced
        nv = self.inner._nvml
        self._saved.setdefault(gpu, cur.requested)
        if pid in cur.requested:
            return cur.enforced
        req = nv.c_nvmlWorkloadPowerProfileRequestedProfiles_v1_t()
        req.requestedProfilesMask = _mask(nv, [pid])
        try:
            nv.nvmlDeviceWorkloadPowerProfileSetRequestedProfiles(self.inner._h(gpu), ctypes.byref(req))
        except nv.NVMLError as e:
            raise ActuationError(f"{gpu}: request workload power profile {profile} failed: {type(e).__name__}") from e
        self._added.setdefault(gpu, set()).add(pid)
        after = self.profiles(gpu)
        if pid not in after.requested:
            raise ActuationError(f"{gpu}: profile {profile} not in the requested mask after the write "
                                 f"(requested {list(after.requested)})")
        return after.enforced


@contextlib.contextmanager
def with_profiles(cm: Any) -> Iterator[WorkloadProfileActuator]:
    """Enter actuator context ``cm`` and yield it wrapped in a :class:`WorkloadProfileActuator`; on exit the
    profile bits it requested are cleared (before the inner actuator restores its own settings).

    Raises:
        ActuationError: clearing failed (raised after the inner actuator's exit has run).
    """
    with cm as inner:
        w = WorkloadProfileActuator(inner)
        failed: list[str] = []
        try:
            yield w
        finally:
            for gpu in list(w._added):
                try:
                    w._clear(gpu)
                except Exception as e:  # noqa: BLE001 - collected; the inner exit must still run
                    failed.append(f"{gpu}: {e}")
    if failed:
        raise ActuationError("workload power profiles not cleared: " + "; ".join(failed))
