"""`gpufield fp64`: command-line layer over :mod:`gpufield.fp64`."""

from __future__ import annotations

import typer

app = typer.Typer(help="fp64 wing (see gpufield.fp64).", no_args_is_help=True)
