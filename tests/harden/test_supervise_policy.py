"""The retry policy (triage.md 5.10): classes, budget, back-off, no-progress cap, NaN checkpoints."""

from __future__ import annotations

import pytest

from gpufield.harden.policy import (
    CONTINUE,
    EXCLUDE,
    RETRY,
    STOP,
    Failure,
    PolicyConfig,
    RetryPolicy,
)
from gpufield.triage import NO_RETRY


def test_config_code_data_classes_stop_without_retry():
    for cls in sorted(NO_RETRY):
        d = RetryPolicy().decide(Failure(kind="exit", cls=cls, confidence=0.9, steps=500))
        assert d.action == STOP and d.retries_used == 0, cls
    assert RetryPolicy().decide(Failure(kind="exit", user_exception=True)).action == STOP
    assert RetryPolicy().decide(Failure(kind="exit", cls="UNKNOWN", action_kind="FIX_CONFIG", confidence=0.8)).action == STOP


def test_low_confidence_verdict_counts_as_unknown():
    # triage reads a bare SIGKILL as HOST_OOM_KILL at 0.5 (prior, no OOM-killer line): not enough to stop
    d = RetryPolicy().decide(Failure(kind="crash", cls="HOST_OOM_KILL", action_kind="FIX_CONFIG", confidence=0.5,
                                     host="h1"))
    assert d.action == RETRY


def test_hardware_excludes_the_blamed_host():
    d = RetryPolicy().decide(Failure(kind="exit", cls="GPU_FELL_OFF_BUS", action_kind="EXCLUDE_NODE",
                                     confidence=0.95, host="gpu-b17"))
    assert (d.action, d.host, d.retries_used) == (EXCLUDE, "gpu-b17", 1)


def test_a_lost_node_is_excluded_within_the_budget_and_is_not_a_stalled_restart():
    p = RetryPolicy(config=PolicyConfig(max_retries=2, transient_retries=5, backoff_s=0.0))
    first = p.decide(Failure(kind="crash", host="n0", steps=0))  # a restart granted: the next failure is judged
    assert first.action == RETRY
    d = p.decide(Failure(kind="lost", host="n1", steps=0))  # not a same-node retry even with transient retries left
    assert (d.action, d.host, d.retries_used, p.stalled) == (EXCLUDE, "n1", 2, 0)
    assert "supervisor of n1 is gone" in d.reason
    assert p.decide(Failure(kind="lost", host="n2")).action == STOP  # the budget (2) is spent


def test_transient_retries_same_nodes_once_then_excludes_most_implicated():
    p = RetryPolicy(config=PolicyConfig(max_retries=5, min_progress_steps=0))
    first = p.decide(Failure(kind="hang", host="b"))
    second = p.decide(Failure(kind="hang", host="a"))
    assert first.action == RETRY and first.host is None
    assert second.action == EXCLUDE and second.host == "a"  # tie between a and b: the current one
    p2 = RetryPolicy(config=PolicyConfig(max_retries=5, min_progress_steps=0))
    p2.decide(Failure(kind="hang", host="b"))
    p2.blamed["b"] += 1
    assert p2.decide(Failure(kind="hang", host="a")).host == "b"


def test_budget_is_never_exceeded_and_backoff_grows():
    p = RetryPolicy(config=PolicyConfig(max_retries=3, backoff_s=2.0, backoff_factor=2.0, backoff_max_s=5.0,
                                        transient_retries=100, min_progress_steps=0))
    ds = [p.decide(Failure(kind="crash", steps=1000)) for _ in range(10)]
    assert [d.action for d in ds] == [RETRY] * 3 + [STOP] * 7
    assert [d.delay_s for d in ds[:3]] == [2.0, 4.0, 5.0]
    assert max(d.retries_used for d in ds) == 3 == p.retries_used


def test_no_progress_cap_stops_with_93():
    p = RetryPolicy(config=PolicyConfig(max_retries=10, no_progress_restarts=3, min_progress_steps=200,
                                        transient_retries=100))
    # the first attempt progressed; then 3 restarts in a row make 10 steps each: the 3rd one's failure stops
    ds = [p.decide(Failure(kind="crash", steps=s)) for s in (5000, 10, 10, 10)]
    assert [d.action for d in ds] == [RETRY, RETRY, RETRY, STOP]
    assert ds[-1].no_progress and not ds[0].no_progress and p.retries_used == 3
    p = RetryPolicy(config=PolicyConfig(max_retries=10, no_progress_restarts=2, transient_retries=100))
    assert [p.decide(Failure(kind="crash", steps=s)).action for s in (0, 10, 300, 10, 10)] == [RETRY] * 4 + [STOP]


def test_nan_early_stops_late_retries_once_per_checkpoint():
    assert RetryPolicy().decide(Failure(kind="nan", nan=True, steps=3)).action == STOP
    p = RetryPolicy(config=PolicyConfig(nan_early_steps=100))
    assert p.decide(Failure(kind="nan", nan=True, steps=5000, checkpoint="ck/4000")).action == RETRY
    assert p.decide(Failure(kind="nan", nan=True, steps=5000, checkpoint="ck/4500")).action == RETRY
    d = p.decide(Failure(kind="nan", nan=True, steps=5000, checkpoint="ck/4000"))
    assert d.action == STOP and "ck/4000" in d.reason


def test_straggler_is_reported_unless_exclusion_is_asked():
    assert RetryPolicy().decide(Failure(kind="straggler", host="h", rank=3)).action == CONTINUE
    d = RetryPolicy(config=PolicyConfig(exclude_stragglers=True)).decide(Failure(kind="straggler", host="h"))
    assert (d.action, d.host) == (EXCLUDE, "h")


def test_config_validation():
    with pytest.raises(ValueError):
        PolicyConfig(max_retries=-1)
    with pytest.raises(ValueError):
        PolicyConfig(backoff_factor=0.5)
    with pytest.raises(ValueError):
        Failure(kind="boom")
