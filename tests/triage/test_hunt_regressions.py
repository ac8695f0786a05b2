"""Regressions from the external test hunt: one synthetic scenario per defect (see hunt_data/README.md).

Each test runs the full pipeline (:func:`gpufield.triage.analyze`) on the scenario folder and checks
the verdict a human triager would give from the lines (the expected class follows
``../shared/reference/triage.md`` 5.3/5.6 and the NVIDIA Xid catalogue bundled in ``data/``).
"""

from __future__ import annotations

from pathlib import Path

from gpufield.triage import analyze

HUNT = Path(__file__).parent / "hunt_data"  # not under data/: other tests ingest data/ as one corpus


def _run(name: str):
    return analyze([str(HUNT / name)])


def test_h1_late_xid_after_job_death_is_context_not_root():
    # CUDA OOM on hA at 03:00:01 ends the job (timeouts 03:10); Xid 79 on hB at 05:00, after the death
    res = _run("D07")
    top = res.verdict
    assert top.cls == "CUDA_OOM_CAPACITY" and top.action_kind == "FIX_CONFIG" and top.host == "hA"
    late = [i for i in res.incidents if i.cls == "GPU_FELL_OFF_BUS"]
    assert len(late) == 1 and late[0].confidence <= 0.3 and "Outside the failure episode" in late[0].note
    assert "NCCL_COLLECTIVE_TIMEOUT" in top.cascade_classes


def test_h1_stale_xid_day_before_is_context_not_root():
    res = _run("D07b")
    assert res.verdict.cls == "CUDA_OOM_CAPACITY"
    assert [i.cls for i in res.incidents][-1] == "GPU_FELL_OFF_BUS"


def test_h3_untimed_cuda_ecc_traceback_merges_into_timed_xid48_naming_the_gpu():
    # the traceback has no time (inherits 03:00:00 of the step line); Xid 48 at 03:00:05 names 0000:ba:00
    res = _run("D02")
    top = res.verdict
    assert (top.cls, top.host, top.gpu, top.action_kind) == ("ECC_UNCORRECTABLE", "hC", "0000:ba:00.0", "RESET_GPU")
    assert "0000:ba:00.0" in top.action and "not named" not in top.action
    assert {e.event.kind for e in top.evidence} >= {"xid"} and any("ECC error" in e.event.raw for e in top.evidence)
    assert [i.cls for i in res.incidents] == ["ECC_UNCORRECTABLE"]
