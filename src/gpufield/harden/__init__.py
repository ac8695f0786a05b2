"""gpufield.harden: supervise a training job (``gpufield run``), with the retry policy and the
optional progress hook :mod:`gpufield.harden.monitor` (``from gpufield.harden import monitor``) (see :mod:`gpufield.harden.supervise`)."""

from gpufield.harden.policy import Decision, Failure, PolicyConfig, RetryPolicy
from gpufield.harden.supervise import Detection, RunResult, SuperviseConfig, Thresholds, supervise

__all__ = ["Decision", "Detection", "Failure", "PolicyConfig", "RetryPolicy", "RunResult", "SuperviseConfig",
           "Thresholds", "supervise"]
