"""The ``gpufield`` command line: a thin typer layer, one sub-app per wing.

Each wing's commands live in ``gpufield/cli/<wing>.py`` and call one library function each.
Library exceptions become exit codes here, in one handler:

- 0: a verdict was reached (whatever it is)
- 2: bad input (:class:`gpufield.errors.InputError`)
- 3: missing optional dependency (:class:`gpufield.errors.DependencyError`)
- 4: any other :class:`gpufield.errors.GpufieldError`
- 141 (128 + SIGPIPE, what the shell reports for ``seq 100000 | head -1``): stdout was closed
  early (``gpufield triage ... | head -1``); the command ends quietly, without a traceback

``python -m gpufield`` runs the same app (``gpufield/__main__.py``).
"""

from __future__ import annotations

import os
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

    app.add_typer(triage.app, name="triage")
    app.add_typer(verify.app, name="verify")
    app.add_typer(power.app, name="power")
    app.add_typer(fp64.app, name="fp64")


_register()


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; map gpufield errors to exit codes with a one-line message on stderr."""
    click = _click()
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
        return int(e.exit_code or 0)
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
    except Exception as e:  # click usage errors etc.
        if isinstance(e, click.exceptions.ClickException):
            e.show()
            return e.exit_code
        if isinstance(e, typer.Abort):
            return 130
        raise
    return rv if isinstance(rv, int) else 0


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
