"""gpufield.harden: preflight node checks (``gpufield preflight``, :mod:`gpufield.harden.preflight`) and
job supervision (``gpufield run``, :mod:`gpufield.harden.supervise`) with the retry policy and the
optional progress hook :mod:`gpufield.harden.monitor` (``from gpufield.harden import monitor``); with
one supervisor per node (:class:`ClusterConfig`, ``gpufield run --cluster``) they agree through the job's
torch.distributed store."""

from gpufield.harden.gate import preflight_gate
from gpufield.harden.policy import Decision, Failure, PolicyConfig, RetryPolicy
from gpufield.harden.preflight import (
    CheckResult,
    PreflightConfig,
    PreflightReport,
    run_preflight,
)
from gpufield.harden.protocols import PreflightCheck
from gpufield.harden.supervise import (
    ClusterConfig,
    Detection,
    RunResult,
    SuperviseConfig,
    Thresholds,
    supervise,
)

__all__ = ["CheckResult", "ClusterConfig", "Decision", "Detection", "Failure", "PolicyConfig", "PreflightCheck", "PreflightConfig",
           "PreflightReport", "RetryPolicy", "RunResult", "SuperviseConfig", "Thresholds", "preflight_gate", "run_preflight",
           "supervise"]
