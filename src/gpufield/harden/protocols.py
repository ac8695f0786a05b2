"""Extension points of the harden wing.

:class:`PreflightCheck`: one read-only node check of ``gpufield preflight``. A new check is one
small class with a ``name`` and a ``run(context)`` method, added to the explicit table
``gpufield.harden.preflight.CHECKS``; nothing else branches on check names.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:  # annotations only: the preflight package imports this module
    from gpufield.harden.preflight.model import CheckResult, PreflightContext


@runtime_checkable
class PreflightCheck(Protocol):
    """One node check: reads the machine (never changes it) and says pass, warn, fail or skip.

    Attributes:
        name: stable dotted identifier used by ``--only`` / ``--skip`` and in the JSON
            (``"gpu.ecc"``, ``"host.shm"``); the part before the dot is its group.
        description: one line saying what is checked.

    A check must not raise for what it finds on the machine (a missing file, a driver error,
    NVML timing out): those are results (``fail`` or ``skip`` with a reason). The runner times
    each check and turns an unexpected exception into a ``fail`` naming it.
    """

    name: str
    description: str

    def run(self, ctx: PreflightContext) -> CheckResult:
        """Run the check on the machine ``ctx`` describes.

        Args:
            ctx: configuration, injectable roots (``/sys``, ``/proc``, ``/dev``), environment and
                the shared, time-bounded NVML readings.

        Returns:
            The result; ``elapsed_s`` is filled in by the runner.
        """
        ...
