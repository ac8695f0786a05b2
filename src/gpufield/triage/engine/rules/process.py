"""Process rules (tier 3): one rank's fault - CUDA errors, CUDA OOM, numerics, restarts, stragglers.

OOM sub-classes follow triage.md 2.10: *checkpoint gather* when the allocation failed while a
FULL_STATE_DICT was gathered for saving; *init* when it failed before any training step while the
model was being built or sharded; *fragmentation* when the reserved-but-unallocated pool alone could
have served the request and is a large share of the device ("reserved >> allocated", PyTorch's own
hint), or when the device reported at least twice the request as free (the memory exists, not as one
block); otherwise *capacity*. Numerics follow 2.11.
"""

from __future__ import annotations

import re
import statistics

from gpufield.triage.engine.model import CONF_CASCADE_ONLY, CONF_INFERRED, CONF_PRIOR, Finding, Tier
from gpufield.triage.engine.phases import PhaseMark
from gpufield.triage.engine.rules.base import (
    RuleContext,
    as_float,
    as_int,
    finding,
    group_by,
    survived,
    text,
    traceback_of,
)
from gpufield.triage.events import Event

# kernel faults of the Xid 13/31 family: illegal address, misaligned address, illegal instruction
_ILLEGAL = re.compile(r"illegal memory access|illegal address|cudaErrorIllegalAddress|misaligned address|"
                      r"illegal instruction was encountered|cudaErrorIllegalInstruction", re.IGNORECASE)
_INIT_CONTEXT = re.compile(r"from_pretrained|fully_shard|_init_|__init__|\.to\(|materializ|load_state_dict|"
                           r"init_process_group|model = ", re.IGNORECASE)
#: reserved-but-unallocated memory at least this share of device capacity counts as "reserved >> allocated"
FRAG_SHARE = 0.15
#: device free memory at least this many times the failed request: the memory exists but not in one block
FREE_MARGIN = 2.0
LOSS_SCALE_FLOOR = 1.0
OVERFLOW_STREAK = 5
#: the default initial dynamic loss scale, 2**16 (torch.amp.GradScaler ``init_scale=65536.0``, Apex amp, DeepSpeed
#: ``initial_scale_power: 16``); configs may start higher (2**32). Overflow skips that halve the scale on the way down
#: to it are the documented calibration ("skipped iterations in the first few steps are expected", torch AMP docs,
#: GradScaler), so a streak of skips is a collapse only once the scale is below this
CALIBRATED_SCALE = 2.0 ** 16


# fp16 / autocast evidence anywhere in the job (a mixed-precision NaN: bf16 is the fix the threads give)
_FP16 = re.compile(r"\bfp16\b|float16|autocast|GradScaler|loss scale", re.IGNORECASE)
# DeepSpeed's fp16 loss scaler (deepspeed/runtime/fp16/loss_scaler.py) and its overflow messages
_DEEPSPEED = re.compile(r"Current loss scale already at minimum|deepspeed|Attempted loss scale|OVERFLOW! Rank", re.IGNORECASE)

#: distinct processes with an Xid 13/31 on one GPU that make the GPU, not the program, the suspect
MIN_PROCESSES_SAME_GPU = 3


def cuda_illegal_rule(ctx: RuleContext) -> list[Finding]:
    """Illegal memory access (CUDA error text or Xid 13/31) -> ``CUDA_ILLEGAL_ADDRESS``.

    The class is certain; the root (kernel bug vs. hardware) is established only when the driver's
    Xid 13/31 for the same host corroborates it, otherwise evidence is requested (INDEX case 22).
    """
    evs = [e for e in ctx.kinds("cuda_illegal_address")]
    evs += [e for e in ctx.kinds("watchdog_blocked", "python_exception", "cuda_error", "nccl_internal_error")
            if _ILLEGAL.search(text(e))]
    xids = [e for e in ctx.kinds("xid") if str(e.code or e.fields.get("xid")) in ("13", "31")]
    if not evs and not xids:
        return []
    out = []
    keyed = group_by(sorted(evs + xids, key=lambda e: (ctx.t(e) or 0, e.file, e.line)), lambda e: e.host)
    for _host, group in keyed.items():
        has_xid = any(e.kind == "xid" for e in group)
        # one GPU faulting in several processes (different pids) while no other GPU of the host faults
        # points at the GPU, not at one program's kernel (a buggy kernel faults wherever it runs; a
        # restarted buggy job faults on its other GPUs too): pytorch#51382 ("my device 7 is faulty");
        # NVIDIA's Xid guide: run a DCGM diagnostic
        pids: dict[str, set[int]] = {}
        for e in group:
            if e.kind == "xid" and e.gpu_bdf and e.pid is not None:
                pids.setdefault(e.gpu_bdf, set()).add(e.pid)
        gpu, seen = max(pids.items(), key=lambda kv: len(kv[1]), default=(None, set()))
        recurring = len(pids) == 1 and len(seen) >= MIN_PROCESSES_SAME_GPU
        facts = {"recurring": "yes", "processes": str(len(seen))} if recurring else {}
        out.append(finding(ctx, "CUDA_ILLEGAL_ADDRESS", "cuda_illegal_address", Tier.PROCESS,
                           0.85 if has_xid else 0.75, group, established=has_xid,
                           facts=facts, **({"gpu": gpu} if recurring else {}),
                           note="A kernel made an illegal memory access"
                                + (f" (driver Xid 13/31 corroborates); GPU {gpu} faulted in {len(seen)} different "
                                   "processes, which points at the GPU rather than one program." if recurring else
                                   " (driver Xid 13/31 corroborates)." if has_xid else
                                   "; no driver Xid in the input to tell a code bug from hardware.")))
    return out


def _bytes(e: Event, key: str) -> float | None:
    return as_float(e.fields.get(key))


PHASE_WINDOW_LINES = 60  # a phase mark further back than this does not describe the event


def _phase_before(ctx: RuleContext, e: Event) -> PhaseMark | None:
    """The last phase mark at or before ``e`` in the same file, within :data:`PHASE_WINDOW_LINES`."""
    end = e.line + e.raw.count("\n")
    marks = [m for m in ctx.phases if m.file == e.file and end - PHASE_WINDOW_LINES <= m.line <= end]
    return marks[-1] if marks else None


def oom_class(ctx: RuleContext, e: Event) -> tuple[str, str]:
    """(class, reason) of one ``cuda_oom`` event."""
    mark = _phase_before(ctx, e)
    if e.fields.get("phase") == "checkpoint_gather":
        return "CUDA_OOM_CHECKPOINT_GATHER", "while a full state dict was gathered for saving"
    if mark is not None and mark.phase == "checkpoint_save":
        return "CUDA_OOM_CHECKPOINT_GATHER", f"during checkpoint save ({mark.file}:{mark.line})"
    tried, cap = _bytes(e, "tried_bytes"), _bytes(e, "capacity_bytes")
    alloc, resv = _bytes(e, "allocated_bytes"), _bytes(e, "reserved_bytes")
    unalloc = _bytes(e, "reserved_unallocated_bytes")
    if unalloc is None and resv is not None and alloc is not None and resv >= alloc:
        unalloc = resv - alloc
    if tried and cap and unalloc is not None and unalloc >= tried and unalloc >= FRAG_SHARE * cap:
        return "CUDA_OOM_FRAGMENTATION", (f"{unalloc / 2**30:.2f} GiB reserved but unallocated "
                                          f">= request {tried / 2**30:.2f} GiB")
    free = _bytes(e, "free_bytes")
    if tried and free is not None and free >= FREE_MARGIN * tried:
        # the device itself reported several times the request as free, yet no block of that size could be
        # had: not a capacity problem but a fragmented address space (expandable_segments lets the allocator
        # map the request from pieces; jhc13/taggui#188: 20 MiB failed with 2.35 GiB free, fixed by it)
        return "CUDA_OOM_FRAGMENTATION", (f"request {tried / 2**20:.0f} MiB failed while the device reported "
                                          f"{free / 2**30:.2f} GiB free")
    started = ctx.progress_before(e) or bool(ctx.kinds("loss"))
    tb = traceback_of(ctx, e)  # where it was raised: the traceback's frames and source lines above the OOM line
    if e.fields.get("phase") == "init" or not started and (
            _INIT_CONTEXT.search(e.raw) or (tb is not None and _INIT_CONTEXT.search(tb.raw))
            or (mark is not None and mark.phase == "setup")):
        return "CUDA_OOM_INIT", "before the first training step, while building/sharding the model"
    if tried and cap:
        return "CUDA_OOM_CAPACITY", f"request {tried / 2**30:.2f} GiB on a {cap / 2**30:.2f} GiB device that is full"
    return "CUDA_OOM_CAPACITY", "allocation failed"


# NCCL's CUDACHECK failure text for cudaErrorMemoryAllocation ("out of memory", cudaGetErrorString), printed by NCCL
# itself (include/alloc.h ncclCudaCalloc / ncclCudaMalloc) while it allocates its buffers; with its error-return chain
# through init.cc or the transport set-up (transport.cc, p2p.cc, net.cc) it happened while the communicator was built
_NCCL_CUDA_OOM = re.compile(r"NCCL WARN Cuda failure '?out of memory")
_NCCL_INIT_RETURN = re.compile(r"\b(?:init|transport|p2p|net|channel|bootstrap)\.cc:\d+ -> \d+")


def nccl_init_oom(ctx: RuleContext) -> list[Finding]:
    """NCCL's own ``Cuda failure 'out of memory'`` during communicator set-up -> ``CUDA_OOM_INIT``."""
    evs = [e for e in ctx.kinds("cuda_error") if _NCCL_CUDA_OOM.search(e.raw)]
    if not evs:
        return []
    chain = [r for r in ctx.kinds("nccl_return") if r.file == evs[0].file and r.line > evs[0].line
             and _NCCL_INIT_RETURN.search(r.raw)]
    if not chain and ctx.progress_before(evs[0]):
        return []
    return [finding(ctx, "CUDA_OOM_INIT", "nccl_init_oom", Tier.PROCESS, 0.8, evs + chain[:3],
                    note=f"NCCL ran out of GPU memory allocating its buffers while building the communicator "
                         f"({evs[0].where}); the ranks waiting for this one in bootstrap are its victims.")]


def cuda_oom_rule(ctx: RuleContext) -> list[Finding]:
    """CUDA out-of-memory messages (all three message generations) by phase and pool state."""
    tagged = [(oom_class(ctx, e), e) for e in ctx.kinds("cuda_oom")]
    out = [] if tagged else nccl_init_oom(ctx)
    for (cls, _host), items in group_by(tagged, lambda ce: (ce[0][0], ce[1].host)).items():
        (_, why), first = items[0]
        evs = [e for _, e in items]
        gpu = f"GPU {first.gpu_index}" if first.gpu_index is not None else None
        out.append(finding(ctx, cls, "cuda_oom", Tier.PROCESS, 0.85, evs, gpu=gpu,
                           note=f"CUDA out of memory {why}."))
    return out


def nan_rule(ctx: RuleContext) -> list[Finding]:
    """Non-finite *loss* -> ``NAN_LOSS``; NaN/Inf in another metric (grad-norm) -> a warning only.

    A NaN/Inf gradient norm with a finite loss is what mixed-precision loops print when a step's
    gradients overflow and the step is skipped (FSDP2 loops print ``'grad_norm': nan`` on every
    step line); the run may be perfectly healthy, so it is never the root of an incident
    (issue 23). A framework's NaN guard that raised (Megatron's ``found NaN in local grad norm``
    assertion) is fatal and counts as a loss NaN. Notes whether the loss went NaN right after the
    first optimizer step.
    """
    evs = ctx.kinds("nan_loss")
    loss = [e for e in evs if e.fields.get("is_loss", "loss" in str(e.fields.get("metric", "loss")).lower())
            or e.fields.get("fatal")]
    other = [e for e in evs if e not in loss]
    if other:
        metrics = sorted({str(e.fields.get("metric")) for e in other})
        fin = [e for e in other if e.fields.get("finite_loss") is not None]
        ctx.warn(f"{len(other)} line(s) with a non-finite {', '.join(metrics)}"
                 + (f" while the loss stayed finite ({fin[0].where}: loss {fin[0].fields['finite_loss']:g})" if fin
                    else "") + ": skipped/overflowed steps; a warning, not a failure.", other)
    if not loss:
        return []
    step = as_int(loss[0].fields.get("step"))
    early = step is not None and step <= 2
    note = (f"Loss became NaN/Inf at step {step}" if step is not None else "Loss became NaN/Inf") + (
        " right after the first optimizer step: numerics/configuration, not hardware." if early else ".")
    if all(e.fields.get("fatal") for e in loss):  # only a framework's NaN guard fired: it stopped the run
        note = (f"The framework's non-finite check stopped training: {loss[0].fields.get('check', 'a metric')} "
                f"was {loss[0].fields.get('value')} (bad samples, lr or precision; not hardware unless it follows "
                "one GPU).")
    facts = {"step": str(step) if step is not None else "-"}
    if any(_FP16.search(e.raw) for e in ctx.events):
        facts["precision"] = "fp16"
    if _recovered(ctx, loss):
        facts["recovered"] = "yes"
        note += " The loss is finite again after its NaN steps: single steps overflow, the model did not diverge."
    return [finding(ctx, "NAN_LOSS", "nan_loss", Tier.PROCESS, 0.85, loss, note=note, facts=facts)]


def _recovered(ctx: RuleContext, nan: list[Event]) -> bool:
    """A finite loss printed after the first NaN/Inf loss in the same file, by the same rank."""
    first = nan[0]
    return any(e.file == first.file and e.line > first.line and e.rank == first.rank
               and (v := as_float(e.fields.get("value", e.fields.get("loss")))) is not None and v == v
               for e in ctx.kinds("loss"))


def loss_scale_rule(ctx: RuleContext) -> list[Finding]:
    """fp16 overflow skips -> ``LOSS_SCALE_COLLAPSE``.

    Established when the scale fell to <= 1, when >= 5 overflow skips brought it below the default
    initial scale 2**16, or when the loss then became NaN; skips that only calibrate a higher
    initial scale (2**32 -> 2**26) down are a warning, and a few skips alone give the class with
    prior confidence only.
    """
    evs = ctx.kinds("loss_scale_overflow")
    if not evs:
        return []
    scales = [s for s in (as_float(e.fields.get("new_loss_scale")) for e in evs) if s is not None]
    floor = bool(scales) and min(scales) <= LOSS_SCALE_FLOOR or any(e.fields.get("at_minimum") for e in evs)
    nan_after = any(ctx.timeline.before(evs[0], n) is not False for n in ctx.kinds("nan_loss")
                    if n.fields.get("is_loss", True))
    streak = len(evs) >= OVERFLOW_STREAK and (not scales or min(scales) < CALIBRATED_SCALE)
    strong = floor or streak or nan_after
    scale_txt = f"{min(scales):g}" if scales else ("its minimum" if floor else "?")
    every = [e for e in ctx.kinds("skipped_step")
             if (as_int(e.fields.get("skipped")) or 0) >= max(as_int(e.fields.get("step")) or 1, 1)]
    if not strong and not every:
        # a few skips while the scale calibrates down from 2^32: normal; a warning, never an incident. A hint
        # incident stays only when DeepSpeed's own counter says *every* step so far was skipped (skipped >= step)
        ctx.warn(f"{len(evs)} fp16 overflow skip(s), loss scale down to {scale_txt}: normal loss-scale "
                 "calibration unless it keeps falling", evs)
        return []
    return [finding(ctx, "LOSS_SCALE_COLLAPSE", "loss_scale", Tier.PROCESS, 0.85 if strong else CONF_PRIOR + 0.05,
                    evs, established=strong, facts={"min_scale": scale_txt, **({"framework": "deepspeed"} if any(
                        _DEEPSPEED.search(e.raw) for e in evs) else {})},
                    note=f"{len(evs)} fp16 overflow skip(s); loss scale down to {scale_txt}"
                         + (" - collapsed." if strong else " (a few skips are normal calibration)."))]


def silent_skip_rule(ctx: RuleContext) -> list[Finding]:
    """Optimizer steps skipped with no overflow message (bf16 ZeRO) -> ``SILENT_SKIPPED_STEPS``."""
    skips = [e for e in ctx.kinds("skipped_step") if as_int(e.fields.get("skipped")) != 0]
    if not skips or ctx.kinds("loss_scale_overflow"):
        return []  # "skipped=0" progress lines are healthy; overflow skips belong to loss_scale
    return [finding(ctx, "SILENT_SKIPPED_STEPS", "silent_skip", Tier.PROCESS, CONF_INFERRED, skips,
                    note=f"{len(skips)} skipped optimizer step(s) without any overflow message.")]


def restart_loop_rule(ctx: RuleContext) -> list[Finding]:
    """Repeated restarts from the same state -> ``RESTART_LOOP``."""
    loops = ctx.kinds("restart_loop")
    restarts = ctx.kinds("elastic_restart")
    count = max([as_int(e.fields.get("count")) or 1 for e in loops] + [len(loops), len(restarts)], default=0)
    if not loops and len(restarts) < 3:
        return []
    evs = loops + restarts
    return [finding(ctx, "RESTART_LOOP", "restart_loop", Tier.PROCESS, 0.85 if count >= 3 else CONF_INFERRED, evs,
                    facts={"count": str(count)},
                    note=f"The job was restarted {count} time(s) from the same state without progress.")]


_RANK_IN_TEXT = re.compile(r"\b[Rr]ank\s*r?(\d+)|\br(\d+)\b")


def straggler_rule(ctx: RuleContext) -> list[Finding]:
    """Straggler findings and clock-event reasons -> ``STRAGGLER_{INPUT,COMPUTE,THERMAL}``, ``INPUT_STALL``.

    Per-rank wall times that are all within 5 % of each other while the step is compute-bound are
    *not* evidence that nobody straggles: the all-reduce barrier equalises them (traceml #252); the
    compute straggler is then reported as suspected and unattributed, with arrival skew requested.
    """
    out = []
    rows = ctx.kinds("straggler_finding")
    named = [e for e in rows if e.fields.get("finding")]
    table = [e for e in rows if not e.fields.get("finding") and as_float(e.fields.get("step_ms")) is not None]
    for e in named:
        kind = str(e.fields["finding"]).upper()
        m = _RANK_IN_TEXT.search(e.raw.split(":", 1)[-1])
        rank = e.rank if e.rank is not None else (int(m.group(1) or m.group(2)) if m else None)
        if "INPUT" in kind and "STALL" not in kind:
            out.append(finding(ctx, "STRAGGLER_INPUT", "straggler", Tier.PROCESS, 0.8, [e], rank=rank,
                               note=f"Rank {rank} waits on input far longer than the median rank."))
        elif "STALL" in kind:
            out.append(finding(ctx, "INPUT_STALL", "straggler", Tier.PROCESS, CONF_INFERRED, [e], rank=rank,
                               note="Periodic input stalls on all ranks (dataloader/storage)."))
        elif "CHECKPOINT" in kind:
            out.append(finding(ctx, "CHECKPOINT_IO_SLOW", "straggler", Tier.PROCESS, CONF_INFERRED, [e],
                               note="Checkpoint writes are slow."))
        elif "COMPUTE" in kind and rank is not None and "BOUND" not in kind:
            out.append(finding(ctx, "STRAGGLER_COMPUTE", "straggler", Tier.PROCESS, 0.8, [e], rank=rank,
                               note=f"Rank {rank} is a compute straggler."))
        elif "COMPUTE" in kind:
            vals = [as_float(t.fields.get("step_ms")) for t in table]
            vals = [v for v in vals if v is not None]
            flat = len(vals) >= 2 and (max(vals) - min(vals)) <= 0.05 * statistics.median(vals)
            out.append(finding(ctx, "STRAGGLER_COMPUTE", "straggler_masked", Tier.PROCESS, CONF_CASCADE_ONLY,
                               [e] + table, established=False, rank=None,
                               note="Compute-bound steps" + (
                                   " with per-rank wall times equal within 5 %: a barrier inside the measured "
                                   "region masks any compute straggler; wall time cannot name it." if flat else ".")))
    out.extend(_step_time_stragglers(ctx))
    hot = [e for e in ctx.kinds("clock_event")
           if str(e.fields.get("active", "")).lower() in ("active", "true", "1", "yes")
           and re.search(r"HW|Thermal|Power Brake", str(e.fields.get("reason", "")), re.IGNORECASE)]
    for (host, gpu), group in group_by(hot, lambda e: (e.host, e.gpu_bdf or e.gpu_uuid or e.gpu_index)).items():
        out.append(finding(ctx, "STRAGGLER_THERMAL", "clock_events", Tier.HARDWARE, CONF_INFERRED, group,
                           note=f"HW slowdown/thermal clock events active on GPU {gpu} of {host or 'the host'}."))
    return out


def _step_time_stragglers(ctx: RuleContext) -> list[Finding]:
    """Per-rank step-time aggregates (:mod:`gpufield.triage.steptime`): a rank whose mean step time
    is >= ``StepTimeConfig.min_ratio`` x its peers' median over >= ``min_steps`` steps is a compute
    straggler (severity from the 5/10/20 % bands). Equal times clear nobody (a collective inside the
    measured step equalises them) and give no finding."""
    from gpufield.triage.steptime import StepTimeConfig, slow_ranks

    cfg = StepTimeConfig()
    out = []
    named: set[int | None] = set()
    # compute-only times first: they exclude the collective wait that equalises the wall times
    for what, label in (("compute", "compute time (excluding collective waits)"), ("step", "step time")):
        for e, ratio, med in slow_ranks(ctx.kinds("step_time"), cfg, what=what):
            if e.rank in named:
                continue
            named.add(e.rank)
            f = e.fields
            out.append(finding(ctx, "STRAGGLER_COMPUTE", "step_time", Tier.PROCESS, 0.75, [e], rank=e.rank,
                               facts={"ratio": f"{ratio:.2f}", "severity": cfg.severity(ratio - 1) or "low",
                                      "steps": str(f["count"]), "timing": what},
                               note=f"Rank {e.rank}'s mean {label} {f['mean_s']:.3f} s over {f['count']} steps is "
                                    f"{ratio:.2f}x the median of its peers ({med:.3f} s)."))
    if not out:
        out.extend(_common_slowdown(ctx))
    return out


def _common_slowdown(ctx: RuleContext) -> list[Finding]:
    """Every rank's step time jumped at the same step and stayed up (:func:`gpufield.triage.steptime.slowdown`)
    while no rank stands out: in DDP/FSDP the step's collective makes every rank wait for the slowest, so a
    rank that started to compute longer (a masked compute straggler, traceml #252) shows exactly this. A
    shared cause (input pipeline, host contention) looks the same, so it is a hint, not established, and
    the rank is not named: per-rank compute-only timing or collective arrival skew is the next evidence."""
    walls = [e for e in ctx.kinds("step_time") if e.fields.get("what", "step") == "step" and e.rank is not None]
    ranks = {e.rank for e in walls}
    if len(ranks) < 2 or len(walls) != len(ranks) or not all(e.fields.get("slowdown") for e in walls):
        return []
    ks = [e.fields["slowdown"][0] for e in walls]
    if max(ks) - min(ks) > 1:
        return []
    before = statistics.median(e.fields["slowdown"][1] for e in walls)
    after = statistics.median(e.fields["slowdown"][2] for e in walls)
    return [finding(ctx, "STRAGGLER_COMPUTE", "common_slowdown", Tier.PROCESS, CONF_CASCADE_ONLY, walls,
                    established=False, rank=None, facts={"step": str(min(ks)), "before_s": f"{before:.3f}",
                                                         "after_s": f"{after:.3f}"},
                    note=f"Every rank's step time rose from {before:.3f} s to {after:.3f} s at step {min(ks)} and "
                         "stayed there: the step's collective makes all ranks wait for the slowest one, so one rank "
                         "that computes longer looks like this (a shared input or host slowdown does too); the wall "
                         "times cannot name the rank.")]


_PEER_LOST = re.compile(r"Connection closed by (?:remote )?peer|Connection reset by peer|Broken pipe|"
                        r"remote process exited|ncclRemoteError|remote worker crashing", re.IGNORECASE)


def _signature(e: Event) -> tuple[str, int | None, str]:
    """Kind, rank and message of an error line: the same error printed to several files (torchrun --tee)."""
    msg = e.fields.get("message")
    return e.kind, e.rank, str(msg if isinstance(msg, str) else e.raw.strip().splitlines()[-1] if e.raw.strip() else "")


def generic_fault_rule(ctx: RuleContext) -> list[Finding]:
    """A Python exception or CUDA error no other rule explains.

    When other ranks then lose their connection to the failing rank (gloo "Connection closed by
    peer", ncclRemoteError, broken pipe), the job failed because that rank *exited*: the class is
    ``PEER_PROCESS_EXIT`` with the root *established* at the exception (the rank is blamed, the peers
    are victims). Otherwise ``UNKNOWN`` (process tier). Exceptions of the distributed machinery (NCCL,
    gloo, DistBackendError, ChildFailedError) are cascades and are left to the teardown rule. An
    exception after which the same rank's progress lines go on (:func:`~.base.survived`) was handled by
    the program: a warning, never an incident.
    """
    cascade = re.compile(r"NCCL|DistBackendError|ChildFailedError|ProcessGroup|watchdog|c10d|Rendezvous|"
                         r"SignalException|KeyboardInterrupt|gloo|Connection closed by|Connection reset by|"
                         r"Timed out waiting", re.IGNORECASE)
    evs = [e for e in ctx.kinds("python_exception", "cuda_error")
           if not cascade.search(text(e)) and not ctx.is_cited(e)]
    # an error after which the same rank kept training was caught and handled (a save retried): noise of a
    # healthy run; every copy of it (a --tee console copy beside the rank's own file) goes with it
    kept = {_signature(e) for e in evs if survived(ctx, e)}
    handled = [e for e in evs if _signature(e) in kept]
    if handled:
        ctx.warn(f"{len(handled)} error line(s) after which training went on ({handled[0].where}: "
                 f"{str(handled[0].fields.get('exc_type') or handled[0].kind)}): caught and handled, not a failure.",
                 handled)
        evs = [e for e in evs if _signature(e) not in kept]
    if not evs:
        return []
    first = evs[0]
    exc = str(first.fields.get("exc_type") or first.kind)
    lost = [e for e in ctx.kinds("python_exception", "nccl_remote_error", "nccl_warn", "nccl_error")
            if _PEER_LOST.search(text(e)) and e.rank != first.rank
            and ctx.timeline.before(e, first) is not True and (e.file != first.file or e.line > first.line
                                                                or e.rank is not None)]
    who = f"rank {first.rank}" if first.rank is not None else "a rank"
    if lost:
        ranks = sorted({e.rank for e in lost if e.rank is not None})
        return [finding(ctx, "PEER_PROCESS_EXIT", "rank_exception_exit", Tier.PROCESS, 0.8, evs + lost[:8],
                        facts={"exception": exc, "victims": ",".join(map(str, ranks)) or "-"},
                        note=f"{exc} on {who} ({first.where}) ended that rank; its peers"
                             f"{' (ranks ' + ', '.join(map(str, ranks)) + ')' if ranks else ''} then lost the "
                             "connection to it: they are victims.")]
    return [finding(ctx, "UNKNOWN", "python_exception", Tier.PROCESS, CONF_CASCADE_ONLY, evs, established=False,
                    facts={"exception": exc},
                    note=f"{exc} on {who} matches no failure class; it is the earliest process fault in the input.")]
