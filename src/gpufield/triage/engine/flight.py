"""Flight Recorder across ranks: which ranks never reached the SeqNum the others wait in.

Input: the ``flight_recorder`` events of dumps (``fields["dump"]`` True, one per rank and process
group; see :mod:`gpufield.triage.parsers.flight_recorder`). For each process group, ``N`` is the
highest SeqNum any rank enqueued; a rank whose last enqueued SeqNum is below ``N`` never reached
collective ``N`` (it was busy elsewhere, hung, or dead), and its last entry says what it last did.
This is what ``tools/flight_recorder`` (``fr_trace``) reports as "missing ranks", computed here from
the dumps themselves.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gpufield.triage.events import Event


@dataclass(frozen=True, slots=True)
class FrView:
    """One process group across the dumps.

    Attributes:
        pg: process-group id as written in the dumps.
        seq: ``N``, the highest SeqNum any rank enqueued.
        at_seq: ranks that enqueued ``N`` (waiting in it unless completed).
        behind: ``rank -> (last enqueued SeqNum, what its last entry was)`` for ranks below ``N``.
        events: the dump events of this group (evidence), rank order.
    """

    pg: str
    seq: int
    at_seq: tuple[int, ...]
    behind: dict[int, tuple[int, str]]
    events: tuple[Event, ...]

    def describe(self) -> str:
        """One sentence for notes: who never reached SeqNum N and what each was doing."""
        if not self.behind:
            return f"Flight Recorder: every dumped rank reached SeqNum {self.seq} on PG {self.pg}."
        who = "; ".join(f"rank {r} last enqueued SeqNum {s} ({doing})" for r, (s, doing) in sorted(self.behind.items()))
        return (f"Flight Recorder: rank(s) {', '.join(map(str, sorted(self.behind)))} never reached SeqNum {self.seq} "
                f"on PG {self.pg} that rank(s) {', '.join(map(str, self.at_seq)) or '?'} wait in: {who}.")


def views(events: Sequence[Event]) -> list[FrView]:
    """Per process group, the ranks behind the highest enqueued SeqNum (dumps with a known rank only)."""
    per: dict[str, dict[int, Event]] = {}
    for e in events:
        if e.kind != "flight_recorder" or not e.fields.get("dump") or e.rank is None:
            continue
        if not isinstance(e.fields.get("last_enqueued"), int):
            continue
        per.setdefault(str(e.fields.get("pg")), {})[e.rank] = e
    out = []
    for pg, by_rank in sorted(per.items()):
        if len(by_rank) < 2:
            continue
        n = max(e.fields["last_enqueued"] for e in by_rank.values())
        at = tuple(sorted(r for r, e in by_rank.items() if e.fields["last_enqueued"] == n))
        behind = {r: (e.fields["last_enqueued"], str(e.fields.get("entry", "?"))) for r, e in by_rank.items()
                  if e.fields["last_enqueued"] < n}
        out.append(FrView(pg, n, at, behind, tuple(by_rank[r] for r in sorted(by_rank))))
    return out
