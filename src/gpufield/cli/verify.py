"""`gpufield verify`: command-line layer over :mod:`gpufield.verify`."""

from __future__ import annotations

import typer

app = typer.Typer(help="verify wing (see gpufield.verify).", no_args_is_help=True)
