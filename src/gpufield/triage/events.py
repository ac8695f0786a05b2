"""The event: one parsed log or telemetry record, the unit every triage stage works on.

Parsers (``gpufield.triage.parsers``) turn lines into :class:`Event` objects; the engine
(``gpufield.triage.engine``) groups events into incidents. This module is the contract between
them: a parser emits only the ``kind`` values of :data:`KINDS`, with the ``fields`` listed there.

Design follows ``../shared/reference/triage.md`` section 5.3 (``events`` table: ts_ns, host,
rank, gpu_uuid, pci_bdf, source, kind, code, severity, fields_json, raw).

Conventions the parsers follow (``gpufield.triage.parsers``):

* ``rank`` is a *global* rank: from a ``[rankN]:`` prefix, ``[Rank N]`` / ``[PG 0 Rank N]``, a
  ChildFailedError ``rank : N`` entry or ``rank=N``. A rank inside a non-default process group
  (``[PG 3 Rank 7]``) goes to ``fields["pg_rank"]`` only. torchrun's ``[default0]:`` log prefix is a
  *local* rank and goes to ``fields["local_rank"]``.
* The ``[N]`` after an NCCL ``host:pid:tid`` prefix is NCCL's ``cudaDev``: it lands in
  ``gpu_index``, never in ``rank``.
* ``fields["level"]`` keeps a glog / PyTorch severity letter (``I W E F``) where the line had one.
* Fields added after the first contract (all optional, documented in :data:`KINDS`): Xid
  ``gpu_instance subcode fatal phys_addr link``; ``pcie_aer`` status bits; ``nccl_return``,
  ``pg_teardown``, ``gpu_handle_error``, ``p2p_access``, ``nic_link_state`` kinds; ``wrapped`` on a
  watchdog timeout re-raised inside "watchdog thread terminated with exception" (a duplicate of an
  earlier event, keep it for evidence, do not count it twice); ``nccl_init`` / ``nccl_bootstrap``
  (severity ``info``: topology, never a cause), the NCCL 2.0 ``file.h:N WARN`` form and the bare
  ``ncclSocketInit:`` detail line as ``nccl_warn``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Severity = Literal["debug", "info", "warning", "error", "fatal"]

#: source -> where a line came from (one value per parser family)
SOURCES = (
    "kernel",      # dmesg / journal / syslog / kmsg: NVRM Xid, SXid, AER, OOM-killer
    "nccl",        # NCCL INFO/WARN lines, IB completion errors, NCCL error strings
    "torch",       # torch.distributed / ProcessGroupNCCL watchdog, heartbeat, Flight Recorder
    "torchrun",    # torch.distributed.elastic / torchrun ChildFailedError blocks, rendezvous
    "cuda",        # CUDA runtime errors and allocator OOM messages
    "train",       # training-loop lines: loss, NaN/Inf, loss-scale overflow, skipped steps
    "smi",         # nvidia-smi -q dumps and nvidia-smi / p2p test tables
    "dcgm",        # dcgm-exporter / Prometheus text samples
    "tool",        # outputs of other tools (straggler tables, restart-loop monitors)
)

#: kind -> (source, meaning, fields a parser fills in where present).
#: ``code`` holds the primary code as a string (Xid number, IB status, NCCL retcode, exit code).
KINDS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    # kernel
    "xid": ("kernel", "NVRM Xid", ("xid", "pid", "name", "message", "rst", "d_rst", "mnemonic", "gpu_instance", "subcode", "fatal", "phys_addr", "link", "intrinfo", "error_status")),
    "sxid": ("kernel", "NVSwitch SXid", ("sxid", "message", "fatal", "link", "switch")),
    "gpu_fell_off_bus": ("kernel", "GPU has fallen off the bus (with or without Xid 79)", ("message", "multiline", "pci_id")),
    "gpu_reset_required": ("kernel", "NV_ERR_RESET_REQUIRED / GPU needs reset", ("message", "status")),
    "gpu_map": ("kernel", "NVRM: GPU at PCI:<bdf>: GPU-<uuid> join line", ()),
    "pcie_aer": ("kernel", "PCIe AER error report", ("severity_text", "type", "device", "agent", "vendor_device", "status", "mask", "errors", "source", "id_kind")),
    "host_oom_kill": ("kernel", "OOM killer killed a process (``score``: the pre-4.19 'Kill process N (name) score S or "
                      "sacrifice child' line that names the chosen task)",
                      ("pid", "name", "anon_rss_kb", "total_vm_kb", "cgroup", "score", "trigger", "gfp_mask",
                       "report_header")),
    "nvrm_other": ("kernel", "other NVRM error line", ("message", "status", "driver_version")),
    "nic_link_state": ("kernel", "ConnectX (mlx5_core) port link state line", ("hca", "port", "state", "nic_bdf")),
    # nccl
    "nccl_init": ("nccl", "NCCL INFO 'comm 0x.. rank R nranks N cudaDev D busId B' (src/init.cc): where a rank runs; "
                  "rank = rank in that communicator (global when nranks is the world size), gpu_bdf from busId",
                  ("rank", "nranks", "cuda_dev", "nvml_dev", "bus_id", "comm", "comm_id", "state")),
    "nccl_bootstrap": ("nccl", "NCCL INFO 'Bootstrap : Using if:ip<0>' / NET/Socket / NET/IB OOB: this process's "
                       "address(es)", ("transport", "ifname", "ip", "addresses")),
    "nccl_warn": ("nccl", "NCCL WARN line", ("message", "site", "retcode")),
    "nccl_return": ("nccl", "NCCL INFO error-return chain line 'file.cc:N -> R' (R = ncclResult_t)", ("site", "retcode")),
    "ib_completion_error": ("nccl", "NET/IB completion with error", ("status", "status_text", "opcode", "vendor_err", "peer", "qp", "direction", "hca", "len", "opcode_text")),
    "ib_async_event": ("nccl", "NET/IB async event (e.g. port error)", ("event",)),
    "nccl_system_error": ("nccl", "unhandled system error / ncclSystemError", ("message", "errno", "nccl_version", "via", "pg", "seq", "op_type", "errno")),
    "nccl_remote_error": ("nccl", "ncclRemoteError / remote process exited / broken pipe", ("message", "peer", "nccl_version", "via", "pg", "seq", "op_type", "errno")),
    "nccl_internal_error": ("nccl", "ncclInternalError / unhandled cuda error", ("message", "nccl_version", "via", "pg", "seq", "op_type", "errno")),
    "nccl_error": ("nccl", "other NCCL error (NCCL error ... / ncclInvalidUsage)", ("message", "nccl_version", "via", "pg", "seq", "op_type", "errno")),
    "native_frame": ("nccl", "a native backtrace frame in an NCCL entry point (ncclGroupEnd, ncclGetUniqueId, "
                     "ncclShmOpen): where a signal hit", ("function",)),
    # torch
    "watchdog_timeout": ("torch", "ProcessGroupNCCL watchdog caught collective timeout", ("seq", "op_type", "numel_in", "numel_out", "timeout_ms", "ran_for_ms", "pg", "wrapped")),
    "heartbeat_timeout": ("torch", "heartbeat monitor timed out / watchdog stuck", ("timeout_s", "pg", "message")),
    "desync": ("torch", "desync debug report / collective sequence mismatch", ("seq", "op_type", "message")),
    "flight_recorder": ("torch", "Flight Recorder missing-ranks report line, or (``dump`` True) one process group of a "
                        "whole dump (parsers/flight_recorder.py)",
                        ("message", "missing_ranks", "seq", "pg", "enabled", "entry", "dump", "last_enqueued",
                         "last_started", "last_completed", "timeout_ms", "version")),
    "last_enqueued": ("torch", "last enqueued / completed NCCL work SeqNum", ("last_enqueued", "last_completed", "last_started", "seq", "pg")),
    "pg_teardown": ("torch", "'Some NCCL operations have failed or timed out' / 'taking the entire process down'", ("message",)),
    "watchdog_blocked": ("torch", "watchdog thread blocked / terminated with exception", ("message", "pg")),
    "python_exception": ("torch", "uncaught Python exception line (RuntimeError: ... etc.)", ("exc_type", "message", "errno")),
    # torchrun
    "child_failed": ("torchrun", "ChildFailedError block: one failure", ("exitcode", "signal", "signal_name", "local_rank", "error_file", "root_cause", "time", "traceback", "script", "entry", "binary", "block_line")),
    "rendezvous_error": ("torchrun", "rendezvous connect / timeout error", ("endpoint", "message", "timeout_s")),
    "mem_report": ("kernel", "a line of the kernel's memory report (show_mem: OOM killer, allocation failure)",
                   ("free_swap_kb",)),
    "name_unresolved": ("torchrun", "a tool or wrapper could not resolve a host name (nslookup, ping, a launch "
                        "script; not a Python exception)", ("name", "message")),
    "elastic_restart": ("torchrun", "elastic agent restarting workers", ("restart_count", "attempts_left", "message")),
    "scheduler_cancel": ("torchrun", "the batch scheduler cancelled the job/step (Slurm '*** JOB n ON host CANCELLED AT t DUE TO TIME LIMIT ***'): its processes then get SIGKILL", ("scheduler", "job_id", "scope", "reason", "message")),
    "signal_death": ("torchrun", "process died / killed by signal (SIGKILL, SIGBUS, ...)", ("signal", "signal_name", "message", "sent_by_agent")),
    # cuda
    "cuda_illegal_address": ("cuda", "an illegal memory access was encountered", ("message", "via", "pg")),
    "cuda_oom": ("cuda", "CUDA out of memory (any of the three message generations)", ("tried_bytes", "capacity_bytes", "free_bytes", "allocated_bytes", "reserved_bytes", "generation", "process_bytes", "phase", "reserved_unallocated_bytes")),
    "cuda_error": ("cuda", "other CUDA runtime error", ("message", "cuda_error", "cuda_code", "via")),
    "bus_error": ("cuda", "DataLoader worker bus error / shm exhausted", ("message", "shm_hint")),
    "gpu_handle_error": ("smi", "nvidia-smi / NVML cannot reach a GPU (Unable to determine the device handle, NVMLError)", ("message",)),
    # train
    "loss": ("train", "a training-progress line with a loss value (only with IngestOptions(with_loss=True))", ("step", "loss", "iter")),
    "nan_loss": ("train", "loss or another metric (grad-norm) is NaN/Inf; ``is_loss`` False = a metric other than the "
                 "loss (a warning, never a root by itself), ``finite_loss`` = a finite loss on the same line",
                 ("step", "value", "iter", "metric", "is_loss", "finite_loss")),
    "loss_scale_overflow": ("train", "fp16 overflow: skipping step, loss scale reduced; ``at_minimum``: DeepSpeed's "
                            "'Current loss scale already at minimum' (the run aborts)",
                            ("step", "loss_scale", "new_loss_scale", "at_minimum")),
    "skipped_step": ("train", "optimizer step skipped", ("step", "skipped")),
    "restart_loop": ("tool", "repeated restart / rerun of the same job", ("count", "message")),
    "straggler_finding": ("tool", "per-rank timing table row or finding", ("finding", "step_ms", "metric", "value_ms", "median_ms", "median_rank", "total_ms", "message")),
    "traceback": ("torch", "Python traceback frames (innermost last)", ("frames", "files", "user_call", "user_frame")),
    "step_time": ("train", "per-rank step-time summary (gpufield.triage.steptime, seconds); ``what`` = ``compute``: the "
                  "compute-only durations of the same step lines", ("count", "mean_s", "std_s", "max_s", "stated", "first_line", "what")),
    # smi / dcgm
    "clock_event": ("smi", "active clock-event (throttle) reason", ("reason", "active", "reasons", "mask", "counter_us")),
    "ecc_counter": ("smi", "ECC counter value", ("counter", "value", "volatile", "location")),
    "row_remap": ("smi", "row-remap state", ("correctable", "uncorrectable", "pending", "failure", "banks_max", "banks_high", "banks_partial", "banks_low", "banks_none")),
    "p2p_bandwidth": ("smi", "p2p bandwidth matrix row", ("p2p_enabled", "gb_per_s", "direction", "latency_us", "writes", "matrix")),
    "pcie_acs": ("smi", "lspci -vvv 'ACSCtl: SrcValid+ ...' (ACS enabled on a PCIe port: P2P / GPUDirect redirected)",
                 ("src_valid", "req_redir", "cmplt_redir", "enabled")),
    "gpu_topology": ("smi", "nvidia-smi topo -m matrix: the link type of each GPU pair (PIX/PXB = through PCIe "
                     "switches, PHB/NODE/SYS = through the host bridge or CPUs, NV# = NVLink)", ("links", "gpus")),
    "p2p_access": ("smi", "p2pBandwidthLatencyTest 'Device=i CAN/CANNOT Access Peer Device=j'", ("peer", "can_access")),
    "metric_sample": ("dcgm", "one Prometheus/DCGM sample", ("metric", "value", "labels")),
}


#: fields any kind may carry besides its own: the glog level letter, torchrun's local rank, the rank
#: inside a non-default process group, the Python exception type, a truncation flag, the message
#: text, the metric name (DCGM), the NCCL result name, the source location (``file.cc:N``), and
#: ``bad_timestamp``: the text of a timestamp prefix that could not be read as a date (``Mar 99
#: 99:99:99``); such an event has no ``ts_ns``, ingestion warns about it, and the timeline leaves it
#: untimed instead of giving it its file neighbour's time
COMMON_FIELDS = ("level", "local_rank", "pg_rank", "exc_type", "truncated", "message", "metric", "result",
                 "where", "site", "bad_timestamp")

#: kinds emitted by more than the source listed first in :data:`KINDS` (dcgm-exporter text gives
#: the same clock-event / ECC / row-remap facts as nvidia-smi)
OTHER_SOURCES: dict[str, tuple[str, ...]] = {"clock_event": ("dcgm",), "ecc_counter": ("dcgm",), "row_remap": ("dcgm",),
                                             # UCX's "Caught signal 7 (Bus error...)" inside NCCL's process
                                             "signal_death": ("nccl",),
                                             # a c10d TCPStore client socket reset by the store's process
                                             "nccl_remote_error": ("torchrun",),
                                             # nvidia-smi --query-gpu / NVML sampler CSVs join bus id and UUID too
                                             "gpu_map": ("smi",)}


@dataclass(frozen=True, slots=True)
class Event:
    """One parsed record.

    Attributes:
        source: one of :data:`SOURCES`.
        kind: one of :data:`KINDS`.
        file: path of the input file, as given by the user.
        line: 1-based line number of the record's first line in ``file``.
        raw: the record's raw text (continuation lines joined by ``\\n``), never altered.
        ts_ns: absolute UTC time in ns since the epoch when the line carries one, else None.
        mono_s: kernel monotonic seconds (``[ 269.516977]``) when present, else None.
        host: hostname when the line or its prefix names one.
        rank: global rank when the line names one.
        pid: process id when present.
        gpu_bdf: PCI bus id normalised to ``dddd:bb:dd.f`` (``.0`` added when missing), lower-case.
        gpu_uuid: ``GPU-...`` string when present.
        gpu_index: device ordinal (``cuda:3``, ``GPU 3``) when present.
        code: primary code as text (Xid number, IB status, NCCL retcode, exit code), or None.
        severity: one of ``debug, info, warning, error, fatal``.
        fields: parser-specific extracted values (see :data:`KINDS`); JSON-serialisable.
    """

    source: str
    kind: str
    file: str
    line: int
    raw: str
    ts_ns: int | None = None
    mono_s: float | None = None
    host: str | None = None
    rank: int | None = None
    pid: int | None = None
    gpu_bdf: str | None = None
    gpu_uuid: str | None = None
    gpu_index: int | None = None
    code: str | None = None
    severity: Severity = "error"
    fields: dict[str, Any] = field(default_factory=dict)

    @property
    def where(self) -> str:
        """``file:line`` of the record."""
        return f"{self.file}:{self.line}"
