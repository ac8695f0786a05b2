"""The validation gate an excluded node must pass before the supervisor lets it back in.

``SuperviseConfig.validate_node`` takes any ``host -> bool``; :func:`preflight_gate` builds the one
the CLI uses (``gpufield run --validate-cmd ...``): the host passes when a command run for it exits
0 within a time limit, and the default command is this package's own preflight
(``gpufield preflight --skip comm``, exit 0 = no check failed). A command template names the host
as ``{host}``, so a cluster runs the preflight where the host is (``ssh {host} gpufield preflight
--skip comm``, ``srun -w {host} -N1 gpufield preflight --skip comm``). Without ``{host}`` the
command runs here, which checks only the machine the supervisor runs on: use that only for the
local host. NVSentinel's remediation asks for the same gate (NVIDIA/NVSentinel #1427).
"""

from __future__ import annotations

import shlex
import subprocess
import sys
from collections.abc import Callable

__all__ = ["DEFAULT_GATE", "preflight_gate"]

#: the default gate command: gpufield's read-only preflight without the all-reduce
DEFAULT_GATE = f"{shlex.quote(sys.executable)} -m gpufield preflight --skip comm"


def preflight_gate(command: str = DEFAULT_GATE, *, timeout_s: float = 300.0,
                   log: Callable[[str], None] | None = None) -> Callable[[str], bool]:
    """A ``validate_node(host) -> bool`` that runs ``command`` (``{host}`` replaced) and passes on exit 0.

    Args:
        command: shell-free command template, split with :func:`shlex.split`; ``{host}`` in any word
            is replaced by the host name.
        timeout_s: limit for one run, s (> 0); a run past it is killed and the host fails.
        log: optional callback given one line per run (host, exit status or why it failed).

    Returns:
        The gate. It never raises: a command that cannot start fails the host.

    Raises:
        ValueError: an empty command or a non-positive ``timeout_s``.
    """
    words = shlex.split(command)
    if not words:
        raise ValueError("the gate command is empty")
    if not timeout_s > 0:
        raise ValueError(f"timeout_s must be > 0, got {timeout_s!r}")

    def gate(host: str) -> bool:
        argv = [w.replace("{host}", host) for w in words]
        try:
            rc = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, timeout=timeout_s, check=False).returncode
        except subprocess.TimeoutExpired:
            why, rc = f"did not finish within {timeout_s:g} s", None
        except OSError as e:
            why, rc = f"could not start: {e.strerror or e}", None
        else:
            why = f"exit status {rc}"
        if log is not None:
            log(f"validation gate for {host}: {' '.join(argv)}: {why}")
        return rc == 0

    return gate
