"""The ``gpufield`` command line: a thin typer layer, one sub-app per wing.

Each wing's commands live in ``gpufield/cli/<wing>.py`` and call one library function each.
Library exceptions become exit codes here, in one handler:

- 0: a verdict was reached (whatever it is)
- 2: bad input (:class:`gpufield.errors.InputError`)
- 3: missing optional dependency (:class:`gpufield.errors.DependencyError`)
- 4: any other :class:`gpufield.errors.GpufieldError`
"""

from __future__ import annotations

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
    except SystemExit as e:  # typer/click exits
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


def _click():
    """The click module typer runs on (typer >= 0.29 vendors it as ``typer._click``)."""
    try:
        from typer import _click as click
    except ImportError:  # older typer depends on click itself
        import click
    return click


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
