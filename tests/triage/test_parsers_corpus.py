"""Every file of the labelled corpus (../shared/data/triage-cases, INDEX.md) parses into the events a
reader of that file expects, and the prefilter never hides a record.

The expected kinds per file were written by reading each line against INDEX.md's description
(e.g. case 01: two watchdog timeouts on SeqNum 1580, then two "last enqueued 1582 / completed 1579"
status lines).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gpufield.triage.ingest import IngestOptions, ingest
from gpufield.triage.parsers import LOSS_PARSER, PARSERS
from gpufield.triage.protocols import LineContext, RecordParser

DATA = Path(__file__).parent / "data"

#: file prefix -> [(line, kind)] in file order
EXPECTED = {
    "01": [(1, "watchdog_timeout"), (2, "watchdog_timeout"), (3, "last_enqueued"), (4, "last_enqueued")],
    "02": [(1, "watchdog_timeout"), (2, "pg_teardown"), (4, "pg_teardown")],
    "03": [(1, "watchdog_timeout"), (2, "watchdog_timeout"), (3, "last_enqueued"), (4, "pg_teardown"), (5, "pg_teardown")],
    "05": [(1, "heartbeat_timeout"), (2, "flight_recorder"), (3, "heartbeat_timeout")],
    "06": [(1, "ib_completion_error")],
    "07": [(1, "ib_completion_error"), (2, "nccl_return"), (3, "nccl_return"), (4, "nccl_return"),
           (5, "ib_completion_error"), (6, "nccl_return")],
    "08": [(1, "ib_async_event")],
    "10": [(1, "nccl_remote_error")] + [(n, "nccl_return") for n in range(2, 7)] + [(7, "nccl_warn"), (8, "nccl_remote_error")],
    "12": [(1, "nccl_system_error"), (2, "nccl_system_error")],
    "13": [(1, "xid")],
    "15": [(1, "gpu_fell_off_bus"), (4, "nvrm_other"), (5, "nvrm_other")],
    "16": [(2, "gpu_handle_error"), (3, "pcie_aer"), (7, "pcie_aer")],
    "17": [(1, "xid"), (2, "xid"), (3, "xid"), (4, "nvrm_other"), (5, "xid")],
    "18": [(1, "cuda_error"), (3, "xid")],
    "19": [(1, "cuda_error")],
    "21": [(1, "cuda_error"), (2, "nvrm_other"), (3, "gpu_reset_required")],
    "22": [(1, "cuda_illegal_address")],
    "24": [(2, "loss_scale_overflow"), (3, "skipped_step")],
    "25": [(n, "nan_loss") for n in range(4, 8)],
    "26": [(1, "cuda_oom")],
    "28": [(1, "cuda_oom")],
    "29": [(8, "child_failed")],
    "30": [(1, "bus_error"), (3, "python_exception")],
    "31": [(1, "rendezvous_error"), (2, "rendezvous_error")],
    "32": [(5, "p2p_access"), (6, "p2p_access")] + [(n, "p2p_bandwidth") for n in (9, 10, 11, 14, 15, 16)],
    "33": [(1, "restart_loop")],
    "34": [(n, "straggler_finding") for n in range(2, 8)],
}


@pytest.fixture(scope="module")
def corpus(shared_dir) -> dict[str, list]:
    res = ingest([shared_dir / "data/triage-cases"], options=IngestOptions(year=2026))
    out: dict[str, list] = {}
    for e in res.events:
        out.setdefault(Path(e.file).name[:2], []).append(e)
    return out


def test_every_corpus_file_is_covered(shared_dir):
    files = sorted(p.name[:2] for p in (shared_dir / "data/triage-cases").glob("*.log"))
    assert files == sorted(EXPECTED)


@pytest.mark.parametrize("case", sorted(EXPECTED))
def test_corpus_kinds(corpus, case):
    assert [(e.line, e.kind) for e in corpus[case]] == EXPECTED[case]


def test_corpus_key_values(corpus):
    c01 = corpus["01"]
    assert {e.rank for e in c01[:2]} == {0, 4} and {e.fields["seq"] for e in c01[:2]} == {1580}
    assert (c01[2].fields["last_enqueued"], c01[2].fields["last_completed"], c01[2].fields["pg"]) == (1582, 1579, 1)
    assert corpus["02"][0].fields["numel_in"] == 1 and corpus["02"][0].fields["timeout_ms"] == 1800000
    c03 = {e.rank: e.fields for e in corpus["03"][:2]}
    assert (c03[0]["seq"], c03[0]["op_type"], c03[1]["seq"], c03[1]["op_type"]) == (315, "ALLREDUCE", 313, "_ALLGATHER_BASE")
    assert corpus["05"][2].fields["timeout_s"] == 600 and corpus["05"][2].severity == "fatal"
    assert corpus["06"][0].fields["status"] == 12 and corpus["07"][0].fields["status"] == 4
    assert {e.host for e in corpus["07"]} == {"<host-A>", "<host-B>"}
    x13 = corpus["13"][0]
    assert (x13.code, x13.gpu_bdf, x13.host, x13.mono_s) == ("79", "0000:03:00.0", "<host-A>", 14282.651831)
    assert corpus["15"][0].gpu_bdf == "0000:b3:00.0" and corpus["15"][2].fields["driver_version"] == "570.158.01"
    assert [e.code for e in corpus["17"] if e.kind == "xid"] == ["119"] * 4
    assert corpus["18"][1].fields["phys_addr"] == "0x7fdf0de80"
    assert corpus["19"][0].fields["cuda_error"] == "cudaErrorECCUncorrectable"
    assert corpus["21"][2].fields["status"] == "0x00000062"
    assert corpus["22"][0].rank == 1 and corpus["22"][0].fields["via"] == "watchdog"
    assert corpus["24"][0].fields["new_loss_scale"] == 2147483648.0
    assert [e.fields["iter"] for e in corpus["25"]] == [16, 17, 18, 19] and corpus["25"][0].fields["step"] == 1
    assert corpus["26"][0].fields["phase"] == "checkpoint_gather" and corpus["28"][0].gpu_index == 3
    c29 = corpus["29"][0]
    assert (c29.rank, c29.code, c29.fields["signal_name"], c29.pid, c29.host) == (2, "-9", "SIGKILL", 36071, "<host-A>")
    assert corpus["30"][1].fields["errno"] == 28
    assert corpus["31"][0].fields["endpoint"] == "<ip-A>:1234"
    c34 = corpus["34"]
    assert [e.fields.get("step_ms") for e in c34[:4]] == [293.0, 292.2, 293.0, 293.1]
    assert (c34[5].fields["finding"], c34[5].rank, c34[5].fields["median_ms"]) == ("INPUT_STRAGGLER", 2, 10.4)


def _brute_force(path: Path) -> list[tuple[int, str]]:
    """Every line offered to every parser, no prefilter (records joined the same way)."""
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    out, i = [], 0
    while i < len(lines):
        for p in PARSERS:
            ctx = LineContext(str(path), i + 1, 2026)
            if isinstance(p, RecordParser) and p.opens_record(lines[i]):
                rec = [lines[i]]
                while i + len(rec) < len(lines) and p.continues_record(rec, lines[i + len(rec)]):
                    rec.append(lines[i + len(rec)])
                out += [(e.line, e.kind) for e in p.parse_record(rec, ctx)]
                i += len(rec) - 1
                break
            e = p.parse_line(lines[i], ctx)
            if e is not None:
                out.append((e.line, e.kind))
                break
        i += 1
    return out


def _all_files(shared: Path | None) -> list[Path]:
    files = sorted(p for p in DATA.iterdir() if p.suffix != ".md")
    if shared is not None:
        files += sorted((shared / "data/triage-cases").glob("*.log"))
    return files


def test_prefilter_hides_nothing(shared_dir):
    for path in _all_files(shared_dir):
        scanned = [(e.line, e.kind) for e in ingest([path], options=IngestOptions(year=2026)).events]
        assert scanned == _brute_force(path), path.name


def test_keywords_cover_prefilters(shared_dir):
    """Contract of LogParser.keywords: every line a prefilter matches contains one of its keywords."""
    for path in _all_files(shared_dir):
        for n, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            for p in (*PARSERS, LOSS_PARSER):
                if re.search(p.prefilter, line):
                    assert any(k in line for k in p.keywords), f"{p.name} keywords miss {path.name}:{n}"


def test_events_follow_the_contract(shared_dir):
    """Kinds, sources, severities and fields are those documented in gpufield.triage.events."""
    from typing import get_args

    from gpufield.triage.events import COMMON_FIELDS, KINDS, OTHER_SOURCES, SOURCES, Severity
    from gpufield.triage.protocols import LogParser

    assert all(isinstance(p, LogParser) for p in (*PARSERS, LOSS_PARSER))
    assert {p.name for p in PARSERS if isinstance(p, RecordParser)} == {"kernel", "torchrun", "train", "smi", "torch", "smi_csv", "python"}
    res = ingest([DATA, shared_dir / "data/triage-cases"], options=IngestOptions(year=2026, with_loss=True))
    seen = set()
    for e in res.events:
        source, _, fields = KINDS[e.kind]
        assert e.source in SOURCES and e.source in (source, *OTHER_SOURCES.get(e.kind, ())), e.where
        assert e.severity in get_args(Severity), e.where
        assert set(e.fields) <= set(fields) | set(COMMON_FIELDS), (e.where, set(e.fields) - set(fields))
        assert e.raw and e.line >= 1 and e.file
        seen.add(e.kind)
    assert len(seen) >= 40          # the fixtures and corpus exercise nearly every kind
