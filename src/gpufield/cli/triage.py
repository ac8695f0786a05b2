"""`gpufield triage`: command-line layer over :mod:`gpufield.triage`."""

from __future__ import annotations

import typer

app = typer.Typer(help="triage wing (see gpufield.triage).", no_args_is_help=False)
