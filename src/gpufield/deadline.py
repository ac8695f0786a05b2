"""Deadlines for one run: a result that is final by the timeout, in every phase (torch-free, so
a command can arm it before its heavy imports; used by :mod:`gpufield.verify`).

VNN-COMP counts a result later than its timeout as a failure, and a scheduler that kills at the
deadline gets none at all. Two mechanisms, both on ``time.monotonic()``:

* :class:`Deadline` is passed through the runner's phases. Interruptible phases (PGD steps,
  α-CROWN iterations, branch-and-bound rounds, MIP workers) stop when the time left is shorter
  than their last step took; a phase that cannot be interrupted (a float64 CROWN re-check, the
  root bounds for branch and bound) is started only when :meth:`Deadline.allows` its estimated
  duration (:class:`PhaseClock` keeps the measured ones).
* :class:`ResultSeal` is the backstop: a timer thread that writes the fallback result
  (``timeout``) ``grace_s`` after the deadline unless the real result was written first; after
  that the late result is discarded, so the file never changes once the deadline has passed.

:meth:`Deadline.from_process_start` counts from the start of the process (Linux
``/proc/self/stat``), so interpreter start-up, imports and loading are inside the budget, as
VNN-COMP's ``run_instance.sh`` measures them.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

_IMPORTED_S = time.monotonic()


def process_start_s() -> float:
    """``time.monotonic()`` value of this process's start (Linux; elsewhere: this module's import).

    The start time is field 22 of ``/proc/self/stat`` in clock ticks since boot
    (``CLOCK_BOOTTIME``), converted by the age of the process.
    """
    try:
        with open("/proc/self/stat") as f:
            after_comm = f.read().rsplit(")", 1)[1].split()
        start_ticks = int(after_comm[19])  # field 22; the list starts at field 3
        age_s = time.clock_gettime(time.CLOCK_BOOTTIME) - start_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        return _IMPORTED_S
    if not 0.0 <= age_s < 86400 * 365:  # a clock the start time is not measured on
        return _IMPORTED_S
    return min(time.monotonic() - age_s, _IMPORTED_S)


def write_text_atomic(path: str | Path, text: str) -> None:
    """Write ``text`` to a unique temporary file beside ``path`` and rename it over ``path``
    (:func:`gpufield._files.atomic_write`, which also refuses devices, FIFOs and links)."""
    from gpufield._files import atomic_write

    atomic_write(path, text, force=True)


@dataclass(frozen=True, slots=True)
class Deadline:
    """A point on the ``time.monotonic()`` clock by which a run must have answered.

    Attributes:
        end_s: the deadline, ``time.monotonic()`` seconds.
    """

    end_s: float

    @classmethod
    def after(cls, seconds: float, *, start_s: float | None = None) -> Deadline:
        """``seconds`` after ``start_s`` (default: now)."""
        return cls((time.monotonic() if start_s is None else start_s) + seconds)

    @classmethod
    def from_process_start(cls, seconds: float) -> Deadline:
        """``seconds`` after this process started (see :func:`process_start_s`)."""
        return cls(process_start_s() + seconds)

    def left_s(self) -> float:
        """Seconds left (negative once passed)."""
        return self.end_s - time.monotonic()

    def expired(self) -> bool:
        """Whether the deadline has passed."""
        return time.monotonic() > self.end_s

    def allows(self, estimate_s: float) -> bool:
        """Whether a phase that cannot be interrupted, expected to take ``estimate_s``, would end in time."""
        return time.monotonic() + max(estimate_s, 0.0) <= self.end_s

    def earlier(self, other_end_s: float) -> Deadline:
        """The earlier of this deadline and ``other_end_s``."""
        return self if self.end_s <= other_end_s else Deadline(other_end_s)


@dataclass
class PhaseClock:
    """Measured durations of named phases, for estimates of phases that cannot be interrupted.

    Attributes:
        seconds: phase name -> the longest duration measured, seconds.
    """

    seconds: dict[str, float] = field(default_factory=dict)

    def timed(self, name: str):
        """Context manager recording the duration of one run of phase ``name``."""
        clock = self

        class _T:
            def __enter__(self):
                self.t = time.monotonic()

            def __exit__(self, *exc):
                d = time.monotonic() - self.t
                clock.seconds[name] = max(clock.seconds.get(name, 0.0), d)
                return False

        return _T()

    def estimate(self, name: str, default_s: float = 0.0) -> float:
        """The longest measured duration of ``name`` (``default_s`` if never measured)."""
        return self.seconds.get(name, default_s)


class ResultSeal:
    """Write a fallback result at ``end_s`` unless the real one is written first (thread-safe).

    Args:
        end_s: ``time.monotonic()`` time at which ``fallback`` runs.
        fallback: writes the fallback result (e.g. ``timeout``); runs at most once.

    Use as a context manager around the work; write the real result with :meth:`finish`.
    """

    def __init__(self, end_s: float, fallback: Callable[[], None]):
        self.end_s, self.fallback = end_s, fallback
        self.sealed = False  # the fallback was written; later results are discarded
        self._done = False
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None

    def _fire(self) -> None:
        with self._lock:
            if not self._done:
                self.fallback()
                self.sealed = self._done = True

    def __enter__(self) -> ResultSeal:
        self._timer = threading.Timer(max(0.0, self.end_s - time.monotonic()), self._fire)
        self._timer.daemon = True
        self._timer.name = "gpufield-result-seal"
        self._timer.start()
        return self

    def finish(self, write: Callable[[], None]) -> bool:
        """Run ``write`` (the real result) unless the fallback came first; True if it ran."""
        with self._lock:
            if self._done:
                return False
            if time.monotonic() > self.end_s:  # the timer is late (a busy interpreter): seal now
                self.fallback()
                self.sealed = self._done = True
                return False
            write()
            self._done = True
            return True

    def __exit__(self, *exc) -> bool:
        if self._timer is not None:
            self._timer.cancel()
        return False


class ProcessResultSeal:
    """:class:`ResultSeal` whose backstop runs in a forked child process, so it fires on time even while
    this process holds the GIL for seconds (importing torch, a long C call): a timer *thread* cannot run
    then, and on a loaded 2-core machine ``gpufield verify run --timeout 2`` sealed 0.6 s late that way.

    The child is forked when the seal is entered (arm it before the heavy imports, while the process is
    small and has no other threads), keeps only the write end of a reply pipe and the read end of a
    request pipe, and does nothing but wait. Protocol: :meth:`finish` sends one byte and reads one reply
    before writing; the child answers ``o`` (go ahead) if the byte came before ``end_s``, else at
    ``end_s`` it writes ``text`` to ``path`` atomically itself, answers ``s`` (sealed) and exits. The
    decision is taken in the child alone, so the file never changes once the seal has fired.

    Args:
        end_s: ``time.monotonic()`` time at which the fallback is written (the monotonic clock is
            system-wide on Linux, so the child reads the same clock).
        path: the result file; text: the fallback result (e.g. ``"timeout\\n"``).

    Same interface as :class:`ResultSeal` (context manager, :meth:`finish`, ``sealed``). Linux/POSIX only
    (``os.fork``); raises ``OSError`` if the fork fails.
    """

    def __init__(self, end_s: float, path: str | Path, text: str):
        self.end_s, self.path, self.text = end_s, Path(path), text
        self.sealed = False
        self._done = False
        self._lock = threading.Lock()
        self._req_w = self._rep_r = -1
        self._pid = 0

    def __enter__(self) -> ProcessResultSeal:
        req_r, req_w = os.pipe()
        rep_r, rep_w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: wait for a request or the end, answer, exit without Python's clean-up
            code = 0
            try:
                os.close(req_w)
                os.close(rep_r)
                import select

                left = self.end_s - time.monotonic()
                ready = select.select([req_r], [], [], max(0.0, left))[0] if left > 0 else []
                if ready and os.read(req_r, 1):
                    os.write(rep_w, b"o")
                else:  # the end came first (or the parent died: EOF): seal
                    write_text_atomic(self.path, self.text)
                    os.write(rep_w, b"s")
            except BaseException:  # noqa: BLE001 - a child must never return into the parent's code
                code = 1
            finally:
                os._exit(code)
        os.close(req_r)
        os.close(rep_w)
        self._req_w, self._rep_r, self._pid = req_w, rep_r, pid
        return self

    def _ask(self) -> bool:
        """True if the child let this process write (it had not sealed)."""
        try:
            os.write(self._req_w, b"f")
        except OSError:  # the child is gone: it sealed (or died; then nobody wrote, so write)
            pass
        reply = os.read(self._rep_r, 1)
        if reply == b"s":
            return False
        return True  # b"o", or EOF from a child that died without sealing

    def finish(self, write: Callable[[], None]) -> bool:
        """Run ``write`` (the real result) unless the child sealed first; True if it ran."""
        with self._lock:
            if self._done:
                return False
            self._done = True
            if not self._ask():
                self.sealed = True
                return False
            write()
            return True

    def __exit__(self, *exc) -> bool:
        with self._lock:
            if not self._done:  # left without a result (as ResultSeal cancels its timer): stand the child
                self._done = True  # down, or learn that it sealed already
                self.sealed = not self._ask()
        for fd in (self._req_w, self._rep_r):
            try:
                os.close(fd)
            except OSError:
                pass
        if self._pid:
            try:
                os.waitpid(self._pid, 0)
            except ChildProcessError:
                pass
        return False
