"""NCCL parser: WARN lines, IB completion errors, async events, error-return chains and the NCCL
error strings that PyTorch re-raises.

Line format from NVIDIA/nccl ``src/debug.cc`` (``ncclDebugLog``): ``host:pid:tid [cudaDev]
file.cc:line NCCL WARN msg`` (NCCL 2.0 printed ``file.h:line WARN msg``, without the word NCCL);
IB messages from ``src/transport/net_ib*.cc``; result strings from
``ncclGetErrorString`` (``src/init.cc``). Two INFO lines of communicator init become events
(``nccl_init``, ``nccl_bootstrap``) because they map ranks to GPUs and IP addresses to hosts
(:mod:`gpufield.triage.engine.topology`). Reference: ``../shared/reference/triage.md`` §2.7.
Docs: https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting.html
"""

from __future__ import annotations

from gpufield.triage.catalog import ib_status, nccl_result
from gpufield.triage.events import Event
from gpufield.triage.parsers import _regex as rx
from gpufield.triage.parsers._common import event, prefix_of, to_int
from gpufield.triage.parsers._prefix import NCCL_PREFIX_RE, bus_id_to_bdf
from gpufield.triage.parsers.cuda import cuda_error_name
from gpufield.triage.protocols import LineContext

# NCCL WARN NET/IB : Got completion with error 12, opcode 1, len 0, vendor err 129
# NCCL WARN NET/IB : Got completion from peer fe80::<gid-1>%ib0<53249> with error 4, opcode 32564, len 32564, vendor err 81 (Send)
# NCCL WARN NET/IB : Got completion from peer <ip><port> with status=12 opcode=0 len=0 vendor err 129 (Recv) localGid <gid> remoteGids<gid> [hca mlx5_10]
# NCCL WARN NET/IB: Got completion from peer 10.0.0.2<4242> with status=transport retry counter exceeded(12) opcode=RDMA_WRITE(1) ... vendor_err=129 ... hca mlx5_0
IB_COMPL_RE = rx.compile(
    r"NET/IB\w* ?: ?Got completion(?: from peer (?P<peer>\S+))? with "
    r"(?:error (?P<err>\d+)|status=(?:(?P<stext>[^()=]*?)\((?P<sn1>\d+)\)|(?P<sn2>\d+)))")
IB_OPCODE_RE = rx.compile(r"opcode[ =](?:(?P<otext>[A-Za-z_]\w*)\((?P<on1>\d+)\)|(?P<on2>\d+))")
IB_VENDOR_RE = rx.compile(r"vendor[ _]err[ =](?P<vendor>\d+)")
IB_LEN_RE = rx.compile(r"\blen[ =](?P<len>\d+)")
IB_DIR_RE = rx.compile(r"\((?P<dir>Send|Recv)\)")
IB_HCA_RE = rx.compile(r"\bhca (?P<hca>[\w.-]+)")
IB_QP_RE = rx.compile(r"\bqp(?:n|_num)?[ =:]+(?P<qp>\d+)")
# NCCL WARN NET/IB : Got async event : port error
# NCCL WARN NET/IB : mlx5_0:1 Got async error event: local catastrophic error
IB_ASYNC_RE = rx.compile(r"NET/IB ?: (?:(?P<dev>[\w.]+):(?P<port>\d+) )?(?:Got async (?:error )?event ?: ?|async fatal event ?: ?)(?P<event>.+?)\s*$")
# host:183006:183220 [1] NCCL INFO misc/socket.cc:535 -> 6
# host:19989:20082 [1] NCCL INFO proxy.cc:858 -> 6 [Proxy Thread]
RETURN_RE = rx.compile(r"NCCL INFO (?P<site>[\w./-]+\.(?:cc|h|cu|cpp|c):\d+) -> (?P<ret>\d+)")
# host:946:988 [0] transport/net_ib.cc:839 NCCL WARN NET/IB : ...   |  (newer)  file.cc:12 (func) NCCL WARN msg
WARN_RE = rx.compile(r"(?:(?P<site>[\w./-]+:\d+)(?: \((?P<func>\w+)\))? )?NCCL WARN (?P<msg>.*?)\s*$")
RETCODE_RE = rx.compile(r"retcode (?P<ret>\d+)")
# NCCL 2.0 (NVIDIA/nccl#111): "host [0] include/socket.h:185 WARN Call to connect failed : Connection refused"
OLD_WARN_RE = rx.compile(r"(?P<site>[\w./-]+\.(?:h|cc|cu|cpp|c):\d+) WARN (?P<msg>.*?)\s*$")
# the "Last error:" detail PyTorch prints after ncclInternalError (misc/socket.cc WARN text, no prefix):
# "ncclSocketInit: connecting to address  with family 59408 is neither AF_INET(2) nor AF_INET6(10)"
SOCKET_INIT_RE = rx.compile(r"(?P<msg>ncclSocketInit: .*?)\s*$")
# the same "Last error:" detail for a bootstrap that found no usable interface (src/bootstrap.cc WARN text,
# printed by PyTorch without NCCL's prefix, often on a "[rankN]: " line): "Bootstrap : no socket interface found"
# XLA quotes the same text: "Last NCCL warning(error): 'Bootstrap : no socket interface found'" (JAX, marin#7018)
BOOTSTRAP_NOIF_RE = rx.compile(r"(?:^|[\]:>']\s*)(?P<msg>Bootstrap ?: no socket interface found)")
# src/init.cc: "node-b:51225:51225 [5] NCCL INFO comm 0x55d0c6a0 rank 13 nranks 16 cudaDev 5 nvmlDev 5 busId ab000
# commId 0x3f1c9a2b7e104d55 - Init COMPLETE" (older: no nvmlDev / commId; "Init START" first)
COMM_RE = rx.compile(
    r"NCCL INFO comm (?P<comm>0x[0-9a-fA-F]+) rank (?P<rank>\d+) nranks (?P<nranks>\d+) cudaDev (?P<dev>\d+)"
    r"(?: nvmlDev (?P<nvml>\d+))? busId (?P<bus>[0-9a-fA-F]+)\b(?: commId (?P<cid>0x[0-9a-fA-F]+))?"
    r"(?:.*?Init (?P<state>START|COMPLETE))?")
# src/bootstrap.cc / net_socket.cc / net_ib: "NCCL INFO Bootstrap : Using eth0:10.42.0.12<0>",
# "NCCL INFO NET/Socket : Using [0]ens1:192.168.1.7<0> [1]ens2:192.168.2.7<0>",
# "NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB eth0:10.42.0.12<0>",
# "NCCL INFO Bootstrap : Using ib1:fe80::966d:ae03:b2:62c4%ib1<0>"
# pasted excerpts often lose the "host:pid:tid [dev] NCCL" prefix and keep "INFO NET/Socket : Using ..."
USING_RE = rx.compile(r"(?:NCCL |^)INFO (?P<what>Bootstrap|NET/IB|NET/Socket) ?: Using ")
ADDR_RE = rx.compile(r"(?:\[\d+\])?(?P<ifname>[\w.-]+):(?P<ip>\d{1,3}(?:\.\d{1,3}){3}|[0-9a-fA-F]*:[0-9a-fA-F:]+)"
                     r"(?:%[\w.-]+)?<\d+>")
# misc/socket.cc:518 NCCL WARN Net : Call to recv from <ip-B><58355> failed : Broken pipe
# misc/socket.cc:538 NCCL WARN Net : Connection closed by remote peer <host-A-fqdn><47861>
REMOTE_RE = rx.compile(
    r"Call to \w+ from (?P<peer>\S+) failed ?: ?(?:Broken pipe|Connection reset by peer|Connection refused)"
    r"|Connection closed by remote peer (?P<peer2>\S+)|remote process exited|Connection reset by peer")
# RuntimeError: NCCL error in: /pytorch/torch/lib/c10d/ProcessGroupNCCL.cpp:825, unhandled system error, NCCL version 2.7.8
# torch.distributed.DistBackendError: NCCL error in: .../ProcessGroupNCCL.cpp:1333, remote process exited or there was a network error, NCCL version 2.18.6
NCCL_ERROR_IN_RE = rx.compile(
    r"(?:(?P<exc>[\w.:]+(?:Error|Exception)): )?NCCL error in: (?P<where>[^,]+), (?P<msg>.*?)(?:, NCCL [Vv]ersion (?P<ver>[\w.+-]+))?\s*$")
# ncclSystemError: System call (socket, malloc, munmap, etc) failed.
# ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.
NCCL_ENUM_RE = rx.compile(r"\b(?P<name>nccl(?:UnhandledCudaError|SystemError|InternalError|InvalidArgument|InvalidUsage|RemoteError|Timeout))\b:?\s*(?P<msg>.*)$")
ERRNO_RE = rx.compile(r"[Ee]rrno:? ?(?P<errno>\d+)")
# init.cc:204 NCCL WARN Cuda failure 'an illegal memory access was encountered'   (NCCL's CUDACHECK macro,
# src/include/checks.h: "Cuda failure '%s'" / newer "Cuda failure %d '%s'"): a CUDA fault seen by NCCL
CUDA_FAIL_RE = rx.compile(r"^Cuda failure (?:(?P<num>\d+) )?'(?P<msg>[^']*)'")

#: ncclResult_t -> event kind
KIND_OF_RESULT = {1: "nccl_internal_error", 2: "nccl_system_error", 3: "nccl_internal_error",
                   4: "nccl_error", 5: "nccl_error", 6: "nccl_remote_error", 8: "nccl_error"}
TEXT_TO_RESULT = (("unhandled cuda error", 1), ("unhandled system error", 2), ("internal error", 3),
                   ("invalid argument", 4), ("invalid usage", 5), ("remote process exited", 6),
                   ("network error", 6), ("timeout", 8))


def result_of_text(msg: str) -> int | None:
    """``ncclResult_t`` whose ``ncclGetErrorString`` text appears in ``msg``, else None."""
    low = msg.lower()
    for text, code in TEXT_TO_RESULT:
        if text in low:
            return code
    return None


class NcclParser:
    """NCCL debug output (``NCCL_DEBUG=WARN|INFO``) and NCCL errors surfaced by PyTorch."""

    name = "nccl"
    source = "nccl"
    prefilter = (r"NCCL WARN|NCCL INFO \S+:\d+ -> \d|NET/IB ?: Got|NCCL error in|Connection closed by remote peer|"
                 r"nccl(?:UnhandledCuda|System|Internal|Remote)Error|ncclInvalid(?:Argument|Usage)|ncclTimeout|"
                 r"ncclSocketInit: |Bootstrap ?: no socket interface found|\.(?:h|cc|cu|cpp|c):\d+ WARN |NCCL INFO comm 0x[0-9a-fA-F]+ rank \d+ nranks|"
                 r"(?:NCCL |^)INFO (?:Bootstrap|NET/IB|NET/Socket) ?: Using |NCCL INFO Call to connect returned|"
                 r"Caught signal \d+ \(|NET/IB\w+ ?: ?Got completion|"
                 r"Error while (?:creating|attaching to) shared memory segment|"
                 r"\b(?:ncclGroupEnd|ncclGetUniqueId|ncclCommInitRank\w*|ncclShmOpen)\(")
    keywords = ("NCCL WARN", ".cc:", ".h:", ".cu:", ".cpp:", ".c:", "NET/IB", "NCCL error", "nccl",
                "Connection closed by remote peer", "INFO comm 0x", "INFO Bootstrap", "INFO NET/Socket", "INFO Call to connect", "Caught signal", "shared memory segment",
                "no socket interface found")

    # "Error while creating shared memory segment /dev/shm/nccl-pZafXL (size 7340384)" quoted without NCCL's
    # prefix (a user's paste, a wrapper's log): still NCCL's SHM transport message (src/misc/shmutils.cc)
    _SHM_SEG = rx.compile(r"Error while (?:creating|attaching to) shared memory segment \S+")

    # [8d6bf97c3bf4:3039 :0:3095] Caught signal 7 (Bus error: nonexistent physical address)   (UCX handler)
    _CAUGHT = rx.compile(r"Caught signal (?P<n>\d+) \((?P<what>[^):]+)")
    #  2 0x000000000007587d ncclGroupEnd()  ???:0      /   #0 0x00007f6b59544f3b in ncclShmOpen(char*, ...) ()
    # worker:101542:101934 [0] NCCL INFO Call to connect returned Connection timed out, retrying   (misc/socket.cc)
    _RETRY = rx.compile(r"NCCL INFO (?P<msg>Call to connect returned (?P<err>.+?)), retrying")
    _FRAME = rx.compile(r"^\s*#?\d+\s+0x[0-9a-fA-F]+\s+(?:in\s+)?(?P<fn>nccl\w+)\(")

    def parse_line(self, line: str, ctx: LineContext) -> Event | None:
        """Parse one NCCL line (see module docstring)."""
        # each search below is skipped when a literal its pattern requires is absent (same result, no RE2 call)
        m = self._CAUGHT.search(line) if "Caught signal " in line else None
        if m:
            n = int(m["n"])
            name = {7: "SIGBUS", 11: "SIGSEGV", 6: "SIGABRT", 9: "SIGKILL"}.get(n)
            return event("nccl", "signal_death", ctx, line, prefix_of(line, ctx), code=-n, severity="error",
                         fields={"signal": n, "signal_name": name, "message": line[m.start():].strip()})
        m = self._SHM_SEG.search(line) if "shared memory segment " in line else None
        if m and "NCCL WARN" not in line:
            return event("nccl", "nccl_warn", ctx, line, prefix_of(line, ctx), severity="error",
                         fields={"message": line[m.start():].strip()})
        m = self._RETRY.search(line) if "NCCL INFO Call to connect returned " in line else None
        if m:  # an INFO line, but the only trace of a peer NCCL cannot reach (route, firewall, wrong interface)
            return event("nccl", "nccl_warn", ctx, line, prefix_of(line, ctx), severity="warning",
                         fields={"message": m["msg"]})
        m = self._FRAME.search(line) if "0x" in line and "nccl" in line else None
        if m:
            return event("nccl", "native_frame", ctx, line, prefix_of(line, ctx), severity="debug",
                         fields={"function": m["fn"]})
        if "INFO" in line and ("Using" in line or "busId" in line):
            ev = self._init(line, ctx)
            if ev is not None:
                return ev
        m = IB_COMPL_RE.search(line)
        if m:
            return self._ib(m, line, ctx)
        m = IB_ASYNC_RE.search(line)
        if m:
            ev = m["event"]
            return event("nccl", "ib_async_event", ctx, line, prefix_of(line, ctx), code=ev,
                         severity="error", fields={"event": ev, "hca": m["dev"], "port": to_int(m["port"])})
        m = RETURN_RE.search(line)
        if m:
            ret = int(m["ret"])
            return event("nccl", "nccl_return", ctx, line, prefix_of(line, ctx), code=ret, severity="warning",
                         fields={"site": m["site"], "retcode": ret, "result": nccl_result(ret).name})
        m = NCCL_ERROR_IN_RE.search(line)
        if m:
            code = result_of_text(m["msg"])
            kind = KIND_OF_RESULT.get(code or 0, "nccl_error")
            return event("nccl", kind, ctx, line, prefix_of(line, ctx), code=code, severity="error",
                         fields={"message": m["msg"], "nccl_version": m["ver"], "where": m["where"],
                                 "exc_type": m["exc"], "errno": to_int(_g(ERRNO_RE.search(line), "errno"))})
        m = WARN_RE.search(line)
        if m:
            return self._warn(m, line, ctx)
        m = OLD_WARN_RE.search(line)
        if m:
            return self._warn(m, line, ctx)
        m = SOCKET_INIT_RE.search(line)
        if m:
            return event("nccl", "nccl_warn", ctx, line, prefix_of(line, ctx), severity="error",
                         fields={"message": m["msg"], "result": "ncclInternalError"})
        m = BOOTSTRAP_NOIF_RE.search(line) if "no socket interface found" in line else None
        if m:  # "Last error:" detail: NCCL's bootstrap matched no interface (NCCL_SOCKET_IFNAME, no usable NIC)
            return event("nccl", "nccl_warn", ctx, line, prefix_of(line, ctx), severity="error",
                         fields={"message": m["msg"], "result": "ncclInternalError"})
        m = REMOTE_RE.search(line)
        if m:  # "Last error:" detail line, e.g. "socketProgress: Connection closed by remote peer h<45074>"
            return event("nccl", "nccl_remote_error", ctx, line, prefix_of(line, ctx), code=6, severity="error",
                         fields={"message": line.strip(), "peer": m["peer"] or m["peer2"]})
        m = NCCL_ENUM_RE.search(line)
        if m:
            info = next((c for c in range(9) if nccl_result(c).name == m["name"]), None)
            kind = KIND_OF_RESULT.get(info or 0, "nccl_error")
            return event("nccl", kind, ctx, line, prefix_of(line, ctx), code=info, severity="error",
                         fields={"message": m["msg"].strip(), "result": m["name"],
                                 "errno": to_int(_g(ERRNO_RE.search(line), "errno"))})
        return None

    def _init(self, line: str, ctx: LineContext) -> Event | None:
        """``nccl_init`` (rank placement) or ``nccl_bootstrap`` (this process's addresses)."""
        pre = prefix_of(line, ctx)
        host = pre.host
        if host is None:  # "[0] node0:13571:13571 [0] NCCL INFO ..." (mpirun --tag-output) and the like
            h = NCCL_PREFIX_RE.search(line)
            host = h["host"] if h else None
        m = COMM_RE.search(line) if "NCCL INFO comm " in line else None
        if m:
            return event("nccl", "nccl_init", ctx, line, pre, severity="info", host=host, bdf=bus_id_to_bdf(m["bus"]),
                         gpu_index=int(m["dev"]),
                         fields={"rank": int(m["rank"]), "nranks": int(m["nranks"]), "cuda_dev": int(m["dev"]),
                                 "nvml_dev": to_int(m["nvml"]), "bus_id": m["bus"], "comm": m["comm"],
                                 "comm_id": m["cid"], "state": m["state"]})
        m = USING_RE.search(line)
        if not m:
            return None
        addrs = [(a["ifname"], a["ip"]) for a in ADDR_RE.finditer(line, m.end())]
        if not addrs:
            return None
        return event("nccl", "nccl_bootstrap", ctx, line, pre, severity="info", host=host,
                     fields={"transport": m["what"], "ifname": addrs[0][0], "ip": addrs[0][1],
                             "addresses": [f"{i}:{a}" for i, a in addrs]})

    def _ib(self, m: rx.Match, line: str, ctx: LineContext) -> Event:
        status = int(m["err"] or m["sn1"] or m["sn2"])
        o = IB_OPCODE_RE.search(line, m.end())
        v = IB_VENDOR_RE.search(line, m.end())
        f = {"status": status, "status_text": ib_status(status).name,
             "opcode": to_int(o and (o["on1"] or o["on2"])), "opcode_text": o and o["otext"],
             "vendor_err": to_int(v and v["vendor"]), "peer": m["peer"],
             "len": to_int(_g(IB_LEN_RE.search(line, m.end()), "len")),
             "direction": _g(IB_DIR_RE.search(line, m.end()), "dir"),
             "hca": _g(IB_HCA_RE.search(line), "hca"), "qp": to_int(_g(IB_QP_RE.search(line), "qp"))}
        return event("nccl", "ib_completion_error", ctx, line, prefix_of(line, ctx), code=status,
                     severity="error", fields=f)

    def _warn(self, m: rx.Match, line: str, ctx: LineContext) -> Event:
        msg = m["msg"]
        pre = prefix_of(line, ctx)
        site = m["site"]
        c = CUDA_FAIL_RE.search(msg)
        if c:  # a CUDA event (its class comes from the CUDA error) that keeps NCCL's site and prefix
            name, code = cuda_error_name(c["msg"])
            num = to_int(c["num"])
            f = {"message": c["msg"], "cuda_error": name, "cuda_code": code if code is not None else num,
                 "site": site, "reported_by": "nccl"}
            if code == 700:
                return event("cuda", "cuda_illegal_address", ctx, line, pre, code=700, severity="error", fields=f)
            return event("cuda", "cuda_error", ctx, line, pre, code=f["cuda_code"], severity="error", fields=f)
        r = REMOTE_RE.search(msg)
        if r:
            return event("nccl", "nccl_remote_error", ctx, line, pre, code=6, severity="error",
                         fields={"message": msg, "peer": r["peer"] or r["peer2"], "site": site})
        code = result_of_text(msg) if "unhandled" in msg or "remote process" in msg else None
        if code in (1, 2, 3, 6):
            return event("nccl", KIND_OF_RESULT[code], ctx, line, pre, code=code, severity="error",
                         fields={"message": msg, "site": site,
                                 "errno": to_int(_g(ERRNO_RE.search(msg), "errno"))})
        rc = RETCODE_RE.search(msg)
        ret = int(rc["ret"]) if rc else None
        return event("nccl", "nccl_warn", ctx, line, pre, code=ret, severity="warning" if ret is None else "error",
                     fields={"message": msg, "site": site, "retcode": ret,
                             "result": nccl_result(ret).name if ret is not None else None})


def _g(m: rx.Match | None, group: str) -> str | None:
    return m[group] if m else None
