"""The check table, selection by name, and the run loop."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterable, Mapping
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from gpufield.errors import InputError, NvmlTimeoutError
from gpufield.harden.preflight._common import WEDGED_FIX, result
from gpufield.harden.preflight.allreduce import AllReduce
from gpufield.harden.preflight.env import IbPorts, NcclEnv, SocketIfname
from gpufield.harden.preflight.gpu_inventory import (
    ClockEvents,
    ForeignProcesses,
    GpusVisible,
    NvLinks,
    PcieLink,
)
from gpufield.harden.preflight.gpu_memory import EccErrors, RetiredPages, RowRemap
from gpufield.harden.preflight.host import CheckpointDisk, DevShm, KernelXid
from gpufield.harden.preflight.model import (
    CheckResult,
    PreflightConfig,
    PreflightContext,
    PreflightReport,
)
from gpufield.harden.protocols import PreflightCheck

__all__ = ["CHECKS", "check_names", "run_preflight", "select_checks"]

#: every check, in run order (cheap reads first, the all-reduce last)
CHECKS: tuple[PreflightCheck, ...] = (
    GpusVisible(), EccErrors(), RowRemap(), RetiredPages(), PcieLink(), NvLinks(), ClockEvents(),
    ForeignProcesses(), KernelXid(), CheckpointDisk(), DevShm(), NcclEnv(), SocketIfname(), IbPorts(), AllReduce(),
)


def check_names() -> tuple[str, ...]:
    """Names of all checks, in run order."""
    return tuple(c.name for c in CHECKS)


def select_checks(only: Iterable[str] = (), skip: Iterable[str] = (),
                  checks: tuple[PreflightCheck, ...] = CHECKS) -> tuple[PreflightCheck, ...]:
    """The checks to run: ``only`` (all when empty) minus ``skip``; a name may be a group (``gpu``).

    Args:
        only: check names or groups to run (comma-separated strings are split).
        skip: check names or groups to leave out.
        checks: the table to select from.

    Returns:
        The selected checks, table order.

    Raises:
        InputError: a name matches no check or group (the message lists the known names), or
            ``skip`` removes every check ``only`` chose.
    """
    names = [c.name for c in checks]
    groups = {n.split(".")[0] for n in names}

    def expand(items: Iterable[str], opt: str) -> set[str]:
        out: set[str] = set()
        for item in (x.strip() for s in items for x in s.split(",")):
            if not item:
                continue
            if item in names:
                out.add(item)
            elif item in groups:
                out |= {n for n in names if n.split(".")[0] == item}
            else:
                raise InputError(f"{opt}: unknown check {item!r}; known: {', '.join(names)} "
                                 f"(or a group: {', '.join(sorted(groups))})")
        return out

    want = expand(only, "--only") or set(names)
    drop = expand(skip, "--skip")
    chosen = tuple(c for c in checks if c.name in want and c.name not in drop)
    if not chosen:  # a prolog that checks nothing must not pass
        raise InputError(f"no check selected: --skip removes every check --only chose ({', '.join(sorted(want))})")
    return chosen


def run_preflight(config: PreflightConfig | None = None, *, only: Iterable[str] = (), skip: Iterable[str] = (),
                  context: PreflightContext | None = None, root: str = "/", environ: Mapping[str, str] | None = None,
                  nvml: Any | None = None, on_result: Any | None = None) -> PreflightReport:
    """Run the selected checks and collect their results.

    Args:
        config: expectations and limits (default :class:`PreflightConfig`).
        only / skip: check names or groups (see :func:`select_checks`).
        context: a ready :class:`PreflightContext` (else one is built from ``config``, ``root``,
            ``environ`` and ``nvml``).
        root: prefix of ``/sys``, ``/proc``, ``/dev`` (tests: a fake tree).
        environ: the job's environment (default ``os.environ``).
        nvml: a ``pynvml``-like module (default the real one).
        on_result: optional callback called with each :class:`CheckResult` as it completes.

    Returns:
        The :class:`PreflightReport`. Never raises for what a check finds; a check that raises
        unexpectedly becomes a ``fail`` naming the exception.

    Raises:
        InputError: an unknown check name in ``only`` / ``skip``.
    """
    chosen = select_checks(only, skip)
    skipped = {c.name for c in select_checks(only, ())} - {c.name for c in chosen}
    ctx = context or PreflightContext(config, root=root, environ=environ, nvml=nvml)
    started = datetime.now(UTC).isoformat(timespec="seconds")
    t_all = time.perf_counter()
    results: list[CheckResult] = []
    for check in CHECKS:
        if check.name in skipped:  # listed, so a reader sees what was not looked at
            r = result(check.name, "skip", "not run: left out with --skip")
            results.append(r)
            if on_result is not None:
                on_result(r)
            continue
        if check not in chosen:
            continue
        t0 = time.perf_counter()
        try:
            r = check.run(ctx)
        except NvmlTimeoutError as e:
            r = result(check.name, "fail", str(e), fix=WEDGED_FIX)
        except Exception as e:  # a bug or an unforeseen machine state: a result, not a crash
            r = result(check.name, "fail", f"check raised {type(e).__name__}: {e}",
                       fix="report this as a gpufield bug with the message")
        r = replace(r, elapsed_s=time.perf_counter() - t0)
        results.append(r)
        if on_result is not None:
            on_result(r)
    st = ctx._state  # only if some check read NVML
    return PreflightReport(results=tuple(results), host=socket.gethostname(), started_utc=started,
                           elapsed_s=time.perf_counter() - t_all,
                           nvml_elapsed_s=None if st is None else st.elapsed_s,
                           nvml_wedged=st is not None and st.timeout is not None)
