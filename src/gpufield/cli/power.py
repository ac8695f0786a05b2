"""`gpufield power`: command-line layer over :mod:`gpufield.power`."""

from __future__ import annotations

import typer

app = typer.Typer(help="power wing (see gpufield.power).", no_args_is_help=True)
