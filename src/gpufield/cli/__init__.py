"""The ``gpufield`` command line: a thin typer layer, one sub-app per wing.

Each wing's commands live in ``gpufield/cli/<wing>.py`` and call one library function each.
Library exceptions become exit codes here, in one handler:

- 0: a verdict was reached (whatever it is)
- 2: bad input: :class:`gpufield.errors.InputError` and any ``ValueError``, ``OSError`` (a missing,
  existing or unreadable file...) or ``re.error`` raised while a command runs, shown as one line
  ``gpufield: error: <message>``; or an option value rejected where it is parsed (choices, ranges,
  paths that must exist), shown by click as its usage hint and one ``Error: ...`` line naming the option
- 3: missing optional dependency (:class:`gpufield.errors.DependencyError`)
- 4: any other :class:`gpufield.errors.GpufieldError`
- 141 (128 + SIGPIPE, what the shell reports for ``seq 100000 | head -1``): stdout was closed
  early (``gpufield triage ... | head -1``); the command ends quietly, without a traceback

Set ``GPUFIELD_DEBUG=1`` in the environment to get the full Python traceback of such a
ValueError / OSError / re.error instead of the one-line message (for bug reports).

``gpufield --version`` prints the installed version (``importlib.metadata``).

``python -m gpufield`` runs the same app (``gpufield/__main__.py``).
"""

from __future__ import annotations

import os
import re
import signal
import sys

import typer

from gpufield.errors import DependencyError, GpufieldError, InputError

app = typer.Typer(
    name="gpufield",
    help="Triage, verify, power-control and FP64-emulate on NVIDIA datacenter GPUs.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


def _register() -> None:
    from gpufield.cli import fp64, power, triage, verify
    from gpufield.cli import run as run_cli

    app.add_typer(triage.app, name="triage")
    app.add_typer(verify.app, name="verify")
    app.add_typer(power.app, name="power")
    app.add_typer(fp64.app, name="fp64")
    app.command("run", context_settings={"allow_interspersed_args": False})(run_cli.run)

    from gpufield.cli import preflight

    app.command("preflight", help=preflight.HELP)(preflight.preflight_cmd)


_register()


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("gpufield")
    except PackageNotFoundError:  # a source tree that was never installed
        return "unknown"


def _show_version(value: bool) -> None:
    if value:
        typer.echo(f"gpufield {_version()}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", help="print the version and exit",  # noqa: ARG001
                                 callback=_show_version, is_eager=True),
) -> None:
    """Triage, verify, power-control and FP64-emulate on NVIDIA datacenter GPUs."""


#: environment variable that turns the one-line message for ValueError / OSError / re.error into the traceback
DEBUG_ENV = "GPUFIELD_DEBUG"


def _debug() -> bool:
    return os.environ.get(DEBUG_ENV, "").strip().lower() not in ("", "0", "false", "no", "off")


def _one_line(text: str) -> str:
    return "; ".join(line.strip() for line in text.splitlines() if line.strip())


def _describe(e: BaseException) -> str:
    """A one-line message for a plain ValueError / OSError / re.error; names the file where known."""
    if isinstance(e, OSError) and e.strerror:
        where = "" if e.filename is None else f"{e.filename}"
        if getattr(e, "filename2", None) is not None:
            where += f" -> {e.filename2}"
        msg = f"{where}: {e.strerror}" if where else e.strerror
    elif isinstance(e, re.error):
        pat = "" if e.pattern is None else f" {e.pattern!r}"
        msg = f"invalid regular expression{pat}: {e.msg}"
    else:
        msg = str(e) or type(e).__name__
    return _one_line(msg) or type(e).__name__


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; map gpufield errors to exit codes with a one-line message on stderr."""
    from gpufield.cli import _interrupt

    click = _click()
    _interrupt.reported = False
    try:
        rv = app(args=argv, standalone_mode=False)
        sys.stdout.flush()  # a closed pipe shows here, not as "Exception ignored" at interpreter exit
    except BrokenPipeError:
        return _stdout_closed()
    except SystemExit as e:  # typer/click exits
        if _from_broken_pipe(e):  # rich and click turn EPIPE into SystemExit(1)
            return _stdout_closed()
        return int(e.code or 0)
    except typer.Exit as e:
        rv = int(e.exit_code or 0)
    except InputError as e:
        print(f"gpufield: error: {e}", file=sys.stderr)
        return 2
    except DependencyError as e:
        print(f"gpufield: {e}", file=sys.stderr)
        return 3
    except GpufieldError as e:
        print(f"gpufield: {type(e).__name__}: {e}", file=sys.stderr)
        return 4
    except KeyboardInterrupt:
        print("gpufield: interrupted", file=sys.stderr)
        return 130
    except (ValueError, OSError, re.error) as e:  # a wrong input that no check caught: a line, not a traceback
        if _debug():
            raise
        print(f"gpufield: error: {_describe(e)}", file=sys.stderr)
        return 2
    except Exception as e:  # click usage errors etc.
        if isinstance(e, click.exceptions.ClickException):
            e.show()
            return e.exit_code
        if isinstance(e, typer.Abort):  # Ctrl-C as click reports it
            print("gpufield: interrupted", file=sys.stderr)
            return 130
        raise
    rv = rv if isinstance(rv, int) else 0
    if rv == _interrupt.EXIT_INTERRUPTED and not _interrupt.reported:  # typer's silent exit after Ctrl-C
        print("gpufield: interrupted", file=sys.stderr)
    return rv


#: exit status after stdout was closed by the reader: 128 + SIGPIPE, as the shell reports for coreutils
EXIT_STDOUT_CLOSED = 128 + int(getattr(signal, "SIGPIPE", 13))


def _from_broken_pipe(e: BaseException) -> bool:
    """Whether ``e`` was raised while handling a BrokenPipeError (rich's and click's EPIPE exits)."""
    seen: set[int] = set()
    x: BaseException | None = e
    while x is not None and id(x) not in seen:
        if isinstance(x, BrokenPipeError):
            return True
        seen.add(id(x))
        x = x.__cause__ or x.__context__
    return False


def _stdout_closed() -> int:
    """The reader closed stdout: point fd 1 at /dev/null (Python's SIGPIPE recipe) so the flush at
    interpreter exit cannot fail again, and end quietly."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, sys.stdout.fileno())
        finally:
            os.close(devnull)
    except (OSError, ValueError):  # stdout without a file descriptor (captured, closed): nothing to flush
        pass
    return EXIT_STDOUT_CLOSED


def _click():
    """The click module typer runs on (typer >= 0.29 vendors it as ``typer._click``)."""
    try:
        from typer import _click as click
    except ImportError:  # older typer depends on click itself
        import click
    return click


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
