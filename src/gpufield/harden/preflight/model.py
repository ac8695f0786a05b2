"""Data model of preflight: configuration, the context checks read, results and the report."""

from __future__ import annotations

import math
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from gpufield.errors import InputError

__all__ = ["CheckResult", "NvmlState", "PreflightConfig", "PreflightContext", "PreflightReport",
           "STATUSES", "SEVERITIES"]

Status = Literal["pass", "warn", "fail", "skip"]
Severity = Literal["info", "warning", "critical"]
#: result statuses, best first
STATUSES: tuple[str, ...] = ("pass", "skip", "warn", "fail")
#: how bad a non-passing result is: ``critical`` = do not run a job here (exclude / drain the node)
SEVERITIES: tuple[str, ...] = ("info", "warning", "critical")


@dataclass(frozen=True, kw_only=True, slots=True)
class CheckResult:
    """Outcome of one check.

    Attributes:
        name: the check's name (``"gpu.ecc"``).
        status: ``pass`` / ``warn`` / ``fail`` / ``skip`` (could not be checked here: no GPU, no IB...).
        severity: ``info`` / ``warning`` / ``critical`` (critical: keep jobs off this node).
        reason: one line saying what was found.
        values: measured values, JSON-serialisable, units in the key names (``free_gib``, ``busbw_gb_per_s``).
        fix: what to do about a warn / fail, or None.
        elapsed_s: wall time the check took, seconds (set by the runner).
    """

    name: str
    status: Status
    severity: Severity
    reason: str
    values: dict[str, Any] = field(default_factory=dict, hash=False)
    fix: str | None = None
    elapsed_s: float = 0.0

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, got {self.status!r}")
        if self.severity not in SEVERITIES:
            raise ValueError(f"severity must be one of {SEVERITIES}, got {self.severity!r}")

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (see :mod:`gpufield.harden.preflight.report` for the schema)."""
        return {"name": self.name, "status": self.status, "severity": self.severity, "reason": self.reason,
                "values": self.values, "fix": self.fix, "elapsed_s": round(self.elapsed_s, 6)}


def _positive(name: str, v: float | None, *, allow_zero: bool = False, allow_none: bool = True) -> None:
    if v is None and allow_none:
        return
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and (v >= 0 if allow_zero else v > 0)
    if not ok:
        raise InputError(f"{name} must be a {'non-negative' if allow_zero else 'positive'} number, got {v!r}")


@dataclass(frozen=True, kw_only=True, slots=True)
class PreflightConfig:
    """What the node is expected to look like, and the limits of the active checks.

    Attributes:
        expected_gpu_count: GPUs NVML must see (None: any number; with a number, no NVML is a fail).
        expected_gpu_model: product name the GPUs must have, matched through the spec catalogue
            (``"H200"`` matches ``"NVIDIA H200"``) or else as a case-insensitive substring.
        expected_nvlinks: NVLinks per GPU that must be up (None: all links NVML lists must be up).
        checkpoint_dir: directory checkpoints are written to (free space and writability checked).
        min_free_disk_gib: free space needed there, GiB.
        min_shm_gib: size /dev/shm must have, GiB (Docker's default is 64 MiB; NCCL and DataLoader
            workers need far more).
        max_foreign_gpu_memory_mib: memory another process may hold on a GPU before it fails, MiB.
        max_retired_pages: retired pages per GPU (SBE + DBE) before a warning (Azure's 60-page rule).
        nvml_timeout_s: deadline of every NVML call, s.
        kernel_log: a file with the kernel log (``dmesg`` / ``journalctl -k -b`` output) to read
            instead of ``/dev/kmsg``.
        allreduce_backend: ``auto`` (NCCL across the GPUs when NVML sees >= 2, else gloo on CPU),
            ``gloo`` or ``nccl``.
        allreduce_cpu_ranks: processes of the gloo all-reduce (>= 2).
        allreduce_bytes: message size of the all-reduce, bytes.
        allreduce_iters: timed iterations (after 2 warm-up ones).
        allreduce_timeout_s: limit for the whole all-reduce (start-up included), s.
        min_busbw_fraction: GPU bus bandwidth below this fraction of the catalogue's one-direction
            NVLink bandwidth is a warning.
    """

    expected_gpu_count: int | None = None
    expected_gpu_model: str | None = None
    expected_nvlinks: int | None = None
    checkpoint_dir: str = "."
    min_free_disk_gib: float = 50.0
    min_shm_gib: float = 1.0
    max_foreign_gpu_memory_mib: float = 1024.0
    max_retired_pages: int = 60
    nvml_timeout_s: float = 10.0
    kernel_log: str | None = None
    allreduce_backend: Literal["auto", "gloo", "nccl"] = "auto"
    allreduce_cpu_ranks: int = 2
    allreduce_bytes: int = 64 * 2**20
    allreduce_iters: int = 10
    allreduce_timeout_s: float = 120.0
    min_busbw_fraction: float = 0.5

    def __post_init__(self) -> None:
        for name in ("expected_gpu_count", "expected_nvlinks"):
            v = getattr(self, name)
            if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 0):
                raise InputError(f"{name} must be a whole number >= 0, got {v!r}")
        if self.expected_gpu_model is not None and not self.expected_gpu_model.strip():
            raise InputError("expected_gpu_model must not be empty")
        for name in ("min_free_disk_gib", "min_shm_gib", "max_foreign_gpu_memory_mib"):
            _positive(name, getattr(self, name), allow_zero=True, allow_none=False)
        for name in ("nvml_timeout_s", "allreduce_timeout_s"):
            _positive(name, getattr(self, name), allow_none=False)
        if not isinstance(self.max_retired_pages, int) or self.max_retired_pages < 0:
            raise InputError(f"max_retired_pages must be a whole number >= 0, got {self.max_retired_pages!r}")
        if self.allreduce_backend not in ("auto", "gloo", "nccl"):
            raise InputError(f"allreduce_backend must be auto, gloo or nccl, got {self.allreduce_backend!r}")
        if not isinstance(self.allreduce_cpu_ranks, int) or not 2 <= self.allreduce_cpu_ranks <= 64:
            raise InputError(f"allreduce_cpu_ranks must be a whole number in 2..64, got {self.allreduce_cpu_ranks!r}")
        if not isinstance(self.allreduce_bytes, int) or not 4 <= self.allreduce_bytes <= 2**34:
            raise InputError(f"allreduce_bytes must be a whole number in 4..2^34, got {self.allreduce_bytes!r}")
        if not isinstance(self.allreduce_iters, int) or not 1 <= self.allreduce_iters <= 1000:
            raise InputError(f"allreduce_iters must be a whole number in 1..1000, got {self.allreduce_iters!r}")
        if not (isinstance(self.min_busbw_fraction, (int, float)) and 0 <= self.min_busbw_fraction <= 1):
            raise InputError(f"min_busbw_fraction must lie in [0, 1], got {self.min_busbw_fraction!r}")


@dataclass(kw_only=True, slots=True)
class NvmlState:
    """What one bounded NVML pass read (shared by all GPU checks; read once per run).

    Attributes:
        unavailable: why NVML cannot be used here (no driver, no library...), or None.
        timeout: the ``NvmlTimeoutError`` message of a call that missed its deadline, or None.
        stage: where the pass stopped: ``open`` / ``sample`` / ``health`` / ``done``.
        driver_version: driver version string.
        gpus: enumerated :class:`~gpufield.telemetry.GpuInfo`.
        lost: ``(index, NVML error name)`` of GPUs NVML counts but could not open.
        samples / health: readings, or None when the pass stopped before them.
        elapsed_s: wall time of the pass.
    """

    unavailable: str | None = None
    timeout: str | None = None
    stage: str = "open"
    driver_version: str | None = None
    gpus: list[Any] = field(default_factory=list)
    lost: list[tuple[int, str]] = field(default_factory=list)
    samples: list[Any] | None = None
    health: list[Any] | None = None
    elapsed_s: float = 0.0


class PreflightContext:
    """Everything a check reads: configuration, the filesystem root, the environment and NVML.

    Args:
        config: the :class:`PreflightConfig`.
        root: prefix of ``/sys``, ``/proc`` and ``/dev`` paths (tests pass a fake tree in a tmp dir).
        environ: environment the job will run with (default ``os.environ``).
        nvml: a ``pynvml``-like module (default the real one; tests pass ``FakeNvml``).
    """

    def __init__(self, config: PreflightConfig | None = None, *, root: str | os.PathLike[str] = "/",
                 environ: Mapping[str, str] | None = None, nvml: Any | None = None) -> None:
        self.config = config or PreflightConfig()
        self.root = Path(root)
        self.environ: Mapping[str, str] = dict(os.environ if environ is None else environ)
        self._nvml = nvml
        self._state: NvmlState | None = None

    def path(self, absolute: str) -> Path:
        """``absolute`` (``"/sys/class/net"``) under :attr:`root`."""
        return self.root / absolute.lstrip("/")

    def nvml_state(self) -> NvmlState:
        """The NVML readings, read on first use with every call bounded by ``config.nvml_timeout_s``."""
        if self._state is None:
            self._state = _read_nvml(self._nvml, self.config.nvml_timeout_s)
        return self._state


def _read_nvml(nvml: Any | None, timeout_s: float) -> NvmlState:
    from gpufield.errors import DependencyError, NvmlTimeoutError, NvmlUnavailableError
    from gpufield.telemetry.nvml import NvmlReader

    st = NvmlState()
    t0 = time.perf_counter()
    reader = NvmlReader(nvml, call_timeout_s=timeout_s)
    try:
        with reader:
            st.driver_version, st.gpus, st.lost = reader.driver_version, reader.gpus, list(reader.unavailable)
            st.stage = "sample"
            st.samples = reader.sample()
            st.stage = "health"
            st.health = reader.health()
            st.stage = "done"
    except (NvmlUnavailableError, DependencyError) as e:
        st.unavailable = str(e)
    except NvmlTimeoutError as e:
        st.timeout = str(e)
    st.elapsed_s = time.perf_counter() - t0
    return st


@dataclass(frozen=True, kw_only=True, slots=True)
class PreflightReport:
    """All results of one preflight run.

    Attributes:
        results: one :class:`CheckResult` per check run, in table order.
        host: the node's hostname.
        started_utc: ISO 8601 start time.
        elapsed_s: wall time of the whole run.
        nvml_elapsed_s: part of it spent in the shared NVML pass (charged to the first GPU check too).
        nvml_wedged: an NVML call missed its deadline.
    """

    results: tuple[CheckResult, ...]
    host: str
    started_utc: str
    elapsed_s: float
    nvml_elapsed_s: float | None = None
    nvml_wedged: bool = False

    @property
    def status(self) -> str:
        """Overall: ``fail`` if any check failed, else ``warn`` if any warned, else ``pass``
        (also when everything was skipped: nothing wrong was found)."""
        got = {r.status for r in self.results}
        return "fail" if "fail" in got else "warn" if "warn" in got else "pass"

    def exit_code(self, *, strict: bool = False) -> int:
        """0 = no check failed (warnings allowed unless ``strict``), 1 = a check failed (or warned
        with ``strict``). Bad input (2) and a missing dependency (3) never reach a report."""
        s = self.status
        return 1 if s == "fail" or (strict and s == "warn") else 0
