"""Preflight output: the JSON document (schema below), a rich table, and the safe file writer.

JSON schema ``gpufield.preflight/1`` (stable: fields are only ever added)::

    {
      "schema": "gpufield.preflight/1",
      "host": "gpu-a17",                    # socket.gethostname()
      "started_utc": "2026-12-01T21:40:00+00:00",
      "elapsed_s": 3.21,                    # whole run
      "nvml_elapsed_s": 0.04 | null,        # the shared NVML pass (null: no GPU check ran)
      "nvml_wedged": false,                 # an NVML call missed its deadline
      "status": "pass" | "warn" | "fail",   # worst check status (skips count as pass)
      "exit_code": 0 | 1,                   # what the CLI exits with (see --strict)
      "counts": {"pass": 9, "warn": 1, "fail": 0, "skip": 5},
      "checks": [
        {"name": "gpu.ecc", "status": "pass" | "warn" | "fail" | "skip",
         "severity": "info" | "warning" | "critical",
         "reason": "one line", "values": {...measured values, units in key names...},
         "fix": "what to do" | null, "elapsed_s": 0.0012}
      ]
    }
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from gpufield._files import atomic_write, check_output
from gpufield.harden.preflight.model import PreflightReport

__all__ = ["SCHEMA", "check_report_path", "dumps", "render", "to_dict", "write_report"]

SCHEMA = "gpufield.preflight/1"

_STYLE = {"pass": "green", "warn": "yellow", "fail": "bold red", "skip": "dim"}


def to_dict(report: PreflightReport, *, strict: bool = False) -> dict[str, Any]:
    """The report as the JSON document of the module docstring.

    Args:
        report: a :func:`~gpufield.harden.preflight.run_preflight` result.
        strict: warnings count as failures for ``exit_code``.
    """
    counts = {s: sum(r.status == s for r in report.results) for s in ("pass", "warn", "fail", "skip")}
    return {"schema": SCHEMA, "host": report.host, "started_utc": report.started_utc,
            "elapsed_s": round(report.elapsed_s, 6),
            "nvml_elapsed_s": None if report.nvml_elapsed_s is None else round(report.nvml_elapsed_s, 6),
            "nvml_wedged": report.nvml_wedged, "status": report.status, "exit_code": report.exit_code(strict=strict),
            "counts": counts, "checks": [r.to_dict() for r in report.results]}


def dumps(report: PreflightReport, *, strict: bool = False) -> str:
    """:func:`to_dict` as indented JSON text (ends without a newline)."""
    return json.dumps(to_dict(report, strict=strict), indent=2, default=str)


def render(report: PreflightReport, console: Any | None = None) -> None:
    """Print the report as a rich table (status, check, reason, time) and a summary line.

    Args:
        report: the report.
        console: a ``rich.console.Console`` (default one on stdout).
    """
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    con = console or Console()
    t = Table(title=f"gpufield preflight on {report.host}", title_justify="left")
    t.add_column("status")
    t.add_column("check", no_wrap=True)
    t.add_column("reason")
    t.add_column("s", justify="right")
    for r in report.results:
        reason = Text(r.reason)
        if r.fix and r.status in ("warn", "fail"):
            reason.append(f"\nfix: {r.fix}", style="dim")
        t.add_row(Text(r.status.upper(), style=_STYLE[r.status]), r.name, reason, f"{r.elapsed_s:.2f}")
    con.print(t)
    d = to_dict(report)
    c = d["counts"]
    con.print(Text(f"overall {report.status.upper()}: {c['pass']} pass, {c['warn']} warn, {c['fail']} fail, "
                   f"{c['skip']} skip in {report.elapsed_s:.1f} s", style=_STYLE[report.status]))


def check_report_path(path: str | os.PathLike[str], *, force: bool = False,
                      inputs: Iterable[str | os.PathLike[str]] = ()) -> Path:
    """Refuse an output path for :func:`write_report` before any work is done
    (:func:`gpufield._files.check_output` with ``option="--out"``).

    Args:
        path: target file.
        force: an existing regular file may be replaced.
        inputs: the run's input files (``--kernel-log``); never written over.

    Returns:
        ``Path(path)``.

    Raises:
        InputError: the target exists (without ``force``), is not a regular file (devices, FIFOs,
            sockets, directories, symbolic links are never replaced) or is one of ``inputs``, or its
            directory does not exist.
    """
    return check_output(path, force=force, inputs=inputs, option="--out")


def write_report(text: str, path: str | os.PathLike[str], *, force: bool = False,
                 inputs: Iterable[str | os.PathLike[str]] = ()) -> Path:
    """Write ``text`` to ``path`` through a unique temp file beside it, then rename
    (:func:`gpufield._files.atomic_write`, which checks again just before the rename).

    Args:
        text: the document.
        path: target file.
        force: replace an existing regular file. Special files (devices, FIFOs, sockets,
            directories) are never replaced.
        inputs: the run's input files (``--kernel-log``); never written over.

    Returns:
        The path written.

    Raises:
        InputError: see :func:`check_report_path`.
    """
    out = check_report_path(path, force=force, inputs=inputs)
    return atomic_write(out, text if text.endswith("\n") else text + "\n", force=force, inputs=inputs, option="--out")
