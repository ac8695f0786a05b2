"""Fallback parser: the final line of an uncaught Python exception (``OSError: [Errno 28] No
space left on device``). Last in the parser table, so every specific parser sees a line first.

Format: CPython ``traceback.format_exception_only`` — ``<qualified type>: <message>`` at the start
of the line (after any log prefix); https://docs.python.org/3/library/traceback.html
"""

from __future__ import annotations

from gpufield.triage.events import Event
from gpufield.triage.parsers import _regex as rx
from gpufield.triage.parsers._common import event, prefix_of, to_int
from gpufield.triage.protocols import LineContext

# OSError: [Errno 28] No space left on device
# torch.distributed.DistBackendError: NCCL communicator was aborted on rank 3.
# RuntimeError: [6] is setting up NCCL communicator ...
EXC_LINE_RE = rx.compile(
    r"^\s*(?P<exc>(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Interrupt|Exit|Failure))(?::\s*(?P<msg>.*?))?\s*$")
ERRNO_RE = rx.compile(r"\[Errno (?P<errno>\d+)\]")


class PythonExceptionParser:
    """Uncaught Python exception lines not claimed by a more specific parser."""

    name = "python"
    source = "torch"
    prefilter = r"(?:Error|Exception|Interrupt|Exit|Failure)(?::|\s*$)"
    keywords = ("Error", "Exception", "Interrupt", "Exit", "Failure")

    def parse_line(self, line: str, ctx: LineContext) -> Event | None:
        """``<Type>: <message>`` at the start of the (prefix-stripped) line, else None."""
        pre = prefix_of(line, ctx)
        m = EXC_LINE_RE.match(pre.body)
        if not m:
            return None
        msg = m["msg"]
        e = ERRNO_RE.search(msg or "")
        return event("torch", "python_exception", ctx, line, pre, code=m["exc"].rsplit(".", 1)[-1],
                     severity="error", fields={"exc_type": m["exc"], "message": msg,
                                               "errno": to_int(e and e["errno"])})
