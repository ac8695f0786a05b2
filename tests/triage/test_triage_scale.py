"""Scale does not change the verdict, and repeats are counted rather than kept (issue 24).

* Each labelled shared case analysed alone and as 2 and 40 concatenated copies of itself in one file
  gives the same incident classes (40 copies exceed the per-template cap of the streaming reducer,
  so this also checks that capping loses nothing the rules need); at 2 copies also the same blamed
  host and rank. The whole corpus concatenated into one file yields no class that no single case
  yields.
* :class:`~gpufield.triage.aggregate.EventReducer` keeps the first ``KEEP_PER_TEMPLATE`` copies and
  the last one of a repeated template, counts all of them with first/last line, and keeps every
  distinct error and one ``nccl_init`` per (host, rank, GPU) whatever the number of communicators.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufield.triage.aggregate import KEEP_PER_TEMPLATE, EventReducer
from gpufield.triage.analyze import analyze
from gpufield.triage.ingest import IngestOptions, ingest


def _cases(shared_dir: Path) -> list[Path]:
    cases = sorted((shared_dir / "data" / "triage-cases").glob("*.log"))
    assert len(cases) >= 20
    return cases


def _key(result, entities: bool) -> list:
    return sorted({(i.cls, i.host, i.rank) if entities else i.cls for i in result.incidents}, key=str)


def test_copies_of_a_case_give_its_verdict(shared_dir, tmp_path):
    for case in _cases(shared_dir):
        one = analyze([str(case)])
        for k in (2, 40):
            f = tmp_path / f"x{k}-{case.name}"
            f.write_bytes(case.read_bytes() * k)
            many = analyze([str(f)])
            assert _key(many, False) == _key(one, False), (case.name, k)
            if k == 2:
                assert _key(many, True) == _key(one, True), case.name
            if k == 40 and one.stats["events"] > KEEP_PER_TEMPLATE:
                assert many.stats["events_kept"] < many.stats["events"]


def test_whole_corpus_in_one_file_adds_no_class(shared_dir, tmp_path):
    cases = _cases(shared_dir)
    union: set[str] = set()
    for case in cases:
        union |= {i.cls for i in analyze([str(case)]).incidents}
    f = tmp_path / "all.log"
    f.write_bytes(b"".join(c.read_bytes() for c in cases))
    together = {i.cls for i in analyze([str(f)]).incidents}
    assert together and together <= union


def _warn(i: int, rank: int = 0) -> str:
    return f"node-a:100:{200 + rank} [{rank}] misc/socket.cc:{500 + i % 7} NCCL WARN Net : Call to recv from 10.0.0.2<{40000 + i}> failed : Broken pipe"


def test_reducer_caps_repeats_and_counts_them(tmp_path):
    lines = [_warn(i) for i in range(1000)]
    lines += [f"[ {10 + i}.000001] NVRM: Xid (PCI:0000:{0x10 + i:02x}:00): {79 if i % 2 else 48}, pid=1, GPU error"
              for i in range(50)]  # 50 distinct GPUs: all kept
    lines += [f"node-a:100:300 [{r % 8}] NCCL INFO comm 0x{c:x} rank {r} nranks 16 cudaDev {r % 8} busId {r % 8 + 1}b000"
              f" commId 0x{c:x} - Init COMPLETE" for c in range(0x10, 0x40) for r in range(16)]  # 48 comms x 16 ranks
    f = tmp_path / "job.log"
    f.write_text("\n".join(lines) + "\n")
    red = EventReducer()
    res = ingest([f], options=IngestOptions(year=2026), sink=red.add)
    kept = red.events()
    assert res.stats.events == red.seen == 1000 + 50 + 48 * 16
    warns = [e for e in kept if e.kind == "nccl_remote_error"]
    assert len(warns) == KEEP_PER_TEMPLATE + 1
    assert [e.line for e in warns] == [*range(1, KEEP_PER_TEMPLATE + 1), 1000]  # first ones and the last
    (st,) = [t for t in red.summary() if t["kind"] == "nccl_remote_error"]
    assert (st["count"], st["first_line"], st["last_line"], st["host"]) == (1000, 1, 1000, "node-a")
    assert len([e for e in kept if e.kind == "xid"]) == 50
    inits = [e for e in kept if e.kind == "nccl_init"]
    assert len(inits) == 16 and sorted(e.fields["rank"] for e in inits) == list(range(16))
    assert [e.line for e in kept] == sorted(e.line for e in kept)  # ingestion order kept


def test_reducer_keeps_progress_markers_around_kept_events(tmp_path):
    lines = []
    for i in range(3000):
        lines.append(f"step {i} loss {1.0 + i / 1e4:.4f}")
        if i in (1500, 2999):
            lines.append(_warn(i))
    f = tmp_path / "train.log"
    f.write_text("\n".join(lines) + "\n")
    red = EventReducer()
    ingest([f], options=IngestOptions(year=2026, with_loss=True, loss_every=1000), sink=red.add)
    kept = red.events()
    loss = [e.line for e in kept if e.kind == "loss"]
    warn = [e.line for e in kept if e.kind != "loss"]
    assert warn == [1502, 3002]
    assert loss[0] == 1 and 1501 in loss and 3001 in loss  # first, and the last before each event
    assert len(loss) <= 6


def test_reducer_rejects_a_zero_cap():
    with pytest.raises(ValueError):
        EventReducer(keep_per_template=0)


def test_plain_triage_imports_no_heavy_module(tmp_path):
    # issue 24: start-up; duckdb, jinja2, pyarrow and torch are imported only by the features that need them
    import subprocess
    import sys

    f = tmp_path / "kern.log"
    f.write_text("[ 1.0] NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.\nplain\nplain\n")
    code = ("import sys\nsys.argv = ['gpufield', 'triage', sys.argv[1]]\nfrom gpufield.cli import main\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            "print('HEAVY', sorted(m for m in ('duckdb', 'jinja2', 'pyarrow', 'torch') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code, str(f)], capture_output=True, text=True, timeout=120).stdout
    assert "GPU_FELL_OFF_BUS" in out.replace(" ", "_") or "fell off" in out.lower()
    assert "HEAVY []" in out
