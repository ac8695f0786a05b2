"""``gpufield preflight``: read-only node checks before a job, for people and for scheduler prologs.

Exit codes (a Slurm prolog that exits non-zero drains the node, so only a real failure is non-zero):

- 0: no check failed (passes, skips, and warnings unless ``--strict``)
- 1: at least one check failed (with ``--strict``: or warned)
- 2: bad input (unknown check name, bad number, existing ``--out`` without ``--force``), one line on stderr
- 3: a missing optional dependency
"""

from __future__ import annotations

import math
import os
import sys
from typing import Annotated

import typer

from gpufield.errors import InputError

HELP = (
    "Check this node before a job: GPUs, ECC / row remaps, Xid since boot, PCIe / NVLink, clocks, stray GPU "
    "processes, disk, /dev/shm, NCCL environment, IB ports, and a short real all-reduce.\n\n"
    "Exit status: 0 no check failed (warnings allowed unless --strict); 1 a check failed (or warned with "
    "--strict); 2 bad input; 3 missing dependency.\n\n"
    "JSON (--json, --out) has schema gpufield.preflight/1: host, started_utc, elapsed_s, status, exit_code, "
    "counts, and per check: name, status (pass/warn/fail/skip), severity (info/warning/critical), reason, "
    "values, fix, elapsed_s.\n\n"
    "Slurm prolog: gpufield preflight --expect-gpus 8 --skip comm --out /var/log/gpufield/preflight.json --force"
)


def _whole(opt: str, value: str | None) -> int | None:
    if value is None:
        return None
    try:
        n = int(value.strip())
    except ValueError:
        raise InputError(f"{opt}: expected a whole number >= 0, got {value!r}") from None
    if n < 0:
        raise InputError(f"{opt}: expected a whole number >= 0, got {value!r}")
    return n


def _check_kernel_log(path: str) -> None:
    """``--kernel-log``: an existing regular file; a FIFO is read if a writer appears (``_files.open_fifo``);
    anything else (missing, a directory, a device) is bad input (exit 2), not a skipped check."""
    import stat

    try:
        mode = os.stat(path).st_mode
    except OSError as e:
        raise InputError(f"--kernel-log: {e.strerror or e}; expected a saved dmesg / journalctl -k -b file",
                         path=path) from None
    if stat.S_ISDIR(mode):
        raise InputError("--kernel-log is a directory; expected a saved dmesg / journalctl -k -b file", path=path)
    if not (stat.S_ISREG(mode) or stat.S_ISFIFO(mode)):  # a device: /dev/zero would be read forever
        raise InputError("--kernel-log is not a regular file; expected a saved dmesg / journalctl -k -b file "
                         "(without --kernel-log, /dev/kmsg is read)", path=path)
    if not os.access(path, os.R_OK):
        raise InputError("--kernel-log is not readable", path=path)


def _number(opt: str, value: str | None, *, positive: bool = False) -> float | None:
    if value is None:
        return None
    try:
        x = float(value.strip())
    except ValueError:
        raise InputError(f"{opt}: expected a number, got {value!r}") from None
    if not math.isfinite(x) or x < 0 or (positive and x == 0):
        raise InputError(f"{opt}: expected a {'positive' if positive else 'non-negative'} number, got {value!r}")
    return x


def preflight_cmd(
    json_out: Annotated[bool, typer.Option("--json", help="print the JSON report on stdout instead of the table")] = False,
    out: Annotated[str | None, typer.Option("--out", help="also write the JSON report to FILE (temp file + rename)")] = None,
    force: Annotated[bool, typer.Option("--force", help="replace an existing --out file (never a special file)")] = False,
    only: Annotated[list[str] | None, typer.Option("--only", help="run only these checks or groups (gpu, kernel, "
                                                   "host, env, net, comm); repeat or comma-separate")] = None,
    skip: Annotated[list[str] | None, typer.Option("--skip", help="leave these checks or groups out")] = None,
    strict: Annotated[bool, typer.Option("--strict", help="exit 1 on warnings too")] = False,
    list_checks: Annotated[bool, typer.Option("--list", help="list the checks and exit")] = False,
    expect_gpus: Annotated[str | None, typer.Option("--expect-gpus", help="GPUs NVML must see")] = None,
    expect_model: Annotated[str | None, typer.Option("--expect-model", help="GPU model, e.g. H200")] = None,
    expect_nvlinks: Annotated[str | None, typer.Option("--expect-nvlinks", help="NVLinks up per GPU")] = None,
    checkpoint_dir: Annotated[str, typer.Option("--checkpoint-dir", help="where checkpoints go")] = ".",
    min_free_disk_gib: Annotated[str, typer.Option("--min-free-disk-gib", help="free GiB needed there")] = "50",
    min_shm_gib: Annotated[str, typer.Option("--min-shm-gib", help="/dev/shm size needed, GiB")] = "1",
    nvml_timeout_s: Annotated[str, typer.Option("--nvml-timeout-s", help="deadline of each NVML call")] = "10",
    kernel_log: Annotated[str | None, typer.Option("--kernel-log", help="read this file (dmesg / journalctl -k -b "
                                                   "output) instead of /dev/kmsg")] = None,
    allreduce_backend: Annotated[str, typer.Option("--allreduce-backend", help="auto, gloo or nccl")] = "auto",
    allreduce_ranks: Annotated[str, typer.Option("--allreduce-ranks", help="gloo processes (>= 2)")] = "2",
    allreduce_mib: Annotated[str, typer.Option("--allreduce-mib", help="all-reduce message size, MiB")] = "64",
    allreduce_iters: Annotated[str, typer.Option("--allreduce-iters", help="timed iterations")] = "10",
    allreduce_timeout_s: Annotated[str, typer.Option("--allreduce-timeout-s", help="limit for the all-reduce")] = "120",
    min_busbw_fraction: Annotated[str, typer.Option("--min-busbw-fraction", help="GPU busbw below this fraction of "
                                                    "one-direction NVLink warns")] = "0.5",
    root: Annotated[str, typer.Option("--root", help="read /sys, /proc and /dev under this directory", hidden=True)] = "/",
) -> None:
    """Check this node before a job (see the command help for exit codes and JSON)."""
    from gpufield.harden.preflight import (
        PreflightConfig,
        check_report_path,
        dumps,
        render,
        run_preflight,
        select_checks,
        write_report,
    )

    if list_checks:
        from gpufield.harden.preflight import CHECKS

        for c in CHECKS:
            typer.echo(f"{c.name:18} {c.description}")
        raise typer.Exit(0)
    mib = _number("--allreduce-mib", allreduce_mib, positive=True)
    cfg = PreflightConfig(
        expected_gpu_count=_whole("--expect-gpus", expect_gpus), expected_gpu_model=expect_model,
        expected_nvlinks=_whole("--expect-nvlinks", expect_nvlinks), checkpoint_dir=checkpoint_dir,
        min_free_disk_gib=_number("--min-free-disk-gib", min_free_disk_gib),
        min_shm_gib=_number("--min-shm-gib", min_shm_gib),
        nvml_timeout_s=_number("--nvml-timeout-s", nvml_timeout_s, positive=True), kernel_log=kernel_log,
        allreduce_backend=allreduce_backend, allreduce_cpu_ranks=_whole("--allreduce-ranks", allreduce_ranks),
        allreduce_bytes=max(4, int(mib * 2**20)), allreduce_iters=_whole("--allreduce-iters", allreduce_iters),
        allreduce_timeout_s=_number("--allreduce-timeout-s", allreduce_timeout_s, positive=True),
        min_busbw_fraction=_number("--min-busbw-fraction", min_busbw_fraction))
    select_checks(only or (), skip or ())  # unknown names -> exit 2 before any work
    if kernel_log is not None:  # a file the user named: missing or unusable is bad input, not a skipped check
        _check_kernel_log(kernel_log)
    ins = [kernel_log] if kernel_log is not None else []
    if out is not None:  # refuse before the run, not after it
        check_report_path(out, force=force, inputs=ins)
    report = run_preflight(cfg, only=only or (), skip=skip or (), root=root)
    text = dumps(report, strict=strict)
    if out is not None:
        write_report(text, out, force=force, inputs=ins)
    if json_out:
        typer.echo(text)
    else:
        render(report)
    code = report.exit_code(strict=strict)
    if report.nvml_wedged:  # a thread stuck in the driver must not hold the prolog past its output
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    raise typer.Exit(code)
