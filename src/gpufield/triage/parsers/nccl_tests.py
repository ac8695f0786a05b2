"""nccl-tests parser: the failure line nccl-tests prints when an NCCL call returns an error.

nccl-tests' ``NCCLCHECK`` macro (NVIDIA/nccl-tests ``src/common.h``) prints, since 2019::

    <host>: Test NCCL failure <file>:<line> '<ncclGetErrorString(res)>'                 (NCCL < 2.13)
    <host>: Test NCCL failure <file>:<line> '<ncclGetErrorString(res)> / <ncclGetLastError()>'

and before 2019 (nccl-tests cbe7f65) ``NCCL failure <file>:<line> '<text>'`` without host. The
quoted text is NCCL's own result string, so the line becomes the NCCL error event of that
``ncclResult_t`` (``nccl_system_error`` for ncclSystemError, ...), looked up in the table of every
release's ``ncclGetErrorString`` texts (:func:`gpufield.triage.catalog.nccl_result_of_error_string`).
The host is the one nccl-tests names (``getHostName``), unless a log prefix already named one.
The sibling ``Test CUDA failure`` line is the CUDA parser's.
"""

from __future__ import annotations

from gpufield.triage.catalog import nccl_result_of_error_string
from gpufield.triage.events import Event
from gpufield.triage.parsers import _regex as rx
from gpufield.triage.parsers._common import event, prefix_of
from gpufield.triage.parsers.nccl import KIND_OF_RESULT
from gpufield.triage.protocols import LineContext

# fastmoe: Test NCCL failure common.cu:777 'unhandled system error'
# DisAI-4090-2: Test NCCL failure common.cu:961 'internal error - please report this issue to the NCCL developers / '
# NCCL failure common.cu:908 'unhandled cuda error'.
FAILURE_RE = rx.compile(
    r"(?:(?P<host>[A-Za-z0-9][\w.-]*): )?(?P<test>Test )?NCCL failure (?P<site>[\w./-]+:\d+) '(?P<msg>[^']*)'?")


class NcclTestsParser:
    """``Test NCCL failure <file>:<line> '<NCCL error string>'`` lines of nccl-tests."""

    name = "nccl_tests"
    source = "nccl"
    prefilter = r"NCCL failure [\w./-]+:\d+ '"
    keywords = ("NCCL failure ",)

    def parse_line(self, line: str, ctx: LineContext) -> Event | None:
        """Parse one nccl-tests failure line (see module docstring); None for any other line."""
        m = FAILURE_RE.search(line)
        if m is None:
            return None
        pre = prefix_of(line, ctx)
        msg = m["msg"].strip()
        text = msg.partition(" / ")[0]  # after " / ": ncclGetLastError(), kept in the message
        info = nccl_result_of_error_string(text)
        code = info.code if info is not None and info.code not in (0, 7) else None
        kind = KIND_OF_RESULT.get(code, "nccl_error") if code is not None else "nccl_error"
        host = pre.host or m["host"]
        return event("nccl", kind, ctx, line, pre, code=code, severity="error", host=host,
                     fields={"message": msg, "result": info.name if code is not None else None,
                             "site": m["site"], "via": "nccl-tests"})
