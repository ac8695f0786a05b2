"""The rule table, in evaluation order (style convention 4: an explicit registry, no import magic).

Order matters only for the fallback rules at the end (``generic_fault``, ``teardown``), which look
at events no earlier rule cited. Root selection does not depend on this order: it uses each
finding's causal tier and time (see :mod:`gpufield.triage.engine.incidents`).
"""

from __future__ import annotations

from gpufield.triage.engine.model import Tier
from gpufield.triage.engine.rules import collective, fabric, hardware, host, process
from gpufield.triage.engine.rules.base import FnRule, Rule, RuleContext

RULES: tuple[Rule, ...] = (
    # tier 0: hardware
    FnRule("xid_catalog", ("GPU_FELL_OFF_BUS", "GSP_TIMEOUT", "ECC_UNCORRECTABLE", "HBM_DEGRADATION",
                           "NVLINK_FAULT", "GPU_RESET_REQUIRED"), Tier.HARDWARE, hardware.xid_rule),
    FnRule("dcgm_xid", ("GPU_FELL_OFF_BUS", "GSP_TIMEOUT", "ECC_UNCORRECTABLE", "HBM_DEGRADATION", "NVLINK_FAULT",
                        "GPU_RESET_REQUIRED", "CUDA_ILLEGAL_ADDRESS"), Tier.HARDWARE, hardware.dcgm_xid_rule),
    FnRule("sxid", ("NVLINK_FAULT",), Tier.HARDWARE, hardware.sxid_rule),
    FnRule("cuda_hw_error", ("ECC_UNCORRECTABLE", "NVLINK_FAULT"), Tier.HARDWARE, hardware.cuda_hw_error_rule),
    FnRule("smi_memory", ("HBM_DEGRADATION", "ECC_UNCORRECTABLE", "GPU_RESET_REQUIRED"), Tier.HARDWARE, hardware.smi_memory_rule),
    FnRule("pcie_aer", ("GPU_LOST_PCIE",), Tier.HARDWARE, hardware.pcie_rule),
    # tier 1: fabric
    FnRule("ib_completion", ("IB_TRANSPORT_RETRY_EXCEEDED", "IB_LOCAL_PROTECTION_ERROR"), Tier.FABRIC,
           fabric.ib_completion_rule),
    FnRule("ib_port", ("IB_LINK_FLAP",), Tier.FABRIC, fabric.ib_port_rule),
    FnRule("nccl_network_config", ("NCCL_NETWORK_CONFIG",), Tier.FABRIC, fabric.nccl_network_config_rule),
    FnRule("p2p_bandwidth", ("P2P_BROKEN",), Tier.FABRIC, fabric.p2p_rule),
    # tier 2: host
    FnRule("shm_ipc", ("CONTAINER_SHM_IPC",), Tier.HOST, fabric.shm_ipc_rule),
    # UNKNOWN: a scheduler cancel; PEER_PROCESS_EXIT: a SIGKILL with no OOM-killer line
    FnRule("host_oom", ("HOST_OOM_KILL", "UNKNOWN", "PEER_PROCESS_EXIT"), Tier.HOST, host.host_oom_rule),
    FnRule("shm_exhausted", ("SHM_EXHAUSTED",), Tier.HOST, host.shm_exhausted_rule),
    FnRule("rendezvous", ("RENDEZVOUS_UNREACHABLE",), Tier.HOST, host.rendezvous_rule),
    FnRule("launch_skew", ("LAUNCH_SKEW",), Tier.HOST, host.launch_skew_rule),
    FnRule("unique_id_wait", ("SETUP_PHASE_TIMEOUT",), Tier.PROCESS, host.unique_id_wait_rule),
    # tier 3: one process / configuration / numerics
    FnRule("cuda_illegal_address", ("CUDA_ILLEGAL_ADDRESS",), Tier.PROCESS, process.cuda_illegal_rule),
    FnRule("cuda_oom", ("CUDA_OOM_CAPACITY", "CUDA_OOM_FRAGMENTATION", "CUDA_OOM_CHECKPOINT_GATHER",
                        "CUDA_OOM_INIT"), Tier.PROCESS, process.cuda_oom_rule),
    FnRule("loss_scale", ("LOSS_SCALE_COLLAPSE",), Tier.PROCESS, process.loss_scale_rule),
    FnRule("nan_loss", ("NAN_LOSS",), Tier.PROCESS, process.nan_rule),
    FnRule("silent_skip", ("SILENT_SKIPPED_STEPS",), Tier.PROCESS, process.silent_skip_rule),
    FnRule("restart_loop", ("RESTART_LOOP",), Tier.PROCESS, process.restart_loop_rule),
    FnRule("straggler", ("STRAGGLER_INPUT", "STRAGGLER_COMPUTE", "STRAGGLER_THERMAL", "INPUT_STALL",
                         "CHECKPOINT_IO_SLOW"), Tier.PROCESS, process.straggler_rule),
    FnRule("desync", ("COLLECTIVE_DESYNC",), Tier.PROCESS, collective.desync_rule),
    FnRule("phase_timeout", ("SETUP_PHASE_TIMEOUT", "CHECKPOINT_SAVE_TIMEOUT"), Tier.PROCESS,
           collective.phase_timeout_rule),
    # tier 4-6: cascades (class names the symptom; root UNKNOWN unless a lower tier explains them)
    FnRule("peer_exit", ("PEER_PROCESS_EXIT",), Tier.NCCL, collective.peer_exit_rule),
    FnRule("watchdog_blocked", ("WATCHDOG_BLOCKED",), Tier.WATCHDOG, collective.watchdog_blocked_rule),
    FnRule("heartbeat", ("HEARTBEAT_MONITOR_TIMEOUT",), Tier.WATCHDOG, collective.heartbeat_rule),
    FnRule("nccl_timeout", ("NCCL_COLLECTIVE_TIMEOUT",), Tier.WATCHDOG, collective.nccl_timeout_rule),
    # fallbacks: only events no rule above cited
    FnRule("generic_fault", ("UNKNOWN", "PEER_PROCESS_EXIT"), Tier.PROCESS, process.generic_fault_rule),
    FnRule("teardown", ("UNKNOWN",), Tier.TEARDOWN, collective.teardown_rule),
)

__all__ = ["RULES", "Rule", "RuleContext", "FnRule"]
