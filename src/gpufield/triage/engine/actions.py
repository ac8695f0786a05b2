"""Actions as data: class -> (action kind, sentence template, evidence to collect next), with variants
chosen by the finding's facts, read from ``gpufield/triage/data/actions.toml`` (format in its header).

Retry policy of triage.md 5.10: configuration/code/data classes never get ``RETRY`` (no blind
retries); hardware classes exclude the blamed node or reset the blamed GPU; transient or unknown
classes retry once after turning on the evidence that will name the root next time. The action
texts and evidence requests follow the resolutions of the labelled threads: the action follows the
evidence (a ``/dev/shm`` permission error gets ``chmod``, not ``--shm-size``; IPv4-mapped RoCE GIDs do
not get the GID-index fix), not one canned action per class.

Templates may use ``{host}``, ``{gpu}``, ``{rank}`` and any key of the finding's ``facts``; a
missing value is replaced by a neutral phrase ("<host not named in the logs>").
"""

from __future__ import annotations

import string
import tomllib
from dataclasses import dataclass
from importlib import resources
from typing import Final

RETRY, EXCLUDE_NODE, RESET_GPU, FIX_CONFIG, STOP = "RETRY", "EXCLUDE_NODE", "RESET_GPU", "FIX_CONFIG", "STOP"
ACTION_KINDS: Final = (RETRY, EXCLUDE_NODE, RESET_GPU, FIX_CONFIG, STOP)

#: classes whose cause is configuration, code or data: a retry without a change fails again
NO_RETRY: Final = frozenset({
    "NCCL_NETWORK_CONFIG", "CONTAINER_SHM_IPC", "IB_LOCAL_PROTECTION_ERROR", "P2P_BROKEN",
    "RENDEZVOUS_UNREACHABLE", "SETUP_PHASE_TIMEOUT", "CHECKPOINT_SAVE_TIMEOUT", "LAUNCH_SKEW",
    "CUDA_OOM_CAPACITY", "CUDA_OOM_FRAGMENTATION", "CUDA_OOM_CHECKPOINT_GATHER", "CUDA_OOM_INIT",
    "HOST_OOM_KILL", "SHM_EXHAUSTED", "LOSS_SCALE_COLLAPSE", "NAN_LOSS", "SILENT_SKIPPED_STEPS",
    "COLLECTIVE_DESYNC", "CUDA_ILLEGAL_ADDRESS", "RESTART_LOOP", "STRAGGLER_INPUT", "STRAGGLER_COMPUTE",
    "INPUT_STALL", "CHECKPOINT_IO_SLOW",
})

@dataclass(frozen=True, slots=True)
class Variant:
    """One ``[[CLASS.when]]`` entry of ``data/actions.toml``: facts to match, fields it replaces."""

    facts: tuple[tuple[str, str], ...]
    kind: str | None
    template: str | None
    next: tuple[str, ...] | None

    def matches(self, values: dict[str, object]) -> bool:
        """Every fact pattern holds: ``"v"`` equal, ``"*"`` present and not empty, ``"!v"`` anything else."""
        for key, want in self.facts:
            have = values.get(key)
            have_s = "" if have in (None, "", "-") else str(have)
            if want == "*":
                ok = bool(have_s)
            elif want.startswith("!"):
                ok = have_s != want[1:]
            else:
                ok = have_s == want
            if not ok:
                return False
        return True


def _load() -> tuple[dict[str, tuple[str, str, tuple[str, ...]]], dict[str, tuple[Variant, ...]]]:
    """Read ``data/actions.toml`` (format in its header); raises ValueError on an unknown kind."""
    data = tomllib.loads(resources.files("gpufield.triage").joinpath("data", "actions.toml").read_text("utf-8"))
    shared = {f"@{k}": str(v) for k, v in data.pop("_evidence", {}).items()}

    def nxt(items: list[str]) -> tuple[str, ...]:
        out = []
        for x in items:
            tag = next((t for t in shared if x == t or x.startswith(t + " ")), None)
            out.append(shared[tag] + x[len(tag):] if tag else x)
        return tuple(out)

    base: dict[str, tuple[str, str, tuple[str, ...]]] = {}
    variants: dict[str, tuple[Variant, ...]] = {}
    for cls, row in data.items():
        for kind in [row["kind"], *(w.get("kind") for w in row.get("when", ()))]:
            if kind is not None and kind not in ACTION_KINDS:
                raise ValueError(f"data/actions.toml: [{cls}] kind {kind!r} is not one of {ACTION_KINDS}")
        base[cls] = (row["kind"], row["action"], nxt(row.get("next", [])))
        variants[cls] = tuple(Variant(facts=tuple((k, str(v)) for k, v in w["facts"].items()), kind=w.get("kind"),
                                      template=w.get("action"),
                                      next=nxt(w["next"]) if "next" in w else None) for w in row.get("when", ()))
    return base, variants


#: class -> (action kind, template, next evidence): the defaults of ``data/actions.toml``
ACTIONS: Final[dict[str, tuple[str, str, tuple[str, ...]]]]
#: class -> the fact-matched variants of ``data/actions.toml``, first match wins
VARIANTS: Final[dict[str, tuple[Variant, ...]]]
ACTIONS, VARIANTS = _load()


class _Blank(dict):
    def __missing__(self, key: str) -> str:
        return {"host": "<host not named in the logs>", "gpu": "<GPU not named in the logs>",
                "rank": "<rank not named>", "peer": "<peer not named>", "reporters": "<the reporting host>",
                "seqs": "see the mismatch report in the evidence", "endpoint": "<endpoint not named>"}.get(key, "?")


def render(template: str, values: dict[str, object]) -> str:
    """Fill ``template`` with ``values``; missing or None values become neutral phrases."""
    clean = _Blank({k: v for k, v in values.items() if v not in (None, "", "-")})
    return string.Formatter().vformat(template, (), clean)


def action_for(cls: str, values: dict[str, object], *, running: bool = True,
               exception: bool = False) -> tuple[str, str, tuple[str, ...]]:
    """(kind, sentence, next evidence) for one incident.

    Args:
        cls: taxonomy class.
        values: ``host``, ``gpu``, ``rank`` and the finding's facts.
        running: False when the failure happened before any training progress; an IB retry error
            at startup is then a configuration problem (RoCE GID index, routing), not a node fault.
        exception: the UNKNOWN incident is an uncaught Python exception (code/data fault).

    Raises:
        KeyError: ``cls`` has no action (a consistency test keeps the table complete).
    """
    values = dict(values)
    values["running"] = "yes" if running else "no"
    if exception:
        values["uncaught"] = "yes"
    if cls == "ECC_UNCORRECTABLE":  # the catalogue bucket the action names
        bucket, xid = values.get("bucket"), values.get("xid")
        values["catalog"] = (f"catalog {bucket} for Xid {xid}" if bucket and xid else
                             "catalog WORKFLOW_XID_48, the uncorrectable-ECC workflow")
    kind, template, nxt = ACTIONS[cls]
    for v in VARIANTS.get(cls, ()):
        if v.matches(values):
            kind = v.kind or kind
            template = v.template or template
            nxt = nxt if v.next is None else v.next
            break
    return kind, render(template, values), tuple(render(n, values) for n in nxt)
