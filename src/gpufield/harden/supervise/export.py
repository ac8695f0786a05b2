"""What ``gpufield run`` writes for others: the JSON-lines event log, Prometheus metrics on a
localhost endpoint, the excluded-node files a scheduler reads, and the control file it re-reads.

- **Event log** (``<run_dir>/events.jsonl``): one JSON object per line, ``{"t": <unix s>,
  "event": <name>, ...}``; names: ``launch``, ``detect``, ``triage``, ``decision``, ``exit``,
  ``control``, ``control_rejected``, ``nodes``.
- **Metrics** (``prometheus_client``, its own registry, served on ``127.0.0.1:<port>``):
  ``gpufield_run_rank_step{rank}``, ``gpufield_run_rank_silent_seconds{rank}``,
  ``gpufield_run_hang_timeout_seconds``, ``gpufield_run_attempt``, ``gpufield_run_retries_used``,
  ``gpufield_run_retry_budget``, ``gpufield_run_excluded_nodes``,
  ``gpufield_run_straggler_slowdown{rank}``, ``gpufield_run_detections_total{kind}``,
  ``gpufield_run_decisions_total{action}``.
- **Excluded nodes**: ``exclude_file`` holds the excluded hosts on one comma-separated line
  (``sbatch --exclude=$(cat FILE)``; Slurm's ``--exclude=<file>`` also reads a file when the argument
  contains a ``/``; :mod:`gpufield.harden.supervise.slurm`); ``hostfile`` holds the
  remaining hosts, one per line (an MPI/DeepSpeed hostfile, or ``{hosts}`` of the command). Both are
  written to a temp file beside the target and renamed.
- **Control file**: a JSON object of :class:`~gpufield.harden.supervise.progress.Thresholds`
  fields (``{"hang_floor_s": 30, "straggler_slowdown": 0.15}``), re-read when its mtime changes;
  an invalid file is reported as ``control_rejected`` and the thresholds in force stay.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from gpufield.harden.supervise.progress import Thresholds


def write_atomic(path: str | os.PathLike[str], text: str, *, inputs: Iterable[str | os.PathLike[str]] = ()) -> None:
    """Write ``text`` to ``path`` through a unique temp file in the same folder and a rename
    (:func:`gpufield._files.atomic_write`; an existing regular file is replaced).

    Args:
        path: the target. text: its new content.
        inputs: the run's input files (``--control-file``); never written over.

    Raises:
        OSError: the folder is missing or not writable, or ``path`` exists and is not a regular file
            or is one of ``inputs``.
    """
    from gpufield._files import atomic_write
    from gpufield.errors import InputError

    try:
        atomic_write(path, text, force=True, inputs=inputs)
    except InputError as e:
        raise OSError(str(e)) from None


class EventLog:
    """Append-only JSON-lines log; each :meth:`emit` is one flushed line.

    Args:
        path: the log file (created, appended to).
        echo: called with each event dict too (e.g. to print it), or None.
    """

    def __init__(self, path: str | os.PathLike[str], echo=None) -> None:
        self.path = Path(path)
        self._f = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 (closed in close())
        self.echo = echo
        self.events: list[dict[str, Any]] = []

    def emit(self, event: str, **fields: Any) -> dict[str, Any]:
        """Write one event; returns the dict written."""
        rec = {"t": round(time.time(), 3), "event": event, **fields}
        self._f.write(json.dumps(rec, default=str) + "\n")
        self._f.flush()
        self.events.append(rec)
        if self.echo is not None:
            self.echo(rec)
        return rec

    def close(self) -> None:
        """Close the file."""
        self._f.close()


class Metrics:
    """The supervisor's Prometheus metrics, on their own registry.

    Args:
        port: serve them on ``127.0.0.1:<port>`` (0: any free port, see :attr:`port`); None: no endpoint.
    """

    def __init__(self, port: int | None) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge

        self.registry = r = CollectorRegistry()
        self.step = Gauge("gpufield_run_rank_step", "last step reported by the rank", ["rank"], registry=r)
        self.silent = Gauge("gpufield_run_rank_silent_seconds", "seconds since the rank last progressed",
                            ["rank"], registry=r)
        self.timeout = Gauge("gpufield_run_hang_timeout_seconds", "hang timeout in force", registry=r)
        self.attempt = Gauge("gpufield_run_attempt", "current launch, 0-based", registry=r)
        self.retries = Gauge("gpufield_run_retries_used", "restarts spent of the job's budget", registry=r)
        self.budget = Gauge("gpufield_run_retry_budget", "restarts allowed for the whole job", registry=r)
        self.excluded = Gauge("gpufield_run_excluded_nodes", "hosts currently excluded", registry=r)
        self.slowdown = Gauge("gpufield_run_straggler_slowdown", "relative slowdown of a named straggler",
                              ["rank"], registry=r)
        self.detections = Counter("gpufield_run_detections", "detections by kind", ["kind"], registry=r)
        self.decisions = Counter("gpufield_run_decisions", "policy decisions by action", ["action"], registry=r)
        self.server = None
        self.port: int | None = None
        if port is not None:
            from prometheus_client import start_http_server

            self.server, _ = start_http_server(port, addr="127.0.0.1", registry=r)
            self.port = self.server.server_port

    def text(self) -> str:
        """The metrics in the Prometheus text format."""
        from prometheus_client import generate_latest

        return generate_latest(self.registry).decode()

    def close(self) -> None:
        """Stop the endpoint."""
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()


class Control:
    """Re-reads the control file when its mtime changes.

    Args:
        path: the JSON control file, or None (thresholds fixed).
        thresholds: the thresholds at start.
    """

    def __init__(self, path: str | os.PathLike[str] | None, thresholds: Thresholds) -> None:
        self.path = Path(path) if path else None
        self.thresholds = thresholds
        self._mtime: int | None = None

    def poll(self) -> tuple[Thresholds, dict[str, Any] | None, str | None]:
        """Check the file.

        Returns:
            ``(thresholds in force, changes applied or None, error message or None)``.
        """
        if self.path is None:
            return self.thresholds, None, None
        try:
            m = self.path.stat().st_mtime_ns
        except OSError:
            return self.thresholds, None, None
        if m == self._mtime:
            return self.thresholds, None, None
        self._mtime = m
        try:
            data = json.loads(self.path.read_text())
            if not isinstance(data, dict):
                raise ValueError("expected a JSON object of threshold fields")
            names = {f.name for f in dataclasses.fields(Thresholds)}
            unknown = set(data) - names
            if unknown:
                raise ValueError(f"unknown threshold(s) {sorted(unknown)}; known: {sorted(names)}")
            new = dataclasses.replace(self.thresholds, **data)
        except (OSError, ValueError, TypeError) as e:
            return self.thresholds, None, f"{self.path}: {e}"
        changed = {k: v for k, v in data.items() if getattr(self.thresholds, k) != v}
        self.thresholds = new
        return new, changed, None
