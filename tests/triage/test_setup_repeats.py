"""``IngestOptions(setup_once=True)``: repeated NCCL set-up lines are counted, not parsed, and what
the reducer keeps (and the template miner sees) is exactly what it keeps from every line parsed.

The reference is the ingestion without the fast path (every line parsed) fed through the same
:class:`~gpufield.triage.aggregate.EventReducer`: a different, independent code path (the NCCL
parser and ``split_prefix`` on every line instead of the anchored line-key program)."""

from __future__ import annotations

from pathlib import Path

from _corpus_checks import load_benchmark

from gpufield.triage.aggregate import EventReducer
from gpufield.triage.analyze import LOSS_EVERY
from gpufield.triage.ingest import IngestOptions, ingest
from gpufield.triage.miner import TemplateMiner

HERE = Path(__file__).resolve().parent


def _read(paths, *, setup_once: bool, block_bytes: int = 8 << 20, workers: int = 1):
    red, miner = EventReducer(), TemplateMiner(year=2026)

    def sink(e):
        red.add(e)
        miner.note_event(e)

    res = ingest([str(p) for p in paths], on_block=miner.on_block, sink=sink,
                 options=IngestOptions(year=2026, with_loss=True, loss_every=LOSS_EVERY, block_bytes=block_bytes,
                                       workers=workers, setup_once=setup_once))
    miner.finish()
    kept = [tuple(getattr(e, k) if k != "fields" else sorted(e.fields.items(), key=str) for k in e.__slots__)
            for e in red.events()]
    return kept, [t.to_dict() for t in miner.templates()], red.summary(), res.stats


def _same(paths, **kw):
    full = _read(paths, setup_once=False, **kw)
    fast = _read(paths, setup_once=True, **kw)
    assert fast[0] == full[0]  # kept events, all attributes, in order
    assert fast[1:3] == full[1:3]  # mined templates, capped-template summary
    st0, st1 = full[3], fast[3]
    assert st1.events + st1.setup_repeats == st0.events and st0.setup_repeats == 0
    assert [str(w) for w in st1.warnings] == [str(w) for w in st0.warnings]
    return st1


def test_dense_log_keeps_the_same_events_with_fewer_parsed(shared_dir, tmp_path):
    log = tmp_path / "dense.log"
    load_benchmark("triage_scale").build(log, 2, shared_dir / "data" / "triage-cases")
    st = _same([log])
    # 3 units x 64 ranks x 4 set-up lines; the first unit's are parsed, the other units' (new pid,
    # comm and commId, same hosts / ranks / bus ids / addresses) are counted
    assert st.setup_repeats >= 2 * 64 * 4
    st = _same([log], block_bytes=64 << 10)
    assert st.setup_repeats >= 2 * 64 * 4


def test_two_processes_and_the_fast_path_together(shared_dir, tmp_path, monkeypatch):
    from gpufield.triage import _split

    log = tmp_path / "dense.log"
    load_benchmark("triage_scale").build(log, 2, shared_dir / "data" / "triage-cases")
    monkeypatch.setattr(_split, "MIN_BYTES", 1 << 20)
    one = _read([log], setup_once=False, block_bytes=64 << 10)
    two = _read([log], setup_once=True, block_bytes=64 << 10, workers=2)
    assert two[:3] == one[:3]
    assert two[3].files[0].helper_blocks >= 10 and two[3].setup_repeats > 0
    assert two[3].events + two[3].setup_repeats == one[3].events


def test_lines_the_key_cannot_vouch_for_are_parsed(tmp_path):
    # each of these repeats a first line in everything but the part named; every one must be parsed
    first = [
        "node-1:100:100 [0] NCCL INFO comm 0x55aa rank 3 nranks 8 cudaDev 0 nvmlDev 0 busId 1b000 commId 0x1 - Init START",
        "node-1:100:100 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>",
        "err-node:100:100 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.2<0>",
    ]
    again = [
        "node-1:200:201 [1] NCCL INFO comm 0x66bb rank 3 nranks 8 cudaDev 1 nvmlDev 1 busId 1b000 commId 0x2 - Init START",
        "node-1:200:200 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>",  # the same: counted
        "err-node:200:200 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.2<0>",  # error-ish host: parsed
        "[2026-08-11 03:00:00] node-1:200:200 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>",  # a time: parsed
        "node-1:200:200 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.9<0>",  # another address: parsed
        "node-1:200:200 [0] NCCL INFO comm 0x66bb rank 3 nranks 8 cudaDev 1 busId 1b000 - Init COMPLETE",  # state
        "node-1:200:200 [0] NCCL INFO comm 0x66bb rank 4 nranks 8 cudaDev 1 busId 1b000 - Init START",  # rank
        "[rank3]:node-1:200:200 [0] NCCL INFO comm 0x66bb rank 3 nranks 8 cudaDev 1 busId 1b000 - Init START",
    ]
    f = tmp_path / "setup.log"
    f.write_text("\n".join(first + again) + "\n")
    st = _same([f])
    assert st.setup_repeats == 2  # the first two lines of ``again``
    assert st.events == len(first) + len(again) - 2


def test_nccl_init_variants_fixture_twice_in_one_file(tmp_path):
    # real set-up lines of several NCCL versions and launchers (mpirun tags, IPv6 bootstrap, no nvmlDev)
    f = tmp_path / "twice.log"
    f.write_text((HERE / "data" / "nccl_init_variants.log").read_text() * 2)
    assert _same([f]).setup_repeats > 0


def test_reducer_template_counts_equal_signature_per_event(shared_dir, tmp_path, monkeypatch):
    # the reducer memoises signature() by (kind, raw, host); the counts per template must be those of
    # signature() called on every event (same raw on another host is another template)
    from collections import Counter

    from gpufield.triage import aggregate
    from gpufield.triage.engine.correlate import signature

    log = tmp_path / "dense.log"
    load_benchmark("triage_scale").build(log, 1, shared_dir / "data" / "triage-cases")
    text = log.read_text()
    (tmp_path / "other-host.log").write_text(text.replace("node-1:", "node-9:"))
    events = ingest([str(log), str(tmp_path / "other-host.log")], options=IngestOptions(year=2026)).events
    monkeypatch.setattr(aggregate, "_SIGNATURE_MEMO", 64)  # also exercise the clearing
    red = EventReducer()
    for e in events:
        red.add(e)
    want = Counter((e.kind, e.file, e.host, e.rank, signature(e)[1]) for e in events
                   if e.kind not in aggregate.SETUP_KINDS and e.kind != "loss")
    got = Counter({k: t.count for k, t in red.templates.items()})
    assert got == want and len(want) > 50


def test_shared_banner_and_errorish_scan_finds_the_lines_of_the_two_scans(shared_dir, tmp_path):
    # analyze runs one RE2 search for the phase keywords and the miner's words together; the banners
    # and the mined templates must be those of the two separate searches, also where the words touch
    # word characters, newlines and each other (the miner's \b)
    import random

    import numpy as np

    from gpufield.triage.analyze import _SharedScan
    from gpufield.triage.engine.phases import marks_in_block

    words = ["error", "Errors", "xerror", "error_", "failed", "timed out", "Traceback", "WARN", "warning:",
             "checkpoint", "Loading checkpoint", "tokenizing", "map", "Map:", "split", "download", "preprocess",
             "filter", "loading dataset", " ", " ", "\n", "\n", "\t", "x", "7", "-", ":", "\xe9", "_"]
    rng = random.Random(5)
    blocks = ["".join(rng.choice(words) for _ in range(rng.randint(1, 300))).encode() + b"\n" for _ in range(300)]
    log = tmp_path / "dense.log"
    load_benchmark("triage_scale").build(log, 1, shared_dir / "data" / "triage-cases")
    blocks.append(log.read_bytes())
    shared = _SharedScan()
    one, two = TemplateMiner(year=2026), TemplateMiner(year=2026)
    banners = 0
    for k, block in enumerate(blocks):
        nl = np.flatnonzero(np.frombuffer(block, dtype=np.uint8) == 10)
        n = len(nl)
        starts = np.concatenate([[0], nl + 1]).astype(np.int64)
        b_lines, e_lines = shared.lines(block, int(starts[n]))
        want = marks_in_block(block, starts, n, "f", 1)
        assert marks_in_block(block, starts, n, "f", 1, firsts=b_lines) == want, block
        banners += len(want)
        one.on_block(f"f{k}", block, starts, n, 0)
        two.on_block(f"f{k}", block, starts, n, 0, lines=e_lines)
        assert one._pending == two._pending, block
    one.finish()
    two.finish()
    assert [t.to_dict() for t in one.templates()] == [t.to_dict() for t in two.templates()]
    assert banners > 100 and one.lines_mined > 1000
