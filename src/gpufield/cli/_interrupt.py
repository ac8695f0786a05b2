"""Ctrl-C in a command: its own message on stderr, else one generic line from ``main``.

typer ends a command interrupted by Ctrl-C with exit status 130 and no message at all (seen by a
new user of ``verify run``); commands that know what they left behind say so through
:func:`interrupted`, and :func:`gpufield.cli.main` prints ``gpufield: interrupted`` for the rest.
"""

from __future__ import annotations

from typing import NoReturn

import typer

#: 128 + SIGINT, what the shell reports for a command ended by Ctrl-C
EXIT_INTERRUPTED = 130

#: set once a command has printed its own interruption message (reset by ``main``)
reported = False


def interrupted(message: str) -> NoReturn:
    """Print ``message`` on stderr and exit 130 (``main`` then adds nothing).

    Raises:
        typer.Exit: always, with code 130.
    """
    global reported
    reported = True
    typer.echo(message, err=True)
    raise typer.Exit(EXIT_INTERRUPTED)
