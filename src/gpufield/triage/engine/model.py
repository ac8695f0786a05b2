"""Engine data model: the failure taxonomy, causal tiers, findings and incidents.

A *finding* is what one rule concludes from the events (a class, the event it blames, the evidence
it cites). An *incident* is what the report shows: one root finding with the findings and events
it explains (its cascade), a confidence and an action.

Taxonomy and causal prior follow ``../shared/reference/triage.md`` section 5.3 (class names, used
verbatim) and section 5.6 item 2 (hardware > fabric > host > process > NCCL remote/system errors >
watchdog/heartbeat > torchrun teardown).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum

from gpufield.triage.events import Event

#: every class the engine may emit (triage.md section 5.3, verbatim)
TAXONOMY: tuple[str, ...] = (
    "NCCL_COLLECTIVE_TIMEOUT", "SETUP_PHASE_TIMEOUT", "COLLECTIVE_DESYNC", "CHECKPOINT_SAVE_TIMEOUT",
    "HEARTBEAT_MONITOR_TIMEOUT", "LAUNCH_SKEW", "WATCHDOG_BLOCKED", "PEER_PROCESS_EXIT",
    "NCCL_NETWORK_CONFIG", "CONTAINER_SHM_IPC", "IB_TRANSPORT_RETRY_EXCEEDED",
    "IB_LOCAL_PROTECTION_ERROR", "IB_LINK_FLAP", "P2P_BROKEN", "RENDEZVOUS_UNREACHABLE",
    "GPU_FELL_OFF_BUS", "GPU_LOST_PCIE", "GSP_TIMEOUT", "ECC_UNCORRECTABLE", "HBM_DEGRADATION",
    "NVLINK_FAULT", "GPU_RESET_REQUIRED", "CUDA_ILLEGAL_ADDRESS", "CUDA_OOM_CAPACITY",
    "CUDA_OOM_FRAGMENTATION", "CUDA_OOM_CHECKPOINT_GATHER", "CUDA_OOM_INIT", "HOST_OOM_KILL",
    "SHM_EXHAUSTED", "NAN_LOSS", "LOSS_SCALE_COLLAPSE", "SILENT_SKIPPED_STEPS", "STRAGGLER_COMPUTE",
    "STRAGGLER_INPUT", "STRAGGLER_THERMAL", "INPUT_STALL", "CHECKPOINT_IO_SLOW", "RESTART_LOOP",
    "LEMON_NODE", "UNKNOWN",
)


class Tier(IntEnum):
    """Causal prior: a lower tier causes the higher ones, never the reverse (triage.md 5.6)."""

    HARDWARE = 0  # Xid 79/48/95/119/64, AER fatal, GPU lost, NVLink
    FABRIC = 1  # IB status 12/4, port errors, P2P, NCCL network configuration
    HOST = 2  # host OOM kill, /dev/shm, rendezvous, launch skew
    PROCESS = 3  # one rank's fault: CUDA error/OOM, NaN, desync, setup/checkpoint phase
    NCCL = 4  # ncclRemoteError / system error / broken pipe: usually a victim
    WATCHDOG = 5  # watchdog timeout, heartbeat monitor, watchdog blocked
    TEARDOWN = 6  # torchrun ChildFailedError, SIGABRT teardown


#: confidence levels and their documented meaning (see gpufield.triage module docstring)
CONF_DETERMINISTIC_ENTITY = 0.9  # catalogued code/message, blamed host or GPU identified
CONF_DETERMINISTIC = 0.8  # catalogued code/message, entity not fully identified
CONF_INFERRED = 0.65  # pattern across events (SeqNum mismatch, setup barrier, arrival skew)
CONF_PRIOR = 0.45  # class chosen by causal prior / base rate, corroboration missing
CONF_CASCADE_ONLY = 0.3  # only cascades seen: the class names the symptom, the root is unknown


@dataclass(slots=True)
class Finding:
    """One rule's conclusion.

    Attributes:
        cls: taxonomy class (one of :data:`TAXONOMY`).
        rule: name of the rule that produced it.
        tier: causal tier of the root event.
        confidence: 0..1, see the ``CONF_*`` constants.
        established: True when the logs establish this as a root cause; False when the class only
            names the symptom (cascade-only evidence, root UNKNOWN).
        root: the event the finding blames (earliest evidence of the root).
        evidence: every event the rule cites (root first).
        host, gpu, rank: blamed entities (``gpu`` is a PCI bus id, UUID or ordinal as text).
        note: one-sentence explanation shown in reports.
        facts: values the action template may use (e.g. ``{"peer": "10.0.0.2"}``).
        t_ns: skew-corrected time of ``root`` in ns, or None.
        fixed: entity names (``host``, ``gpu``, ``rank``) the rule set on purpose (None included:
            "the lines do not say which"); the blame stage fills only the others from the evidence.
    """

    cls: str
    rule: str
    tier: Tier
    confidence: float
    established: bool
    root: Event
    evidence: list[Event]
    host: str | None = None
    gpu: str | None = None
    rank: int | None = None
    note: str = ""
    facts: dict[str, str] = field(default_factory=dict)
    t_ns: int | None = None
    fixed: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        if self.cls not in TAXONOMY:
            raise ValueError(f"rule {self.rule!r} emitted {self.cls!r}, not a triage.md 5.3 class")
        if not 0.0 <= self.confidence <= 1.0:
            raise ValueError(f"confidence {self.confidence} outside [0, 1]")


@dataclass(frozen=True, slots=True)
class EvidenceLine:
    """One deduplicated evidence line: an event plus how many same-signature copies it stands for.

    Attributes:
        event: the first (earliest) copy.
        count: number of copies (same kind and normalised text) across ranks and hosts.
        ranks: ranks that reported a copy, sorted.
        hosts: hosts that reported a copy, sorted.
        role: ``"root"`` for the root finding's events, ``"cascade"`` for events it explains.
    """

    event: Event
    count: int
    ranks: tuple[int, ...]
    hosts: tuple[str, ...]
    role: str


@dataclass(slots=True)
class Incident:
    """A root finding with its cascade, confidence and action.

    Attributes:
        cls: taxonomy class.
        confidence: 0..1 (see the ``CONF_*`` constants).
        established: whether the logs establish the root; ``root_cause`` is ``"UNKNOWN"`` if not.
        root: the blamed event.
        host, gpu, rank: blamed entities.
        action_kind: ``RETRY``, ``EXCLUDE_NODE``, ``RESET_GPU``, ``FIX_CONFIG`` or ``STOP``.
        action: the action sentence with the blamed entity filled in.
        next_evidence: what to collect next (always non-empty when ``established`` is False).
        evidence: deduplicated evidence lines, root lines first.
        cascade_count: number of cascade events (copies included) this root explains.
        cascade_classes: classes of the findings folded into this incident as cascades.
        rule: the rule that produced the root finding.
        note: explanation sentence.
        t_ns: skew-corrected time of the root event.
        competitors: the other hypotheses and why this root beat each
            (:class:`~gpufield.triage.engine.hypotheses.Competitor`: explained / outranked / rejected).
        peer: the peer the root names (``IP``, ``IP:port``, a host), when it names one.
    """

    cls: str
    confidence: float
    established: bool
    root: Event
    host: str | None
    gpu: str | None
    rank: int | None
    action_kind: str
    action: str
    next_evidence: tuple[str, ...]
    evidence: list[EvidenceLine]
    cascade_count: int
    cascade_classes: tuple[str, ...]
    rule: str
    note: str
    t_ns: int | None
    competitors: tuple = ()
    peer: str | None = None

    @property
    def evidence_lines(self) -> tuple[str, ...]:
        """``file:line`` of every evidence line, root lines first."""
        return tuple(x.event.where for x in self.evidence)

    @property
    def root_cause(self) -> str:
        """The class when the root is established, else ``"UNKNOWN"``."""
        return self.cls if self.established else "UNKNOWN"
