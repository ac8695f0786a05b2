"""torchrun / torch.distributed.elastic parser: the ``ChildFailedError`` block, worker failures,
signals, rendezvous and store-connection errors, worker-group restarts.

Formats from ``torch/distributed/elastic/multiprocessing/errors/__init__.py`` (``ChildFailedError.
format_msg``: ``[N]:`` entries with ``time``, ``host``, ``rank (local_rank: L)``, ``exitcode (pid:
P)``, ``error_file``, ``traceback``), ``.../multiprocessing/api.py`` and ``.../agent/server/api.py``.
Reference: ``../shared/reference/triage.md`` §2.9. Docs: https://docs.pytorch.org/docs/stable/elastic/errors.html
"""

from __future__ import annotations

import dataclasses
import signal as _signal
from collections.abc import Sequence

from gpufield.triage.events import Event
from gpufield.triage.parsers import _regex as rx
from gpufield.triage.parsers._common import at_line, event, prefix_of, to_int
from gpufield.triage.parsers._prefix import parse_date_time
from gpufield.triage.protocols import LineContext, LogParser

# torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
CHILD_OPEN_RE = rx.compile(r"ChildFailedError:?\s*$")
# experiments/<script>.py FAILED     ------     ====     Failures:     <NO_OTHER_FAILURES>     Root Cause (first observed failure):
BLOCK_LINE_RE = rx.compile(
    r"^\s*(?:[=-]{8,}|\S.* FAILED|Failures:|<NO_OTHER_FAILURES>|Root Cause \(first observed failure\):|\[\d+\]:"
    r"|\s*(?:time|host|rank|exitcode|error_file|traceback)\s*: .*|\s+\S.*)\s*$")
SEP_RE = rx.compile(r"^\s*[=-]{8,}\s*$")
# bug.py FAILED        (the block's own title line: what a paste keeps when the header line above it was cut)
TITLE_RE = rx.compile(r"^\s*[^\s:]+ FAILED\s*$")
# [0]:
ENTRY_RE = rx.compile(r"^\s*\[(?P<n>\d+)\]:\s*$")
#   time      : 2023-09-14_01:45:50
FIELD_RE = rx.compile(r"^\s*(?P<k>time|host|rank|exitcode|error_file|traceback)\s*: ?(?P<v>.*?)\s*$")
#   rank      : 2 (local_rank: 2)
RANK_RE = rx.compile(r"(?P<rank>-?\d+) \(local_rank: (?P<lr>-?\d+)\)")
#   exitcode  : -9 (pid: 36071)
EXIT_RE = rx.compile(r"(?P<code>-?\d+)(?: \(pid: (?P<pid>\d+)\))?")
#   traceback : Signal 9 (SIGKILL) received by PID 79468      (older: "signal 9 (SIGKILL) received by PID")
SIGNAL_RE = rx.compile(r"[Ss]ignal (?P<n>\d+) \((?P<name>SIG\w+)\) received by PID (?P<pid>\d+)")
# ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: 1) local_rank: 3 (pid: 429) of binary: /usr/bin/python
# E1129 11:57:07.249000 29471 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: -6) local_rank: 3 (pid: 29577) of binary: <python>
FAILED_RE = rx.compile(r"failed \(exitcode: (?P<code>-?\d+)\) local_rank: (?P<lr>\d+) \(pid: (?P<pid>\d+)\)(?: of binary: (?P<bin>\S+))?")
# WARNING:torch.distributed.elastic.multiprocessing.api:Sending process 426 closing signal SIGTERM
CLOSING_RE = rx.compile(r"Sending process (?P<pid>\d+) closing signal (?P<name>SIG\w+)")
# [WARNING] Unable to shutdown process 264 via Signals.SIGTERM, forcefully exiting via Signals.SIGKILL
# (torch/distributed/elastic/multiprocessing/api.py; newer torch prints the numbers: "via 15, forcefully exiting via 9")
FORCED_RE = rx.compile(r"Unable to shutdown process (?P<pid>\d+) via (?:Signals\.)?(?P<first>\w+), forcefully exiting via "
                       r"(?:Signals\.)?(?P<then>\w+)")
# torch.distributed.elastic.rendezvous.api.RendezvousConnectionError: The connection to the C10d store has failed. ...
# torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError
RDZV_RE = rx.compile(r"(?P<exc>Rendezvous\w*(?:Error|Closed\w*))(?::\s*(?P<msg>.*))?")
# [E socket.cpp:860] [c10d] The client socket has timed out after 60s while trying to connect to <ip-A>:1234
# ... while trying to connect to (<ip-A>, 29500).     (torch >= 2.4 prints the address as a (host, port) pair)
SOCKET_RE = rx.compile(r"client socket has timed out after (?P<secs>\d+)(?P<unit>ms|s) while trying to connect to "
                       r"(?:\((?P<h>[^,()\s]+), (?P<p>\d+)\)|\(?(?P<ep>[^)\s]+?)\)?)\.?\s*$")
# the etcd rendezvous backend's client (python-etcd, used by torch/distributed/elastic/rendezvous/etcd_rendezvous.py)
# retrying the etcd v2 API (/v2/machines: the cluster's member list, /v2/keys) on a refused or failed connection:
#   WARNING:urllib3.connectionpool:Retrying (...) after connection broken by 'NewConnectionError('...: Failed to
#   establish a new connection: [Errno 111] Connection refused')': /v2/machines
ETCD_RE = rx.compile(r"Failed to establish a new connection: (?P<err>\[Errno \d+\] [^'\")]+).*?: (?P<path>/v2/(?:machines|keys)\S*)")
# gdb's stop report for a signal (gdb/infrun.c print_signal_received_reason):
#   Thread 787 "imagenet_fake_d" received signal SIGBUS, Bus error.      /   Program received signal SIGSEGV, Segmentation fault.
GDB_SIGNAL_RE = rx.compile(r"\b(?:Thread \d+(?: \"[^\"]*\")?|Program) received signal (?P<name>SIG[A-Z]+), (?P<desc>[^.]+)")
_SIGNUM = {"SIGBUS": 7, "SIGSEGV": 11, "SIGABRT": 6, "SIGKILL": 9, "SIGTERM": 15, "SIGFPE": 8, "SIGILL": 4}
# [rank6]:[W729 10:15:17.529361055 TCPStore.cpp:125] [c10d] recvValue failed on SocketImpl(fd=76, addr=[localhost]:60950,
#   remote=[localhost]:29500): Connection reset by peer     (c10d TCPStore client: the store's process closed the
#   connection abruptly - ECONNRESET / EPIPE - i.e. the process hosting the store, rank 0 or the agent, went away)
STORE_RESET_RE = rx.compile(r"\[c10d\] \w+ failed on SocketImpl\([^)]*remote=(?P<remote>[^,)\s]+)\)?[^:]*: "
                            r"(?P<err>Connection reset by peer|Broken pipe)")
# ... via c10d key-value store by key '0', but store->get('0') got error: Socket Timeout
# torch.distributed.DistStoreError: Socket Timeout  /  ...: Timed out after 1801 seconds waiting for clients. 1/3 clients
# joined.  (c10d TCPStore client / server: the store at MASTER_ADDR:MASTER_PORT never answered, or ranks never joined it)
STORE_RE = rx.compile(r"store->get\('[^']*'\) got error: (?P<err>.*)$|DistStoreError: .+|[Ss]ocket [Tt]imeout|"
                      r"Connection to the C10d store has failed")
# a host name the resolver cannot resolve, printed by a tool or wrapper (not as a Python exception, which the
# Python parser reads): glibc gai_strerror "Name or service not known" (EAI_NONAME) / "Temporary failure in name
# resolution" (EAI_AGAIN) / "No address associated with hostname", musl "Name does not resolve", busybox
# nslookup "can't resolve 'NAME'", macOS "nodename nor servname provided, or not known"
#   nslookup: can't resolve 'dlc1dwuhvtro4c27-master-0': Name does not resolve
#   ping: master-0: Name or service not known
RESOLVE_RE = rx.compile(r"can't resolve '(?P<name>[^']+)'|(?:^|\s)(?P<name2>[\w.-]+): (?:Name or service not known|"
                        r"Name does not resolve|Temporary failure in name resolution)|Name or service not known|"
                        r"Name does not resolve|Temporary failure in name resolution|No address associated with hostname|"
                        r"nodename nor servname provided")
_PY_EXC_LINE = rx.compile(r"^\s*(?:\[[^\]]*\]:?\s*)*[\w.]+(?:Error|Exception|Exit)\b:?")
# [default] Worker group FAILED. 3/3 attempts left; will restart worker group
# slurmstepd: error: *** JOB 123 ON node01 CANCELLED AT 2024-01-01T00:00:00 DUE TO TIME LIMIT ***
# slurmstepd: error: *** STEP 12345.0 ON hA CANCELLED AT 2026-08-11T03:00:05 ***          (scancel: no reason)
# (Slurm src/slurmd/slurmstepd/req.c / step_terminate_monitor: the step is killed with SIGKILL after KillWait)
SLURM_CANCEL_RE = rx.compile(r"\*\*\* (?P<what>JOB|STEP) (?P<id>[\w.+]+) ON (?P<host>\S+) CANCELLED AT (?P<at>\S+)"
                             r"(?: DUE TO (?P<reason>[A-Z][A-Z_ ]*[A-Z]))?(?: \([^)]*\))? \*\*\*")
# slurmstepd: error: Detected 1 oom-kill event(s) in StepId=37205392.0. Some of your processes may have been killed by the cgroup out-of-memory handler.
# (older Slurm: "Detected 1 oom-kill event(s) in step 1234.batch cgroup."; src/plugins/task/cgroup, the step's memory cgroup)
# newer Slurm: "Detected 1 oom_kill event in StepId=43622791.67. Some of the step tasks have been OOM Killed."
# (singular/plural "event"/"events", no "(s)")
SLURM_OOM_RE = rx.compile(r"Detected (?P<n>\d+) oom[-_]kill events?(?:\(s\))? in (?:StepId=|step )(?P<step>[\w.+]*\w)")
# srun: error: node17: task 0: Out Of Memory          (srun's per-task exit report; "tasks 0-3: Out Of Memory")
SRUN_OOM_RE = rx.compile(r"srun: error: (?P<host>[^\s:]+): tasks? (?P<tasks>[\d,\-\[\]]+): Out Of Memory")
# c10d TCPStore server bind failure (torch/csrc/distributed/c10d/socket.cpp, libuv backend):
# "The server socket has failed to listen on any local network address. useIpv6: 0, code: -98, name: EADDRINUSE, ..."
# older: "RuntimeError: Address already in use" / "The server socket has failed to bind to [::]:29500 (errno: 98 - Address already in use)."
BIND_RE = rx.compile(r"server socket has failed to (?:listen|bind)|EADDRINUSE|Address already in use")
# bash's report of a child killed by SIGKILL (jobs.c: the strsignal(9) text "Killed" after the pid):
#   cli_demo.sh: line 5: 12989 Killed
#   /var/spool/slurmd/job00191/slurm_script: line 28:  8156 Killed                  python3 main.py ...
BASH_KILLED_RE = rx.compile(r"^\s*(?P<script>\S+): line (?P<line>\d+): +(?P<pid>\d+) Killed(?:\s+(?P<cmd>\S.*?))?\s*$")
RESTART_RE = rx.compile(r"Worker group FAILED\. (?P<left>\d+)/(?P<max>\d+) attempts left; will restart")


def _signal_name(exitcode: int | None) -> tuple[int | None, str | None]:
    if exitcode is None or exitcode >= 0:
        return None, None
    try:
        return -exitcode, _signal.Signals(-exitcode).name
    except ValueError:
        return -exitcode, None


class TorchrunParser:
    """torchrun / elastic agent output."""

    name = "torchrun"
    source = "torchrun"
    prefilter = (r"ChildFailedError|failed \(exitcode|closing signal|[Ss]ignal \d+ \(SIG|Rendezvous\w*(?:Error|Closed)|"
                 r"client socket has timed out|store->get|C10d store has failed|Worker group FAILED|CANCELLED AT|"
                 r"Unable to shutdown process|oom[-_]kill event|: Out Of Memory|server socket has failed|"
                 r"EADDRINUSE|Address already in use|DistStoreError: |Socket Timeout|^\s*[^\s:]+ FAILED\s*$|: line \d+: +\d+ Killed|"
                 r"can't resolve '|Name or service not known|Name does not resolve|Temporary failure in name resolution|"
                 r"No address associated with hostname|nodename nor servname provided|failed on SocketImpl\(|"
                 r"received signal SIG|: /v2/(?:machines|keys)")
    keywords = ("ChildFailedError", "failed (exitcode", "closing signal", "Unable to shutdown process", "ignal ", "Rendezvous",
                "client socket has timed out", "store->get", "C10d store has failed", "Worker group FAILED", "CANCELLED AT",
                "oom-kill event", "oom_kill event", ": Out Of Memory", "server socket has failed", "EADDRINUSE",
                "Address already in use", "DistStoreError: ", "Socket Timeout", " FAILED", " Killed",
                "can't resolve '", "Name or service not known", "Name does not resolve", "name resolution",
                "No address associated with hostname", "nodename nor servname", "failed on SocketImpl(",
                "received signal SIG", ": /v2/")

    def __init__(self, inner: Sequence[LogParser] = ()) -> None:
        """``inner``: parsers offered the exception line that ends an entry's ``traceback`` field (the
        failing rank's own error, e.g. a desync report, printed inside the block)."""
        self.inner = tuple(inner)

    def parse_line(self, line: str, ctx: LineContext) -> Event | None:
        """Parse one torchrun / elastic line (see module docstring)."""
        pre = prefix_of(line, ctx)
        m = FAILED_RE.search(line)
        if m:
            code = int(m["code"])
            sig, name = _signal_name(code)
            return event("torchrun", "child_failed", ctx, line, pre, code=code, severity="error",
                         pid=int(m["pid"]),
                         fields={"exitcode": code, "signal": sig, "signal_name": name,
                                 "local_rank": int(m["lr"]), "binary": m["bin"]})
        m = BASH_KILLED_RE.search(line)
        if m:  # the shell saw its child die of SIGKILL; who sent it the line does not say
            return event("torchrun", "signal_death", ctx, line, pre, code=-9, severity="error", pid=int(m["pid"]),
                         fields={"signal": 9, "signal_name": "SIGKILL", "reporter": "bash", "command": m["cmd"],
                                 "message": line[m.start("pid"):].strip()})
        m = SIGNAL_RE.search(line)
        if m:
            return event("torchrun", "signal_death", ctx, line, pre, code=-int(m["n"]), severity="error",
                         pid=int(m["pid"]), fields={"signal": int(m["n"]), "signal_name": m["name"],
                                                     "message": line[m.start():]})
        m = FORCED_RE.search(line)
        if m:  # the agent itself SIGKILLs a worker that ignored SIGTERM (a hung rank), not the OOM killer
            then = m["then"]
            num = int(then) if then.isdigit() else (9 if then == "SIGKILL" else None)
            return event("torchrun", "signal_death", ctx, line, pre, code=-num if num else then, severity="info",
                         pid=int(m["pid"]), fields={"signal": num, "signal_name": "SIGKILL" if num == 9 else then,
                                                     "sent_by_agent": True, "message": line[m.start():]})
        m = CLOSING_RE.search(line)
        if m:
            return event("torchrun", "signal_death", ctx, line, pre, code=m["name"], severity="info",
                         pid=int(m["pid"]), fields={"signal_name": m["name"], "sent_by_agent": True,
                                                     "message": line[m.start():]})
        m = ETCD_RE.search(line)
        if m:
            return event("torchrun", "rendezvous_error", ctx, line, pre, severity="error",
                         fields={"endpoint": f"etcd {m['path']}", "message": f"etcd: {m['err']}"})
        m = GDB_SIGNAL_RE.search(line)
        if m:
            return event("torchrun", "signal_death", ctx, line, pre, code=m["name"], severity="error",
                         fields={"signal": _SIGNUM.get(m["name"]), "signal_name": m["name"],
                                 "message": line[m.start():].strip()})
        m = STORE_RESET_RE.search(line)
        if m:
            return event("torchrun", "nccl_remote_error", ctx, line, pre, severity="warning",
                         fields={"peer": m["remote"].replace("[", "").replace("]", ""), "via": "c10d store",
                                 "message": line[m.start():]})
        m = SOCKET_RE.search(line)
        if m:
            return event("torchrun", "rendezvous_error", ctx, line, pre, severity="error",
                         fields={"endpoint": m["ep"] or f"{m['h']}:{m['p']}",
                                 "timeout_s": int(m["secs"]) / (1000 if m["unit"] == "ms" else 1),
                                 "message": line[m.start():]})
        m = RDZV_RE.search(line)
        if m:
            return event("torchrun", "rendezvous_error", ctx, line, pre, code=m["exc"], severity="error",
                         fields={"exc_type": m["exc"], "message": (m["msg"] or "").strip() or None})
        m = RESOLVE_RE.search(line)
        if m and not _PY_EXC_LINE.search(pre.body):
            return event("torchrun", "name_unresolved", ctx, line, pre, severity="error",
                         fields={"name": m["name"] or m["name2"], "message": line[m.start():].strip()})
        m = STORE_RE.search(line)
        if m:
            return event("torchrun", "rendezvous_error", ctx, line, pre, severity="error",
                         fields={"message": (m["err"] or m.group(0)).strip()})
        m = SLURM_OOM_RE.search(line) or SRUN_OOM_RE.search(line)
        if m:  # the step's memory cgroup hit its limit: the kernel OOM killer inside Slurm's cgroup
            srun = m.re is SRUN_OOM_RE
            return event("torchrun", "host_oom_kill", ctx, line, pre, severity="fatal",
                         host=m["host"] if srun else None,
                         fields={"scheduler": "slurm", "scope": "cgroup", "step": None if srun else m["step"],
                                 "kills": None if srun else int(m["n"]), "tasks": m["tasks"] if srun else None,
                                 "message": line[m.start():].strip()})
        m = BIND_RE.search(line)
        if m:  # the rendezvous store could not listen on its port (another job holds it)
            return event("torchrun", "rendezvous_error", ctx, line, pre, severity="error",
                         fields={"message": line[m.start():].strip(), "bind_failed": True})
        m = SLURM_CANCEL_RE.search(line)
        if m:
            reason = (m["reason"] or "").strip() or None
            return event("torchrun", "scheduler_cancel", ctx, line, pre, code=reason or "CANCELLED", severity="error",
                         host=m["host"], ts_ns=pre.ts_ns or parse_date_time(m["at"], ctx.utc_offset_s),
                         fields={"scheduler": "slurm", "job_id": m["id"], "scope": m["what"].lower(),
                                 "reason": reason, "message": line[m.start():]})
        m = RESTART_RE.search(line)
        if m:
            left, mx = int(m["left"]), int(m["max"])
            return event("torchrun", "elastic_restart", ctx, line, pre, severity="warning",
                         fields={"restart_count": mx - left + 1, "attempts_left": left, "message": line[m.start():]})
        if CHILD_OPEN_RE.search(line):  # block header seen alone (the block itself was cut off)
            return event("torchrun", "child_failed", ctx, line, pre, severity="error",
                         fields={"truncated": True})
        return None

    # --- the ChildFailedError block ---------------------------------------------------------
    def opens_record(self, line: str) -> bool:
        """The ``...ChildFailedError:`` header line, or the block's ``<script> FAILED`` title when the
        header was cut off (a block without ``[N]:`` entries then gives no event)."""
        return bool(CHILD_OPEN_RE.search(line)) or bool(TITLE_RE.match(line))

    def continues_record(self, lines: Sequence[str], line: str) -> bool:
        """Lines of the block up to the separator that closes the Root Cause section (a block opened by its
        title line alone must go on with torchrun's separator line, or it is not a failure block)."""
        if len(lines) == 1 and not CHILD_OPEN_RE.search(lines[0]):
            return bool(SEP_RE.match(line))
        if SEP_RE.match(lines[-1]):
            root = next((i for i, x in enumerate(lines) if "Root Cause" in x), None)
            if root is not None and any(ENTRY_RE.match(x) for x in lines[root:]):
                return False
        return bool(line.strip()) and bool(BLOCK_LINE_RE.match(line))

    def parse_record(self, lines: Sequence[str], ctx: LineContext) -> list[Event]:
        """One ``child_failed`` event per ``[N]:`` entry (Root Cause entry: ``root_cause=True``)."""
        pre = prefix_of(lines[0], ctx)
        script = next((x.strip()[:-len(" FAILED")] for x in lines if x.rstrip().endswith(" FAILED")), None)
        out: list[Event] = []
        entry: dict | None = None
        root = False
        start = 0

        def flush() -> None:
            if entry is None:
                return
            e = dict(entry)
            code = to_int(e.get("exitcode"))
            sig, name = _signal_name(code)
            s = SIGNAL_RE.search(e.get("traceback") or "")
            if s:
                sig, name = int(s["n"]), s["name"]
            line_ctx = at_line(ctx, start)
            raw = "\n".join(lines[start:end])
            ts = parse_date_time(e["time"], ctx.utc_offset_s) if e.get("time") else None
            err_file = e.get("error_file")
            out.append(event("torchrun", "child_failed", line_ctx, raw, pre, code=code,
                             severity="fatal" if e["root"] else "error", host=e.get("host"),
                             rank=to_int(e.get("rank")), pid=to_int(e.get("pid")), ts_ns=ts,
                             fields={"exitcode": code, "signal": sig, "signal_name": name,
                                     "local_rank": to_int(e.get("local_rank")),
                                     "error_file": None if err_file in (None, "<N/A>") else err_file,
                                     "root_cause": e["root"], "time": e.get("time"),
                                     "traceback": e.get("traceback"), "script": script,
                                     "entry": e["n"], "block_line": ctx.line}))
            last = e.get("tb_last")
            if last is not None and self.inner:  # the rank's own exception line, read as if printed alone
                inner_ctx = at_line(ctx, last)
                for p in self.inner:
                    ev = p.parse_line(lines[last].strip(), inner_ctx)
                    if ev is not None:
                        out.append(dataclasses.replace(ev, rank=ev.rank if ev.rank is not None else to_int(e.get("rank")),
                                                       host=ev.host or e.get("host")))
                        break

        end = 0
        for i, x in enumerate(lines):
            if "Root Cause" in x:
                end = i
                flush()
                entry, root = None, True
                continue
            m = ENTRY_RE.match(x)
            if m or SEP_RE.match(x):
                end = i
                flush()
                entry = None
                if m:
                    entry, start = {"n": int(m["n"]), "root": root}, i
                continue
            if entry is None:
                continue
            f = FIELD_RE.match(x)
            if f:
                k, v = f["k"], f["v"]
                if k == "rank":
                    r = RANK_RE.search(v)
                    entry["rank"], entry["local_rank"] = (r["rank"], r["lr"]) if r else (v, None)
                elif k == "exitcode":
                    r = EXIT_RE.search(v)
                    entry["exitcode"], entry["pid"] = (r["code"], r["pid"]) if r else (v, None)
                else:
                    entry[k] = v
            elif entry.get("traceback") is not None and x.startswith(" "):
                entry["traceback"] += "\n" + x.strip()
                entry["tb_last"] = i
        end = len(lines)
        flush()
        if not out and CHILD_OPEN_RE.search(lines[0]):
            out.append(event("torchrun", "child_failed", ctx, "\n".join(lines), pre, severity="error",
                             fields={"script": script, "truncated": True}))
        return out
