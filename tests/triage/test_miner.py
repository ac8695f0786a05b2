"""Unparsed error-ish lines are mined into templates; those only near the failure or only on the
failing host come back as ``TriageResult.unexplained`` (issue 24)."""

from __future__ import annotations

from gpufield.triage.analyze import analyze
from gpufield.triage.miner import TemplateMiner


def _syslog(minute: int, sec: int, host: str, tag: str, msg: str) -> str:
    return f"Mar 21 01:{minute:02d}:{sec:02d} {host} {tag}: {msg}"


def _job(tmp_path):
    a, b = tmp_path / "node-a", tmp_path / "node-b"
    a.mkdir()
    b.mkdir()
    la, lb = [], []
    for m in range(0, 30):  # a warning both hosts print all along: explained by nothing, but not unexplained
        for host, out in (("node-a", la), ("node-b", lb)):
            out.append(_syslog(m, 0, host, "agent[7]", f"WARNING: slow metadata server response {m * 7 % 13} ms"))
    # an unknown error only on node-b, seconds before the Xid: the evidence no rule explains
    for s in (10, 12, 14):
        lb.append(_syslog(25, s, "node-b", "healthd[99]", f"sensor {s} read error: i2c bus timeout on slot 3"))
    lb.append(_syslog(25, 20, "node-b", "kernel", "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus."))
    # an error early in the job on node-a only: neither near the failure nor on the failing host
    la.append(_syslog(1, 5, "node-a", "sshd[5]", "error: kex_exchange_identification: Connection closed by remote host"))
    (a / "syslog").write_text("\n".join(la) + "\n")
    (b / "syslog").write_text("\n".join(lb) + "\n")
    return tmp_path


def test_unexplained_templates_near_the_failure_on_the_failing_host(tmp_path):
    res = analyze([str(_job(tmp_path))])
    assert res.verdict is not None and res.verdict.cls == "GPU_FELL_OFF_BUS" and res.verdict.host == "node-b"
    by_text = {t.template: t for t in res.unparsed_templates}
    sensor = next(t for k, t in by_text.items() if "i2c bus timeout" in k)
    assert sensor.count == 3 and sensor.hosts == ["node-b"] and "<*>" in sensor.template
    assert sensor.first_line == 31 and sensor.last_line == 33  # 30 warnings, then the three sensor lines
    slow = next(t for k, t in by_text.items() if "slow metadata" in k)
    assert slow.count == 60 and slow.hosts == ["node-a", "node-b"]
    unexplained = {t.template: t.reasons for t in res.unexplained}
    assert unexplained == {sensor.template: ["near_failure", "failing_host_only"]}
    # the Xid line itself became an event and is not mined
    assert not any("Xid" in t.template for t in res.unparsed_templates)
    assert res.stats["mined_lines"] == 3 + 60 + 1


def test_miner_counts_across_blocks_and_skips_event_lines(tmp_path):
    from gpufield.triage.ingest import IngestOptions, ingest

    lines = [f"worker {i % 9} failed to open shard {i}: error EIO" if i % 3 else "step loss 1.0" for i in range(3000)]
    lines[1500] = "node-a:1:2 [0] misc/socket.cc:538 NCCL WARN Net : Connection closed by remote peer x<1>"
    f = tmp_path / "w.log"
    f.write_text("\n".join(lines) + "\n")
    miner = TemplateMiner()
    ingest([f], options=IngestOptions(year=2026, block_bytes=4096), on_block=miner.on_block, sink=miner.note_event)
    miner.finish()
    (t,) = miner.templates()
    expected = sum(1 for i, x in enumerate(lines) if "failed" in x)
    assert t.count == expected == 2000  # line 1501 (an event) replaced a "step" line
    assert t.first_line == 2 and t.last_line == 3000
