"""`gpufield triage`: command-line layer over :mod:`gpufield.triage`.

``gpufield triage [PATHS...]`` is shorthand for ``gpufield triage analyze [PATHS...]``; ``-`` is
standard input; bare ``gpufield triage`` reads standard input unless it is a terminal (``</dev/null``
is read too: no input, exit 2) and triages the bundled example incident only on a terminal.
A first argument that names a
subcommand (``analyze``, ``eval``) is the subcommand: write ``./eval`` to triage a file called
``eval``.
"""

from __future__ import annotations

import json
import math
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any

import typer
from typer.core import TyperGroup


class _TriageGroup(TyperGroup):
    """Routes ``gpufield triage PATHS...`` to the ``analyze`` subcommand."""

    def resolve_command(self, ctx: Any, args: list[str]) -> tuple[str | None, Any, list[str]]:
        """Any first argument that is not a subcommand name starts the ``analyze`` arguments."""
        if args and args[0] not in self.commands:
            return "analyze", self.commands["analyze"], args
        return super().resolve_command(ctx, args)


app = typer.Typer(
    cls=_TriageGroup,
    invoke_without_command=True,
    no_args_is_help=False,
    context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
    help="Find the root incident behind a failed multi-node job and recommend an action.\n\n"
    "gpufield triage [PATHS...] [--json] [--html FILE] [--db FILE] [--quiet] [--force] is shorthand for "
    "'gpufield triage analyze'; with no PATHS it reads standard input (piped or redirected), and triages the "
    "bundled example incident only when standard input is a terminal.",
)


def _tolerance(value: float, param: typer.CallbackParam) -> float:
    """Option callback: a finite number of seconds in [0, MAX_SKEW_TOLERANCE_S] (the library's check)."""
    from gpufield.triage.analyze import MAX_SKEW_TOLERANCE_S

    if not (math.isfinite(value) and 0 <= value <= MAX_SKEW_TOLERANCE_S):
        raise typer.BadParameter(f"expected a finite number of seconds in [0, {MAX_SKEW_TOLERANCE_S:g}], got {value:g}",
                                 param=param)
    return value


@app.callback()
def _default(ctx: typer.Context) -> None:
    """Triage logs (default: standard input, or the bundled example on a terminal); see ``analyze`` and ``eval``."""
    if ctx.invoked_subcommand is None:
        _run([], json_out=False, html=None, db=None, quiet=False, force=False, skew_tolerance_s=30.0)


@app.command("analyze")
def analyze_cmd(
    paths: Annotated[list[str] | None, typer.Argument(help="log files or directories of one job; - = standard input")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="print the result as JSON")] = False,
    html: Annotated[str | None, typer.Option("--html", metavar="FILE", help="write a self-contained HTML report")] = None,
    db: Annotated[str | None, typer.Option("--db", metavar="FILE", help="store the run (events, incidents, offsets, "
                                           "templates, telemetry) in a DuckDB file (docs/triage-store.md)")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="print only the one-line verdict")] = False,
    force: Annotated[bool, typer.Option("--force", help="replace an existing --html file / replace this run's rows "
                                        "in --db (never a device, FIFO, symlink or input)")] = False,
    skew_tolerance_s: Annotated[float, typer.Option(help="cross-host clock uncertainty after correction, s",
                                                    callback=_tolerance)] = 30.0,
    allow_missing: Annotated[bool, typer.Option("--allow-missing", help="a missing path among several is a warning, "
                                                "not an error")] = False,
    run_id: Annotated[str | None, typer.Option("--run-id", help="id of this run in --db (default: a hash of the "
                                               "input files, their sizes and mtimes)")] = None,
    telemetry: Annotated[list[str] | None, typer.Option("--telemetry", metavar="FILE", help="GPU telemetry to plot "
                                                        "and store: nvidia-smi --query-gpu CSV or Prometheus / "
                                                        "dcgm-exporter text (repeatable)")] = None,
    workers: Annotated[int | None, typer.Option("--workers", min=1, max=2, help="processes parsing one large plain "
                                                "log (default: 2 on a machine with 2+ CPUs; same result)")] = None,
) -> None:
    """Triage logs of a failed job and print the verdict.

    With no PATHS, standard input is read when it is not a terminal (piped or redirected, also
    ``</dev/null``, which is no input: exit 2); on a terminal the bundled example incident is triaged.

    Example:
        gpufield triage /var/log/job-1234/ --html report.html

        journalctl -k -o json | gpufield triage -
    """
    _run(paths or [], json_out=json_out, html=html, db=db, quiet=quiet, force=force, skew_tolerance_s=skew_tolerance_s,
         allow_missing=allow_missing, run_id=run_id, telemetry=telemetry or [], workers=workers)


#: inputs larger than this (bytes on disk) get a progress bar when stderr is a terminal
PROGRESS_MIN_BYTES = 4 << 20


def _run(paths: list[str], *, json_out: bool, html: str | None, db: str | None, quiet: bool, force: bool,
         skew_tolerance_s: float, allow_missing: bool = False, run_id: str | None = None,
         telemetry: list[str] | None = None, workers: int | None = None) -> None:
    from gpufield.triage import analyze, check_writable, dumps, one_line, render, write_html
    from gpufield.triage.inputs import STDIN, stdin_has_input

    if not paths and stdin_has_input():
        paths = [STDIN]
    real = [p for p in paths if p != STDIN]
    if html and db and os.path.abspath(html) == os.path.abspath(db):
        from gpufield.errors import InputError

        raise InputError("--html and --db name the same file", path=html)
    if html:
        check_writable(html, force=force, inputs=real, option="--html")
    if db:
        from gpufield.triage.store import check_store

        check_store(db, inputs=real)
    samples = []
    if telemetry:
        from gpufield.triage.telemetry_input import read_telemetry

        for t in telemetry:
            samples.extend(read_telemetry(t))
    with _progress(paths, quiet or json_out) as progress:
        result = analyze(paths, skew_tolerance_s=skew_tolerance_s, allow_missing=allow_missing, progress=progress,
                         workers=workers)
    for w in result.stats.get("warnings", [])[:20]:
        print(f"gpufield: warning: {w}", file=sys.stderr)
    if html:
        write_html(result, html, force=force, telemetry=samples)
    stored = None
    if db:
        from gpufield.triage.store import store_result

        stored = store_result(result, db, force=force, run_id=run_id, telemetry=samples)
    if json_out:
        sys.stdout.write(dumps(result) + "\n")
    elif quiet:
        print(one_line(result))
    else:
        render(result)
        if html:
            print(f"HTML report written: {html}")
        if db:
            print(f"run {stored} stored in {db}")


@contextmanager
def _progress(paths: list[str], quiet: bool) -> Iterator[Any]:
    """A ``progress(path, n_bytes)`` callback drawing a rich bar on stderr, or None.

    Drawn only when stderr is a terminal, not ``quiet``, and the inputs are over
    :data:`PROGRESS_MIN_BYTES` on disk (or include standard input / a pipe, whose size is unknown).
    """
    from rich.console import Console

    console = Console(stderr=True)
    if quiet or not console.is_terminal:
        yield None
        return
    total, unknown = 0, False
    for p in paths:
        if p == "-" or not os.path.exists(p):
            unknown = unknown or p == "-"
            continue
        if os.path.isdir(p):
            for root, _d, names in os.walk(p):
                total += sum(os.path.getsize(os.path.join(root, n)) for n in names
                             if os.path.isfile(os.path.join(root, n)))
        elif os.path.isfile(p):
            total += os.path.getsize(p)
        else:
            unknown = True
    if not unknown and total < PROGRESS_MIN_BYTES:
        yield None
        return
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TransferSpeedColumn,
    )

    with Progress(TextColumn("triage {task.description}"), BarColumn(bar_width=24), DownloadColumn(),
                  TransferSpeedColumn(), TimeElapsedColumn(), console=console, transient=True) as bar:
        # decompressed bytes are counted against the on-disk total: compressed inputs overshoot, so
        # the total is dropped (a spinner-like bar) once it is passed
        task = bar.add_task("reading", total=None if unknown else total)

        def show(path: str, n: int) -> None:
            t = bar.tasks[0]
            name = os.path.basename(path) or path
            if t.total is not None and t.completed + n > t.total:
                bar.update(task, total=None)
            bar.update(task, advance=n, description=name[-32:])

        yield show


@app.command("eval")
def eval_cmd(
    directory: Annotated[str, typer.Argument(help="labelled corpus directory with INDEX.md")],
    json_out: Annotated[bool, typer.Option("--json", help="print the evaluation as JSON")] = False,
    min_accuracy: Annotated[float, typer.Option(min=0.0, max=1.0, help="exit 1 when accuracy is below this (0..1)")] = 0.0,
    split: Annotated[str | None, typer.Option("--split", help="score only this split's rows: dev, test or retired-test")] = None,
) -> None:
    """Score triage against a labelled corpus: per-class accuracy and confusion.

    Example:
        gpufield triage eval ../shared/data/triage-cases --min-accuracy 0.95
    """
    from gpufield.triage import evaluate, render_eval

    report = evaluate(directory, split=split)
    if json_out:
        sys.stdout.write(json.dumps(report.to_dict(), indent=2) + "\n")
    else:
        render_eval(report)
    if report.accuracy < min_accuracy:
        # SystemExit (not typer.Exit): gpufield.cli.main runs click with standalone_mode=False,
        # where an Exit's code would be returned and dropped
        raise SystemExit(1)
