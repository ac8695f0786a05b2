"""Ingestion robustness: compression, bad inputs, block boundaries, mixed prefixes, statistics."""

from __future__ import annotations

import bz2
import gzip
import lzma
import shutil
from datetime import UTC, datetime
from pathlib import Path

import pytest

from gpufield.errors import LogFormatError
from gpufield.triage.ingest import IngestOptions, IngestStats, ingest, iter_events

DATA = Path(__file__).parent / "data"
KERNEL = DATA / "kernel_variants.log"
OPTS = IngestOptions(year=2026)


def _sig(events) -> list[tuple]:
    return [(e.line, e.kind, e.code, e.gpu_bdf, e.rank, e.ts_ns, e.raw, tuple(sorted(e.fields.items(), key=str)))
            for e in events]


@pytest.mark.parametrize(("suffix", "opener"), [(".gz", gzip.open), (".bz2", bz2.open), (".xz", lzma.open)])
def test_compressed_same_events(tmp_path, suffix, opener):
    plain = ingest([KERNEL], options=OPTS)
    packed = tmp_path / ("kern" + suffix)
    with opener(packed, "wb") as f:
        f.write(KERNEL.read_bytes())
    res = ingest([packed], options=OPTS)
    assert _sig(res.events) == _sig(plain.events) and res.events[0].file == str(packed)
    assert res.stats.files[0].compression == suffix.strip(".").replace("gz", "gzip").replace("bz2", "bzip2")
    assert res.stats.bytes == KERNEL.stat().st_size and res.stats.bytes_on_disk == packed.stat().st_size


def test_gzip_detected_by_magic_not_name(tmp_path):
    p = tmp_path / "kern.log"                       # gzip content, misleading name
    p.write_bytes(gzip.compress(KERNEL.read_bytes()))
    assert len(ingest([p], options=OPTS).events) == len(ingest([KERNEL], options=OPTS).events)


def test_truncated_gzip_keeps_what_was_read(tmp_path):
    body = ("x" * 100 + "\n") * 50_000 + KERNEL.read_text()   # records near the end
    full = gzip.compress(("NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.\n" + body).encode())
    p = tmp_path / "cut.log.gz"
    p.write_bytes(full[: len(full) // 2])
    res = ingest([p], options=IngestOptions(year=2026, block_bytes=65536))
    assert res.events[0].code == "79" and res.events[0].line == 1
    assert any("truncated or corrupt" in w.message for w in res.stats.warnings)
    assert res.stats.files_read == 1 and not res.stats.nothing_read


def test_binary_empty_missing_unknown(tmp_path):
    binary = tmp_path / "trace_rank_0.bin"
    binary.write_bytes(b"\x80\x04\x95" + bytes(range(256)) * 10)
    empty = tmp_path / "empty.log"
    empty.write_bytes(b"")
    prose = tmp_path / "notes.txt"
    prose.write_text("nothing to see here\njust some words\n")
    zst = tmp_path / "kern.log.zst"
    zst.write_bytes(b"\x28\xb5\x2f\xfd" + b"\x00" * 16)
    res = ingest([binary, empty, prose, zst, tmp_path / "missing.log"], options=OPTS)
    msgs = {Path(w.path).name: w.message for w in res.stats.warnings}
    assert "binary file" in msgs["trace_rank_0.bin"] and "empty file" == msgs["empty.log"]
    assert "no recognised log records in 2 lines" in msgs["notes.txt"]
    assert "zstd" in msgs["kern.log.zst"] and "no such file" in msgs["missing.log"]
    assert res.stats.files_read == 1 and res.stats.lines == 2 and not res.stats.nothing_read
    assert res.stats.unreadable == [str(zst), str(tmp_path / "missing.log")]
    res.raise_if_nothing_read()                     # one readable file: no error


def test_nothing_read_raises_with_reasons(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "README.md").write_text("# docs\n")
    res = ingest([tmp_path / "sub", tmp_path / "gone.log"])
    assert res.stats.nothing_read and res.stats.files_read == 0
    with pytest.raises(LogFormatError) as err:
        res.raise_if_nothing_read()
    assert "gone.log: no such file" in str(err.value) and "README.md" in str(err.value)
    empty_dir = tmp_path / "empty"
    empty_dir.mkdir()
    res = ingest(empty_dir)
    assert [w.message for w in res.stats.warnings] == ["directory contains no files"]
    with pytest.raises(LogFormatError, match="directory contains no files"):
        res.raise_if_nothing_read()


def test_directory_walk_is_sorted_and_recursive(tmp_path):
    (tmp_path / "b").mkdir()
    shutil.copy(KERNEL, tmp_path / "b" / "kern.log")
    shutil.copy(DATA / "train_variants.log", tmp_path / "a.log")
    files = [f.path for f in ingest([tmp_path]).stats.files]
    assert files == [str(tmp_path / "a.log"), str(tmp_path / "b" / "kern.log")]


def _filler(n: int) -> str:
    return "".join(f"step {i} | loss {1 + i % 7 / 10:.4f} | lr 2.0e-05 | tokens/s 51234\n" for i in range(n))


def test_records_across_block_boundaries(tmp_path):
    """Multi-line records that straddle read blocks come out exactly as with one big block."""
    parts = [_filler(37), KERNEL.read_text(), _filler(53),
             (DATA / "torchrun_blocks.log").read_text(), _filler(11),
             (DATA / "nvidia_smi_q_h800.txt").read_text(), _filler(5)]
    p = tmp_path / "mixed.log"
    p.write_text("".join(parts))
    one = ingest([p], options=IngestOptions(year=2026, block_bytes=1 << 24)).events
    for block in (4096, 4099, 5000, 8191):
        small = ingest([p], options=IngestOptions(year=2026, block_bytes=block)).events
        assert _sig(small) == _sig(one), block
    assert sum(e.kind == "child_failed" for e in one) == 7 and sum(e.kind == "clock_event" for e in one) == 9


def test_mixed_prefixes_crlf_bad_bytes_and_no_final_newline(tmp_path):
    lines = [
        b"May 18 19:02:39 node-1 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.",
        b"[Tue Aug 11 03:14:22 2026] NVRM: Xid (PCI:0000:3c:00): 48, pid=2, An uncorrectable double bit error",
        b"2026-08-11T03:14:22.5Z node-2 kernel: NVRM: Xid (PCI:0000:3d:00): 13, pid=3, Graphics Exception",
        b"[2022-02-16 01:23:00,852] [INFO] [Rank 3] OVERFLOW! Rank 3 Skipping step. Attempted loss scale: 2, reducing to 1",
        b"E1218 20:27:21.426415540 4242 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: -9) "
        b"local_rank: 1 (pid: 77) of binary: /usr/bin/python",
        b"\xff\xfe garbage \xc3( then RuntimeError: CUDA error: an illegal memory access was encountered",
        b"[default3]:[rank11]:[E ProcessGroupNCCL.cpp:563] [Rank 11] Watchdog caught collective operation timeout: "
        b"WorkNCCL(SeqNum=9, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600010 milliseconds",
    ]
    p = tmp_path / "mixed.log"
    p.write_bytes(b"\r\n".join(lines))              # CRLF, and the last line has no newline
    ev = ingest([p], options=OPTS).events
    assert [e.line for e in ev] == list(range(1, 8))

    def ns(*a, ms=0):
        return int(datetime(*a, tzinfo=UTC).timestamp()) * 10**9 + ms * 10**6

    assert (ev[0].ts_ns, ev[0].host) == (ns(2026, 5, 18, 19, 2, 39), "node-1")
    assert ev[1].ts_ns == ns(2026, 8, 11, 3, 14, 22) and ev[2].ts_ns == ns(2026, 8, 11, 3, 14, 22, ms=500)
    assert ev[3].ts_ns == ns(2022, 2, 16, 1, 23, 0, ms=852) and ev[3].rank == 3
    assert ev[4].ts_ns == ns(2026, 12, 18, 20, 27, 21) + 426415540 and ev[4].pid == 77
    assert ev[5].kind == "cuda_illegal_address" and "\ufffd" in ev[5].raw
    assert (ev[6].rank, ev[6].fields["local_rank"], ev[6].fields["seq"]) == (11, 3, 9)
    assert not ev[6].raw.endswith("\r")


def test_utc_offset_option(tmp_path):
    p = tmp_path / "k.log"
    p.write_text("May 18 19:02:39 node-1 kernel: NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.\n")
    utc = ingest([p], options=IngestOptions(year=2026)).events[0].ts_ns
    cest = ingest([p], options=IngestOptions(year=2026, utc_offset_s=7200)).events[0].ts_ns
    assert utc - cest == 7200 * 10**9


def test_very_long_line_then_record(tmp_path):
    p = tmp_path / "long.log"
    p.write_bytes(b"A" * (6 << 20) + b"\nNVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.\n")
    res = ingest([p], options=IngestOptions(year=2026, block_bytes=1 << 20))
    assert [(e.line, e.code) for e in res.events] == [(2, "79")]
    assert res.stats.lines == 2 and res.stats.bytes == p.stat().st_size
    assert [(w.line, "only its first" in w.message) for w in res.stats.warnings] == [(1, True)]


def test_stats_sink_and_streaming():
    got = []
    res = ingest([DATA], options=OPTS, sink=got.append)
    assert res.events == [] and len(got) == res.stats.events > 100
    sizes = sum(p.stat().st_size for p in DATA.iterdir() if p.suffix != ".md")
    lines = sum(len(p.read_bytes().splitlines()) for p in DATA.iterdir() if p.suffix != ".md")
    assert (res.stats.bytes, res.stats.lines, res.stats.files_read) == (sizes, lines, len(res.stats.files))
    stats = IngestStats()
    gen = iter_events([KERNEL], stats=stats)
    first = next(gen)
    assert first.line == 1 and first.kind == "xid"
    rest = list(gen)
    assert stats.events == 1 + len(rest) and stats.files_read == 1 and stats.mb_per_s > 0


def test_options_are_validated():
    with pytest.raises(ValueError, match="block_bytes"):
        IngestOptions(block_bytes=100)
    with pytest.raises(ValueError, match="utc_offset_s"):
        IngestOptions(utc_offset_s=20 * 3600)


def test_rank_from_key_value_and_pg_rank(tmp_path):
    p = tmp_path / "r.log"
    p.write_text("2026-01-01 12:00:00 host=n1 rank=5 local_rank=1 RuntimeError: CUDA error: an illegal memory access "
                 "was encountered\n"
                 "[E ProcessGroupNCCL.cpp:1 ] [PG 3 Rank 7] Timeout at NCCL work: 31, last enqueued NCCL work: 31, "
                 "last completed NCCL work: 30.\n")
    a, b = ingest([p], options=OPTS).events
    assert (a.kind, a.rank) == ("cuda_illegal_address", 5)
    assert (b.kind, b.rank, b.fields["pg"], b.fields["pg_rank"]) == ("last_enqueued", None, 3, 7)   # rank in PG 3 is not global


def test_year_from_mtime_with_new_year_rollover(tmp_path):
    import os

    p = tmp_path / "syslog"
    p.write_text("Dec 31 23:59:58 n1 kernel: NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.\n"
                 "Jan  1 00:00:03 n1 kernel: NVRM: Xid (PCI:0000:3c:00): 79, GPU has fallen off the bus.\n")
    mtime = datetime(2027, 1, 1, 0, 5, tzinfo=UTC).timestamp()
    os.utime(p, (mtime, mtime))
    a, b = ingest([p]).events                       # no year given: from mtime, December -> 2026
    assert a.ts_ns == int(datetime(2026, 12, 31, 23, 59, 58, tzinfo=UTC).timestamp()) * 10**9
    assert b.ts_ns == int(datetime(2027, 1, 1, 0, 0, 3, tzinfo=UTC).timestamp()) * 10**9
    a2, _ = ingest([p], options=IngestOptions(year=2027)).events   # an explicit year is taken as given
    assert a2.ts_ns == int(datetime(2027, 12, 31, 23, 59, 58, tzinfo=UTC).timestamp()) * 10**9


def test_loss_thinning(tmp_path):
    p = tmp_path / "train.log"
    p.write_text("".join(f"iter {i} step {i}: loss {2 - i / 100:.4f}\n" for i in range(10)) + "iter 10 step 10: loss nan\n")
    assert [e.kind for e in ingest([p]).events] == ["nan_loss"]
    every1 = ingest([p], options=IngestOptions(with_loss=True)).events
    assert [e.fields.get("iter") for e in every1] == list(range(11))
    # the first loss line, the first of each 32-line chunk, the last one before another record
    every3 = ingest([p], options=IngestOptions(with_loss=True, loss_every=3)).events
    assert [(e.kind, e.fields.get("iter")) for e in every3] == [("loss", 0), ("loss", 9), ("nan_loss", 10)]
    with pytest.raises(ValueError, match="loss_every"):
        IngestOptions(loss_every=0)


def _progress_log(path):
    """1000 loss lines (iter 0..999) with an NCCL WARN after iter 499 and a NaN loss at the end."""
    lines = [f"[rank0]: iter {i} step {i}: lm loss {2 - i / 1000:.4f}" for i in range(1000)]
    lines.insert(500, "node-1:11:12 [0] transport/net_ib.cc:1 NCCL WARN NET/IB : something odd")
    path.write_text("\n".join(lines) + "\niter 1000 step 1000: lm loss nan\n")
    return lines


def test_loss_thinning_keeps_first_sample_and_last_before_each_record(tmp_path):
    p = tmp_path / "train.log"
    lines = _progress_log(p)
    evs = ingest([p], options=IngestOptions(with_loss=True, loss_every=64)).events
    assert [e.kind for e in evs if e.kind != "loss"] == ["nccl_warn", "nan_loss"]
    got = [e.fields["iter"] for e in evs if e.kind == "loss"]
    # chunks of 32 lines; every 2nd chunk (64 // 32) gives its first loss line (line index -> iter: the
    # WARN line is index 500); plus iter 499 (before the WARN) and 999 (before the NaN)
    chunk_firsts = [idx if idx < 500 else idx - 1 for idx in range(0, len(lines), 64)]
    assert got == sorted({0, 499, 999, *chunk_firsts})
    assert all(e.line == lines.index(e.raw) + 1 for e in evs if e.kind == "loss")


@pytest.mark.parametrize("block_bytes", [4096, 16384])
def test_loss_thinning_across_blocks(tmp_path, block_bytes):
    p = tmp_path / "train.log"
    _progress_log(p)
    evs = ingest([p], options=IngestOptions(with_loss=True, loss_every=100, block_bytes=block_bytes)).events
    loss = [e.fields["iter"] for e in evs if e.kind == "loss"]
    assert loss[0] == 0 and 499 in loss and loss[-1] == 999          # exact at any block size
    assert loss == sorted(set(loss)) and 10 <= len(loss) <= 1000 // 32 + 3 * (p.stat().st_size // block_bytes + 1)


def test_walk_skips_fifo_but_reads_an_explicit_pipe(tmp_path):
    import os
    import threading

    (tmp_path / "d").mkdir()
    os.mkfifo(tmp_path / "d" / "pipe")
    shutil.copy(KERNEL, tmp_path / "d" / "kern.log")
    res = ingest([tmp_path / "d"], options=OPTS)          # must not block on the FIFO
    assert [f.path for f in res.stats.files] == [str(tmp_path / "d" / "kern.log")]
    assert any("not a regular file" in w.message for w in res.stats.warnings)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    writer = threading.Thread(target=lambda: fifo.write_bytes(KERNEL.read_bytes()))
    writer.start()
    piped = ingest([fifo], options=OPTS)
    writer.join()
    assert _sig(piped.events) == _sig(ingest([KERNEL], options=OPTS).events)


def test_tqdm_carriage_returns_before_a_record(tmp_path):
    bar = "".join(f"\rEpoch 3: {p:3d}%|{'#' * (p // 10):<10}| {p}/100 [00:{p:02d}<01:00, 1.5it/s]" for p in range(0, 100, 7))
    rec = ("[rank5]:[E1218 20:27:21.426415540 ProcessGroupNCCL.cpp:629] [Rank 5] Watchdog caught collective operation "
           "timeout: WorkNCCL(SeqNum=7, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600081 "
           "milliseconds before timing out.")
    p = tmp_path / "tqdm.log"
    p.write_bytes((bar + "\r" + rec + "\n").encode())
    (e,) = ingest([p], options=OPTS).events
    assert (e.kind, e.rank, e.fields["seq"], e.fields["level"]) == ("watchdog_timeout", 5, 7, "E")
    assert e.ts_ns == int(datetime(2026, 12, 18, 20, 27, 21, tzinfo=UTC).timestamp()) * 10**9 + 426415540
    assert e.raw.startswith("\rEpoch 3:")                       # raw text kept as read
