"""Host rules (tier 2): host OOM kill, /dev/shm exhaustion, rendezvous, launch skew.

Exit-code meanings follow triage.md 2.9: -9 SIGKILL (host OOM killer, scheduler, NVRx monitor),
-6 SIGABRT (watchdog teardown), -11 SIGSEGV, 1 Python exception.
"""

from __future__ import annotations

import re

from gpufield.triage.engine.model import CONF_INFERRED, CONF_PRIOR, Finding, Tier
from gpufield.triage.engine.rules.base import (
    RuleContext,
    as_int,
    finding,
    group_by,
    text,
    traceback_of,
)
from gpufield.triage.events import Event

_SIGKILL = re.compile(r"SIGKILL|signal 9\b|Signal 9\b|exitcode\s*:\s*-9\b", re.IGNORECASE)
# host memory refused to the process (no kill): torch's CPU allocator (c10/core/impl/alloc_cpu.cpp
# "DefaultCPUAllocator: can't allocate memory: you tried to allocate N bytes. Error code 12 (Cannot allocate
# memory)"), Python's MemoryError, C++ std::bad_alloc
_HOST_ALLOC = re.compile(r"DefaultCPUAllocator: can't allocate memory|\bMemoryError\b|std::bad_alloc")
_SHM_FULL = re.compile(r"out of shared memory|shared memory limit|No space left on device", re.IGNORECASE)
_RDZV_CONNECT = re.compile(r"connect|unreachable|resolve|refused|Name or service not known", re.IGNORECASE)
_JOB_SOURCES = frozenset({"nccl", "torch", "torchrun", "train", "cuda"})  # the job's own output, not the kernel
LAUNCH_SKEW_S = 120.0  # host start times further apart than this are a staggered launch


def is_sigkill(e: Event) -> bool:
    """A torchrun failure / signal death that reports SIGKILL (exit code -9)."""
    f = e.fields
    if as_int(f.get("exitcode", e.code if e.kind == "child_failed" else None)) == -9:
        return True
    if as_int(f.get("signal")) == 9 or str(f.get("signal_name", "")).upper() == "SIGKILL":
        return True
    return bool(_SIGKILL.search(e.raw))


def host_oom_rule(ctx: RuleContext) -> list[Finding]:
    """Kernel / Slurm OOM-killer lines (deterministic), or SIGKILL'd ranks without one.

    The host OOM killer is named only on its own evidence (an ``Out of memory: Killed process`` kernel
    line, the OOM report's ``<comm> invoked oom-killer`` header, or a Slurm ``oom-kill event``). A rank killed with SIGKILL and no such line may have been killed
    by the OOM killer, a scheduler, a monitor or itself (triage.md 2.9): the finding is then
    ``PEER_PROCESS_EXIT`` (that rank's exit ended the job), not established, with ``HOST_OOM_KILL``
    recorded as a rejected hypothesis and the kernel log of that host asked for first.
    """
    ooms = ctx.kinds("host_oom_kill")
    forced = [e for e in ctx.kinds("signal_death") if e.fields.get("sent_by_agent") and is_sigkill(e)]
    forced_pids = {e.pid for e in forced if e.pid is not None}
    # torchrun SIGKILLed these itself after SIGTERM was ignored ("forcefully exiting via 9"): a hung rank
    # during teardown, not the kernel OOM killer; a kill is the agent's when its pid matches, or when the
    # same file shows the agent forcing a kill and the kill names no pid
    kills = [e for e in ctx.kinds("child_failed", "signal_death") if is_sigkill(e) and not e.fields.get("sent_by_agent")
             and not (e.pid in forced_pids or (e.pid is None and any(f.file == e.file for f in forced)))]
    out = []
    if ooms:
        for host, group in group_by(ooms, lambda e: e.host).items():
            related = [k for k in kills if k.host in (host, None)]
            # a pre-4.19 kernel names the chosen task ("Kill process N ... score S") before the victim
            # ("Killed process N ..."): count the victims, or the chosen tasks when no victim line is there
            # the report header ("<comm> invoked oom-killer") announces a kill but names no victim: count it only
            # when the excerpt has no victim or chosen-task line
            named = [e for e in group if not e.fields.get("report_header")]
            victims = [e for e in named if e.fields.get("score") is None] or named or group[:1]
            n_kills = len({e.fields.get("pid", id(e)) for e in victims})
            out.append(finding(ctx, "HOST_OOM_KILL", "host_oom", Tier.HOST, 0.9 if host else 0.8, group + related,
                               note=f"The kernel OOM killer killed a process on {host or 'the host'} "
                                    f"({n_kills} kill(s)); ranks died with SIGKILL."))
        return out
    # the kernel's memory report with no free swap left (show_mem, printed by the OOM killer and by allocation
    # failures) and no kill line in the excerpt: the host ran out of memory; the kill itself is not shown
    exhausted = [e for e in ctx.kinds("mem_report") if e.fields.get("free_swap_kb") == 0]
    for host, group in group_by(exhausted, lambda e: e.host).items():
        related = [k for k in kills if k.host in (host, None)]
        kills = [k for k in kills if k not in related]
        out.append(finding(ctx, "HOST_OOM_KILL", "host_mem_report", Tier.HOST, CONF_INFERRED, group + related,
                           established=False,
                           note=f"The kernel printed a memory report with no free swap on {host or 'the host'} "
                                f"({group[0].where}): host memory was exhausted; the OOM killer's 'Killed process' "
                                "line next to it names the victim."))
    refused = [e for e in ctx.kinds("python_exception", "cuda_error") if _HOST_ALLOC.search(text(e))]
    if refused:
        first = refused[0]
        m = re.search(r"allocate (\d+) bytes", first.raw)
        size = f" ({int(m.group(1)) / 2**30:.1f} GiB requested)" if m else ""
        out.append(finding(ctx, "HOST_OOM_KILL", "host_alloc_refused", Tier.HOST, 0.8, refused,
                           facts={"prior": "allocator"},
                           note=f"Host memory exhausted on {('rank ' + str(first.rank)) if first.rank is not None else 'a rank'}"
                                f": the CPU allocator refused an allocation{size} ({first.where}); the process "
                                "then exited (no kernel OOM kill was needed)."))
        hosts = {r.host for r in refused}
        kills = [k for k in kills if k.host not in hosts and None not in hosts]  # the allocator failure explains them
    cancels = ctx.kinds("scheduler_cancel")
    for c in cancels:  # the scheduler sends SIGKILL after its grace period: that explains the -9s
        related = [k for k in kills if k.host in (c.host, None)]
        kills = [k for k in kills if k not in related]
        reason = c.fields.get("reason") or "a user/admin scancel"
        out.append(finding(ctx, "UNKNOWN", "scheduler_cancel", Tier.HOST, 0.85, [c, *related],
                           facts={"scheduler_reason": str(c.fields.get("reason") or "CANCELLED"),
                                  "job_id": str(c.fields.get("job_id", "?"))},
                           note=f"The scheduler cancelled {c.fields.get('scope', 'job')} {c.fields.get('job_id', '?')} on "
                                f"{c.host or 'the host'} ({reason}); the SIGKILL (exit -9) of the ranks is its doing, "
                                "not the host OOM killer."))
    for host, group in group_by(kills, lambda e: e.host).items():
        # no OOM-killer line (kernel "Out of memory: Killed process", Slurm "oom-kill event"): the sender of
        # SIGKILL is not in the input. The host OOM killer is the commonest sender of a training rank's
        # SIGKILL in public reports (triage.md 2.9; shared case 29), so it is the hypothesis to check first,
        # NOT established; a monitor, a scheduler or the program itself (PEER_PROCESS_EXIT) stay possible
        ranks = sorted({k.rank for k in group if k.rank is not None})
        out.append(finding(ctx, "HOST_OOM_KILL", "sigkill_prior", Tier.HOST, CONF_PRIOR + 0.05, group,
                           facts={"prior": "sigkill"}, established=False,
                           rank=ranks[0] if len(ranks) == 1 else None,
                           note=f"Rank(s) {', '.join(map(str, ranks)) or '?'} on {host or 'a host'} received SIGKILL "
                                "(exit -9) from a sender the input does not show (no OOM-killer line, no scheduler "
                                "cancel, not torchrun's own kill): most often the host OOM killer; check that "
                                "host's kernel log for 'Out of memory: Killed process' before blaming the program."))
    return out


def shm_exhausted_rule(ctx: RuleContext) -> list[Finding]:
    """DataLoader worker bus errors / shared-memory limit messages -> ``SHM_EXHAUSTED``."""
    evs = ctx.kinds("bus_error") + [e for e in ctx.kinds("python_exception", "cuda_error")
                                   if "DataLoader" in e.raw and _SHM_FULL.search(text(e))]
    if not evs:
        return []
    evs.sort(key=lambda e: (ctx.t(e) or 0, e.file, e.line))
    return [finding(ctx, "SHM_EXHAUSTED", "shm_exhausted", Tier.HOST, 0.85, evs,
                    note="DataLoader workers died with a bus error: /dev/shm is too small for them.")]


# frames of the rendezvous: torch/distributed/rendezvous.py (init_method tcp:// / env://), the elastic
# rendezvous handlers, the c10d TCPStore constructor
_RDZV_FRAME = re.compile(r"distributed/rendezvous\.py:|elastic/rendezvous/|_rendezvous_handler|:_create_c10d_store$|"
                         r":_create_tcp_store$|TCPStore")
#: innermost frames of a traceback that decide where its exception was raised
INNER_FRAMES = 2


def rendezvous_exceptions(ctx: RuleContext) -> list[Event]:
    """Python exceptions raised inside the rendezvous (the innermost frames of their traceback are in the
    rendezvous code), whatever their type: ``ValueError: host not found`` from ``TCPStore(...)`` in
    ``_tcp_rendezvous_handler`` (kubeflow/pytorch-operator#313) is a rendezvous failure, not a program bug."""
    out = []
    for e in ctx.kinds("python_exception"):
        tb = traceback_of(ctx, e)
        frames = [str(f) for f in (tb.fields.get("frames") or [])] if tb is not None else []
        if any(_RDZV_FRAME.search(f) for f in frames[-INNER_FRAMES:]):
            out.append(e)
    return out


# a distributed launch in the logs: the launcher's own frames (torchrun / torch.distributed.run / the elastic agent)
_LAUNCH_FRAME = re.compile(r"torch/distributed/(?:run\.py|launch\.py|launcher/|elastic/)|/bin/torchrun:")
# the unresolved name belongs to an HTTP download (model hub, dataset, pip), not to the rendezvous
_HTTP_CLIENT = re.compile(r"HTTPS?ConnectionPool|urllib3|requests\.exceptions|MaxRetryError|huggingface_hub|"
                          r"http\.client|aiohttp|pip\._", re.IGNORECASE)


def unresolved_launch_names(ctx: RuleContext) -> list[Event]:
    """Host names that could not be resolved before the job made progress, in a job whose logs show a
    distributed launch and no HTTP-client failure: the only name a launcher needs at start-up is its rendezvous
    endpoint (MASTER_ADDR / --rdzv-endpoint; a Kubernetes or DLC master pod's service name), so the launch
    could not reach it (ms-swift#6368: ``nslookup: can't resolve '<job>-master-0'`` before a torchrun traceback)."""
    unresolved = [e for e in ctx.kinds("name_unresolved") if not ctx.progress_before(e)]
    if not unresolved:
        return []
    frames = [str(f) for tb in ctx.kinds("traceback") for f in (tb.fields.get("frames") or [])]
    launched = any(_LAUNCH_FRAME.search(f) for f in frames) or bool(ctx.kinds("child_failed", "rendezvous_error"))
    http = any(_HTTP_CLIENT.search(f) for f in frames) or any(_HTTP_CLIENT.search(text(e))
                                                              for e in ctx.kinds("python_exception"))
    return unresolved if launched and not http else []


# Errors that prove the rendezvous store *was reached*, so they are not RENDEZVOUS_UNREACHABLE:
# - torch elastic raises RendezvousClosedError for a node that joins a rendezvous whose state, read from the store,
#   is already closed (torch/distributed/elastic/rendezvous/dynamic_rendezvous.py, "Rendezvous for run_id=... was
#   observed to be closed"): the node came too late, a launch skew;
# - ProcessGroupNCCL's "[r] is setting up NCCL communicator and retrieving ncclUniqueId from [0] via c10d key-value
#   store by key 'k', but store->get('k') got error" (ProcessGroupNCCL.cpp broadcastUniqueNCCLID) is a rank already
#   connected to the store waiting for the key rank 0 sets at its first NCCL collective; torch's own reading: "a
#   possible application crash on rank 0 or a network set up issue" - rank 0 late (busy) or gone, not the store.
_RDZV_CLOSED = re.compile(r"RendezvousClosed|[Rr]endezvous for run_id=\S* was observed to be closed")
#   older torch releases printed the same message misspelled "retreiving" (2023 threads NVIDIA/nccl#845,
#   zai-org/ChatGLM-6B#1232; torch 2.3 prints "retrieving"): both spellings are the one message.
UNIQUE_ID_WAIT = re.compile(r"retr(?:ie|ei)ving ncclUniqueId from \[(?P<src>\d+)\] via c10d key-value store")


def store_reached(e: Event) -> bool:
    """The rendezvous error shows the store answered (a closed rendezvous, or a wait for rank 0's ncclUniqueId)."""
    return bool(_RDZV_CLOSED.search(text(e)) or UNIQUE_ID_WAIT.search(text(e)))


def rendezvous_rule(ctx: RuleContext) -> list[Finding]:
    """torchrun / c10d store connection failures (and exceptions raised inside the rendezvous code, and host
    names a launch could not resolve) -> ``RENDEZVOUS_UNREACHABLE``; errors showing the store answered
    (:func:`store_reached`) are left to ``LAUNCH_SKEW`` and ``SETUP_PHASE_TIMEOUT``."""
    evs = [e for e in ctx.kinds("rendezvous_error") if not store_reached(e)]
    evs += [e for e in rendezvous_exceptions(ctx) if e not in evs]
    names = unresolved_launch_names(ctx)
    evs += [e for e in names if e not in evs]
    if not evs:
        return []
    bind = [e for e in evs if e.fields.get("bind_failed")]
    conf = 0.85 if bind or any(_RDZV_CONNECT.search(text(e)) for e in evs) else CONF_INFERRED
    endpoint = next((str(e.fields["endpoint"]) for e in evs if e.fields.get("endpoint")), None) \
        or next((str(e.fields["name"]) for e in names if re.fullmatch(r"[\w.-]+", str(e.fields.get("name") or ""))), "-")
    facts = {"endpoint": endpoint, "peer": endpoint}
    if bind:  # the store's own port is taken (EADDRINUSE): a second job on the same host, not reachability
        facts["fix"] = "port"
        return [finding(ctx, "RENDEZVOUS_UNREACHABLE", "rendezvous_bind", Tier.HOST, conf, evs, facts=facts,
                        note=f"The rendezvous store could not listen on its port ({bind[0].where}: address "
                             "already in use): another process or job on this host holds it.")]
    return [finding(ctx, "RENDEZVOUS_UNREACHABLE", "rendezvous", Tier.HOST, conf, evs,
                    facts=facts,
                    note=f"Workers could not reach the rendezvous endpoint {endpoint}.")]


def unique_id_wait_rule(ctx: RuleContext) -> list[Finding]:
    """A rank timed out waiting in the store for rank 0's ncclUniqueId -> unestablished ``SETUP_PHASE_TIMEOUT`` on
    the rank that never published it (busy before its first collective, or crashed: its own log decides)."""
    evs = [e for e in ctx.kinds("rendezvous_error") if UNIQUE_ID_WAIT.search(text(e))]
    if not evs:
        return []
    src = int(UNIQUE_ID_WAIT.search(text(evs[0])).group("src"))  # type: ignore[union-attr]
    return [finding(ctx, "SETUP_PHASE_TIMEOUT", "unique_id_wait", Tier.PROCESS, CONF_PRIOR, evs, established=False,
                    rank=src, facts={"hint": "unique_id", "rank": str(src)},
                    note=f"A rank reached the rendezvous store but timed out waiting for the ncclUniqueId rank {src} "
                         f"publishes at its first NCCL collective ({evs[0].where}): rank {src} had not got there "
                         "(still preparing, e.g. building the dataset) or had crashed; its own log decides.")]


def launch_skew_rule(ctx: RuleContext) -> list[Finding]:
    """Hosts whose first records of the same kinds are > 120 s apart, with an init-phase timeout -> ``LAUNCH_SKEW``.

    The timeout must be a heartbeat timeout or a watchdog timeout at a low SeqNum (init collectives):
    early ranks waited for late ones (INDEX case 05 diagnosis).
    """
    closed = [e for e in ctx.kinds("rendezvous_error") if _RDZV_CLOSED.search(text(e))]
    if closed:  # this node read a closed rendezvous from the store: the others had completed it without it
        return [finding(ctx, "LAUNCH_SKEW", "launch_skew_closed", Tier.HOST, CONF_INFERRED, closed,
                        facts={"rendezvous": "closed"},
                        note=f"The rendezvous was already closed when this node joined ({closed[0].where}): the "
                             "store was reachable, the other nodes completed the round without it (a late start).")]
    timeouts = [e for e in ctx.kinds("heartbeat_timeout", "watchdog_timeout")
                if e.kind == "heartbeat_timeout" or (as_int(e.fields.get("seq")) or 10**9) <= 8]
    if not timeouts:
        return []
    # compare like with like: only kinds every host logged (rank 0 alone prints progress lines)
    kinds_of: dict[str, set[str]] = {}
    for e in ctx.events:
        if e.host and ctx.t(e) is not None and e.source in _JOB_SOURCES and e.kind != "loss":
            kinds_of.setdefault(e.host, set()).add(e.kind)
    if len(kinds_of) < 2:
        return []
    common = set.intersection(*kinds_of.values())
    first: dict[str, int] = {}
    for e in ctx.events:
        t = ctx.t(e)
        if e.host in kinds_of and t is not None and e.kind in common:
            first[e.host] = min(first.get(e.host, t), t)
    if len(first) < 2:
        return []
    late = max(first, key=first.__getitem__)
    spread_s = (first[late] - min(first.values())) / 1e9
    if spread_s <= LAUNCH_SKEW_S:
        return []
    return [finding(ctx, "LAUNCH_SKEW", "launch_skew", Tier.HOST, CONF_INFERRED, timeouts, host=late,
                    facts={"spread_s": f"{spread_s:.0f}"},
                    note=f"Hosts started {spread_s:.0f} s apart ({late} last) and init-phase collectives "
                         "timed out: a staggered launch, not a hardware fault.")]
