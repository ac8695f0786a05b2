"""Desync blame from the tracebacks (faults dev rows desync-ddp-2r-rank1-step5, desync-ddp-4r-rank2-step6).

Both are real torchrun/gloo runs (faults INDEX: the labelled rank issues one extra all_reduce). In
the 2-rank run the peer (rank 0) aborts on gloo's "Received data size doesn't match" with no Python
traceback; in the 4-rank run every rank times out, three inside DDP's backward, rank 2 inside its
own ``dist.all_reduce`` call. The injector's banner ("fault desync at step 5") must not count.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufield.triage.analyze import analyze
from gpufield.triage.labels import parse_index

FAULTS = Path(__file__).parent / "corpus" / "faults"


def _label(row_id: str) -> int:
    row = {r.number: r for r in parse_index(FAULTS / "INDEX.md")}[row_id]
    assert row.split == "dev"
    return int(dict(row.blame)["rank"][0])


@pytest.mark.parametrize("row", ["desync-ddp-2r-rank1-step5", "desync-ddp-4r-rank2-step6"])
def test_desync_blames_the_rank_that_issued_the_extra_collective(row):
    top = analyze([str(FAULTS / f"{row}.log")]).incidents[0]
    assert top.cls == "COLLECTIVE_DESYNC"
    assert top.rank == _label(row)


def test_banner_word_desync_is_not_a_desync_report():
    res = analyze([str(FAULTS / "desync-ddp-2r-rank1-step5.log")])
    assert not any(e.kind == "desync" and "faultloop:" in e.raw for e in res.events)
    assert any(e.kind == "desync" and "Received data size" in e.raw for e in res.events)
