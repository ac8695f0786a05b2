"""An exclusive lock on the actuator state directory, with the holder's PID (one writer per host).

Two actuator processes sharing ``state_dir`` would each treat the other's saved originals as orphans
of a crashed run: the second would "restore" the first one's live cap and delete its state file. So
a writing :class:`~gpufield.power.actuators.nvml.NvmlActuator` takes this lock before it looks at any
state file. The lock is ``fcntl.flock`` on ``<state_dir>/actuator.lock`` (the kernel drops it when
the holder dies, however it dies) and the file records the holder's PID:

* lock held by a live process -> :class:`~gpufield.errors.ActuationError` naming that PID;
* file left by a process that died (lock free, PID recorded) -> taken over, with a message naming
  the dead PID (:attr:`StateDirLock.takeover`), and its state files are then restored as orphans.
"""

from __future__ import annotations

import fcntl
import logging
import os
from pathlib import Path

from gpufield.errors import ActuationError

__all__ = ["StateDirLock"]

_log = logging.getLogger("gpufield.power")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


class StateDirLock:
    """Exclusive, PID-stamped lock on one state directory (see the module docstring).

    Args:
        state_dir: the actuator's state directory (created if missing).
    """

    def __init__(self, state_dir: str | os.PathLike) -> None:
        self.path = Path(state_dir) / "actuator.lock"
        self._fd: int | None = None
        self.takeover: str | None = None

    def _recorded_pid(self, fd: int) -> int | None:
        os.lseek(fd, 0, os.SEEK_SET)
        raw = os.read(fd, 64).decode(errors="replace").strip()
        return int(raw) if raw.isdigit() else None

    def acquire(self) -> None:
        """Take the lock or refuse.

        Raises:
            ActuationError: another live process holds it (its PID is named).
        """
        if self._fd is not None:
            return
        if self.path.parent.exists() and not self.path.parent.is_dir():  # mkdir would say only "File exists"
            from gpufield.errors import InputError

            raise InputError("state_dir exists and is not a directory; expected the folder for the lock and saved "
                             "settings", path=str(self.path.parent))
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = self._recorded_pid(fd)
            os.close(fd)
            who = f"PID {pid}" if pid is not None else "an unknown process"
            raise ActuationError(f"state directory {self.path.parent} is locked by another actuator ({who}); "
                                 "refusing to start: it would restore that process's live settings") from None
        prev = self._recorded_pid(fd)
        if prev is not None and prev != os.getpid():
            state = "no longer running" if not _pid_alive(prev) else "running but not holding the lock"
            self.takeover = f"took over the lock of {self.path} left by PID {prev} ({state})"
            _log.warning(self.takeover)
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, os.SEEK_SET)
        os.write(fd, f"{os.getpid()}\n".encode())
        os.fsync(fd)
        self._fd = fd

    def release(self) -> None:
        """Clear the PID and drop the lock (idempotent)."""
        if self._fd is None:
            return
        try:
            os.ftruncate(self._fd, 0)
        finally:
            os.close(self._fd)  # closing the descriptor releases the flock
            self._fd = None
