"""Every NVML call with a deadline: a proxy of the ``pynvml`` module that runs calls on a worker thread.

A wedged driver makes NVML calls block for minutes or forever (``nvidia-smi`` hanging in D state,
sglang #31229 in ``../shared/reference/triage.md`` "Update 2026-12"). :class:`BoundedNvml` wraps a
``pynvml``-like module: each ``nvml*`` function runs on one daemon worker thread and the caller waits
at most ``timeout_s``. A call that misses its deadline raises
:class:`~gpufield.errors.NvmlTimeoutError` naming the call; from then on the module is *wedged*:
every later call raises at once (the worker is still stuck in the driver, so queueing more work
behind it would only hang too), and ``nvmlShutdown`` becomes a no-op.

The worker is a daemon thread, so a stuck call never keeps the interpreter from exiting normally.
A thread blocked in uninterruptible kernel sleep can still delay process teardown; callers that must
exit promptly after a timeout (a Slurm prolog) should ``os._exit`` after writing their output, as
``gpufield preflight`` does.

Constants, structures and exception classes are forwarded unchanged, so ``except nv.NVMLError_NotSupported``
works the same through the proxy.

Example::

    import pynvml
    from gpufield.telemetry import NvmlReader
    with NvmlReader(call_timeout_s=5.0) as r:     # same as NvmlReader(BoundedNvml(pynvml, timeout_s=5.0))
        r.sample()
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any

from gpufield.errors import NvmlTimeoutError

__all__ = ["BoundedNvml"]


class _Worker:
    """One daemon thread that runs submitted calls in order."""

    def __init__(self) -> None:
        self._q: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._loop, name="gpufield-nvml", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while True:
            item = self._q.get()
            if item is None:
                return
            fn, args, kwargs, box, done = item
            try:
                box.append((True, fn(*args, **kwargs)))
            except BaseException as e:  # handed to the caller, re-raised there
                box.append((False, e))
            done.set()

    def submit(self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any],
               timeout_s: float) -> tuple[bool, Any] | None:
        box: list[tuple[bool, Any]] = []
        done = threading.Event()
        self._q.put((fn, args, kwargs, box, done))
        return box[0] if done.wait(timeout_s) else None

    def stop(self) -> None:
        self._q.put(None)


class BoundedNvml:
    """A ``pynvml``-like module whose every ``nvml*`` call returns within ``timeout_s`` or raises.

    Args:
        nvml: the module to wrap (the real ``pynvml`` or :class:`gpufield.testing.FakeNvml`).
        timeout_s: deadline of each call in seconds (> 0).

    Attributes:
        wedged: the :class:`~gpufield.errors.NvmlTimeoutError` of the first call that missed its
            deadline, or None while NVML answers.

    Raises:
        ValueError: ``timeout_s`` is not a positive finite number.
    """

    def __init__(self, nvml: Any, *, timeout_s: float) -> None:
        if not (isinstance(timeout_s, (int, float)) and 0 < timeout_s < float("inf")):
            raise ValueError(f"timeout_s must be a positive number of seconds, got {timeout_s!r}")
        self._nv = nvml
        self.timeout_s = float(timeout_s)
        self.wedged: NvmlTimeoutError | None = None
        self._worker: _Worker | None = None

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._nv, name)
        if not (callable(value) and name.startswith("nvml") and not isinstance(value, type)):
            return value

        def bounded(*args: Any, **kwargs: Any) -> Any:
            return self.call(name, value, *args, **kwargs)

        bounded.__name__ = name
        return bounded

    def call(self, name: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run ``fn(*args, **kwargs)`` on the worker thread with the deadline.

        Args:
            name: the NVML function name (for the error message).
            fn: the function.

        Returns:
            What ``fn`` returns; its exceptions (``NVMLError`` ...) are re-raised here.

        Raises:
            NvmlTimeoutError: this call missed the deadline, or an earlier one did.
        """
        if self.wedged is not None:
            if name == "nvmlShutdown":
                return None
            raise NvmlTimeoutError(self.wedged.call, self.wedged.timeout_s, earlier=True)
        if self._worker is None:
            self._worker = _Worker()
        got = self._worker.submit(fn, args, kwargs, self.timeout_s)
        if got is None:
            self.wedged = NvmlTimeoutError(name, self.timeout_s)
            self._worker.stop()  # abandoned: it ends if the stuck call ever returns
            self._worker = None
            raise self.wedged
        ok, value = got
        if not ok:
            raise value
        return value

    def close(self) -> None:
        """Stop the worker thread (idempotent; a wedged worker is left to the daemon flag)."""
        if self._worker is not None:
            self._worker.stop()
            self._worker = None
