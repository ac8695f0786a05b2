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


def test_h4_truncated_gzip_keeps_every_decoded_line_and_warns_with_file_line():
    # cut at 90 % of its bytes; `zcat` recovers 2,700 lines (Xid 79 on line 1) before "unexpected end of file"
    from gpufield.triage import IngestOptions, ingest

    path = HUNT / "D01-trunc-kern.log.gz"
    res = ingest([path], options=IngestOptions(year=2026))
    assert res.stats.lines == 2701 and res.stats.files_read == 1  # 2,700 whole lines + the cut one
    assert res.events[0].line == 1 and res.events[0].code == "79"
    warn = [w for w in res.stats.warnings if "truncated" in w.message]
    assert len(warn) == 1 and warn[0].line == 2700 and str(path) in str(warn[0])
    assert analyze([str(path)]).verdict.cls == "GPU_FELL_OFF_BUS"


def test_h4_truncated_bz2_xz_and_multimember_gzip(tmp_path):
    import bz2
    import gzip
    import lzma
    import zlib

    from gpufield.triage import IngestOptions, ingest

    xid = b"Aug 11 03:00:00 hB kernel: NVRM: Xid (PCI:0000:9a:00): 79, pid=1, name=p, GPU has fallen off the bus.\n"
    body = xid + b"".join(f"Aug 11 03:00:01 hB kernel: audit: id={i} {'x' * (i % 37)}\n".encode() for i in range(19999))
    oracles = {"bz2": bz2.BZ2Decompressor, "xz": lzma.LZMADecompressor, "gz": lambda: zlib.decompressobj(wbits=31)}
    for ext, comp in (("bz2", lambda b: bz2.compress(b, 1)),  # 100 kB blocks: a cut keeps whole blocks
                       ("xz", lzma.compress), ("gz", gzip.compress)):
        blob = comp(body)
        head = blob[: len(blob) * 3 // 4]
        cut = tmp_path / f"k.log.{ext}"
        cut.write_bytes(head)
        decoded = oracles[ext]().decompress(head)  # independent: the codec's decoder over all the cut bytes at once
        res = ingest([cut], options=IngestOptions(year=2026))
        assert res.stats.lines == decoded.count(b"\n") + (0 if decoded.endswith(b"\n") else 1) > 5000, ext
        assert [e.code for e in res.events] == ["79"], ext
        assert any("truncated" in w.message for w in res.stats.warnings), ext
    two = tmp_path / "two.log.gz"
    two.write_bytes(gzip.compress(body[:5000]) + gzip.compress(body[5000:]))
    res = ingest([two], options=IngestOptions(year=2026))
    assert res.stats.lines == 20000 and not [w for w in res.stats.warnings if "truncated" in w.message]


def test_m1_same_seqnum_different_optype_is_desync_stop():
    top = _run("D19").verdict
    assert (top.cls, top.action_kind, top.established) == ("COLLECTIVE_DESYNC", "FIX_CONFIG", True)
    assert top.confidence == 0.8 and "BROADCAST" in top.action and "ALLREDUCE" in top.action and top.rank is None


def test_m1_same_seqnum_same_op_different_numel_is_desync_stop():
    top = _run("D20").verdict
    assert (top.cls, top.action_kind) == ("COLLECTIVE_DESYNC", "FIX_CONFIG")
    assert top.confidence == 0.65 and "4194305" in top.action and "NumelIn" in top.note


def test_m2_contained_xid94_follows_catalogue_restart_app(tmp_path):
    top = _run("D03").verdict  # "Contained: CE User Channel (0x9). RST: No, D-RST: No"
    assert (top.cls, top.gpu, top.action_kind) == ("ECC_UNCORRECTABLE", "0000:2a:00.0", "RETRY")
    assert "RESTART_APP for Xid 94" in top.action and "WORKFLOW_XID_48" not in top.action
    # the same line with RST: Yes needs the reset; Xid 95 cites its own catalogue entry (RESET_GPU)
    line = (HUNT / "D03" / "hB" / "kern.log").read_text().replace("RST: No, D-RST", "RST: Yes, D-RST")
    (tmp_path / "rst.log").write_text(line)
    (tmp_path / "x95.log").write_text("Aug 11 03:00:05 hB kernel: NVRM: Xid (PCI:0000:2a:00): 95, pid=60001, "
                                      "name=python3, Uncontained: FBHUB. RST: Yes, D-RST: No\n")
    rst = analyze([str(tmp_path / "rst.log")]).verdict
    assert rst.action_kind == "RESET_GPU" and "RESET_GPU for Xid 94" in rst.action
    x95 = analyze([str(tmp_path / "x95.log")]).verdict
    assert x95.action_kind == "RESET_GPU" and "RESET_GPU for Xid 95" in x95.action


def test_m3_single_xid63_is_a_hint_not_hbm_degradation(tmp_path):
    res = _run("D11")  # one "Row Remapper: new row ... marked for remapping" + NCCL timeouts on hA
    top = res.verdict
    assert top.cls == "NCCL_COLLECTIVE_TIMEOUT" and top.action_kind == "RETRY"
    hint = [i for i in res.incidents if i.cls == "HBM_DEGRADATION"]
    assert len(hint) == 1 and not hint[0].established and hint[0].action_kind != "EXCLUDE_NODE"
    assert "No exclusion" in hint[0].action and "0000:86:00.0" in hint[0].action
    # growth: the remap record at three different times is degradation (exclude + RMA)
    line = (HUNT / "D11" / "hB" / "kern.log").read_text()
    (tmp_path / "kern.log").write_text("".join(line.replace("03:00:00", f"0{h}:00:00") for h in (1, 2, 3)))
    grown = analyze([str(tmp_path / "kern.log")]).verdict
    assert (grown.cls, grown.established, grown.action_kind) == ("HBM_DEGRADATION", True, "EXCLUDE_NODE")


def test_m4_host_from_folder_when_kernel_log_names_none(tmp_path):
    # gpu-b17/dmesg.txt in `dmesg -T` form carries no hostname; alone (no NCCL lines naming gpu-b17)
    job = tmp_path / "job-1234"
    (job / "gpu-b17").mkdir(parents=True)
    (job / "gpu-b17" / "dmesg.txt").write_bytes((HUNT / "D05" / "gpu-b17" / "dmesg.txt").read_bytes())
    top = analyze([str(job)]).verdict
    assert (top.cls, top.host, top.action_kind) == ("GPU_FELL_OFF_BUS", "gpu-b17", "EXCLUDE_NODE")
    assert "Exclude node gpu-b17" in top.action
    # generic folder names and the input directory itself are never hosts
    logs = tmp_path / "in" / "logs"
    logs.mkdir(parents=True)
    (logs / "dmesg.txt").write_bytes((HUNT / "D05" / "gpu-b17" / "dmesg.txt").read_bytes())
    for given in (tmp_path / "in", logs):
        top = analyze([str(given)]).verdict
        assert top.host is None and "Exclude node (unknown: the logs do not name the host that wrote logs/dmesg.txt)" in top.action
    # with the job's NCCL init lines the rank<->bus-id map names rank 13 too (D05 as collected)
    top = _run("D05").verdict
    assert (top.host, top.gpu, top.rank) == ("gpu-b17", "0000:9a:00.0", 13)


def test_m4_rfc5424_kernel_line_keeps_time_and_host():
    from gpufield.triage import IngestOptions, ingest

    ev = ingest([HUNT / "D14" / "kern.log"], options=IngestOptions(year=2026)).events
    assert [(e.kind, e.code, e.host) for e in ev] == [("xid", "79", "hB")]
    assert ev[0].ts_ns == 1786417200123456000  # 2026-08-11T03:00:00.123456Z
    top = _run("D14").verdict
    assert top.host == "hB" and "Exclude node hB" in top.action


def test_m5_slurm_time_limit_sigkill_is_not_host_oom(tmp_path):
    top = _run("D10").verdict  # "*** STEP 12345.0 ON hA CANCELLED AT ... DUE TO TIME LIMIT ***" + exit -9
    assert top.cls != "HOST_OOM_KILL" and top.rule == "scheduler_cancel" and top.host == "hA"
    assert top.action_kind == "FIX_CONFIG" and "time limit" in top.action and "memory" not in top.action.split(";")[0]
    assert not [i for i in _run("D10").incidents if i.cls == "HOST_OOM_KILL"]
    # a bare SIGKILL stays an unestablished prior whose action asks for the OOM-killer line first
    body = (HUNT / "D10" / "hA" / "slurm.out").read_text().splitlines()
    (tmp_path / "bare.log").write_text("\n".join(x for x in body if "slurmstepd" not in x) + "\n")
    bare = analyze([str(tmp_path / "bare.log")]).verdict
    assert (bare.cls, bare.established) == ("HOST_OOM_KILL", False)
    assert "the kernel log of hA for 'Out of memory: Killed process'" in bare.action
    from gpufield.triage import IngestOptions, ingest

    (tmp_path / "s.log").write_text("slurmstepd: error: *** JOB 123 ON node01 CANCELLED AT 2024-01-01T00:00:00 DUE TO "
                                    "TIME LIMIT ***\n")
    (e,) = ingest([tmp_path / "s.log"], options=IngestOptions(year=2026)).events
    assert (e.kind, e.host, e.fields["reason"], e.fields["job_id"], e.ts_ns) == (
        "scheduler_cancel", "node01", "TIME LIMIT", "123", 1704067200 * 10**9)


def test_l1_duplicate_inputs_are_read_once_with_a_warning(tmp_path):
    from gpufield.triage import IngestOptions, ingest

    src = HUNT / "D05"
    once = ingest([src], options=IngestOptions(year=2026))
    link = tmp_path / "again.txt"
    link.symlink_to((src / "gpu-b17" / "dmesg.txt").resolve())
    dup = ingest([src, src, src / "gpu-b17" / "dmesg.txt", link], options=IngestOptions(year=2026))
    assert dup.stats.files_seen == once.stats.files_seen == 4
    assert len(dup.events) == len(once.events)
    warns = [w for w in dup.stats.warnings if "read once" in w.message]
    assert len(warns) == 6 and any(str(link) in str(w) for w in warns)
    a = analyze([str(src)]).verdict
    b = analyze([str(src), str(src)]).verdict
    assert a.cascade_count == b.cascade_count == 15


def test_l3_fatal_nvswitch_sxid_gets_a_fabric_node_action():
    top = _run("D15").verdict  # "nvidia-nvswitch0: SXid (PCI:0000:c3:00.0): 24007, Fatal, Link 30 ..."
    assert (top.cls, top.host, top.gpu, top.action_kind) == ("NVLINK_FAULT", "hB", None, "EXCLUDE_NODE")
    assert "not named" not in top.action and "Reset GPU" not in top.action
    assert "SXid 24007 on nvidia-nvswitch0 (PCI 0000:c3:00.0) link 30" in top.action


def test_l5_timeout_note_counts_ranks_per_process_group():
    top = _run("D16").verdict  # PG 0 SeqNum 8812 on 4 ranks, PG 1 SeqNum 301 on 4 other ranks
    assert top.cls == "NCCL_COLLECTIVE_TIMEOUT"
    assert "4 rank(s) on PG 0 SeqNum 8812 (ALLREDUCE)" in top.note and "4 rank(s) on PG 1 SeqNum 301" in top.note
    assert "8 rank(s) timed out on SeqNum 8812" not in top.note


def test_l2_host_attribution_is_consistent_across_events_evidence_and_json():
    import json

    from gpufield.triage import dumps

    res = _run("D17")
    for e in res.events:
        if e.file.endswith(("gpu-a03/train.log", "gpu-b17/train.log")):
            assert e.host == e.file.split("/")[-2], (e.kind, e.line, e.host)  # watchdog and loss lines too
    cascade = [x for x in res.verdict.evidence if x.role == "cascade"]
    assert cascade and set(cascade[0].hosts) == {"gpu-a03", "gpu-b17"}
    d = json.loads(dumps(res))["incidents"][0]
    assert d["root"]["time"] == d["evidence"][0]["time"] == "2026-08-11T03:00:00.000Z"  # as logged, both places
    assert d["root"]["time_corrected"] is not None


def test_l6_unresolved_status12_peer_is_named_by_the_one_host_whose_ib_port_went_down():
    # hA and hC: status 12 from peer 10.0.0.17 (no Bootstrap line maps it); hB: "mlx5_3: Port: 1 Link DOWN"
    top = _run("D04").verdict
    assert (top.cls, top.host, top.action_kind) == ("IB_TRANSPORT_RETRY_EXCEEDED", "hB", "EXCLUDE_NODE")
    assert "Exclude node hB" in top.action and "10.0.0.17" in top.note and top.confidence == 0.8
    assert any(x.event.kind == "nic_link_state" for x in top.evidence if x.role == "root")


def test_l4_clock_900s_ahead_is_estimated_from_same_seqnum_timeouts():
    # gpu-b17's clock runs 15 min ahead: its timeouts of SeqNum 8812 read 03:25:01, gpu-a03's 03:10:00
    res = _run("D18")
    assert res.clock_offsets_s == {"gpu-a03": 0.0, "gpu-b17": 901.0}
    top = res.verdict
    assert (top.cls, top.host, top.rank) == ("GPU_FELL_OFF_BUS", "gpu-b17", 13) and top.cascade_count == 15
    assert [i.cls for i in res.incidents] == ["GPU_FELL_OFF_BUS"]


def test_m5_bare_sigkill_after_a_hardware_root_elsewhere_is_teardown_not_a_second_incident():
    # n1: Xid 79; n4: a rank's exit -9 with no OOM-killer line, after it
    res = _run("D06")
    assert [i.cls for i in res.incidents] == ["GPU_FELL_OFF_BUS"]
    assert res.verdict.host == "n1" and "HOST_OOM_KILL" in res.verdict.cascade_classes
