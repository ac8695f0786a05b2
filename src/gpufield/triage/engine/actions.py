"""Actions as data: class -> (action kind, sentence template, evidence to collect next).

Retry policy of triage.md 5.10: configuration/code/data classes never get ``RETRY`` (no blind
retries); hardware classes exclude the blamed node or reset the blamed GPU; transient or unknown
classes retry once after turning on the evidence that will name the root next time. The action
texts and evidence requests follow the INDEX.md action notes of the labelled corpus.

Templates may use ``{host}``, ``{gpu}``, ``{rank}`` and any key of the finding's ``facts``; a
missing value is replaced by a neutral phrase ("<host not named in the logs>").
"""

from __future__ import annotations

import string
from typing import Final

RETRY, EXCLUDE_NODE, RESET_GPU, FIX_CONFIG, STOP = "RETRY", "EXCLUDE_NODE", "RESET_GPU", "FIX_CONFIG", "STOP"
ACTION_KINDS: Final = (RETRY, EXCLUDE_NODE, RESET_GPU, FIX_CONFIG, STOP)

#: classes whose cause is configuration, code or data: a retry without a change fails again
NO_RETRY: Final = frozenset({
    "NCCL_NETWORK_CONFIG", "CONTAINER_SHM_IPC", "IB_LOCAL_PROTECTION_ERROR", "P2P_BROKEN",
    "RENDEZVOUS_UNREACHABLE", "SETUP_PHASE_TIMEOUT", "CHECKPOINT_SAVE_TIMEOUT", "LAUNCH_SKEW",
    "CUDA_OOM_CAPACITY", "CUDA_OOM_FRAGMENTATION", "CUDA_OOM_CHECKPOINT_GATHER", "CUDA_OOM_INIT",
    "HOST_OOM_KILL", "SHM_EXHAUSTED", "LOSS_SCALE_COLLAPSE", "NAN_LOSS", "SILENT_SKIPPED_STEPS",
    "COLLECTIVE_DESYNC", "CUDA_ILLEGAL_ADDRESS", "RESTART_LOOP", "STRAGGLER_INPUT", "STRAGGLER_COMPUTE",
    "INPUT_STALL", "CHECKPOINT_IO_SLOW",
})

_FR = "Flight Recorder: TORCH_NCCL_TRACE_BUFFER_SIZE=2000 TORCH_NCCL_DUMP_ON_TIMEOUT=1, then fr_trace on the dumps"
_DMESG = "kernel log (dmesg -T / journalctl -k) of every host for Xid, AER, OOM-killer lines in the failure window"

#: class -> (action kind, template, next evidence)
ACTIONS: Final[dict[str, tuple[str, str, tuple[str, ...]]]] = {
    "GPU_FELL_OFF_BUS": (EXCLUDE_NODE, "Exclude node {host} and restart from the last checkpoint; reboot it "
                         "(catalog RESTART_BM), reseat/RMA GPU {gpu} if it recurs.", ("nvidia-smi -q on {host} after reboot",)),
    "GPU_LOST_PCIE": (EXCLUDE_NODE, "Exclude node {host}; reseat or RMA GPU {gpu} (PCIe link errors on its path).",
                      ("lspci -vvv / AER counters of the root port on {host}", _DMESG)),
    "GSP_TIMEOUT": (RESET_GPU, "Reset GPU {gpu} on {host} (nvidia-smi -r or reboot); record the driver "
                    "version and escalate if Xid 119 recurs.", ("driver version and GSP firmware on {host}",)),
    "ECC_UNCORRECTABLE": (RESET_GPU, "Drain node {host} and reset GPU {gpu} ({catalog}); check "
                          "the row-remap state; RMA if it recurs.", ("nvidia-smi -q -d ROW_REMAPPER,ECC on {host}",)),
    "HBM_DEGRADATION": (EXCLUDE_NODE, "Exclude node {host} and RMA GPU {gpu}: its HBM keeps failing.",
                        ("row-remap history (nvidia-smi -q -d ROW_REMAPPER) of GPU {gpu}",)),
    "NVLINK_FAULT": (RESET_GPU, "Reset GPU {gpu} on {host} (NVLink fault); exclude the node if it recurs.",
                     ("nvidia-smi nvlink -e counters on {host}",)),
    "GPU_RESET_REQUIRED": (RESET_GPU, "Reset GPU {gpu} on {host} before reuse; run jobs without it until then.",
                           (_DMESG,)),
    "LEMON_NODE": (EXCLUDE_NODE, "Exclude node {host}: it failed {count} jobs; send it for diagnosis.",
                   ("per-node failure history across jobs",)),
    "STRAGGLER_THERMAL": (EXCLUDE_NODE, "Exclude node {host} from throughput-critical jobs and check cooling/"
                          "power for GPU {gpu} (HW slowdown active).", ("clock-event reason counters of {gpu}",)),
    "IB_LINK_FLAP": (EXCLUDE_NODE, "Exclude node {host} and check its IB port/cable (ibqueryerrors, UFM "
                     "cumulative port-down time).", ("IB port counters link_downed/symbol_error on {host}",)),
    "IB_TRANSPORT_RETRY_EXCEEDED": (EXCLUDE_NODE, "Exclude node {host} (IB retries exhausted towards it) and run "
                                    "ib_write_bw between {reporters} and {peer}.",
                                    ("ib_write_bw between the pair", "IB counters local_ack_timeout_err / link_downed")),
    "IB_LOCAL_PROTECTION_ERROR": (FIX_CONFIG, "Fix the PCIe ACS setting between NIC and GPU (lspci -vvv | grep "
                                  "ACSCtl shows SrcValid+); confirm with NCCL_NET_GDR_LEVEL=0.",
                                  ("lspci -vvv | grep ACSCtl on {reporters}",)),
    "NCCL_NETWORK_CONFIG": (FIX_CONFIG, "Fix the NCCL network configuration (NCCL_SOCKET_IFNAME / NCCL_IB_HCA, "
                            "interfaces and routes) on {host}.", ("NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET log",)),
    "P2P_BROKEN": (FIX_CONFIG, "Fix PCIe P2P (IOMMU passthrough/off, ACS disabled); workaround NCCL_P2P_DISABLE=1.",
                   ("p2pBandwidthLatencyTest matrix after the change",)),
    "CONTAINER_SHM_IPC": (FIX_CONFIG, "Run the container with --ipc=host or a larger --shm-size; preflight "
                          "/dev/shm size and IPC mode.", ("NCCL_DEBUG=INFO log of the failing rank", "df -h /dev/shm")),
    "RENDEZVOUS_UNREACHABLE": (FIX_CONFIG, "Fix reachability of the rendezvous endpoint {endpoint}: name "
                               "resolution (/etc/hosts), firewall, port.", ("nc -vz {endpoint} from every node",)),
    "LAUNCH_SKEW": (FIX_CONFIG, "Launch all nodes together (gang scheduling) and raise only the init "
                    "timeout; do not blame hardware.", ("start time of every node's launcher",)),
    "SETUP_PHASE_TIMEOUT": (FIX_CONFIG, "Pre-tokenise/prepare the dataset offline, or raise the timeout of the "
                            "setup phase only.", ("per-rank time spent before the first step",)),
    "CHECKPOINT_SAVE_TIMEOUT": (FIX_CONFIG, "Use a separate, longer timeout (or async/sharded save) for checkpoint "
                                "saving.", ("checkpoint write duration per rank",)),
    "COLLECTIVE_DESYNC": (STOP, "Stop: ranks issue different collectives ({seqs}); fix the code path that runs "
                          "only on some ranks (e.g. a checkpoint/eval branch).", (_FR, "TORCH_NCCL_DESYNC_DEBUG=1")),
    "CUDA_ILLEGAL_ADDRESS": (STOP, "Stop: treat as a code fault unless Xid 48/94/95 co-occur; rerun with "
                             "CUDA_LAUNCH_BLOCKING=1 or compute-sanitizer on one rank.",
                             ("dmesg on {host} for Xid 13/31 of that PID", "CUDA_LAUNCH_BLOCKING=1 traceback")),
    "CUDA_OOM_CAPACITY": (FIX_CONFIG, "Reduce memory per GPU: smaller micro-batch, activation checkpointing, "
                          "CPU offload or more shards.", ("torch.cuda.memory_summary() at the failing step",)),
    "CUDA_OOM_FRAGMENTATION": (FIX_CONFIG, "Set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (fragmented "
                               "allocator pool).", ("torch.cuda.memory_snapshot()",)),
    "CUDA_OOM_CHECKPOINT_GATHER": (FIX_CONFIG, "Save the FULL_STATE_DICT with offload_to_cpu=True, rank0_only=True "
                                   "(or a sharded checkpoint).", ()),
    "CUDA_OOM_INIT": (FIX_CONFIG, "Initialise on the meta device / shard before materialising the model "
                      "(every rank must not build the full model on GPU).", ()),
    "HOST_OOM_KILL": (FIX_CONFIG, "Reduce host memory on {host}: fewer DataLoader workers, less pinned memory; "
                      "watch per-rank RSS.", ("'Out of memory: Killed process' in dmesg of {host}",
                                              "per-rank host RSS trend")),
    "SHM_EXHAUSTED": (FIX_CONFIG, "Raise the container's --shm-size (or --ipc=host) for DataLoader workers.",
                      ("df -h /dev/shm inside the container",)),
    "NAN_LOSS": (FIX_CONFIG, "Fix numerics before rerunning (bf16 instead of fp16, lower LR, gradient clipping, "
                 "check fully-masked batches).", ("TORCH_NCCL_NAN_CHECK=1 to localise the rank", _DMESG)),
    "LOSS_SCALE_COLLAPSE": (FIX_CONFIG, "Switch to bf16 or lower the LR / add gradient clipping: the fp16 loss "
                            "scale is collapsing.", ("loss scale and skipped-step count per step",)),
    "SILENT_SKIPPED_STEPS": (STOP, "Stop: optimizer steps are silently skipped; inspect grad-norm and "
                             "skipped_steps.", ("grad-norm and parameter checksum per step",)),
    "RESTART_LOOP": (STOP, "Stop the restarts: cap retries, validate the checkpoint and fall back to the last "
                     "persistent checkpoint.", ("which checkpoint each restart loaded",)),
    "STRAGGLER_INPUT": (FIX_CONFIG, "Fix the input pipeline of rank {rank} (more DataLoader workers, local "
                        "data cache).", ("per-rank input-wait time",)),
    "STRAGGLER_COMPUTE": (FIX_CONFIG, "Measure collective arrival skew or compute-only CUDA-event time per rank "
                          "to name the slow rank; wall time per phase cannot.", ("per-rank collective arrival skew",
                                                                                   _FR)),
    "INPUT_STALL": (FIX_CONFIG, "Fix the periodic input stall (storage/DataLoader prefetch).",
                    ("per-step data-wait time",)),
    "CHECKPOINT_IO_SLOW": (FIX_CONFIG, "Use async/sharded checkpoints or faster storage.", ("NFS mountstats",)),
    "NCCL_COLLECTIVE_TIMEOUT": (RETRY, "Retry once with Flight Recorder on; if it recurs exclude the most "
                                "implicated host.", (_FR, _DMESG + " (the rank that never joined)",
                                                     "IB port counters of the hosts of the missing rank(s)")),
    "PEER_PROCESS_EXIT": (RETRY, "Find the first failing rank/host in time order, starting with peer {peer} "
                          "(the reporting host is a victim); retry once if none is found.", ("logs of every rank, first error in time order", _DMESG)),
    "HEARTBEAT_MONITOR_TIMEOUT": (RETRY, "Retry once with a py-spy dump on timeout; check whether nodes started "
                                  "at different times.", ("py-spy dump of the stuck ranks", "launch time of every node",
                                                          _FR)),
    "WATCHDOG_BLOCKED": (RETRY, "Retry once with py-spy attached; look for a thread holding the GIL inside a "
                         "CUDA call.", ("py-spy dump --native of the stuck rank",)),
    "UNKNOWN": (RETRY, "Retry once after turning on the evidence below; stop if it fails the same way.",
                (_DMESG, _FR, "NCCL_DEBUG=INFO logs of all ranks")),
}

#: action override for a Python exception no class covers: a code/data fault, never retried blindly
UNKNOWN_EXCEPTION: Final = (STOP, "Stop: {exception} ends the job on one rank; fix the code or data before "
                            "rerunning.", ("full traceback of the first failing rank",))


class _Blank(dict):
    def __missing__(self, key: str) -> str:
        return {"host": "<host not named in the logs>", "gpu": "<GPU not named in the logs>",
                "rank": "<rank not named>", "peer": "<peer not named>", "reporters": "<the reporting host>",
                "seqs": "see the mismatch report in the evidence", "endpoint": "<endpoint not named>"}.get(key, "?")


def render(template: str, values: dict[str, object]) -> str:
    """Fill ``template`` with ``values``; missing or None values become neutral phrases."""
    clean = _Blank({k: v for k, v in values.items() if v not in (None, "", "-")})
    return string.Formatter().vformat(template, (), clean)


def action_for(cls: str, values: dict[str, object], *, running: bool = True,
               exception: bool = False) -> tuple[str, str, tuple[str, ...]]:
    """(kind, sentence, next evidence) for one incident.

    Args:
        cls: taxonomy class.
        values: ``host``, ``gpu``, ``rank`` and the finding's facts.
        running: False when the failure happened before any training progress; an IB retry error
            at startup is then a configuration problem (RoCE GID index, routing), not a node fault.
        exception: the UNKNOWN incident is an uncaught Python exception (code/data fault).

    Raises:
        KeyError: ``cls`` has no action (a consistency test keeps the table complete).
    """
    kind, template, nxt = UNKNOWN_EXCEPTION if (cls == "UNKNOWN" and exception) else ACTIONS[cls]
    if cls == "PEER_PROCESS_EXIT" and values.get("exception"):  # the exiting rank's own exception is known
        kind, template, nxt = UNKNOWN_EXCEPTION
    if cls == "ECC_UNCORRECTABLE":
        bucket, xid = values.get("bucket"), values.get("xid")
        values = {**values, "catalog": f"catalog {bucket} for Xid {xid}" if bucket and xid else
                  "catalog WORKFLOW_XID_48, the uncorrectable-ECC workflow"}
        if bucket == "RESTART_APP":  # contained (Xid 94, RST: No, D-RST: No): only the faulting process died
            kind, template = RETRY, ("Restart the job from the last checkpoint, same nodes: the ECC error on GPU {gpu} "
                                     "({host}) was contained to the faulting process ({catalog}; no reset needed); "
                                     "drain {host} and check the row-remap state if it recurs.")
    if cls == "HBM_DEGRADATION" and values.get("hint") == "lone_remap":
        kind, template = RETRY, ("No exclusion: one row-remap record (Xid {xid}) on GPU {gpu} ({host}) is not "
                                 "degradation; reset the GPU at the next drain to activate the remap, and exclude "
                                 "it only if remaps recur, an uncorrectable error (Xid 48/94/95) follows or Xid 64 "
                                 "(remap failure) appears.")
        nxt = ("row-remap counters (nvidia-smi -q -d ROW_REMAPPER) of GPU {gpu} over the next days",)
    if cls == "NVLINK_FAULT" and values.get("sxid"):  # an NVSwitch, not a GPU: the node's fabric
        kind, template = EXCLUDE_NODE, ("Exclude node {host}: fatal NVSwitch SXid {sxid} on {switch} takes down the "
                                        "node's NVLink fabric; reset the fabric (GPUs and NVSwitches, restart Fabric "
                                        "Manager, or reboot the node) before reuse; RMA the baseboard if it recurs.")
        nxt = ("nvidia-smi -q (Fabric state) and Fabric Manager log on {host}", "nvidia-smi nvlink -e counters on {host}")
    if cls == "NVLINK_FAULT" and values.get("n_gpus"):  # several GPUs of one node: its fabric
        kind, template = EXCLUDE_NODE, ("Exclude node {host}: NVLink faults (Xid {xid}) on {n_gpus} GPUs ({gpus}) "
                                        "point at the node's NVLink fabric; reset it (all GPUs and NVSwitches, restart "
                                        "Fabric Manager, or reboot the node) and check nvidia-smi nvlink -s before "
                                        "reuse.")
        nxt = ("nvidia-smi -q (Fabric state) and Fabric Manager log on {host}", "nvidia-smi nvlink -e counters on {host}")
    reason = values.get("scheduler_reason")
    if reason:  # Slurm cancelled the job: its limit or policy, not a node/memory fault
        kind, template, nxt = {
            "TIME LIMIT": (FIX_CONFIG, "Resubmit from the last checkpoint with a longer time limit (sbatch --time) or "
                           "checkpoint before the limit; not a node or memory fault.", ("sacct -j {job_id}",)),
            "PREEMPTION": (RETRY, "Requeue from the last checkpoint: the job was preempted.", ("sacct -j {job_id}",)),
            "NODE FAILURE": (EXCLUDE_NODE, "Exclude node {host} (Slurm reported a node failure) and resubmit.",
                             ("scontrol show node {host}", "slurmd log of {host}")),
        }.get(str(reason), (STOP, "Cancelled by the scheduler or a user (scancel, {scheduler_reason}): ask the "
                                  "owner before resubmitting.", ("sacct -j {job_id}",)))
    if cls == "HOST_OOM_KILL" and values.get("prior") == "allocator":
        template = ("Reduce host memory per rank on {host} (rank {rank}): the CPU allocator was refused memory "
                    "(RAM, cgroup or RLIMIT_AS limit): fewer DataLoader workers, less pinned memory, check the job's "
                    "memory limit.")
    if cls == "HOST_OOM_KILL" and values.get("prior") == "sigkill":
        template = ("Check the kernel log of {host} for 'Out of memory: Killed process' first: if it is there, reduce "
                    "host memory (fewer DataLoader workers, less pinned memory); if not, find who sent SIGKILL "
                    "(scheduler limit, cgroup, a monitor) before changing anything.")
    if cls == "IB_TRANSPORT_RETRY_EXCEEDED" and not running:
        if values.get("roce") == "yes":  # RoCE evidence (GID / RoCE in the NCCL lines): the GID index is the usual fix
            kind, template = FIX_CONFIG, ("Fix the RoCE addressing before retrying: check NCCL_IB_GID_INDEX "
                                         "(show_gids, RoCE v2 GID) and run ib_write_bw between the pair.")
        else:  # native InfiniBand (or unknown link layer): no GID index to fix; the path itself
            kind, template = FIX_CONFIG, ("Check the IB path between {reporters} and {peer} before retrying: port "
                                         "state and link layer (ibstat), subnet manager, routing/partition (P_Key), "
                                         "then ib_write_bw between the pair; if ibstat shows 'Link layer: Ethernet' "
                                         "(RoCE), check NCCL_IB_GID_INDEX with show_gids.")
            nxt = ("ibstat / ibv_devinfo on both hosts (link layer, port state)", *nxt)
    if cls == "CONTAINER_SHM_IPC":
        cause = values.get("shm_cause")
        if cause == "permission":
            kind, template = FIX_CONFIG, ("Fix the permissions of /dev/shm inside the container (mounted read-only "
                                         "or not writable by the job's user: chmod 1777 /dev/shm or mount a writable "
                                         "tmpfs there); a larger --shm-size does not help a permission error.")
            nxt = ("ls -ld /dev/shm and mount | grep shm inside the container",)
        elif cause == "space":
            kind, template = FIX_CONFIG, ("Give the container more /dev/shm: --shm-size (e.g. 8g) or --ipc=host; "
                                         "NCCL's SHM segments did not fit.")
            nxt = ("df -h /dev/shm inside the container",)
    if cls == "NCCL_NETWORK_CONFIG" and values.get("fix") == "ib":  # IB device / transport set-up failed
        template = ("Make InfiniBand work on every node (ibstat / ibv_devinfo: ports Active, the same HCAs exposed to "
                    "each node and its container, NCCL_IB_HCA naming devices that exist), or fall back to sockets with "
                    "NCCL_IB_DISABLE=1 while it is fixed.")
        nxt = ("ibstat / ibv_devinfo on every node", "NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET log of both nodes")
    if cls == "NCCL_NETWORK_CONFIG" and values.get("fix") == "internal_prior":  # a bare ncclInternalError at init
        template = ("Check NCCL's network set-up on every host before rerunning: NCCL_SOCKET_IFNAME (and "
                    "NCCL_IB_HCA) must name interfaces that exist on every host (ip -br link; hosts whose interface "
                    "names differ need all the names, comma-separated), the hosts must reach each other on them, and "
                    "every host must run the same NCCL version.")
        nxt = ("NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET log of every host (the WARN line before the internal error)",
               "ip -br link and ip -br addr on every host")
    if cls == "NCCL_NETWORK_CONFIG" and values.get("fix") == "memlock":  # ibv_reg_mr* refused: pinned-memory limit
        template = ("Raise the locked-memory limit (RLIMIT_MEMLOCK) that the ranks actually get: InfiniBand memory "
                    "registration (ibv_reg_mr) was refused for lack of lockable memory, not because of the HCA or its "
                    "port. Set memlock unlimited in /etc/security/limits.conf (and LimitMEMLOCK=infinity for slurmd / "
                    "the MPI daemons), run containers with --ulimit memlock=-1, and check ulimit -l inside the launcher "
                    "(mpirun/srun ... sh -c 'ulimit -l') on every node.")
        nxt = ("ulimit -l as the job sees it on every node (mpirun/srun <args> sh -c 'ulimit -l')",
               "dmesg of the node for mlx5 'reg mr failed' / MKEY limit lines if the limit is already unlimited")
    if cls == "RENDEZVOUS_UNREACHABLE" and values.get("fix") != "port" and values.get("endpoint") in (None, "", "-"):
        # no endpoint in the logs (a bare DistStoreError: Socket Timeout): first what each node was told to reach
        template = ("Check the rendezvous settings every node's launcher gets (MASTER_ADDR / MASTER_PORT or "
                    "--rdzv-endpoint, --nnodes / WORLD_SIZE, NODE_RANK, the framework's multi-node variables), then "
                    "that the address is reachable from every node (name resolution, firewall, port).")
        nxt = ("MASTER_ADDR, MASTER_PORT, WORLD_SIZE and NODE_RANK as each node's launcher saw them",
               "nc -vz <MASTER_ADDR> <MASTER_PORT> from every node")
    if cls == "RENDEZVOUS_UNREACHABLE" and values.get("fix") == "port":  # EADDRINUSE: the store port is taken
        template = ("Give each job its own rendezvous port (torchrun --master_port / MASTER_PORT, or "
                    "--rdzv-endpoint host:port): another job or process on this host already listens on it.")
        nxt = ("ss -ltnp on the master host (who holds the port)",)
    if cls == "LOSS_SCALE_COLLAPSE" and values.get("framework") == "deepspeed":
        template = ("The DeepSpeed fp16 dynamic loss scale hit its minimum: set a static \"loss_scale\" (non-zero) "
                    "or a lower \"initial_scale_power\" / \"min_loss_scale\" in the fp16 section of the DeepSpeed "
                    "config, or train in bf16; lower the LR / add gradient clipping if overflows persist.")
    if cls == "NAN_LOSS" and values.get("precision") == "fp16":  # fp16 / autocast evidence beside the NaN
        template = ("Fix numerics before rerunning: use bf16 instead of fp16 autocast (or disable autocast), then "
                    "lower LR / gradient clipping if it recurs.")
    if cls == "CUDA_ILLEGAL_ADDRESS" and values.get("recurring") == "yes":  # one GPU, several processes
        kind, template = EXCLUDE_NODE, ("Take GPU {gpu} on {host} out of service and run a DCGM diagnostic "
                                        "(dcgmi diag -r 3) on it: it raised MMU faults (Xid 13/31) in {processes} "
                                        "different processes, which points at the GPU rather than one program's code.")
        nxt = ("dcgmi diag -r 3 -i <GPU {gpu}> on {host}", "Xid history of GPU {gpu} across jobs")
    if cls == "NCCL_NETWORK_CONFIG" and values.get("fix") == "socket_ifname":
        template = ("Set NCCL_SOCKET_IFNAME (and GLOO_SOCKET_IFNAME) to the host NIC that reaches the other nodes: "
                    "NCCL chose {ifnames}, a container bridge/loopback interface other hosts cannot reach.")
        nxt = ("ip -br addr on every node", "NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET log after the change")
    return kind, render(template, values), tuple(render(n, values) for n in nxt)
