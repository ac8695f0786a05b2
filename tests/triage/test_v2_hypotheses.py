"""Issue 23 evidence model: competing hypotheses, evidence against a SeqNum-mismatch desync,
file:line evidence and competitors in the JSON export."""

from __future__ import annotations

import glob

from test_engine import watchdog

from gpufield.triage import analyze
from gpufield.triage.engine import run_engine
from gpufield.triage.report.json_export import to_dict


def test_seqnum_mismatch_does_not_beat_a_watchdog_that_ran_14x_its_timeout():
    # ranks 0-2 time out on SeqNum 48213; rank 3 reports SeqNum 48212 after 14x the 600 s timeout: it was
    # stalled in 48212 (SIGSTOP / stuck call), not issuing a different collective sequence
    evs = [watchdog(r, "node-a", 600, seq=48213, line=10 + r) for r in range(3)]
    evs.append(watchdog(3, "node-b", 8400, seq=48212, ran=8_400_000, line=20))
    res = run_engine(evs)
    top = res.incidents[0]
    assert top.cls != "COLLECTIVE_DESYNC" and all(i.cls != "COLLECTIVE_DESYNC" for i in res.incidents)
    rejected = [c for c in top.competitors if c.verdict == "rejected"]
    assert rejected and rejected[0].cls == "COLLECTIVE_DESYNC" and "14x" in rejected[0].why
    assert rejected[0].evidence == ("node-b.log:20",)
    assert top.rank == 3 and "Rank 3 was stalled in SeqNum 48212" in top.note  # the stalled rank, not the waiters
    assert [c.verdict for c in top.competitors if c.cls == "WATCHDOG_BLOCKED"] == ["explained"]
    # the same mismatch with ordinary 'ran for' values stays a desync (different collective sequences)
    evs[-1] = watchdog(3, "node-b", 600, seq=48212, line=20)
    assert run_engine(evs).incidents[0].cls == "COLLECTIVE_DESYNC"


def test_competitors_and_evidence_lines_are_exported(shared_dir):
    res = analyze(glob.glob(str(shared_dir / "data/triage-cases/03-*.log")))
    top = res.verdict
    assert top.cls == "COLLECTIVE_DESYNC"
    (c,) = [c for c in top.competitors if c.cls == "NCCL_COLLECTIVE_TIMEOUT"]
    assert c.verdict == "explained" and "cascade-level" in c.why
    assert top.evidence_lines[0].endswith("03-collective-desync-after-midepoch-ckpt.log:1")
    verdict = to_dict(res)["verdict"]
    assert verdict["beat"][0]["class"] == "NCCL_COLLECTIVE_TIMEOUT" and verdict["evidence_lines"][0].endswith(":1")
    d = to_dict(res)["incidents"][0]
    assert d["evidence_lines"] == list(top.evidence_lines)
    assert d["competitors"][0]["verdict"] in ("explained", "outranked", "rejected")


def test_as_int_never_raises_and_keeps_finite_integers():
    # issue 23: {'skipped': inf} made as_int raise OverflowError inside a rule (runs under the fixed 'ci' profile)
    import math

    from hypothesis import given
    from hypothesis import strategies as st

    from gpufield.triage.engine.rules.base import as_float, as_int

    @given(st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(), st.text(max_size=12),
                     st.none(), st.booleans(), st.just("inf"), st.just("-Infinity"), st.just("1e400")))
    def check(v):
        got = as_int(v)
        assert got is None or isinstance(got, int)
        if isinstance(v, float):
            assert (got is None) == (not math.isfinite(v))
        if isinstance(v, int):
            assert got == int(v)
        as_float(v)

    check()
    assert as_int(float("inf")) is None and as_int("12") == 12 and as_int("1e400") is None
