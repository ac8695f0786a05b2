"""``python -m gpufield``: the same typer app as the ``gpufield`` command (:func:`gpufield.cli.main`)."""

import sys

from gpufield.cli import main

if __name__ == "__main__":
    sys.exit(main())
