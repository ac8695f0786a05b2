"""NVML actuator: interlocked, clamped, verified writes with save/restore (power.md 7.2, 4.2).

Safety rules, in the order they are checked:

1. **Interlock.** A setter runs only if the GPU's UUID is in ``WriteConfig.allow_uuids`` *and*
   ``WriteConfig.i_own_this_gpu`` is set (the CLI's ``--i-own-this-gpu``). Otherwise
   :class:`~gpufield.errors.ActuationError` is raised *before* any NVML setter is touched.
2. **Save before the first write.** The GPU's power limit (mW, as NVML gives it) and whether we lock
   clocks are written to ``<state_dir>/<uuid>.json`` before the first setter call.
3. **Clamp and verify.** Limits are clamped into ``nvmlDeviceGetPowerManagementLimitConstraints``
   and read back with ``nvmlDeviceGetEnforcedPowerLimit``; clock windows snap to
   ``nvmlDeviceGetSupportedGraphicsClocks`` and are verified by the clock-event reason bit 0x2
   (``ApplicationsClocksSetting``: locked/app clocks in effect).
2a. **One writer per state directory.** A writing actuator takes
   :class:`~gpufield.power.actuators.statelock.StateDirLock` (``flock`` + the holder's PID) before it
   reads any state file: a second writing process refuses to start instead of "restoring" the first
   one's live settings; a lock left by a dead PID is taken over with a message.
3a. **Limits from the GPU.** Caps are clamped into the GPU's own constraints; a clock window is
   refused (not snapped into range) when it leaves the GPU's supported clocks or tops out below
   ``MIN_CLOCK_TOP_FRAC`` of its maximum clock (:meth:`GpuCaps.check_window`).
4. **Restore.** On ``__exit__``, ``atexit``, SIGTERM and SIGINT every changed GPU gets its saved limit
   back and its clocks unlocked; the state file is then deleted. At ``__enter__`` state files left by a
   crashed run are restored first (orphan restore, as Dynamo's power agent does).

mW and MHz appear only in this module; the public methods take and return W and MHz.
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import time
from pathlib import Path
from types import FrameType
from typing import Any

from gpufield.errors import ActuationError, NvmlUnavailableError
from gpufield.power.actuators.statelock import StateDirLock
from gpufield.power.config import WriteConfig
from gpufield.power.types import GpuCaps, GpuState

__all__ = ["NvmlActuator", "read_caps", "read_state"]

_LOCKED_BIT = 0x2  # nvmlClocksEventReasonApplicationsClocksSetting


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def open_handles(nvml: Any) -> dict[str, Any]:
    """``nvmlInit`` and map every GPU's UUID to its NVML handle (read-only calls).

    Raises:
        NvmlUnavailableError: ``nvmlInit`` failed (no driver, no GPU, or no NVML library).
    """
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as e:
        raise NvmlUnavailableError(f"nvmlInit failed: {type(e).__name__}") from e
    handles = {}
    for i in range(nvml.nvmlDeviceGetCount()):
        h = nvml.nvmlDeviceGetHandleByIndex(i)
        handles[_text(nvml.nvmlDeviceGetUUID(h))] = h
    return handles


def read_caps(nvml: Any, h: Any) -> GpuCaps:
    """Read limits and supported clocks of one handle (read-only NVML calls)."""
    lo_mw, hi_mw = nvml.nvmlDeviceGetPowerManagementLimitConstraints(h)
    mem = sorted((int(m) for m in nvml.nvmlDeviceGetSupportedMemoryClocks(h)), reverse=True)
    sm = sorted((int(f) for f in nvml.nvmlDeviceGetSupportedGraphicsClocks(h, mem[0])), reverse=True)
    return GpuCaps(uuid=_text(nvml.nvmlDeviceGetUUID(h)), name=_text(nvml.nvmlDeviceGetName(h)),
                   min_limit_w=lo_mw / 1000.0, max_limit_w=hi_mw / 1000.0,
                   default_limit_w=nvml.nvmlDeviceGetPowerManagementDefaultLimit(h) / 1000.0,
                   sm_clocks_mhz=tuple(sm), mem_clocks_mhz=tuple(mem))


def read_state(nvml: Any, h: Any, uuid: str) -> GpuState:
    """Read control state and telemetry of one handle (instant power field 186 when supported)."""
    power_mw = float(nvml.nvmlDeviceGetPowerUsage(h))
    try:
        fv = nvml.nvmlDeviceGetFieldValues(h, [(nvml.NVML_FI_DEV_POWER_INSTANT, 0),
                                               (nvml.NVML_FI_DEV_PERF_POLICY_POWER, 0)])
        if fv[0].nvmlReturn == 0:
            power_mw = float(fv[0].value.uiVal)
        viol_s = fv[1].value.ullVal * 1e-9 if fv[1].nvmlReturn == 0 else float("nan")
    except nvml.NVMLError:
        viol_s = float("nan")
    reasons = int(nvml.nvmlDeviceGetCurrentClocksEventReasons(h))
    return GpuState(uuid=uuid, t_s=time.monotonic(), power_w=power_mw / 1000.0,
                    energy_j=nvml.nvmlDeviceGetTotalEnergyConsumption(h) / 1000.0,
                    sm_clock_mhz=int(nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_SM)),
                    mem_clock_mhz=int(nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_MEM)),
                    enforced_limit_w=nvml.nvmlDeviceGetEnforcedPowerLimit(h) / 1000.0,
                    default_limit_w=nvml.nvmlDeviceGetPowerManagementDefaultLimit(h) / 1000.0,
                    clocks_locked=bool(reasons & _LOCKED_BIT), reasons=reasons, power_violation_s=viol_s)


class NvmlActuator:
    """The real actuator (see the module docstring for the safety rules).

    Args:
        write: the interlock; the default allows no write (read-only).
        nvml: a ``pynvml``-like module (default: the real one); tests pass ``FakeNvml``.
        install_signal_handlers: restore on SIGTERM/SIGINT (main thread only).

    Raises:
        NvmlUnavailableError: on enter, when NVML cannot be initialised.
    """

    def __init__(self, write: WriteConfig | None = None, *, nvml: Any = None,
                 install_signal_handlers: bool = True) -> None:
        self.write = write or WriteConfig()
        self._nvml = nvml
        self._handles: dict[str, Any] = {}
        self._saved: dict[str, dict[str, Any]] = {}
        self._install = install_signal_handlers
        self._old_handlers: dict[int, Any] = {}
        self.orphans_restored: list[str] = []
        self._lock = StateDirLock(self.write.state_dir)

    @property
    def lock_takeover(self) -> str | None:
        """The message of a stale lock taken over at enter (None if there was none)."""
        return self._lock.takeover

    def may_write(self, gpu: str) -> bool:
        """Whether the interlock allows writing ``gpu``."""
        return self.write.may_write(gpu)

    # --- lifecycle -----------------------------------------------------------------------
    def __enter__(self) -> NvmlActuator:
        if self._nvml is None:
            import pynvml

            self._nvml = pynvml
        if self.write.i_own_this_gpu and self.write.allow_uuids:
            self._lock.acquire()  # before any state file is read (raises if another writer holds it)
        try:
            self._handles.update(open_handles(self._nvml))
        except Exception:
            self._lock.release()
            raise
        self._restore_orphans()
        atexit.register(self.restore_all)
        if self._install:
            for sig in (signal.SIGTERM, signal.SIGINT):
                try:
                    self._old_handlers[sig] = signal.signal(sig, self._on_signal)
                except ValueError:  # not the main thread
                    pass
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Restore every changed GPU, drop handlers, release the state lock and shut NVML down (idempotent)."""
        try:
            self.restore_all()
        finally:
            self._lock.release()  # state files a failed restore left are the next run's orphans
        for sig, old in self._old_handlers.items():
            signal.signal(sig, old)
        self._old_handlers.clear()
        atexit.unregister(self.restore_all)
        if self._handles:
            self._handles.clear()
            try:
                self._nvml.nvmlShutdown()
            except self._nvml.NVMLError:
                pass

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        try:
            self.restore_all()
        finally:  # then behave as the previous handler would (default: die by the signal)
            old = self._old_handlers.pop(signum, signal.SIG_DFL)
            signal.signal(signum, old if old is not None else signal.SIG_DFL)
            if callable(old):
                old(signum, frame)
            else:
                os.kill(os.getpid(), signum)

    # --- reads ---------------------------------------------------------------------------
    def _h(self, gpu: str) -> Any:
        if gpu not in self._handles:
            raise ActuationError(f"GPU {gpu} not found (have {sorted(self._handles)}); use the actuator in 'with'")
        return self._handles[gpu]

    @property
    def gpus(self) -> list[str]:
        """UUIDs of the GPUs NVML enumerates."""
        return list(self._handles)

    def capabilities(self, gpu: str) -> GpuCaps:
        """Limits and supported clocks (W, MHz)."""
        return read_caps(self._nvml, self._h(gpu))

    def read(self, gpu: str) -> GpuState:
        """Current state (W, J, MHz)."""
        return read_state(self._nvml, self._h(gpu), gpu)

    # --- writes --------------------------------------------------------------------------
    def _state_file(self, gpu: str) -> Path:
        return Path(self.write.state_dir) / f"{gpu}.json"

    def _check(self, gpu: str) -> Any:
        h = self._h(gpu)
        if not self.write.may_write(gpu):
            why = "no --i-own-this-gpu flag" if not self.write.i_own_this_gpu else "UUID not in the allow-list"
            raise ActuationError(f"refusing to write {gpu}: read-only ({why})")
        if gpu not in self._saved:
            nv = self._nvml
            saved = {"uuid": gpu, "power_limit_mw": int(nv.nvmlDeviceGetPowerManagementLimit(h)),
                     "clocks_locked_by_us": False, "pid": os.getpid(), "saved_at": time.time()}
            Path(self.write.state_dir).mkdir(parents=True, exist_ok=True)
            self._state_file(gpu).write_text(json.dumps(saved))
            self._saved[gpu] = saved
        return h

    def _mark_locked(self, gpu: str, locked: bool) -> None:
        self._saved[gpu]["clocks_locked_by_us"] = locked
        self._state_file(gpu).write_text(json.dumps(self._saved[gpu]))

    def set_power_limit(self, gpu: str, power_w: float, *, lane: str = "", reason: str = "") -> float:
        """Clamp, write ``nvmlDeviceSetPowerManagementLimit`` and verify the enforced limit (W)."""
        h = self._check(gpu)
        nv = self._nvml
        lo_mw, hi_mw = nv.nvmlDeviceGetPowerManagementLimitConstraints(h)
        want_mw = int(min(max(round(power_w * 1000), lo_mw), hi_mw))
        try:
            nv.nvmlDeviceSetPowerManagementLimit(h, want_mw)
        except nv.NVMLError as e:
            raise ActuationError(f"{gpu}: set power limit {want_mw / 1000:.0f} W failed: {type(e).__name__}") from e
        req_mw = int(nv.nvmlDeviceGetPowerManagementLimit(h))
        enf_mw = int(nv.nvmlDeviceGetEnforcedPowerLimit(h))
        if req_mw != want_mw or enf_mw > want_mw:
            raise ActuationError(f"{gpu}: power limit read back {req_mw / 1000:.1f} W requested /"
                                 f" {enf_mw / 1000:.1f} W enforced, wanted {want_mw / 1000:.1f} W")
        return enf_mw / 1000.0  # may be lower: an out-of-band limiter wins (power.md 4.2)

    def set_clock_window(self, gpu: str, lo_mhz: int, hi_mhz: int, *, lane: str = "", reason: str = "") -> tuple[int, int]:
        """Snap to supported clocks, ``nvmlDeviceSetGpuLockedClocks`` and verify reason bit 0x2."""
        h = self._check(gpu)
        nv = self._nvml
        try:
            lo, hi = read_caps(nv, h).check_window(lo_mhz, hi_mhz)
        except ValueError as e:
            raise ActuationError(f"{gpu}: {e}") from e
        self._mark_locked(gpu, True)
        try:
            nv.nvmlDeviceSetGpuLockedClocks(h, lo, hi)
        except nv.NVMLError as e:
            raise ActuationError(f"{gpu}: lock clocks {lo}-{hi} MHz failed: {type(e).__name__}") from e
        if not int(nv.nvmlDeviceGetCurrentClocksEventReasons(h)) & _LOCKED_BIT:
            raise ActuationError(f"{gpu}: clocks {lo}-{hi} MHz not in effect (reason 0x2 not set)")
        return lo, hi

    def reset_clocks(self, gpu: str, *, lane: str = "", reason: str = "") -> None:
        """``nvmlDeviceResetGpuLockedClocks`` and verify."""
        h = self._check(gpu)
        nv = self._nvml
        try:
            nv.nvmlDeviceResetGpuLockedClocks(h)
        except nv.NVMLError as e:
            raise ActuationError(f"{gpu}: reset clocks failed: {type(e).__name__}") from e
        self._mark_locked(gpu, False)

    def restore_defaults(self, gpu: str) -> None:
        """Write back the saved limit, unlock clocks if we locked them, delete the state file."""
        saved = self._saved.pop(gpu, None)
        if saved is None:
            return
        self._restore(self._h(gpu), saved)
        self._state_file(gpu).unlink(missing_ok=True)

    def restore_all(self) -> None:
        """Restore every GPU this actuator changed (errors are collected, then raised together)."""
        errors = []
        for gpu in list(self._saved):
            try:
                self.restore_defaults(gpu)
            except Exception as e:  # keep restoring the others
                errors.append(f"{gpu}: {e}")
        if errors:
            raise ActuationError("restore failed for " + "; ".join(errors))

    def _restore(self, h: Any, saved: dict[str, Any]) -> None:
        nv = self._nvml
        if saved.get("clocks_locked_by_us"):
            nv.nvmlDeviceResetGpuLockedClocks(h)
        nv.nvmlDeviceSetPowerManagementLimit(h, int(saved["power_limit_mw"]))
        if int(nv.nvmlDeviceGetPowerManagementLimit(h)) != int(saved["power_limit_mw"]):
            raise ActuationError(f"{saved['uuid']}: restored limit did not read back")

    def _restore_orphans(self) -> None:
        d = Path(self.write.state_dir)
        if not d.is_dir():
            return
        for f in sorted(d.glob("GPU-*.json")):
            try:
                saved = json.loads(f.read_text())
            except (OSError, ValueError):
                continue
            uuid = saved.get("uuid")
            if uuid not in self._handles or not self.write.may_write(uuid):
                continue  # not ours to touch: left for a run that may write it
            self._restore(self._handles[uuid], saved)
            f.unlink(missing_ok=True)
            self.orphans_restored.append(uuid)
