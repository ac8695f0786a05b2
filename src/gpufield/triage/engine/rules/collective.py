"""Collective rules: desync, phase timeouts, watchdog/heartbeat, peer exit, torchrun teardown.

These read the ProcessGroupNCCL watchdog records (triage.md 2.8): a rank with a *different*
SeqNum/OpType than its peers at timeout is a desync; a timeout at a low SeqNum on a 1-element
collective is a setup-phase barrier; "ran for" far beyond ``Timeout(ms)`` means the watchdog itself
was blocked. Plain timeouts, remote errors and teardown are cascades: they get a class that names
the symptom and the root is UNKNOWN until a lower-tier rule explains them.
"""

from __future__ import annotations

import re
from collections import Counter

from gpufield.triage.engine import blame, flight
from gpufield.triage.engine.model import CONF_CASCADE_ONLY, CONF_INFERRED, CONF_PRIOR, Finding, Tier
from gpufield.triage.engine.rules.base import RuleContext, as_int, finding, group_by, text
from gpufield.triage.engine.rules.fabric import peer_name
from gpufield.triage.events import Event

SETUP_MAX_SEQ = 8  # the first collectives of a job: init broadcast, barriers
BARRIER_MAX_NUMEL = 8
BLOCKED_FACTOR = 1.5  # "ran for" > 1.5 x timeout (and > timeout + 60 s): the watchdog was blocked
_PEER_GONE = re.compile(r"Broken pipe|Connection closed by (?:remote )?peer|remote process exited|"
                        r"Connection reset by peer|ncclRemoteError", re.IGNORECASE)
_STUCK = re.compile(r"watchdog got stuck|Heartbeat monitor timed out|no heartbeat", re.IGNORECASE)
_TIMEOUT_TEXT = re.compile(r"Watchdog caught collective operation timeout|timed out|Timeout", re.IGNORECASE)
# gloo's collective timeout (torch 2.13 CPU, real: "RuntimeError: [.../gloo/transport/tcp/unbound_buffer.cc:78]
# Timed out waiting 3000ms for recv operation to complete")
_GLOO_TIMEOUT = re.compile(r"Timed out waiting \d+ms for (?:recv|send) operation")
_WRAPPED = re.compile(r"CUDA error|NCCL error|illegal|ECC|Watchdog caught collective", re.IGNORECASE)


def _seq(e: Event) -> int | None:
    return as_int(e.fields.get("seq"))


def _per_rank_timeouts(ctx: RuleContext) -> dict[object, list[Event]]:
    """Watchdog timeouts grouped by process group (field ``pg``; None when not printed)."""
    return group_by([e for e in ctx.kinds("watchdog_timeout") if _seq(e) is not None], lambda e: e.fields.get("pg"))


# NCCL's own check (2.7 - 2.9, src/init.cc / enqueue.cc: ranks of a communicator enqueued different operations):
#   init.cc:1247 NCCL WARN Mismatched collective detected, please check your collective calls at and around rank 39.
_NCCL_MISMATCH = re.compile(r"Mismatched collective detected, please check your collective calls at and around "
                            r"rank (?P<rank>\d+)")


def desync_rule(ctx: RuleContext) -> list[Finding]:
    """Ranks of one process group timing out on different SeqNums -> ``COLLECTIVE_DESYNC``."""
    out = []
    nccl = [(e, m) for e in ctx.kinds("nccl_warn") for m in [_NCCL_MISMATCH.search(text(e))] if m]
    if nccl and not ctx.kinds("desync", "flight_recorder"):
        e, m = nccl[0]
        return [finding(ctx, "COLLECTIVE_DESYNC", "nccl_mismatch", Tier.PROCESS, 0.85, [x for x, _ in nccl],
                        rank=int(m["rank"]), facts={"rank": m["rank"]},
                        note=f"NCCL's own check found ranks enqueueing different collectives ({e.where}); it names "
                             f"rank {m['rank']} as where to look (different sizes or order of calls).")]
    explicit = [e for e in ctx.kinds("desync")]
    explicit += [e for e in ctx.kinds("flight_recorder") if re.search(r"mismatch", text(e), re.IGNORECASE)]
    if explicit:
        odd = _odd_collective_call(ctx)
        if odd is not None:
            out.append(finding(ctx, "COLLECTIVE_DESYNC", "desync_report", Tier.PROCESS, 0.85, explicit + [odd],
                               rank=odd.rank, host=odd.host,
                               facts={"call": str(odd.fields.get("user_call"))},
                               note=f"The desync report shows ranks issuing different collectives; rank {odd.rank} "
                                    f"was in its own collective call `{odd.fields.get('user_call')}` "
                                    f"({odd.fields.get('user_frame')}) that its peers never issued."))
            return out
        out.append(finding(ctx, "COLLECTIVE_DESYNC", "desync_report", Tier.PROCESS, 0.85, explicit,
                           note="The desync/Flight Recorder report shows ranks issuing different collectives."))
        return out
    odd = _odd_collective_call(ctx, need_peers=2)
    if odd is not None:
        out.append(finding(ctx, "COLLECTIVE_DESYNC", "odd_collective_call", Tier.PROCESS, 0.8, [odd],
                           facts={"call": str(odd.fields.get("user_call"))},
                           note=f"Rank {odd.rank} failed inside its own collective call "
                                f"`{odd.fields.get('user_call')}` ({odd.fields.get('user_frame')}) while its peers' "
                                "tracebacks stand at another call site: the ranks issued different collectives."))
        return out
    for pg, evs in _per_rank_timeouts(ctx).items():
        seqs = {_seq(e) for e in evs}
        if len(seqs) < 2:
            out.extend(_same_seq_mismatch(ctx, pg, evs))
            continue
        ops = {(e.fields.get("op_type"), e.fields.get("numel_in")) for e in evs}
        by_seq = {s: sorted({e.rank for e in evs if _seq(e) == s and e.rank is not None}) for s in sorted(seqs)}
        lo = min(seqs)
        behind = by_seq[lo]
        desc = "; ".join(f"SeqNum {s}: ranks {r or '?'}" for s, r in by_seq.items())
        lagging = [e for e in evs if _seq(e) == lo]
        stalled = [e for e in lagging if _blocked(e)]
        saving = _checkpoint_mark(ctx, lagging)
        if len(ops) == 1 and (stalled or saving is not None):
            # evidence against a desync: the lagging rank did not issue a different collective, it stalled
            # (its watchdog noticed far too late) or was saving a checkpoint while the others went on
            why = (f"the lagging rank's watchdog ran for {_ratio(stalled[0]):.0f}x its timeout ({stalled[0].where}): "
                   "it was stalled, so the SeqNum it reports is where it stopped, not a different collective sequence"
                   if stalled else f"the lagging rank was saving a checkpoint ({saving.file}:{saving.line}) while "
                                   "the others went on to the next collective")
            ctx.reject("COLLECTIVE_DESYNC", f"SeqNum mismatch ({desc}) explained: {why}", lagging)
            continue
        ck = _checkpoint_mark(ctx, evs)
        during = f" during a checkpoint save ({ck.file}:{ck.line})" if ck is not None else ""
        out.append(finding(ctx, "COLLECTIVE_DESYNC", "seqnum_mismatch", Tier.PROCESS,
                           0.8 if len(ops) > 1 else CONF_INFERRED, sorted(evs, key=lambda e: (_seq(e), e.line)),
                           rank=behind[0] if len(behind) == 1 else None,
                           facts={"seqs": desc, "pg": str(pg)},
                           note=f"Ranks timed out on different collectives ({desc}){during}: they issued "
                                "different collective sequences."))
    return out


_COLLECTIVE_CALL = re.compile(r"\b(?:all_reduce|all_gather\w*|reduce_scatter\w*|broadcast\w*|all_to_all\w*|"
                              r"barrier|reduce|gather|scatter|send|recv|isend|irecv)\(")


def _odd_collective_call(ctx: RuleContext, need_peers: int = 0) -> Event | None:
    """The traceback of the rank that issued a collective its peers did not: the one rank whose
    innermost own-code call is a collective call (``dist.all_reduce(...)``) at a call site no other
    rank's traceback shows, while the peers are elsewhere (a DDP backward, another collective) or
    aborted without a Python traceback (gloo's size-mismatch abort on the receiving rank)."""
    tbs: dict[int, Event] = {}
    for e in ctx.kinds("traceback"):
        if e.rank is not None and e.fields.get("user_call"):
            tbs.setdefault(e.rank, e)
    if len(tbs) - 1 < need_peers:
        return None
    sites: dict[str, list[int]] = {}
    for r, e in tbs.items():
        sites.setdefault(str(e.fields.get("user_frame")), []).append(r)
    lone = [rs[0] for rs in sites.values() if len(rs) == 1
            and _COLLECTIVE_CALL.search(str(tbs[rs[0]].fields["user_call"]))]
    if need_peers and not any(len(rs) >= need_peers for rs in sites.values()):
        return None  # the peers must agree on another call site
    return tbs[lone[0]] if len(lone) == 1 else None


def _ratio(e: Event) -> float:
    ran, limit = as_int(e.fields.get("ran_for_ms")), as_int(e.fields.get("timeout_ms"))
    return ran / limit if ran and limit else 0.0


def _blocked(e: Event) -> bool:
    """'ran for' far beyond the timeout: the watchdog (or the whole process) was stalled."""
    ran, limit = as_int(e.fields.get("ran_for_ms")), as_int(e.fields.get("timeout_ms"))
    return bool(ran and limit and ran > BLOCKED_FACTOR * limit and ran > limit + 60_000)


def _same_seq_mismatch(ctx: RuleContext, pg: object, evs: list[Event]) -> list[Finding]:
    """Ranks timing out on the *same* SeqNum but a different OpType (or the same op with a different
    NumelIn): the ranks disagree on what collective number N is (triage.md 2.8: a desync; NCCL
    would hang or corrupt data). Different OpType is the catalogued form (0.8); a size mismatch
    alone is an inference (0.65)."""
    known = [e for e in evs if e.fields.get("op_type") is not None or e.fields.get("numel_in") is not None]
    by_op: dict[tuple, list[int | None]] = {}
    for e in known:
        by_op.setdefault((e.fields.get("op_type"), e.fields.get("numel_in")), []).append(e.rank)
    if len(by_op) < 2:
        return []
    op_types = {op for op, _ in by_op}
    desc = "; ".join(f"{op or '?'} NumelIn={n if n is not None else '?'}: ranks "
                     f"{sorted({r for r in ranks if r is not None}) or '?'}" for (op, n), ranks in by_op.items())
    what = "OpType" if len(op_types) > 1 else "NumelIn (tensor size)"
    seq = _seq(evs[0])
    return [finding(ctx, "COLLECTIVE_DESYNC", "seqnum_op_mismatch", Tier.PROCESS,
                    0.8 if len(op_types) > 1 else CONF_INFERRED, sorted(known, key=lambda e: (e.file, e.line)),
                    host=None, gpu=None, rank=None,  # which side is "wrong" is not in the lines
                    facts={"seqs": f"SeqNum {seq}: {desc}", "pg": str(pg)},
                    note=f"Ranks timed out on the same SeqNum {seq} with a different {what} ({desc}): they issued "
                         "different collective sequences (a code path that differs between ranks).")]


_RANK_TAG = re.compile(r"^\[(?:rank|Rank )(\d+)\]")  # "[rank1] saving checkpoint ..." / "[Rank 1] ..."
TRACEBACK_LINES = 40  # frames printed after a timeout error belong to it


def _tag_rank(e: Event) -> int | None:
    """The event's rank, or the ``[rank1]`` tag of its line."""
    if e.rank is not None:
        return e.rank
    m = _RANK_TAG.match(e.raw)
    return int(m.group(1)) if m else None


def _checkpoint_mark(ctx: RuleContext, evs: list[Event]):
    """A checkpoint-save mark that describes the timeout: the last phase mark before the first
    timeout of its file (no ``checkpoint_done`` in between), or a save frame of the traceback
    printed right after a timeout line."""
    for e in evs:
        marks = [m for m in ctx.phases if m.file == e.file]
        before = [m for m in marks if m.line <= e.line]
        tag = _RANK_TAG.match(before[-1].text) if before else None
        saver = int(tag.group(1)) if tag else None
        if before and before[-1].phase == "checkpoint_save" and not any(  # a step of *another* rank is no progress of the saver
                p.file == e.file and before[-1].line < p.line < e.line and (saver is None or _tag_rank(p) in (None, saver))
                for p in ctx.kinds("loss")):
            return before[-1]  # saving, and no training step logged since
        after = [m for m in marks if e.line < m.line <= e.line + TRACEBACK_LINES]
        if after and after[0].phase == "checkpoint_save":
            return after[0]
    return None


def phase_timeout_rule(ctx: RuleContext) -> list[Finding]:
    """Timeouts during setup or checkpoint save -> ``SETUP_PHASE_TIMEOUT`` / ``CHECKPOINT_SAVE_TIMEOUT``."""
    evs = ctx.kinds("watchdog_timeout") + [e for e in ctx.kinds("python_exception", "nccl_error", "heartbeat_timeout")
                                           if e.kind == "heartbeat_timeout" or _TIMEOUT_TEXT.search(text(e))]
    if not evs:
        return []
    evs.sort(key=lambda e: (ctx.t(e) or 0, e.file, e.line))
    ck = _checkpoint_mark(ctx, evs)
    if ck is not None:
        # the saving rank: the one the save banner names, else the one rank that did not time out
        # a rank tag on the mark names the saver, unless that rank itself timed out: then the mark is a frame of
        # its own traceback (it waited inside a collective save, dcp.save) and the one rank that did not time out
        # was the busy one (faults2 ckptstall-fsdp2-mlp-2r: the peer stalled before entering the save)
        m = _RANK_TAG.search(ck.text)
        waited = sorted({e.rank for e in evs if e.rank is not None})
        busy = blame.busy_rank(waited, (e.rank for e in ctx.events if e.rank is not None))
        tagged = int(m.group(1)) if m else None
        saver = busy if tagged is None or (tagged in waited and busy is not None) else tagged
        return [finding(ctx, "CHECKPOINT_SAVE_TIMEOUT", "phase_timeout", Tier.PROCESS, CONF_INFERRED, evs,
                        rank=saver, facts={"marker": f"{ck.file}:{ck.line}"},
                        note=f"The collective timed out while a checkpoint was being saved ({ck.file}:{ck.line}: "
                             f"'{ck.text[:60]}').")]
    evs = [e for e in evs if e.kind == "watchdog_timeout"]
    if not evs:
        return []
    first = evs[0]
    marks = [m for m in ctx.phases if m.file == first.file and m.line <= first.line] or list(ctx.phases)
    last = marks[-1] if marks else None
    seqs = [s for s in (_seq(e) for e in evs) if s is not None]
    low = bool(seqs) and min(seqs) <= SETUP_MAX_SEQ
    numel = [as_int(e.fields.get("numel_in")) for e in evs]
    barrier = any(n is not None and n <= BARRIER_MAX_NUMEL for n in numel)
    setup_mark = last is not None and last.phase == "setup"
    if not (low and (barrier or setup_mark)):
        return []
    if not setup_mark:  # an early 1-element barrier alone: any startup hang looks like this; only a hint
        return [finding(ctx, "SETUP_PHASE_TIMEOUT", "phase_timeout_hint", Tier.PROCESS, CONF_PRIOR, evs,
                        established=False, rank=None, facts={"seq": str(min(seqs)), "hint": "barrier_only"},
                        note=f"An early 1-element collective (SeqNum {min(seqs)}) timed out; no setup-phase "
                             "line (dataset preparation, tokenising) shows a rank was busy, so this may be any "
                             "startup hang.")]
    conf = 0.75 if (barrier and setup_mark) else CONF_INFERRED
    why = f"SeqNum {min(seqs)}" + (", a 1-element barrier" if barrier else "") + (
        f", after '{last.text[:60]}'" if setup_mark else "")
    # the ranks that timed out arrived and waited: blame the one that never did (it was preparing)
    waited = sorted({e.rank for e in evs if e.rank is not None})
    world = max((as_int(e.fields.get("nranks")) or 0 for e in ctx.kinds("nccl_init")), default=0) or None
    busy = blame.busy_rank(waited, (e.rank for e in ctx.events if e.rank is not None), world)
    who = (f" Rank {busy} is the only rank that did not time out: it was the busy one; rank(s) "
           f"{', '.join(map(str, waited))} waited." if busy is not None else "")
    return [finding(ctx, "SETUP_PHASE_TIMEOUT", "phase_timeout", Tier.PROCESS, conf, evs,
                    rank=busy, facts={"seq": str(min(seqs)), "waited": ",".join(map(str, waited)) or "-"},
                    note=f"A setup-phase collective timed out ({why}): one rank was still preparing "
                         "(e.g. tokenising) while the others waited." + who)]


def watchdog_blocked_rule(ctx: RuleContext) -> list[Finding]:
    """"ran for" far beyond the timeout, or a watchdog thread that died on its own -> ``WATCHDOG_BLOCKED``."""
    evs = [e for e in ctx.kinds("watchdog_timeout") if _blocked(e)]
    evs += [e for e in ctx.kinds("watchdog_blocked") if not _WRAPPED.search(text(e)) and not _STUCK.search(text(e))]
    if not evs:
        return []
    ranks = sorted({e.rank for e in evs if e.rank is not None})
    worst = max((e for e in evs if e.kind == "watchdog_timeout"), key=_ratio, default=None)
    how = f" (rank {worst.rank}: ran for {_ratio(worst):.0f}x its timeout)" if worst is not None else ""
    return [finding(ctx, "WATCHDOG_BLOCKED", "watchdog_blocked", Tier.WATCHDOG, CONF_INFERRED - 0.15, evs,
                    established=False, rank=ranks[0] if len(ranks) == 1 else None,
                    note="The watchdog thread itself was blocked (it noticed the timeout far "
                         f"too late){how}: the process was stalled (SIGSTOP, a stuck CUDA/NCCL call, the GIL).")]


def heartbeat_rule(ctx: RuleContext) -> list[Finding]:
    """Heartbeat monitor timeouts -> ``HEARTBEAT_MONITOR_TIMEOUT`` (root unknown)."""
    evs = ctx.kinds("heartbeat_timeout") + [e for e in ctx.kinds("watchdog_blocked") if _STUCK.search(text(e))]
    if not evs:
        return []
    evs.sort(key=lambda e: (ctx.t(e) or 0, e.file, e.line))
    ranks = sorted({e.rank for e in evs if e.rank is not None})
    return [finding(ctx, "HEARTBEAT_MONITOR_TIMEOUT", "heartbeat", Tier.WATCHDOG, CONF_CASCADE_ONLY + 0.1, evs,
                    established=False, facts={"ranks": ",".join(map(str, ranks)) or "-"},
                    note="The heartbeat monitor found the NCCL watchdog stuck; the logs do not show what "
                         "blocked it.")]


def nccl_timeout_rule(ctx: RuleContext) -> list[Finding]:
    """Watchdog collective timeouts (same SeqNum everywhere) -> ``NCCL_COLLECTIVE_TIMEOUT`` (root unknown).

    Flight Recorder evidence names the rank that never joined and it is blamed: a text "missing
    ranks" report, or dumps of several ranks (:mod:`gpufield.triage.engine.flight`: ranks whose last
    enqueued SeqNum is below the one the others wait in, with what each last did). gloo's
    "Timed out waiting Nms for recv operation" counts as a collective timeout.
    """
    gloo = [e for e in ctx.kinds("python_exception", "nccl_error") if _GLOO_TIMEOUT.search(text(e))]
    evs = ctx.kinds("watchdog_timeout", "last_enqueued", "flight_recorder", "pg_teardown") + gloo
    if not any(e.kind == "watchdog_timeout" for e in evs) and not ctx.kinds("flight_recorder") and not gloo:
        return []
    missing = next((e.fields.get("missing_ranks") for e in ctx.kinds("flight_recorder")
                    if e.fields.get("missing_ranks")), None)
    miss = list(missing) if isinstance(missing, list | tuple | set) else ([missing] if missing is not None else [])
    fr_note = ""
    fr = [v for v in flight.views(ctx.kinds("flight_recorder")) if v.behind]
    if fr and not miss:
        miss = sorted({r for v in fr for r in v.behind})
        fr_note = " " + " ".join(v.describe() for v in fr)
    w = [e for e in evs if e.kind == "watchdog_timeout"]
    seq = _seq(w[0]) if w else (fr[0].seq if fr else None)
    op = w[0].fields.get("op_type") if w else None
    ranks = sorted({e.rank for e in w + gloo if e.rank is not None})
    facts = {"seq": str(seq) if seq is not None else "-", "op": str(op or "-"),
             "ranks": ",".join(map(str, ranks)) or "-", "missing": ",".join(map(str, miss)) or "-"}
    if not miss and len(ranks) >= 2:
        world = max((e.rank for e in ctx.events if e.rank is not None), default=-1) + 1
        silent = sorted(set(range(world)) - set(ranks))
        if world > len(ranks) and len(silent) <= max(1, world // 8):
            miss = silent  # every other rank of the job timed out; these never reported
            facts["missing"] = ",".join(map(str, miss))
    stalled_note = ""
    if not miss and ranks:
        # torchrun had to SIGKILL a rank that ignored its SIGTERM ("Unable to shutdown process N via 15,
        # forcefully exiting via 9"): a stopped or hung process, the one the others waited for
        forced = {e.pid for e in ctx.kinds("signal_death") if e.fields.get("sent_by_agent") and e.pid is not None}
        unresponsive = sorted({e.rank for e in ctx.kinds("child_failed")
                               if e.pid in forced and e.rank is not None} - set(ranks))
        if len(unresponsive) == 1:
            miss = unresponsive
            facts["missing"] = str(unresponsive[0])
            stalled_note = (f" Rank {unresponsive[0]} did not time out and ignored torchrun's SIGTERM (it had "
                            "to be SIGKILLed): a stopped or hung process.")
    seqs = sorted({_seq(e) for e in w if _seq(e) is not None})
    if not miss and len(seqs) > 1:
        lag = [e for e in w if _seq(e) == seqs[0]]
        lag_ranks = sorted({e.rank for e in lag if e.rank is not None})
        if lag and all(_blocked(e) for e in lag) and len(lag_ranks) == 1:
            miss = lag_ranks  # the rank stalled in an earlier collective is the one the others waited for
            facts["missing"] = str(lag_ranks[0])
            stalled_note = (f" Rank {lag_ranks[0]} was stalled in SeqNum {seqs[0]} (its watchdog ran for "
                            f"{_ratio(lag[0]):.0f}x the timeout) while the others waited in SeqNum {seqs[-1]}.")
    rank = as_int(miss[0]) if len(miss) == 1 else None
    per_key: dict[tuple, set] = {}
    for e in w:
        per_key.setdefault((e.fields.get("pg"), _seq(e), e.fields.get("op_type")), set()).add(
            e.rank if e.rank is not None else id(e))
    if len(per_key) > 1:  # several process groups / collectives: say each one, not the first with all ranks
        what = "; ".join(f"{len(r)} rank(s) on PG {pg if pg is not None else '?'} SeqNum {sq} ({o or '-'})"
                         for (pg, sq, o), r in per_key.items())
        lead = f"Timeouts on {len(per_key)} collectives: {what}"
    else:
        lead = f"{len(ranks) or len(w) or len(gloo)} rank(s) timed out on SeqNum {facts['seq']} ({facts['op']})"
    note = (lead
            + (f"; rank(s) {facts['missing']} never reported (Flight Recorder or silence)." if miss else
               "; no rank in the input explains why (some rank never joined or a link stalled).")) + fr_note + stalled_note
    evs.sort(key=lambda e: (e.kind == "flight_recorder", ctx.t(e) or 0, e.file, e.line))
    return [finding(ctx, "NCCL_COLLECTIVE_TIMEOUT", "nccl_timeout", Tier.WATCHDOG, CONF_CASCADE_ONLY + (0.15 if miss else 0),
                    evs, established=False, host=None, gpu=None, rank=rank, facts=facts, note=note)]


def peer_exit_rule(ctx: RuleContext) -> list[Finding]:
    """ncclRemoteError / broken pipe / connection closed by peer -> ``PEER_PROCESS_EXIT`` (victim side)."""
    # a store connection reset after training progressed is also what ranks print at a normal exit when the store's
    # process leaves first; only before any progress is it a peer that went away
    evs = [e for e in ctx.kinds("nccl_remote_error") if not ctx.is_cited(e)
           and not (e.fields.get("via") == "c10d store" and ctx.progress_before(e))]
    evs += [e for e in ctx.kinds("nccl_warn", "nccl_error", "python_exception")
            if _PEER_GONE.search(text(e)) and not ctx.is_cited(e)]
    if not evs and not ctx.kinds("ib_completion_error", "ib_async_event"):
        # a bare error-return chain ending in ncclRemoteError (6) still says a peer went away
        evs = [e for e in ctx.kinds("nccl_return") if as_int(e.fields.get("retcode", e.code)) == 6]
    if not evs:
        return _restarted_group(ctx)
    evs.sort(key=lambda e: (ctx.t(e) or 0, e.file, e.line))
    early = _quiet_exit(ctx, evs)
    if early is not None:
        rank, failed = early
        return [finding(ctx, "PEER_PROCESS_EXIT", "peer_exit_quiet_rank", Tier.PROCESS, CONF_INFERRED, evs + failed,
                        host=None, gpu=None, rank=rank, facts={"early_exit": str(rank), "peer": "-"},
                        note=f"Rank {rank} left the job without an error while its peers were still in a collective: "
                             f"they lost the connection to it ({evs[0].where}), and torchrun's failure summary lists "
                             f"every other rank but not rank {rank} (a worker that exits with code 0 is no failure), "
                             "so it finished its loop early (uneven data or a rank-dependent step count).")]
    reporters = sorted({e.host for e in evs if e.host})
    peers = Counter(p for p in (peer_name(ctx, e) for e in evs if e.fields.get("peer")) if p)
    peer = peers.most_common(1)[0][0] if peers else "-"
    return [finding(ctx, "PEER_PROCESS_EXIT", "peer_exit", Tier.NCCL, CONF_CASCADE_ONLY + 0.1, evs, established=False,
                    host=None, gpu=None, rank=None, facts={"reporters": ",".join(reporters) or "-", "peer": peer},
                    note="A remote rank went away (broken pipe / connection closed / ncclRemoteError); "
                         f"{', '.join(reporters) or 'this host'} is a victim - the first failing peer is elsewhere.")]


def _quiet_exit(ctx: RuleContext, lost: list[Event]) -> tuple[int, list[Event]] | None:
    """The one rank that exited *without* an error while its peers lost the connection to it.

    torchrun's failure summary (``child_failed`` entries) lists every worker of its group that exited
    non-zero or was signalled (it SIGTERMs the survivors after the first failure), so a rank that
    printed lines, has no entry, and no error or signal of its own, had already exited with code 0.
    Only for one agent's summary (every entry on one host, ``rank == local_rank``: a single-node group, so
    no rank can be missing for living on another node), and only when exactly one rank is that quiet.

    Returns:
        ``(rank, summary entries)`` or None.
    """
    failed = [e for e in ctx.kinds("child_failed") if e.rank is not None]  # the summary's entries (not the agent's
    # "failed (exitcode: 1) local_rank: 0" line, which names no global rank)
    if not failed or any(e.fields.get("local_rank") != e.rank for e in failed):
        return None
    if len({e.host for e in failed}) != 1 or not any(e.fields.get("root_cause") for e in failed):
        return None
    listed = {e.rank for e in failed}
    seen = {e.rank for e in ctx.events if e.rank is not None}
    noisy = {e.rank for e in ctx.events if e.rank is not None and e.kind != "child_failed"
             and (e.severity in ("error", "fatal") or e.kind in ("signal_death", "traceback"))}
    quiet = sorted(seen - listed - noisy)
    if len(quiet) != 1 or not listed or not {e.rank for e in lost if e.rank is not None} <= listed:
        return None
    return quiet[0], failed


def _restarted_group(ctx: RuleContext) -> list[Finding]:
    """torchrun's ``Worker group FAILED. N/M attempts left; will restart worker group``: a worker process
    of the group exited with a failure and the agent restarted the group. Nothing else naming the
    failing worker -> ``PEER_PROCESS_EXIT``, not established (the worker's own error went to its
    reply file ``attempt_K/<rank>/error.json`` or its stderr, not to the agent's log). Fewer than three
    restarts are not a restart loop (that rule needs three)."""
    restarts = [e for e in ctx.kinds("elastic_restart") if not ctx.is_cited(e)]
    if not restarts:
        return _agent_stopped_group(ctx)
    n = max(as_int(e.fields.get("restart_count")) or 1 for e in restarts)
    return [finding(ctx, "PEER_PROCESS_EXIT", "worker_group_failed", Tier.NCCL, CONF_CASCADE_ONLY + 0.1, restarts,
                    established=False, host=None, gpu=None, rank=None,
                    facts={"restarts": str(n), "reporters": "-", "peer": "-"},
                    note=f"torchrun restarted the worker group {n} time(s) after a worker failed "
                         f"({restarts[0].where}); the failing worker's own error is not in the input.")]


def _agent_stopped_group(ctx: RuleContext) -> list[Finding]:
    """torchrun's ``Sending process N closing signal SIGTERM`` with nothing else explaining it: the agent signals
    only workers still alive when it stops the group (torch/distributed/elastic/multiprocessing/api.py ``_close``:
    ``if handler.proc.poll() is None``), which it does after a worker failed; at a normal end every worker has
    exited already. -> ``PEER_PROCESS_EXIT``, not established (the failed worker's error is elsewhere)."""
    sent = [e for e in ctx.kinds("signal_death") if e.fields.get("sent_by_agent") and not ctx.is_cited(e)
            and e.fields.get("signal_name") in ("SIGTERM", "15")]
    if not sent or [e for e in ctx.kinds("child_failed", "python_exception", "signal_death")
                    if not e.fields.get("sent_by_agent") and e.severity in ("error", "fatal")]:
        return []
    return [finding(ctx, "PEER_PROCESS_EXIT", "agent_stopped_group", Tier.NCCL, CONF_CASCADE_ONLY + 0.1, sent,
                    established=False, host=None, gpu=None, rank=None,
                    facts={"reporters": "-", "peer": "-"},
                    note=f"torchrun sent SIGTERM to {len(sent)} worker(s) still running ({sent[0].where}): it stops "
                         "the group after a worker failed; that worker's own error is not in the input.")]


def teardown_rule(ctx: RuleContext) -> list[Finding]:
    """Anything left that is an error (torchrun failures, NCCL errors, signals) -> ``UNKNOWN``."""
    kinds = ("child_failed", "signal_death", "nccl_error", "nccl_internal_error", "nccl_system_error",
             "python_exception", "watchdog_blocked", "nccl_warn", "elastic_restart", "cuda_error")
    chain = ("nccl_return", "pg_teardown")  # follow-ups of an error: cascade material, never a cause
    evs = [e for e in ctx.kinds(*kinds, *chain) if not ctx.is_cited(e)
           and (e.severity in ("error", "fatal") or e.kind in chain)]
    # torchrun's failure entry whose own traceback field ends with an error an earlier rule already cited (read
    # from inside the entry) is that error's consequence, not another unexplained failure
    inner = [e for e in ctx.events if ctx.is_cited(e) and e.kind != "child_failed"]
    evs = [e for e in evs if not (e.kind == "child_failed" and any(
        i.file == e.file and e.line < i.line <= e.line + e.raw.count("\n") for i in inner))]
    if not evs:
        return []
    return [finding(ctx, "UNKNOWN", "teardown", Tier.TEARDOWN, 0.2, evs, established=False,
                    note="Only teardown/secondary errors are present; none names a cause.")]
