"""gpufield.harden.preflight: read-only node checks before a job starts (``gpufield preflight``).

Each check is a small :class:`~gpufield.harden.protocols.PreflightCheck` object with a stable
name; a run gives one :class:`CheckResult` per check (status pass / warn / fail / skip, severity,
reason, measured values, fix, time) and an overall status::

    from gpufield.harden.preflight import PreflightConfig, run_preflight, dumps
    report = run_preflight(PreflightConfig(expected_gpu_count=8, expected_gpu_model="H200",
                                           checkpoint_dir="/ckpt", min_free_disk_gib=500))
    print(report.status, report.exit_code())
    print(dumps(report))                     # schema gpufield.preflight/1 (see .report)

Checks (``check_names()``), cheap reads first:

* ``gpu.visible`` count, model, lost GPUs; ``gpu.ecc`` uncorrectable ECC (volatile: fail,
  aggregate: warn); ``gpu.row_remap`` remap pending / failed, recovery action; ``gpu.retired_pages``
  (pre-Ampere); ``gpu.pcie_link`` width / generation against the maximum; ``gpu.nvlink`` links up;
  ``gpu.clock_events`` HW slowdown / thermal / power brake; ``gpu.processes`` memory held by others;
* ``kernel.xid`` Xid lines since boot (``/dev/kmsg`` or ``--kernel-log``), parsed by triage's parser;
* ``host.disk`` free space in the checkpoint dir; ``host.shm`` /dev/shm size;
* ``env.nccl`` debug-only NCCL / torch variables; ``env.socket_ifname`` NCCL / gloo interface lists;
  ``net.ib_ports`` IB / RoCE ports ACTIVE;
* ``comm.allreduce`` a real all-reduce in subprocesses (NCCL on >= 2 GPUs, else gloo on CPU),
  checked for correctness, bus bandwidth against the catalogue's NVLink figure on GPUs.

Every NVML call runs under ``nvml_timeout_s`` (:class:`gpufield.telemetry.nvml_deadline.BoundedNvml`):
a wedged driver fails the GPU checks with ``NVML call X did not return within T s``. Without an
NVIDIA driver the GPU checks are skipped (``no NVIDIA driver / NVML not found``), unless a GPU
count is expected. sysfs / procfs / dev paths are read under ``root`` so tests use a fake tree.
"""

from gpufield.harden.preflight.allreduce import bus_bandwidth
from gpufield.harden.preflight.env import parse_if_list
from gpufield.harden.preflight.model import (
    CheckResult,
    PreflightConfig,
    PreflightContext,
    PreflightReport,
)
from gpufield.harden.preflight.report import (
    SCHEMA,
    check_report_path,
    dumps,
    render,
    to_dict,
    write_report,
)
from gpufield.harden.preflight.runner import CHECKS, check_names, run_preflight, select_checks

__all__ = [
    "CHECKS", "CheckResult", "PreflightConfig", "PreflightContext", "PreflightReport", "SCHEMA", "bus_bandwidth",
    "check_names", "check_report_path", "dumps", "parse_if_list", "render", "run_preflight", "select_checks", "to_dict", "write_report",
]
