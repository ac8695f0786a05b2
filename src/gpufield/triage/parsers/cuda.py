"""CUDA parser: runtime errors (illegal address, ECC, NVLink, busy device), the three generations
of PyTorch's CUDA out-of-memory message, DataLoader bus errors.

OOM text from PyTorch ``c10/cuda/CUDACachingAllocator.cpp`` (three layouts: <=2.0 parenthesised,
2.1-2.2 ``total capacty`` typo, >=2.3 ``total capacity`` + ``expandable_segments``); CUDA error
strings from ``cudaGetErrorString`` (https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__TYPES.html).
Reference: ``../shared/reference/triage.md`` §2.10.
"""

from __future__ import annotations

from gpufield.triage.catalog import cuda_driver_results
from gpufield.triage.events import Event
from gpufield.triage.parsers import _regex as rx
from gpufield.triage.parsers._common import event, prefix_of, to_bytes
from gpufield.triage.protocols import LineContext

_N = r"(?P<{0}n>[\d.]+) (?P<{0}u>[KMGT]?i?B|bytes)"
# torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 388.00 MiB (GPU 3; 31.75 GiB total capacity; 28.42 GiB already allocated; 340.94 MiB free; 30.39 GiB reserved in total by PyTorch) If reserved memory is >> allocated memory ...
OOM1_RE = rx.compile(
    r"CUDA out of memory\. Tried to allocate " + _N.format("t") + r" \(GPU (?P<gpu>\d+); " + _N.format("c")
    + r" total capacity; " + _N.format("a") + r" already allocated; " + _N.format("f") + r" free;"
    r"(?: " + _N.format("r") + r" reserved in total by PyTorch)?")
# torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 938.00 MiB. GPU 0 has a total capacity of 5.60 GiB of which 49.44 MiB is free. Process 12622 has 948.00 MiB memory in use. ... Of the allocated memory 3.73 GiB is allocated by PyTorch, and 233.73 MiB is reserved by PyTorch but unallocated.
# torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 8.06 GiB. GPU 0 has a total capacty of 23.70 GiB of which 1.27 GiB is free. ...      (~2.1, note the typo)
OOM2_RE = rx.compile(
    r"CUDA out of memory\. Tried to allocate " + _N.format("t") + r"\. GPU (?P<gpu>\d+) has a total capac(?P<typo>i?)ty of "
    + _N.format("c") + r" of which " + _N.format("f") + r" is free\.")
OOM_PROC_RE = rx.compile(r"(?:Process (?P<pid>\d+) has|this process has) " + _N.format("p") + r" memory in use")
OOM_ALLOC_RE = rx.compile(r"Of the allocated memory " + _N.format("a") + r" is allocated by PyTorch, and "
                          + _N.format("r") + r" is reserved by PyTorch but unallocated")
# RuntimeError: CUDA error: out of memory     /  CUDA out of memory (no numbers)
OOM0_RE = rx.compile(r"CUDA out of memory|CUDA error: out of memory|cudaErrorMemoryAllocation")
# RuntimeError: CUDA error: an illegal memory access was encountered
# RuntimeError: CUDA error: uncorrectable ECC error encountered
# darknet (src/dark_cuda.c check_error): "CUDA Error: uncorrectable ECC error encountered" and, for an error left by
# an earlier call, "CUDA Error Prev: ..." (capital E: the cudaGetErrorString text after it is the same)
CUDA_ERR_RE = rx.compile(r"(?:CUDA [Ee]rror(?: Prev)?|CUDA failure|Cuda failure|cudaError\w*)[:]? ?'?(?P<msg>[^'\n]*?)'?\s*$")
# Test CUDA failure common.cu:1007 'CUDA-capable device(s) is/are busy or unavailable'     (nccl-tests)
# Failed to allocate device vector A (error code unknown error)!                          (CUDA samples)
ERROR_CODE_RE = rx.compile(r"\(error code (?P<msg>[^)]+)\)")
# RuntimeError: DataLoader worker (pid 56811) is killed by signal: Bus error. It is possible that dataloader's workers are out of shared memory. ...
# The signal name is strsignal()'s text; a pasted message wrapped after "Bus" still names SIGBUS (no other signal's
# text starts with "Bus"), so the name may end the line instead of the sentence.
DATALOADER_RE = rx.compile(r"DataLoader worker \(pid (?P<pid>\d+)\) is killed by signal: (?P<sig>[\w ]+?)(?:\.|\s*$)")
# ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient shared memory (shm).
#   (the worker's own SIGBUS handler, torch/csrc/DataLoader.cpp SIGNAL_HANDLER(SIGBUS, ...), printed before it dies)
WORKER_BUS_RE = rx.compile(r"Unexpected bus error encountered in worker")
# CUDA driver API names (programs calling the driver directly, TensorFlow's stream executor):
# "failed call to cuDevicePrimaryCtxRetain: CUDA_ERROR_ECC_UNCORRECTABLE: uncorrectable ECC error encountered"
DRIVER_ERR_RE = rx.compile(r"\b(?P<name>CUDA_ERROR_[A-Z0-9_]+)\b(?::\s*(?P<msg>[^\n]*?))?\s*$")
# "for CUDA device ordinal 0"
ORDINAL_RE = rx.compile(r"CUDA device ordinal (?P<n>\d+)")
# "Error saving model: CUDA out of memory ..." / "Failed to save checkpoint: ..." : the OOM line names the save itself
SAVE_RE = rx.compile(r"(?i)\b(?:error|failed|failure|exception)\b[^:]{0,40}\bsav(?:e|ing)\b[^:]{0,40}\b(?:model|checkpoint|"
                     r"state[ _]?dict|weights)\b|\bsav(?:e|ing)_(?:model|checkpoint|pretrained)\b")
EXC_RE = rx.compile(r"\b(?P<exc>(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception)): ")

#: cudaGetErrorString text -> (cudaError_t name, value); CUDA runtime API, enum cudaError.
CUDA_ERRORS = {
    "out of memory": ("cudaErrorMemoryAllocation", 2),
    "initialization error": ("cudaErrorInitializationError", 3),
    "CUDA-capable device(s) is/are busy or unavailable": ("cudaErrorDevicesUnavailable", 46),
    "no CUDA-capable device is detected": ("cudaErrorNoDevice", 100),
    "invalid device ordinal": ("cudaErrorInvalidDevice", 101),
    "uncorrectable ECC error encountered": ("cudaErrorECCUncorrectable", 214),
    "uncorrectable NVLink error detected during the execution": ("cudaErrorNvlinkUncorrectable", 220),
    "an illegal memory access was encountered": ("cudaErrorIllegalAddress", 700),
    "too many resources requested for launch": ("cudaErrorLaunchOutOfResources", 701),
    "the launch timed out and was terminated": ("cudaErrorLaunchTimeout", 702),
    "device-side assert triggered": ("cudaErrorAssert", 710),
    "an illegal instruction was encountered": ("cudaErrorIllegalInstruction", 715),
    "misaligned address": ("cudaErrorMisalignedAddress", 716),
    "unspecified launch failure": ("cudaErrorLaunchFailure", 719),
    "system not yet initialized": ("cudaErrorSystemNotReady", 802),
    "unknown error": ("cudaErrorUnknown", 999),
}


def cuda_error_name(msg: str) -> tuple[str | None, int | None]:
    """``(cudaError_t name, value)`` of the ``cudaGetErrorString`` text found in ``msg``, else (None, None)."""
    for text, (name, code) in CUDA_ERRORS.items():
        if text in msg:
            return name, code
    return None, None


class CudaParser:
    """CUDA runtime / allocator errors as PyTorch and CUDA programs print them."""

    name = "cuda"
    source = "cuda"
    prefilter = (r"CUDA out of memory|CUDA [Ee]rror|CUDA failure|Cuda failure|cudaError|CUDA-capable device|"
                 r"illegal memory access|CUDA_ERROR_|\(error code |DataLoader worker \(pid \d+\) is killed|"
                 r"Unexpected bus error encountered in worker")
    keywords = ("CUDA", "Cuda failure", "cudaError", "illegal memory access", "(error code ", "DataLoader worker",
                "bus error encountered in worker")

    def parse_line(self, line: str, ctx: LineContext) -> Event | None:
        """Parse one CUDA error line (see module docstring)."""
        if "Search for `cudaError" in line:  # follow-up line of the error already reported
            return None
        pre = prefix_of(line, ctx)
        exc = EXC_RE.search(line)
        exc_type = exc["exc"] if exc else None
        phase = "checkpoint_gather" if ("Failed to clone()" in line or "state_dict" in line
                                        or SAVE_RE.search(line)) else None
        m = OOM2_RE.search(line) or OOM1_RE.search(line)
        if m:
            gen = 1 if m.re is OOM1_RE else (2 if m["typo"] == "" else 3)
            f = {"tried_bytes": to_bytes(m["tn"], m["tu"]), "capacity_bytes": to_bytes(m["cn"], m["cu"]),
                 "free_bytes": to_bytes(m["fn"], m["fu"]), "generation": gen, "phase": phase,
                 "exc_type": exc_type}
            if gen == 1:
                f["allocated_bytes"] = to_bytes(m["an"], m["au"])
                f["reserved_bytes"] = to_bytes(m["rn"], m["ru"]) if m["rn"] else None
            else:
                a = OOM_ALLOC_RE.search(line, m.end())
                if a:
                    alloc, unalloc = to_bytes(a["an"], a["au"]), to_bytes(a["rn"], a["ru"])
                    f.update(allocated_bytes=alloc, reserved_unallocated_bytes=unalloc,
                             reserved_bytes=(alloc or 0) + (unalloc or 0))
                p = OOM_PROC_RE.search(line, m.end())
                if p:
                    f["process_bytes"] = to_bytes(p["pn"], p["pu"])
            return event("cuda", "cuda_oom", ctx, line, pre, code=2, severity="error",
                         gpu_index=int(m["gpu"]), fields=f)
        if OOM0_RE.search(line):
            return event("cuda", "cuda_oom", ctx, line, pre, code=2, severity="error",
                         fields={"generation": 0, "phase": phase, "exc_type": exc_type,
                                 "message": line[OOM0_RE.search(line).start():]})
        m = WORKER_BUS_RE.search(line)
        if m:
            return event("cuda", "bus_error", ctx, line, pre, code="Bus error", severity="error",
                         fields={"message": line[m.start():], "signal_name": None, "shm_hint": "shared memory" in line})
        m = DATALOADER_RE.search(line)
        if m:
            bus = m["sig"].startswith("Bus")
            return event("cuda" if bus else "torchrun", "bus_error" if bus else "signal_death", ctx, line, pre,
                         code=m["sig"], severity="error", pid=int(m["pid"]),
                         fields={"message": line[m.start():], "signal_name": None if bus else m["sig"],
                                 "shm_hint": "shared memory" in line})
        m = DRIVER_ERR_RE.search(line)
        if m:
            return self._driver(m, line, ctx, pre, exc_type)
        msg = None
        m = CUDA_ERR_RE.search(line)
        if m:
            msg = m["msg"]
        elif "CUDA-capable device(s) is/are busy or unavailable" in line:
            msg = "CUDA-capable device(s) is/are busy or unavailable"
        else:
            e = ERROR_CODE_RE.search(line)
            if e:
                msg = e["msg"]
        if msg is None and "illegal memory access" in line:
            msg = "an illegal memory access was encountered"
        if msg is None:
            return None
        name, code = cuda_error_name(msg)
        if code == 700:
            return event("cuda", "cuda_illegal_address", ctx, line, pre, code=700, severity="error",
                         fields={"message": msg, "exc_type": exc_type})
        if name is None and not msg.strip():
            return None
        return event("cuda", "cuda_error", ctx, line, pre, code=code, severity="error",
                     fields={"message": msg, "cuda_error": name, "cuda_code": code, "exc_type": exc_type})

    def _driver(self, m: rx.Match, line: str, ctx: LineContext, pre, exc_type: str | None) -> Event:
        """A ``CUDA_ERROR_*`` driver result, classed like the runtime error of the same condition."""
        info = cuda_driver_results().get(m["name"])
        msg = (m["msg"] or "").strip() or (info.text if info else m["name"])
        o = ORDINAL_RE.search(line)
        gpu = int(o["n"]) if o else None
        code = info.code if info else None
        f = {"message": msg, "cuda_error": info.triage_meaning if info else None, "cuda_code": code,
             "driver_error": m["name"], "exc_type": exc_type}
        if code == 700:
            return event("cuda", "cuda_illegal_address", ctx, line, pre, code=700, severity="error",
                         gpu_index=gpu, fields=f)
        if code == 2:
            return event("cuda", "cuda_oom", ctx, line, pre, code=2, severity="error", gpu_index=gpu,
                         fields={"generation": 0, "message": msg, "exc_type": exc_type, "driver_error": m["name"]})
        return event("cuda", "cuda_error", ctx, line, pre, code=code, severity="error", gpu_index=gpu, fields=f)
