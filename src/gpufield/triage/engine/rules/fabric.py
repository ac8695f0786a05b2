"""Fabric rules (tier 1): IB completion errors, port events, NCCL network config, P2P, SHM/IPC.

IB status meanings are ``ibv_wc_status`` (triage.md 2.7): 4 local protection (ACS/IOMMU breaking
GPUDirect RDMA), 5 flushed (QP already in error: secondary), 12 transport retry exceeded (peer
unreachable, RoCE GID/routing, or a link down longer than timeout x retries), 13 RNR retry exceeded.
"""

from __future__ import annotations

import re
import statistics
from collections import Counter

from gpufield.triage.engine.model import CONF_CASCADE_ONLY, CONF_INFERRED, CONF_PRIOR, Finding, Tier
from gpufield.triage.engine.rules.base import RuleContext, as_float, as_int, finding, group_by, text
from gpufield.triage.events import Event

IB_CLASS = {4: "IB_LOCAL_PROTECTION_ERROR", 12: "IB_TRANSPORT_RETRY_EXCEEDED", 13: "IB_TRANSPORT_RETRY_EXCEEDED"}

# NCCL network-configuration failures (src/bootstrap.cc, misc/socket.cc, misc/ibvwrap.cc, net plugin):
#   "bootstrap.cc:37 NCCL WARN Bootstrap : no socket interface found"
#   "include/socket.h:333 NCCL WARN Call to bind failed : Address already in use"
#   "NCCL WARN NET/Socket : no interface found" / "NCCL_SOCKET_IFNAME set to ... but no interface"
#   "include/socket.h:344 WARN Socket creation failed : Address family not supported by protocol" (IPv4/IPv6 mix)
#   "ncclSocketInit: connecting to address  with family 59936 is neither AF_INET(2) nor AF_INET6(10)" (bad IFNAME)
_NET_CONFIG = re.compile(
    r"no socket interface found|no interface found|Call to bind failed|Address already in use|"
    r"NCCL_SOCKET_IFNAME|NCCL_IB_HCA|No usable listening interface|Invalid NCCL_|"
    r"Network is unreachable|No route to host|Could not find (?:any )?(?:interface|net plugin)|"
    r"Bootstrap : no|failed to resolve|NET/IB : No device found|Failed to open libibverbs|"
    r"NCCL_NET_PLUGIN|NCCL_IB_GID_INDEX|Socket creation failed|Address family not supported|"
    r"neither AF_INET|socketFinalizeAccept: wrong type|version mismatch|"
    r"NET/IB : Unable to open device|"
    r"Call to ibv_(?:create_qp|modify_qp|reg_mr|open_device|alloc_pd|create_cq)\w* failed|ibv_modify_qp failed",
    re.IGNORECASE,
)
# connect() failures: configuration (firewall, wrong interface) before the job ever ran, a dead peer after
# IB transport set-up failures: an HCA that cannot be opened (not exposed to the container, down), IB on one
# node and sockets on the other ("socketFinalizeAccept: wrong type": the peers chose different transports)
_IB_SETUP = re.compile(r"NET/IB : Unable to open device|NET/IB : No device found|socketFinalizeAccept: wrong type|"
                       r"Failed to open libibverbs|Call to ibv_\w+ failed|ibv_modify_qp failed", re.IGNORECASE)
# memory registration refused for lack of memory (misc/ibvwrap.cc: "Call to ibv_reg_mr_iova2 failed with error Cannot
# allocate memory"; NCCL before 2.8 printed no error text: "Call to ibv_reg_mr failed"): the pinned-memory limit
# RLIMIT_MEMLOCK of the process or container (NCCL troubleshooting: --ulimit memlock=-1), not the HCA or its port;
# another errno (EINVAL, EFAULT: GPUDirect / peer-memory module) is not this
_MEMLOCK = re.compile(r"ibv_reg_(?:dmabuf_)?mr\w*(?:\(\))? failed(?:\s*$|.*?(?:Cannot allocate memory|ENOMEM|errno:? ?12\b))",
                      re.IGNORECASE | re.MULTILINE)
_CONNECT_FAIL = re.compile(r"Connect to \S+ failed|Connection refused|Connection timed out|connect returned",
                           re.IGNORECASE)
_NCCLISH = re.compile(r"NCCL|c10d|ProcessGroup|socket", re.IGNORECASE)  # a Python error about NCCL's network
_P2P_TEXT = re.compile(r"peer access is not supported|cudaErrorPeerAccessUnsupported|P2P is disabled between",
                       re.IGNORECASE)
# NCCL SHM transport / container IPC: shm_open / posix_fallocate on /dev/shm, cudaIpc* handles
_SHM_IPC = re.compile(
    r"/dev/shm|shm_open|posix_fallocate|Error while creating shared memory segment|NCCL_SHM|"
    r"cudaIpc\w+ failed|ipc=host|unable to (?:allocate|map) shared memory",
    re.IGNORECASE,
)
# a local system call failure (ncclSystemError) - not diagnostic alone (INDEX case 12 note)
_SYSTEM_ERROR = re.compile(r"unhandled system error|ncclSystemError|System call \(socket", re.IGNORECASE)
_PEER_GONE = re.compile(r"Broken pipe|Connection closed by remote peer|remote process exited|Connection reset by peer",
                        re.IGNORECASE)
# interfaces a container/VM host creates locally; NCCL picking one for its sockets means peers on other
# hosts cannot reach the address it advertises (the fix: NCCL_SOCKET_IFNAME=<the real NIC>)
_BRIDGE_IF = re.compile(r"^(?:docker\d*|br-[0-9a-f]+|veth\w*|virbr\d*|cni\d*|flannel[.\w]*|lo)$")
_SHM_PERM = re.compile(r"Permission denied|Operation not permitted|EACCES|EPERM|Read-only file system", re.IGNORECASE)
_SHM_SPACE = re.compile(r"No space left on device|posix_fallocate|ENOSPC|Bus error|SIGBUS|Cannot allocate memory",
                        re.IGNORECASE)
_NCCL_ENTRY = frozenset({"ncclGroupEnd", "ncclGetUniqueId", "ncclShmOpen", "ncclCommInitRank", "ncclCommInitRankConfig",
                         "ncclProxyService"})
SIGBUS_FRAMES = 40  # backtrace lines printed after a "Caught signal 7" belong to it
# RoCE evidence: NCCL's "NET/IB : Using [0]mlx5_0:1/RoCE", GIDs in the completion line, an explicit GID index
_ROCE = re.compile(r"/RoCE|RoCE|localGid|remoteGids?|GID index|NCCL_IB_GID_INDEX|Link layer: Ethernet|::ffff:",
                   re.IGNORECASE)
_PORT_TEXT = re.compile(r"port error|Link DOWN|link_downed|port down|PORT_ERR", re.IGNORECASE)


def _status(e: Event) -> int | None:
    return as_int(e.fields.get("status", e.code))


def _peer_host(e: Event) -> str | None:
    """The peer named by an IB/socket error, without the port (``10.0.0.2<5000>`` -> ``10.0.0.2``)."""
    peer = e.fields.get("peer")
    if not peer:
        m = re.search(r"(?:peer|from|to)\s+(\S+?)(?:<\d+>|:\d+)?(?:\s|$|,)", e.raw)
        peer = m.group(1) if m else None
    if not peer:
        return None
    peer = re.sub(r"<\d+>$|%\w+.*$", "", str(peer))
    return peer or None


def peer_name(ctx: RuleContext, e: Event) -> str | None:
    """The peer of an IB/socket error as a hostname when the address book knows it, else the address."""
    peer = _peer_host(e)
    return ctx.timeline.ip_host.get(peer, peer) if peer else None


def ib_completion_rule(ctx: RuleContext) -> list[Finding]:
    """IB completion errors, grouped by status; blames the peer when several reporters agree."""
    out = []
    errs = [e for e in ctx.kinds("ib_completion_error") if _status(e) in IB_CLASS]
    for cls, evs in group_by(errs, lambda e: IB_CLASS[_status(e)]).items():
        reporters = sorted({e.host for e in evs if e.host})
        peers = Counter(p for p in (peer_name(ctx, e) for e in evs) if p)
        host, conf, note_who = None, CONF_INFERRED + 0.15, "the reporting pair"
        top = peers.most_common(1)
        if top and len(reporters) >= 2 and top[0][1] >= 2 and len(peers) == 1 or top and top[0][1] >= 3:
            host = top[0][0]
            conf, note_who = 0.9, f"peer {host} (named by {top[0][1]} reports from {len(reporters)} host(s))"
        elif len(reporters) == 1 and not peers:
            host = reporters[0]
            note_who = f"host {host} (the only reporter)"
        elif len(reporters) == 1 and len(peers) == 1:
            # one pair: the reporter's side and the named peer are both blamed (host + peer); either end's
            # HCA, cable or switch port may be at fault
            host = reporters[0]
            note_who = f"the pair {host} <-> {top[0][0]} (one reporter, one peer)"
        peer_txt = top[0][0] if top else "-"
        extra: list[Event] = []
        if host is not None and host not in reporters and host not in {e.host for e in ctx.events if e.host}:
            # the peer is an address no line maps to a host: a port-down on exactly one other host at
            # that time names the far end (triage.md 5.6.2: status-12 peers pointing at one host)
            t0 = ctx.t(evs[0])
            near = [e for e in _port_down(ctx) if e.host and e.host not in reporters and (
                t0 is None or ctx.t(e) is None or abs(ctx.t(e) - t0) <= PORT_DOWN_NEAR_S * 1e9)]
            if len({e.host for e in near}) == 1:
                ip, host = host, near[0].host
                extra = near
                peer_txt = f"{host} ({ip})"
                conf, note_who = 0.8, (f"peer {ip}, which no line maps to a host; {host} reported its IB port down "
                                       f"at that time ({near[0].file}:{near[0].line}), so {ip} is taken to be {host}")
        running = any(ctx.progress_before(e) for e in evs[:1])
        roce = any(_ROCE.search(text(e)) for e in evs + ctx.kinds("nccl_bootstrap", "nccl_init", "nccl_warn"))
        facts = {"status": str(_status(evs[0])), "phase": "running" if running else "startup",
                 "reporters": ",".join(reporters) or "-", "peer": peer_txt, "roce": "yes" if roce else "no",
                 "gid": _gid_kind(evs)}
        status = facts["status"]
        out.append(finding(ctx, cls, "ib_completion", Tier.FABRIC, conf, evs + extra, host=host, gpu=None, facts=facts,
                           note=f"IB completion error status {status} from {len(evs)} report(s); blames {note_who}."))
    return out


# localGid ::ffff:10.0.0.1 remoteGids::ffff:10.0.0.2    (NCCL's IB plugin prints the GIDs of the QP)
_LOCAL_GID = re.compile(r"localGid\s*(?P<gid>[0-9a-fA-F:.<>\w-]+)")


def _gid_kind(evs: list[Event]) -> str:
    """What the GIDs NCCL printed are: ``ipv4_mapped`` (``::ffff:a.b.c.d``, the RoCE v2 IPv4 GID the
    GID-index fix selects), ``link_local`` (``fe80:``, the default index 0 on RoCE), ``-`` when none."""
    for e in evs:
        m = _LOCAL_GID.search(e.raw)
        if m:
            g = m["gid"].lower()
            return "ipv4_mapped" if g.startswith("::ffff:") else "link_local" if g.startswith("fe80") else "other"
    return "-"


PORT_DOWN_NEAR_S = 600.0  # a port-down this close to the completion errors is taken as their cause


def _port_down(ctx: RuleContext) -> list[Event]:
    """IB async port errors and ConnectX ``Link DOWN`` lines, in time order."""
    evs = [e for e in ctx.kinds("ib_async_event") if _PORT_TEXT.search(text(e))]
    evs += [e for e in ctx.kinds("nic_link_state") if str(e.fields.get("state", e.code)).upper() == "DOWN"]
    evs.sort(key=lambda e: (ctx.t(e) or 0, e.file, e.line))
    return evs


def ib_port_rule(ctx: RuleContext) -> list[Finding]:
    """IB async port errors and ConnectX ``Link DOWN`` lines -> ``IB_LINK_FLAP`` on the reporting host."""
    evs = _port_down(ctx)
    out = []
    for host, group in group_by(evs, lambda e: e.host).items():
        conf = 0.85 if len(group) >= 2 else 0.75
        out.append(finding(ctx, "IB_LINK_FLAP", "ib_port", Tier.FABRIC, conf, group,
                           note=f"{len(group)} IB port error event(s) on {host or 'the host'}: a flapping link."))
    return out


def nccl_network_config_rule(ctx: RuleContext) -> list[Finding]:
    """NCCL bootstrap / socket interface / bind failures -> ``NCCL_NETWORK_CONFIG``."""
    kinds = ("nccl_warn", "nccl_system_error", "nccl_error", "nccl_internal_error", "nccl_remote_error",
             "python_exception")
    evs = [e for e in ctx.matching(_NET_CONFIG, kinds) if e.kind != "python_exception" or _NCCLISH.search(text(e))]
    evs += [e for e in ctx.matching(_CONNECT_FAIL, kinds) if e not in evs and not ctx.progress_before(e)
            and (e.kind != "python_exception" or _NCCLISH.search(text(e)))]
    bridges = bridge_interfaces(ctx)
    failed = ctx.kinds("nccl_system_error", "nccl_remote_error") + ctx.matching(_SYSTEM_ERROR, kinds)
    shm_explicit = ctx.matching(_SHM_IPC, kinds) or _sigbus_in_nccl(ctx)
    if bridges and failed and not evs and not shm_explicit:
        names = sorted({n for _, n in bridges})
        return [finding(ctx, "NCCL_NETWORK_CONFIG", "nccl_socket_bridge", Tier.FABRIC, CONF_INFERRED + 0.1,
                        [e for e, _ in bridges] + failed, gpu=None, rank=None,
                        facts={"ifnames": ",".join(names), "fix": "socket_ifname"},
                        note=f"NCCL chose container/bridge interface(s) {', '.join(names)} for its sockets "
                             f"({bridges[0][0].where}) and then failed: peers on other hosts cannot reach that "
                             "address (set NCCL_SOCKET_IFNAME to the host NIC).")]
    if not evs:
        return _bare_internal_error(ctx)
    evs.sort(key=lambda e: (ctx.t(e) or 0, e.file, e.line))
    facts, extra = {}, ""
    if any(_IB_SETUP.search(text(e)) for e in evs):
        facts = {"fix": "ib"}
    if any(_MEMLOCK.search(text(e)) for e in evs):
        facts = {"fix": "memlock"}
    if bridges and not shm_explicit:
        names = sorted({n for _, n in bridges})
        facts = {"ifnames": ",".join(names), "fix": "socket_ifname"}
        extra = f" NCCL's socket interfaces include container/bridge interface(s) {', '.join(names)}."
        evs += [e for e, _ in bridges if e not in evs]
    return [finding(ctx, "NCCL_NETWORK_CONFIG", "nccl_network_config", Tier.FABRIC, 0.8, evs, gpu=None, rank=None,
                    facts=facts, note="NCCL could not set up its network (interface, bind or route failure)." + extra)]


# events that only wrap or accompany an NCCL error (its return chain, the exception and traceback that carry
# it, topology INFO lines): they add no other cause
_NCCL_WRAPPERS = frozenset({"nccl_internal_error", "nccl_return", "nccl_init", "nccl_bootstrap", "traceback",
                            "child_failed", "pg_teardown", "loss", "step_time", "metric_sample"})


def _bare_internal_error(ctx: RuleContext) -> list[Finding]:
    """A prior, not a diagnosis: ``ncclInternalError`` at start-up and nothing else in the logs.

    NCCL returns ncclInternalError for failed internal checks, and during communicator set-up most
    of those checks are in its bootstrap, socket, proxy and net transports (``src/bootstrap.cc``,
    ``misc/socket.cc``, ``proxy.cc``, ``transport/net*.cc``: interface names, address families,
    the peer connection), and remote errors surface as internal errors higher up the stack
    (NVIDIA/nccl#795). With no WARN, CUDA, peer or hardware line beside it, the network set-up is
    the first thing to check; the finding is unestablished and asks for the INIT,NET debug log.
    """
    internal = [e for e in ctx.kinds("nccl_internal_error")
                if as_int(e.code) == 3 and not ctx.progress_before(e)]
    if not internal:
        return []
    for e in ctx.events:
        if e.kind in _NCCL_WRAPPERS or e.severity not in ("error", "fatal"):
            continue
        if e.kind == "python_exception" and _NCCLISH.search(text(e)):
            continue
        return []  # another error names (or may name) the cause
    return [finding(ctx, "NCCL_NETWORK_CONFIG", "nccl_internal_prior", Tier.FABRIC, CONF_PRIOR, internal,
                    established=False, gpu=None, rank=None, facts={"fix": "internal_prior"},
                    note="ncclInternalError during NCCL set-up with no other error in the logs: most of NCCL's "
                         "set-up checks that return it are in its bootstrap/socket/net code (interface names, "
                         "address families, peer connections); a prior, not established.")]


def bridge_interfaces(ctx: RuleContext) -> list[tuple[Event, str]]:
    """``(bootstrap event, ifname)`` for every container-bridge/loopback interface NCCL said it uses."""
    out = []
    for e in ctx.kinds("nccl_bootstrap"):
        names = [str(a).split(":", 1)[0] for a in (e.fields.get("addresses") or [])] or [str(e.fields.get("ifname", ""))]
        if e.fields.get("transport") != "NET/Socket":
            names = names[:1]  # bootstrap (and IB's OOB) use the first interface only; NET/Socket uses them all
        out += [(e, n) for n in dict.fromkeys(names) if _BRIDGE_IF.match(n)]
    return out


def _switch_topology_only(ctx: RuleContext) -> list[Finding]:
    """An ``nvidia-smi topo -m`` matrix with GPU pairs behind PCIe switches (PIX/PXB) as the *only* evidence
    (no error line, no training progress): the one hypothesis a topology supports is P2P through those
    switches, which PCIe ACS or the IOMMU (VT-d) break (nccl#667: all_reduce_perf hung on every PXB/PIX pair,
    fixed by turning VT-d off). Not established: the topology names where P2P runs, not that it fails."""
    topo = ctx.kinds("gpu_topology")
    if not topo or ctx.kinds("loss") or any(e.severity in ("error", "fatal") for e in ctx.events):
        return []
    pairs = sorted({k for e in topo for k, v in (e.fields.get("links") or {}).items() if v in ("PIX", "PXB")})
    if not pairs:
        return []
    return [finding(ctx, "P2P_BROKEN", "p2p_switch_topology", Tier.FABRIC, CONF_CASCADE_ONLY, topo, established=False,
                    gpu=None, rank=None, facts={"pairs": ",".join(pairs)},
                    note=f"Only a PCIe topology is in the input: GPU pairs {', '.join(pairs)} talk peer-to-peer through "
                         "a PCIe switch (PIX/PXB), the path ACS or the IOMMU break; no failure line names it.")]


def p2p_rule(ctx: RuleContext) -> list[Finding]:
    """p2pBandwidthLatencyTest matrices: P2P-enabled off-diagonal bandwidth far below P2P-disabled.

    Broken PCIe P2P (IOMMU/ACS) makes P2P *slower* than staging through host memory; a ratio of
    enabled/disabled median off-diagonal bandwidth below 0.5 is flagged.
    """
    rows = ctx.kinds("p2p_bandwidth")
    unsupported = ctx.matching(_P2P_TEXT)
    acs = [e for e in ctx.kinds("pcie_acs") if e.fields.get("enabled")]
    if acs and not rows and not ctx.kinds("ib_completion_error"):
        return [finding(ctx, "P2P_BROKEN", "pcie_acs", Tier.FABRIC, CONF_INFERRED, acs, gpu=None, rank=None,
                        facts={"acs_ports": str(len(acs))},
                        note=f"ACS is enabled on {len(acs)} PCIe port(s) (lspci ACSCtl SrcValid+/Redir+, "
                             f"{acs[0].where}): peer-to-peer traffic between GPUs and NICs is redirected through "
                             "the root complex.")]
    if unsupported and not rows:
        return [finding(ctx, "P2P_BROKEN", "p2p_bandwidth", Tier.FABRIC, CONF_INFERRED, unsupported,
                        note="CUDA/NCCL report that GPU peer-to-peer access is unavailable between devices.")]
    if not rows:
        return _switch_topology_only(ctx)
    on, off = [], []
    for e in rows:
        vals = e.fields.get("gb_per_s")
        vals = vals if isinstance(vals, list) else [vals]
        enabled = str(e.fields.get("p2p_enabled")).lower() in ("true", "1", "enabled", "yes")
        row = e.gpu_index
        for j, v in enumerate(vals):
            x = as_float(v)
            if x is None or (row is not None and j == row and len(vals) > 1):
                continue
            (on if enabled else off).append(x)
    if not on or not off:
        return []
    ratio = statistics.median(on) / max(statistics.median(off), 1e-9)
    if ratio >= 0.5:
        return []
    return [finding(ctx, "P2P_BROKEN", "p2p_bandwidth", Tier.FABRIC, 0.85, rows,
                    facts={"ratio": f"{ratio:.2f}"},
                    note=f"P2P-enabled bandwidth is {ratio:.2f}x the P2P-disabled bandwidth (median "
                         f"{statistics.median(on):.1f} vs {statistics.median(off):.1f} GB/s): broken PCIe P2P.")]


def _sigbus_in_nccl(ctx: RuleContext) -> list[Event]:
    """SIGBUS signals whose backtrace (the next :data:`SIGBUS_FRAMES` lines of the file) is inside an NCCL
    entry point (ncclGroupEnd / ncclGetUniqueId / ncclShmOpen): NCCL touched a /dev/shm mapping the tmpfs
    had no pages for (pipedream #76, hugectr_backend #42: fixed with --shm-size)."""
    frames = [f for f in ctx.kinds("native_frame") if f.fields.get("function") in _NCCL_ENTRY]
    out = []
    for e in ctx.kinds("signal_death", "child_failed"):
        if as_int(e.fields.get("signal")) != 7 and str(e.fields.get("signal_name")) != "SIGBUS":
            continue
        near = [f for f in frames if f.file == e.file and 0 < f.line - e.line <= SIGBUS_FRAMES]
        if near:
            out += [e, *near[:3]]
    return out


def shm_ipc_rule(ctx: RuleContext) -> list[Finding]:
    """NCCL SHM/IPC failures -> ``CONTAINER_SHM_IPC``.

    Explicit ``/dev/shm`` / ``shm_open`` evidence, or a SIGBUS inside an NCCL entry point: deterministic
    (tier host), with the cause read from the text (``shm_cause`` = ``permission`` for EACCES/EPERM,
    ``space`` for ENOSPC/posix_fallocate/SIGBUS) so the action fits what the thread fixed. A bare NCCL
    system error is given the class by prior (INDEX case 12) only when *no* other explanation is in the
    logs: no network/peer evidence and no container-bridge socket interface (that is network config).
    """
    nccl_kinds = ("nccl_warn", "nccl_system_error", "nccl_error", "nccl_internal_error", "python_exception")
    explicit = [e for e in ctx.matching(_SHM_IPC, nccl_kinds) if "DataLoader" not in e.raw]
    explicit += [e for e in _sigbus_in_nccl(ctx) if e not in explicit]
    if explicit:
        blob = "\n".join(text(e) for e in explicit)
        cause = "permission" if _SHM_PERM.search(blob) else ("space" if _SHM_SPACE.search(blob) else "unknown")
        return [finding(ctx, "CONTAINER_SHM_IPC", "shm_ipc", Tier.HOST, 0.85, explicit, gpu=None, rank=None,
                        facts={"shm_cause": cause},
                        note="NCCL's shared-memory/IPC transport failed (container /dev/shm or IPC namespace)"
                             + {"permission": ": permission denied on /dev/shm.",
                                "space": ": /dev/shm ran out of space.", "unknown": "."}[cause])]
    system = [e for e in ctx.kinds("nccl_system_error", "nccl_error", "python_exception")
              if _SYSTEM_ERROR.search(text(e))]
    if not system:
        return []
    network = ctx.kinds("ib_completion_error", "ib_async_event", "nccl_remote_error", "rendezvous_error")
    network += ctx.matching(_PEER_GONE) + ctx.matching(_NET_CONFIG, nccl_kinds)
    if network or bridge_interfaces(ctx):
        return []
    return [finding(ctx, "CONTAINER_SHM_IPC", "shm_ipc_prior", Tier.NCCL, CONF_PRIOR, system, established=False,
                    facts={"shm_cause": "unknown"},
                    note="NCCL 'unhandled system error' with no network or peer-exit evidence: a local system "
                         "call failed; in containers this is most often the SHM transport (/dev/shm, --ipc).")]
