"""gpufield.harden (see README): preflight node checks (``gpufield preflight``)."""

from gpufield.harden.preflight import (
    CheckResult,
    PreflightConfig,
    PreflightReport,
    run_preflight,
)
from gpufield.harden.protocols import PreflightCheck

__all__: list[str] = ["CheckResult", "PreflightCheck", "PreflightConfig", "PreflightReport", "run_preflight"]
