"""Root vs cascade: fold findings into incidents, order them most likely root first.

Ordering (triage.md 5.6 item 2): established findings before unestablished ones, then by causal
tier (hardware > fabric > host > process > NCCL errors > watchdog > teardown), then by corrected
time, then by confidence. Walking that order, a finding becomes a *cascade* of an earlier root when

- it is cascade-level (tier >= NCCL), or it is not established, or the root is a lower tier
  (hardware explains a NaN, an IB error, a dead rank), and
- it is not clearly *before* the root (beyond the skew tolerance) and not more than
  :data:`EPISODE_S` after it, and
- for findings below the NCCL tier, its entity is consistent with the root's (same host, an
  unknown/unmapped host, or a peer address that cannot be resolved to a different known host);
  NCCL errors, watchdog timeouts and teardown happen on victims anywhere in the job.

Everything else starts its own incident.

*Episode window* (triage.md 5.6.2): when the inputs hold job-side logs (anything but kernel logs,
nvidia-smi and DCGM samples), the failure episode is ``[first job-side anomaly - EPISODE_BEFORE_S,
last job-side line + EPISODE_AFTER_S]``. A finding outside it (a Xid hours after the job died, or
the day before) is context, not root: it is ordered after every in-window failure finding, never
absorbs in-window cascades, and its note says so.

A host blamed by established hardware incidents in
:data:`LEMON_MIN` or more separate files (jobs) is additionally reported as ``LEMON_NODE``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from gpufield.triage.engine import blame
from gpufield.triage.engine.actions import action_for
from gpufield.triage.engine.correlate import Timeline, dedupe
from gpufield.triage.engine.hypotheses import Rejected, competitors
from gpufield.triage.engine.model import Finding, Incident, Tier
from gpufield.triage.events import Event

EPISODE_S = 3 * 3600.0  # a cascade comes within hours of its root (watchdog timeouts: 10-30 min)
LEMON_MIN = 3
EPISODE_BEFORE_S = 3600.0  # a root precedes the first job-side symptom by at most the watchdog timeout + margin
EPISODE_AFTER_S = 300.0  # kernel lines about the failure land within seconds to minutes of the job's last line
#: sources whose lines come from the job itself (not the host's kernel log or GPU telemetry)
HOST_SIDE_SOURCES = frozenset({"kernel", "smi", "dcgm"})
HARDWARE_NODE = frozenset({"GPU_FELL_OFF_BUS", "GPU_LOST_PCIE", "GSP_TIMEOUT", "ECC_UNCORRECTABLE",
                           "HBM_DEGRADATION", "NVLINK_FAULT", "GPU_RESET_REQUIRED"})


#: performance findings (the job may not have failed): reported after every failure finding
PERFORMANCE = frozenset({"STRAGGLER_COMPUTE", "STRAGGLER_INPUT", "STRAGGLER_THERMAL", "INPUT_STALL",
                         "CHECKPOINT_IO_SLOW"})


#: classes whose unestablished findings are weaker than any cascade-level evidence
HINTS = frozenset({"LOSS_SCALE_COLLAPSE", "SILENT_SKIPPED_STEPS"})


def episode_window(findings: Sequence[Finding], tl: Timeline) -> tuple[int, int] | None:
    """The failure episode ``(start_ns, end_ns)`` in corrected time, or None when it cannot be told.

    End: the last timed job-side line + :data:`EPISODE_AFTER_S`. Start: the earliest timed root of a
    job-side failure finding (neither performance nor hint) - :data:`EPISODE_BEFORE_S`, or the
    first job-side line - that margin when no job-side finding exists. None when no job-side line
    has a time (kernel logs alone: everything is in the episode).
    """
    first = last = None
    for e in tl.events:
        if e.source in HOST_SIDE_SOURCES:
            continue
        t = tl.t(e)
        if t is None:
            continue
        first = t if first is None or t < first else first
        last = t if last is None or t > last else last
    if last is None:
        return None
    anomalies = [f.t_ns for f in findings if f.t_ns is not None and f.root.source not in HOST_SIDE_SOURCES
                 and f.cls not in PERFORMANCE and f.cls not in HINTS]
    start = min(anomalies) if anomalies else first
    return int(start - EPISODE_BEFORE_S * 1e9), int(last + EPISODE_AFTER_S * 1e9)


#: hardware classes that name the same fault from two sides (the application's CUDA error, the driver's Xid)
_SAME_FAULT = {"ECC_UNCORRECTABLE": {"ECC_UNCORRECTABLE", "HBM_DEGRADATION"}, "NVLINK_FAULT": {"NVLINK_FAULT"}}


def merge_corroborating(findings: Sequence[Finding]) -> list[Finding]:
    """Fold a hardware finding that names no GPU into one of the same fault that does.

    The application sees an uncorrectable ECC / NVLink error as a CUDA error (often an untimed
    traceback line, which inherits an earlier time of its file) while the driver's Xid line, seconds
    later, names the GPU. Both describe one fault; the Xid finding becomes the root (it names what to
    reset) and the CUDA error lines join its evidence. Partners: established, hardware tier, same
    host (or the GPU-less one has none), compatible class, within :data:`EPISODE_AFTER_S` when both
    are timed.

    Returns:
        The findings without the folded ones (the partners' ``evidence`` and ``note`` are extended).
    """
    out = list(findings)
    for f in findings:
        if f.tier != Tier.HARDWARE or not f.established or f.gpu is not None or f.cls not in _SAME_FAULT:
            continue
        for g in out:
            if g is f or g.gpu is None or not g.established or g.tier != Tier.HARDWARE \
                    or g.cls not in _SAME_FAULT[f.cls] or (f.host is not None and g.host != f.host):
                continue
            if f.t_ns is not None and g.t_ns is not None and abs(f.t_ns - g.t_ns) > EPISODE_AFTER_S * 1e9:
                continue
            seen = {id(e) for e in g.evidence}
            g.evidence.extend(e for e in f.evidence if id(e) not in seen)
            g.note += f" The application's error ({f.root.file}:{f.root.line}) reports the same fault."
            out = [x for x in out if x is not f]
            break
    return out


def in_episode(f: Finding, window: tuple[int, int] | None) -> bool:
    """Whether finding ``f`` lies in the failure episode (untimed findings and no window: yes)."""
    return window is None or f.t_ns is None or window[0] <= f.t_ns <= window[1]


def order_key(f: Finding, window: tuple[int, int] | None = None) -> tuple:
    """Sort key: established first, then causal tier, time, confidence (untimed after timed).

    Performance findings (stragglers, slow input/checkpoints) come after all failure findings;
    findings outside the episode ``window`` come after every in-window finding.
    """
    if not in_episode(f, window):
        group = 5
    elif f.cls in PERFORMANCE:
        group = 4
    elif f.established:
        group = 0
    elif f.cls in HINTS or f.facts.get("hint"):
        group = 3  # e.g. a few fp16 overflow skips: normal calibration unless nothing else is wrong
    else:
        group = 1 if f.tier <= Tier.PROCESS else 2
    return (group, int(f.tier), f.t_ns is None, f.t_ns or 0, -f.confidence, f.root.file, f.root.line)


def _consistent(root: Finding, f: Finding, known_hosts: set[str]) -> bool:
    if root.host is None or f.host is None or f.host == root.host:
        return True
    if f.host not in known_hosts:  # a peer address we cannot map to a hostname
        return True
    return root.host in (f.facts.get("peer"), *f.facts.get("reporters", "").split(","))


def _explains(root: Finding, f: Finding, tl: Timeline, known_hosts: set[str],
              window: tuple[int, int] | None = None) -> bool:
    if in_episode(f, window) and not in_episode(root, window):
        return False
    if not (f.tier >= Tier.NCCL or not f.established or root.tier < f.tier):
        return False
    if f.tier >= Tier.NCCL and root.tier > f.tier:
        return False
    if not root.established and f.tier < Tier.NCCL:
        return False
    if tl.before(f.root, root.root) is True:
        return False
    if root.t_ns is not None and f.t_ns is not None and f.t_ns - root.t_ns > EPISODE_S * 1e9:
        return False
    # a bare SIGKILL after an established root elsewhere is most often the launcher tearing the job down
    teardown_kill = f.facts.get("prior") == "sigkill" and root.established
    return f.tier >= Tier.NCCL or teardown_kill or _consistent(root, f, known_hosts)


def build_incidents(findings: Sequence[Finding], tl: Timeline, *, progress: Sequence[Event] = (),
                    rejected: Sequence[Rejected] = ()) -> list[Incident]:
    """Group findings into incidents, most likely root first.

    Args:
        findings: every finding of every rule.
        tl: the timeline (corrected times, skew tolerance).
        progress: training-progress events (loss lines); used to tell startup from running failures.
        rejected: hypotheses rules refused on contrary evidence (listed as competitors of the top incident).

    Returns:
        Incidents; empty when there are no findings.
    """
    known_hosts = {e.host for e in tl.events if e.host}
    findings = merge_corroborating(findings)
    window = episode_window(findings, tl)
    roots: list[tuple[Finding, list[Finding]]] = []
    for f in sorted(findings, key=lambda f: order_key(f, window)):
        for root, cascades in roots:
            if _explains(root, f, tl, known_hosts, window):
                cascades.append(f)
                break
        else:
            roots.append((f, []))
    incidents = [_incident(root, cascades, tl, progress, in_episode(root, window)) for root, cascades in roots]
    for i, (inc, (root, cascades)) in enumerate(zip(incidents, roots, strict=True)):
        inc.competitors = competitors(root, cascades, [r for r, _ in roots[i + 1:]], rejected if i == 0 else ())
    lemon = _lemon(incidents, [r for r, _ in roots])
    return lemon + incidents


def _incident(root: Finding, cascades: list[Finding], tl: Timeline, progress: Sequence[Event],
              in_window: bool = True) -> Incident:
    root_ids = {id(e) for e in root.evidence}
    seen: set[int] = set(root_ids)
    cascade_events: list[Event] = []
    for c in cascades:
        for e in c.evidence:
            if id(e) not in seen:
                seen.add(id(e))
                cascade_events.append(e)
    cascade_events.sort(key=lambda e: (tl.t(e) is None, tl.t(e) or 0, e.file, e.line))
    running = root.facts.get("phase") != "startup" and (
        root.facts.get("phase") == "running" or any(tl.before(p, root.root) for p in progress))
    host, gpu, rank = root.host, root.gpu, root.rank
    if root.established and root.tier in (Tier.HARDWARE, Tier.HOST, Tier.PROCESS):
        # the blame stage: the culprit is the entity the root's own lines name (fabric roots are left as
        # the rule chose: their reporters are often the victims of the far end)
        b = blame.extract(root.evidence, tl.gpu_uuid)
        host = host if host is not None or "host" in root.fixed else b.host
        gpu = gpu if gpu is not None or "gpu" in root.fixed else b.gpu
        if root.tier == Tier.PROCESS and "rank" not in root.fixed:
            rank = rank if rank is not None else b.rank
        if gpu and gpu.startswith("GPU-"):
            gpu = blame.uuid_map(tl.gpu_uuid).get((host, gpu), gpu)
    if host is None and rank is not None:
        # the blamed rank's host: where that rank's own lines come from (one host only)
        hosts = {e.host for e in tl.events if e.rank == rank and e.host}
        host = next(iter(hosts)) if len(hosts) == 1 else None
    values: dict[str, object] = {"host": host, "gpu": gpu, "rank": rank, **root.facts}
    if host is None and root.root.file:
        # no hostname in the line, its file, its folder or the blamed rank's lines: say plainly that it
        # is unknown and which file's host is meant (a host the blame stage found is named instead)
        values["host"] = f"(unknown: the logs do not name the host that wrote {_short(root.root.file)})"
    kind, action, nxt = action_for(root.cls, values, running=running,
                                   exception=root.rule == "python_exception")
    if not root.established and not nxt:
        nxt = action_for("UNKNOWN", values)[2]
    note, conf = root.note, root.confidence
    silent = {m for c in cascades for m in c.facts.get("missing", "").split(",") if m not in ("", "-")}
    if rank is not None and silent == {str(rank)}:
        # the job side agrees with the host side: the one rank that never reported runs on the blamed GPU
        note += f" Rank {root.rank}, the only rank that never reported, runs on this GPU."
        conf = min(0.95, conf + 0.05)
    if not in_window:
        note += (" Outside the failure episode (well before the first job-side anomaly or after the job's"
                 " last line): context for the host's health, not the root of this failure.")
        conf = min(conf, 0.3)
    return Incident(
        cls=root.cls, confidence=round(conf, 2), established=root.established, root=root.root,
        host=host, gpu=gpu, rank=rank, action_kind=kind, action=action, next_evidence=nxt,
        evidence=dedupe(root.evidence, "root") + dedupe(cascade_events, "cascade"),
        cascade_count=len(cascade_events),
        cascade_classes=tuple(dict.fromkeys(c.cls for c in cascades)),
        rule=root.rule, note=note, t_ns=root.t_ns,
        peer=None if root.facts.get("peer") in (None, "", "-") else root.facts["peer"],
    )


def _short(path: str) -> str:
    """The last two components of ``path`` (``node-b/dmesg.txt``): enough to find the file."""
    parts = [p for p in re.split(r"[\\/]", path) if p]
    return "/".join(parts[-2:])


def _lemon(incidents: list[Incident], roots: list[Finding]) -> list[Incident]:
    per_host: dict[str, list[Incident]] = {}
    files_of: dict[str, set[str]] = {}
    for inc, root in zip(incidents, roots, strict=True):
        if inc.cls in HARDWARE_NODE and inc.established and inc.host:
            per_host.setdefault(inc.host, []).append(inc)
            files_of.setdefault(inc.host, set()).update(e.file for e in root.evidence if e.kind != "gpu_map")
    out = []
    for host, incs in per_host.items():
        files = files_of[host]
        if len(files) >= LEMON_MIN:
            kind, action, nxt = action_for("LEMON_NODE", {"host": host, "count": len(files)})
            first = incs[0]
            out.append(Incident(
                cls="LEMON_NODE", confidence=0.7, established=True, root=first.root, host=host, gpu=None,
                rank=None, action_kind=kind, action=action, next_evidence=nxt,
                evidence=[line for i in incs for line in i.evidence if line.role == "root"][:8],
                cascade_count=0, cascade_classes=tuple(dict.fromkeys(i.cls for i in incs)), rule="node_history",
                note=f"Host {host} is blamed by hardware incidents in {len(files)} separate logs (jobs).",
                t_ns=first.t_ns))
    return out
