"""`gpufield triage`: command-line layer over :mod:`gpufield.triage`.

``gpufield triage [PATHS...]`` is shorthand for ``gpufield triage analyze [PATHS...]``; bare
``gpufield triage`` triages the bundled example incident. A first argument that names a
subcommand (``analyze``, ``eval``) is the subcommand: write ``./eval`` to triage a file called
``eval``.
"""

from __future__ import annotations

import json
import sys
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
    "'gpufield triage analyze'; with no PATHS it triages the bundled example incident.",
)


@app.callback()
def _default(ctx: typer.Context) -> None:
    """Triage logs (default: the bundled example incident); see ``analyze`` and ``eval``."""
    if ctx.invoked_subcommand is None:
        _run([], json_out=False, html=None, db=None, quiet=False, force=False, skew_tolerance_s=30.0)


@app.command("analyze")
def analyze_cmd(
    paths: Annotated[list[str] | None, typer.Argument(help="log files or directories of one job")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="print the result as JSON")] = False,
    html: Annotated[str | None, typer.Option("--html", metavar="FILE", help="write a self-contained HTML report")] = None,
    db: Annotated[str | None, typer.Option("--db", metavar="FILE", help="store the events in a DuckDB file")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="print only the one-line verdict")] = False,
    force: Annotated[bool, typer.Option("--force", help="replace an existing --html file / append to an existing --db")] = False,
    skew_tolerance_s: Annotated[float, typer.Option(min=0.0, help="cross-host clock uncertainty after correction, s")] = 30.0,
) -> None:
    """Triage logs of a failed job and print the verdict.

    Example:
        gpufield triage /var/log/job-1234/ --html report.html
    """
    _run(paths or [], json_out=json_out, html=html, db=db, quiet=quiet, force=force, skew_tolerance_s=skew_tolerance_s)


def _run(paths: list[str], *, json_out: bool, html: str | None, db: str | None, quiet: bool, force: bool,
         skew_tolerance_s: float) -> None:
    from gpufield.triage import (
        analyze,
        check_writable,
        dumps,
        one_line,
        render,
        store_events,
        write_html,
    )

    for out in (html, db):
        if out:
            check_writable(out, force=force, append_ok=out == db)
    result = analyze(paths, skew_tolerance_s=skew_tolerance_s)
    for w in result.stats.get("warnings", [])[:20]:
        print(f"gpufield: warning: {w}", file=sys.stderr)
    if html:
        write_html(result, html, force=force)
    if db:
        store_events(result, db, force=force)
    if json_out:
        sys.stdout.write(dumps(result) + "\n")
    elif quiet:
        print(one_line(result))
    else:
        render(result)
        for out, what in ((html, "HTML report"), (db, "event store")):
            if out:
                print(f"{what} written: {out}")


@app.command("eval")
def eval_cmd(
    directory: Annotated[str, typer.Argument(help="labelled corpus directory with INDEX.md")],
    json_out: Annotated[bool, typer.Option("--json", help="print the evaluation as JSON")] = False,
    min_accuracy: Annotated[float, typer.Option(min=0.0, max=1.0, help="exit 1 when accuracy is below this (0..1)")] = 0.0,
    split: Annotated[str | None, typer.Option("--split", help="score only this split's rows: dev or test")] = None,
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
