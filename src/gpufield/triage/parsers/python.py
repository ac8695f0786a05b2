"""Fallback parser: the final line of an uncaught Python exception (``OSError: [Errno 28] No
space left on device``). Last in the parser table, so every specific parser sees a line first.

Format: CPython ``traceback.format_exception_only`` — ``<qualified type>: <message>`` at the start
of the line (after any log prefix); https://docs.python.org/3/library/traceback.html
"""

from __future__ import annotations

from collections.abc import Sequence

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
#   File "/usr/lib/python3.11/site-packages/torch/distributed/rendezvous.py", line 83, in wrapper
FRAME_RE = rx.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>\S+)')
FLAT_FRAME_RE = rx.compile(r'^File "[^"]+", line \d+, in \S+')
#: path parts of library code (a frame outside them is the program's own)
_LIB_PARTS = ("site-packages/", "dist-packages/", "<frozen ", "/lib/python3")
#: innermost frames kept per traceback
MAX_FRAMES = 8


class PythonExceptionParser:
    """Uncaught Python exception lines not claimed by a more specific parser."""

    name = "python"
    source = "torch"
    prefilter = r"(?:Error|Exception|Interrupt|Exit|Failure)(?::|\s*$)|Traceback \(most recent call last\)"
    keywords = ("Error", "Exception", "Interrupt", "Exit", "Failure", "Traceback (most recent call last)")

    # --- the traceback above the exception line: a ``traceback`` event with its frames -----------
    def opens_record(self, line: str) -> bool:
        """``Traceback (most recent call last):`` (after any prefix)."""
        return line.rstrip().endswith("Traceback (most recent call last):")

    def continues_record(self, lines: Sequence[str], line: str) -> bool:
        """Indented frame / source lines with the header's own prefix (``[rank1]:``); the exception
        line itself is left to the parsers (it is not indented)."""
        head = lines[0]
        pre = head[: head.rfind("Traceback (most recent call last):")]
        if not line.startswith(pre) or not line[len(pre):].strip():
            return False
        body = line[len(pre):]
        if body.startswith((" ", "\t")):
            return True
        # a paste that lost its indentation: frame lines at column 0, each followed by its source line
        # (never the exception line, which the parsers read)
        return bool(FLAT_FRAME_RE.match(body)) or (bool(FLAT_FRAME_RE.match(lines[-1][len(pre):]))
                                                   and not EXC_LINE_RE.match(body))

    def parse_record(self, lines: Sequence[str], ctx: LineContext) -> list[Event]:
        """One ``traceback`` event: ``frames`` (innermost last, at most :data:`MAX_FRAMES` of
        ``file:line:func``), ``files`` (their file paths), ``user_call`` (the source line under the
        innermost frame outside library code, ``site-packages`` etc.) and ``innermost_files``."""
        head = lines[0]
        pre_txt = head[: head.rfind("Traceback (most recent call last):")]
        frames: list[tuple[str, int, str, str]] = []
        for i, x in enumerate(lines[1:], 1):
            m = FRAME_RE.search(x[len(pre_txt):])
            if m:
                src = lines[i + 1][len(pre_txt):].strip() if i + 1 < len(lines) and not \
                    FRAME_RE.search(lines[i + 1][len(pre_txt):]) else ""
                frames.append((m["file"], int(m["line"]), m["func"], src))
        if not frames:
            return []
        user = [f for f in frames if not any(p in f[0] for p in _LIB_PARTS)]
        inner = frames[-MAX_FRAMES:]
        return [event("torch", "traceback", ctx, "\n".join(lines), prefix_of(head, ctx), severity="debug",
                      fields={"frames": [f"{f}:{n}:{fn}" for f, n, fn, _ in inner],
                              "files": [f for f, *_ in inner],
                              "user_call": user[-1][3] if user else None,
                              "user_frame": f"{user[-1][0]}:{user[-1][1]}" if user else None})]

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
