"""Periodic NVML sampling into a callback or ring buffer, and the energy cross-check.

Design per ``../shared/reference/power.md`` section 7.3 and ``triage.md`` section 5.4: one sampler
thread per host, 1 s default (50-100 ms for power work), deadlines on the monotonic clock so the
period does not drift; energy for reporting is the counter difference, cross-checked against the
trapezoid integral of sampled power, flagging disagreement above 3 % (zeus issue #181).

Example::

    from gpufield.telemetry import NvmlReader, NvmlSampler, energy_cross_check
    with NvmlReader() as r, NvmlSampler(r, interval_s=0.1) as s:
        run_workload()
    print(energy_cross_check(s.samples, index=0))
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from gpufield.errors import TelemetryError
from gpufield.telemetry.nvml import GpuSample, NvmlReader

__all__ = ["NvmlSampler", "EnergyCheck", "energy_cross_check"]


class NvmlSampler:
    """Background thread calling ``reader.sample()`` every ``interval_s`` seconds.

    Each batch (one :class:`GpuSample` per GPU) goes to ``callback`` if given and into a ring
    buffer of the last ``max_samples`` samples. An exception inside the loop is kept in
    :attr:`errors` and sampling goes on (a telemetry hiccup must not stop a job); a callback
    exception is kept the same way.

    Args:
        reader: an open :class:`NvmlReader` (or anything with ``sample() -> list[GpuSample]``).
        interval_s: period in seconds (> 0).
        callback: called with each batch, from the sampler thread.
        max_samples: ring-buffer size in samples (all GPUs together).

    Raises:
        ValueError: ``interval_s <= 0`` or ``max_samples < 1``.
    """

    def __init__(self, reader: NvmlReader, *, interval_s: float = 1.0,
                 callback: Callable[[list[GpuSample]], None] | None = None,
                 max_samples: int = 1_000_000) -> None:
        if interval_s <= 0:
            raise ValueError(f"interval_s must be > 0, got {interval_s}")
        if max_samples < 1:
            raise ValueError(f"max_samples must be >= 1, got {max_samples}")
        self._reader = reader
        self.interval_s = float(interval_s)
        self._callback = callback
        self._buf: deque[GpuSample] = deque(maxlen=max_samples)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.errors: list[BaseException] = []
        self.batches = 0

    def __enter__(self) -> NvmlSampler:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        """Start the thread (takes a first batch immediately).

        Raises:
            TelemetryError: already running.
        """
        if self._thread is not None:
            raise TelemetryError("NvmlSampler already started")
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="gpufield-nvml-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread after a final batch (so the window's end is sampled) and join it."""
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join()
        self._thread = None
        self._take()

    @property
    def samples(self) -> list[GpuSample]:
        """A copy of the buffered samples, oldest first."""
        with self._lock:
            return list(self._buf)

    def _take(self) -> None:
        try:
            batch = self._reader.sample()
        except Exception as e:  # keep sampling; report through .errors
            self.errors.append(e)
            return
        with self._lock:
            self._buf.extend(batch)
            self.batches += 1
        if self._callback is not None:
            try:
                self._callback(batch)
            except Exception as e:
                self.errors.append(e)

    def _run(self) -> None:
        deadline = time.monotonic()
        while not self._stop.is_set():
            self._take()
            deadline += self.interval_s
            now = time.monotonic()
            if deadline < now:  # fell behind: skip missed ticks rather than burst
                deadline = now + self.interval_s - ((now - deadline) % self.interval_s)
            self._stop.wait(deadline - now)


@dataclass(frozen=True, kw_only=True, slots=True)
class EnergyCheck:
    """Energy over a window from the counter and from integrated power.

    Attributes:
        index: GPU index.
        duration_s: window length in s.
        counter_j: energy-counter difference in J (the value to report).
        integrated_j: trapezoid integral of ``power_w`` over the samples in J.
        rel_diff: ``(integrated_j - counter_j) / counter_j``.
        tolerance: the allowed ``|rel_diff|``.
        ok: ``|rel_diff| <= tolerance``.
    """

    index: int
    duration_s: float
    counter_j: float
    integrated_j: float
    rel_diff: float
    tolerance: float
    ok: bool


def energy_cross_check(samples: Iterable[GpuSample], *, index: int | None = None,
                       tolerance: float = 0.03) -> EnergyCheck:
    """Compare the energy counter delta with the trapezoid integral of sampled power.

    Args:
        samples: samples of one or more GPUs in any order (sorted by ``ts_ns`` here).
        index: which GPU; may be omitted when the samples hold only one.
        tolerance: allowed relative disagreement (default 3 %, power.md section 7.3).

    Returns:
        :class:`EnergyCheck`.

    Raises:
        TelemetryError: fewer than two samples with both power and energy, several GPUs and no
            ``index``, a counter that went backwards (driver reload), or zero counter energy.
    """
    rows = [s for s in samples if s.power_w is not None and s.energy_j is not None]
    indices = {s.index for s in rows}
    if index is None:
        if len(indices) > 1:
            raise TelemetryError(f"samples hold GPUs {sorted(indices)}; pass index=")
        index = next(iter(indices), -1)
    rows = sorted((s for s in rows if s.index == index), key=lambda s: s.ts_ns)
    if len(rows) < 2:
        raise TelemetryError(f"GPU {index}: need >= 2 samples with power and energy, got {len(rows)}")
    counter_j = rows[-1].energy_j - rows[0].energy_j
    if counter_j < 0:
        raise TelemetryError(f"GPU {index}: energy counter went backwards ({counter_j:.3f} J): driver reloaded?")
    if counter_j == 0:
        raise TelemetryError(f"GPU {index}: energy counter did not advance over the window")
    integrated = 0.0
    for a, b in zip(rows, rows[1:], strict=False):
        integrated += 0.5 * (a.power_w + b.power_w) * (b.ts_ns - a.ts_ns) * 1e-9
    rel = (integrated - counter_j) / counter_j
    return EnergyCheck(index=index, duration_s=(rows[-1].ts_ns - rows[0].ts_ns) * 1e-9, counter_j=counter_j,
                       integrated_j=integrated, rel_diff=rel, tolerance=tolerance, ok=abs(rel) <= tolerance)
