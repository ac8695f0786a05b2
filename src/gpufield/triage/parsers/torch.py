"""PyTorch distributed parser: ProcessGroupNCCL watchdog timeouts, heartbeat monitor, last
enqueued/completed work, teardown, desync reports and Flight Recorder output.

Format strings from ``torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp`` (e.g. ``"[Rank ", rank_,
"] Watchdog caught collective operation timeout: ", work, " ran for ", ms, " milliseconds before
timing out."``) and the Flight Recorder analyzer ``torch/distributed/flight_recorder/fr_trace``.
Reference: ``../shared/reference/triage.md`` §2.8.
Docs: https://docs.pytorch.org/docs/stable/torch_nccl_environment_variables.html ,
https://docs.pytorch.org/tutorials/unstable/flight_recorder_tutorial.html
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from gpufield.triage.events import Event
from gpufield.triage.parsers import _regex as rx
from gpufield.triage.parsers._common import event, prefix_of, to_int
from gpufield.triage.parsers._prefix import torch_pg
from gpufield.triage.protocols import LineContext

# [rank0]:[E1218 20:27:21.426415540 ProcessGroupNCCL.cpp:629] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=BROADCAST, NumelIn=131072000, NumelOut=131072000, Timeout(ms)=600000) ran for 600081 milliseconds before timing out.
# [E ProcessGroupNCCL.cpp:737] [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=469508, OpType=ALLREDUCE, Timeout(ms)=1800000) ran for 1802212 milliseconds before timing out.
# [E ProcessGroupNCCL.cpp:523] Watchdog caught collective operation timeout: WorkNCCL(OpType=ALLREDUCE, SeqNum=458) ran for 1800600 ms before timing out.
WATCHDOG_RE = rx.compile(
    r"Watchdog caught collective operation timeout: WorkNCCL\((?P<args>.*?)(?:\) ran for (?P<ran>\d+) (?:milliseconds|ms)|$)")
WORK_KV_RE = rx.compile(r"(?P<k>SeqNum|OpType|NumelIn|NumelOut|Timeout\(ms\))=(?P<v>[^,\s)]+)")
# [PG 1 Rank 0] Exception (either an error or timeout) detected by watchdog at work: 1580, last enqueued NCCL work: 1582, last completed NCCL work: 1579.
# [PG ID 0 PG GUID 0(default_pg) Rank 0]  failure detected by watchdog at work sequence id: 619725 PG status: last enqueued work: 619732, last completed work: 619724
# [PG 0 Rank 0] Timeout at NCCL work: 315, last enqueued NCCL work: 315, last completed NCCL work: 314.
LAST_RE = rx.compile(
    r"(?:(?:at work(?: sequence id)?|Timeout at NCCL work): (?P<seq>\d+).*?)?[Ll]ast enqueued (?:NCCL )?work: (?P<enq>\d+)")
LAST_DONE_RE = rx.compile(r"last completed (?:NCCL )?work: (?P<done>\d+)")
LAST_STARTED_RE = rx.compile(r"last started (?:NCCL )?work: (?P<started>\d+)")
# [PG 0 Rank 144] Heartbeat monitor timed out! Process will be terminated after dumping debug info. workMetaList_.size()=1
# [PG 0 Rank 144] ProcessGroupNCCL's watchdog got stuck for 600 seconds without making progress in monitoring enqueued collectives.
# [PG 3 Rank 7] First PG on this rank that detected no heartbeat of its watchdog.
HEARTBEAT_RE = rx.compile(
    r"Heartbeat monitor timed out|watchdog got stuck for (?P<secs>\d+) seconds|detected no heartbeat of its watchdog")
# [E ProcessGroupNCCL.cpp:489] Some NCCL operations have failed or timed out. Due to the asynchronous nature of CUDA kernels, ...
# [E ProcessGroupNCCL.cpp:495] To avoid data inconsistency, we are taking the entire process down.
TEARDOWN_RE = rx.compile(r"Some NCCL operations have failed or timed out|taking the entire process down")
# [E ProcessGroupNCCL.cpp:916] [Rank 1] NCCL watchdog thread terminated with exception: <wrapped message>
# [PG ID 0 PG GUID 0(default_pg) Rank 1] Process group watchdog thread terminated with exception: CUDA error: an illegal memory access was encountered
WATCHDOG_EXC_RE = rx.compile(r"[Ww]atchdog thread terminated with exception: (?P<inner>.*)$")
# terminate called after throwing an instance of 'c10::DistBackendError'
TERMINATE_RE = rx.compile(r"terminate called after throwing an instance of '(?P<exc>[^']+)'")
# [rank0]:[E ... ProcessGroupNCCL.cpp:1153] [PG 0 Rank 144] ProcessGroupNCCL preparing to dump debug info.
# [E ... ProcessGroupNCCL.cpp:667] Stack trace of the failed collective not found, potentially because FlightRecorder is disabled. ...
# Not all ranks joining collective 5 at entry 4       /   missing ranks: {1}       (fr_trace output)
FR_RE = rx.compile(
    r"preparing to dump debug info|FlightRecorder is disabled|Flight ?Recorder|Not all ranks joining collective (?P<seq>\d+)"
    r"(?: at entry (?P<entry>\d+))?|missing ranks: \{(?P<missing>[\d, ]*)\}|[Dd]umping (?:nccl|NCCL) trace")
# Detected mismatch between collectives on ranks. Rank 0 is running collective: CollectiveFingerPrint(SequenceNumber=315, OpType=ALLREDUCE, ...), but Rank 1 is running collective: CollectiveFingerPrint(SequenceNumber=313, OpType=_ALLGATHER_BASE, ...)
# [Rank 0] Desync debugging report: ...   /   Collective sequence number: 12 has started on rank 0 but not on rank 1
# gloo: ... op.preamble.length <= op.nbytes. 8 vs 4. Received data size doesn't match expected size. Is there a
# distributed collective mismatch in your code?      /   ... but Rank 1 is running collective: ...
# (a bare "desync" is not enough: banners and command lines name the word, e.g. "fault desync at step 5")
DESYNC_RE = rx.compile(r"[Dd]esync debug|[Dd]esync report|mismatch between collectives|CollectiveFingerPrint|"
                       r"has started on rank \d+ but not|collective mismatch in your code|"
                       r"Received data size doesn't match|Rank \d+ is running collective")
FP_RE = rx.compile(r"(?:SequenceNumber|SeqNum|sequence number:?)[=: ]+(?P<seq>\d+)")
OPTYPE_RE = rx.compile(r"OpType=(?P<op>\w+)")
# WorkNCCL(SeqNum=89, OpType=ALLREDUCE, NumelIn=67108864, Timeout(ms)=90000) raised the following async exception: NCCL error: remote process exited or there was a network error
ASYNC_EXC_RE = rx.compile(r"WorkNCCL\((?P<args>[^\n]*?)\) raised the following async exception: (?P<inner>.*)$")
# NCCL error: remote process exited or there was a network error, NCCL version 2.20.5
INNER_NCCL_RE = rx.compile(r"NCCL error: (?P<msg>.*?)(?:, NCCL [Vv]ersion (?P<ver>[\w.+-]+))?\s*$")


class TorchParser:
    """``torch.distributed`` / ProcessGroupNCCL messages."""

    name = "torch"
    source = "torch"
    prefilter = (r"Watchdog caught|[Ll]ast enqueued|Heartbeat monitor|watchdog got stuck|no heartbeat|"
                 r"Some NCCL operations have failed|entire process down|thread terminated with exception|"
                 r"terminate called after|dump debug info|Flight ?Recorder|Not all ranks joining|missing ranks:|"
                 r"[Dd]umping (?:nccl|NCCL) trace|[Dd]esync debug|[Dd]esync report|mismatch between collectives|"
                 r"CollectiveFingerPrint|has started on rank|raised the following async exception|"
                 r"collective mismatch in your code|Received data size doesn't match|is running collective")
    keywords = ("Watchdog caught", "ast enqueued", "Heartbeat monitor", "watchdog got stuck", "no heartbeat",
                "Some NCCL operations", "entire process down", "terminated with exception", "terminate called",
                "dump debug info", "Recorder", "Not all ranks joining", "missing ranks:", "umping nccl trace",
                "umping NCCL trace", "esync debug", "esync report", "mismatch between collectives",
                "CollectiveFingerPrint", "has started on rank", "raised the following async exception",
                "collective mismatch in your code", "Received data size doesn't match", "is running collective")

    # a launcher that wraps long lines: "... Watchdog caught collective operation timeout: " then "WorkNCCL(...)"
    def opens_record(self, line: str) -> bool:
        """A watchdog record wrapped right after ``timeout:`` (the ``WorkNCCL(...)`` part on the next line)."""
        return line.rstrip().endswith("Watchdog caught collective operation timeout:")

    def continues_record(self, lines: Sequence[str], line: str) -> bool:
        """Only the one ``WorkNCCL(...)`` continuation line."""
        return len(lines) == 1 and line.lstrip().startswith("WorkNCCL(")

    def parse_record(self, lines: Sequence[str], ctx: LineContext) -> list[Event]:
        """Join the wrapped watchdog record and parse it as one line (raw keeps both lines)."""
        joined = lines[0].rstrip() + " " + (lines[1].strip() if len(lines) > 1 else "")
        e = self.parse_line(joined, ctx)
        return [] if e is None else [replace(e, raw="\n".join(lines))]

    def parse_line(self, line: str, ctx: LineContext) -> Event | None:
        """Parse one PyTorch distributed line (see module docstring)."""
        pre = prefix_of(line, ctx)
        pg, pg_rank = torch_pg(line)
        wrapped = WATCHDOG_EXC_RE.search(line)
        m = WATCHDOG_RE.search(line)
        if m:
            kv = {k: v for k, v in WORK_KV_RE.findall(m["args"])}
            f = {"seq": to_int(kv.get("SeqNum")), "op_type": kv.get("OpType"),
                 "numel_in": to_int(kv.get("NumelIn")), "numel_out": to_int(kv.get("NumelOut")),
                 "timeout_ms": to_int(kv.get("Timeout(ms)")), "ran_for_ms": to_int(m["ran"]),
                 "pg": pg, "pg_rank": pg_rank if pg not in (None, 0) else None,
                 "wrapped": True if (wrapped or "what():" in line) else None,
                 "truncated": True if m["ran"] is None else None}
            return event("torch", "watchdog_timeout", ctx, line, pre, code=f["seq"], severity="error", fields=f)
        m = ASYNC_EXC_RE.search(line)
        if m and INNER_NCCL_RE.match(m["inner"]):
            kv = dict(WORK_KV_RE.findall(m["args"]))
            return _nccl_inner(INNER_NCCL_RE.match(m["inner"]), line, ctx, pre, pg, "async_exception",
                               seq=to_int(kv.get("SeqNum")), op_type=kv.get("OpType"))
        if wrapped:
            inner = wrapped["inner"]
            n = INNER_NCCL_RE.match(inner)
            if n:
                return _nccl_inner(n, line, ctx, pre, pg, "watchdog")
            if "illegal memory access" in inner:
                return event("cuda", "cuda_illegal_address", ctx, line, pre, code=700, severity="error",
                             fields={"message": inner, "via": "watchdog", "pg": pg})
            if inner.startswith("CUDA error"):
                from gpufield.triage.parsers.cuda import cuda_error_name

                name, code = cuda_error_name(inner)
                return event("cuda", "cuda_error", ctx, line, pre, code=code, severity="error",
                             fields={"message": inner, "cuda_error": name, "cuda_code": code, "via": "watchdog"})
            return event("torch", "watchdog_blocked", ctx, line, pre, severity="error",
                         fields={"message": inner, "pg": pg})
        m = LAST_RE.search(line)
        if m:
            d, s = LAST_DONE_RE.search(line), LAST_STARTED_RE.search(line)
            f = {"seq": to_int(m["seq"]), "last_enqueued": int(m["enq"]),
                 "last_completed": to_int(d and d["done"]), "last_started": to_int(s and s["started"]),
                 "pg": pg, "pg_rank": pg_rank if pg not in (None, 0) else None}
            return event("torch", "last_enqueued", ctx, line, pre, code=f["seq"], severity="error", fields=f)
        m = HEARTBEAT_RE.search(line)
        if m:
            fatal = pre.level == "F" or m["secs"] is not None
            return event("torch", "heartbeat_timeout", ctx, line, pre, severity="fatal" if fatal else "error",
                         fields={"timeout_s": to_int(m["secs"]), "pg": pg, "message": line[m.start():]})
        m = TEARDOWN_RE.search(line)
        if m:
            return event("torch", "pg_teardown", ctx, line, pre, severity="error",
                         fields={"message": line[m.start():]})
        m = TERMINATE_RE.search(line)
        if m:
            return event("torch", "python_exception", ctx, line, pre, severity="fatal",
                         fields={"exc_type": m["exc"], "message": "terminate called after throwing"})
        m = DESYNC_RE.search(line)
        if m:
            fp, op = FP_RE.search(line), OPTYPE_RE.search(line)
            return event("torch", "desync", ctx, line, pre, code=fp and fp["seq"], severity="error",
                         fields={"seq": to_int(fp and fp["seq"]), "op_type": op and op["op"],
                                 "message": line[m.start():]})
        m = FR_RE.search(line)
        if m:
            missing = None
            if m["missing"] is not None:
                missing = [int(x) for x in m["missing"].replace(" ", "").split(",") if x]
            return event("torch", "flight_recorder", ctx, line, pre,
                         severity="warning" if missing is None and m["seq"] is None else "error",
                         fields={"message": line[m.start():].strip(), "missing_ranks": missing,
                                 "seq": to_int(m["seq"]), "entry": to_int(m["entry"]), "pg": pg,
                                 "enabled": False if "is disabled" in line else None})
        return None


def _nccl_inner(m: rx.Match, line: str, ctx: LineContext, pre, pg: int | None, via: str, **extra) -> Event:
    """An NCCL error re-raised by ProcessGroupNCCL (watchdog / async work exception) -> NCCL kind."""
    from gpufield.triage.parsers.nccl import KIND_OF_RESULT, result_of_text

    code = result_of_text(m["msg"])
    return event("nccl", KIND_OF_RESULT.get(code or 0, "nccl_error"), ctx, line, pre, code=code, severity="error",
                 fields={"message": m["msg"], "nccl_version": m["ver"], "via": via, "pg": pg, **extra})
