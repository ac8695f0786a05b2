"""Flight Recorder dumps (issue 23): real torch 2.13 gloo dumps captured by
``benchmarks/triage_fr_capture.py`` (rank 1 busy before collective 4 while rank 0 times out in it),
the restricted unpickler, and the missing-rank verdict on a collective timeout."""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path

import pytest

from gpufield.errors import InputError
from gpufield.triage import analyze
from gpufield.triage.ingest import ingest
from gpufield.triage.parsers.flight_recorder import FlightRecorderParser, load_restricted

FR = Path(__file__).parent / "fr_data"


class _Evil:
    def __reduce__(self):
        return (os.system, ("touch /tmp/gpufield-fr-pwned",))


def test_real_dumps_decode_to_per_rank_status():
    evs = {e.rank: e for e in ingest([FR / "fr_trace_0", FR / "fr_trace_1"]).events}
    assert evs[0].fields["last_enqueued"] == 4 and evs[0].fields["last_completed"] == 3
    assert evs[1].fields["last_enqueued"] == 3
    assert evs[0].fields["entry"].startswith("all_reduce SeqNum 4 (scheduled, input [[1024]])")
    assert evs[0].fields["timeout_ms"] == 3000


def test_collective_timeout_names_the_rank_that_never_reached_the_seqnum():
    res = analyze([str(FR)])
    top = res.verdict
    assert top is not None and top.cls == "NCCL_COLLECTIVE_TIMEOUT" and not top.established
    assert top.rank == 1  # the busy rank, not rank 0 that timed out waiting
    assert "rank(s) 1 never reached SeqNum 4 on PG 0" in top.note and "SeqNum 3" in top.note


def test_malicious_pickle_is_refused_and_never_executed(tmp_path):
    marker = Path("/tmp/gpufield-fr-pwned")
    marker.unlink(missing_ok=True)
    evil = pickle.dumps({"version": "2.10", "pg_config": {}, "entries": [_Evil()]}, protocol=2)
    with pytest.raises(InputError, match="not allowed"):
        load_restricted(evil)
    f = tmp_path / "fr_trace_0"
    f.write_bytes(evil)
    res = ingest([f])
    assert res.events == [] and any("not allowed" in str(w) for w in res.stats.warnings)
    assert not marker.exists()


def test_json_variant_same_keys(tmp_path):
    # _dump_fr_trace_json writes the same dict as JSON; built here from the real pickle
    dump = load_restricted((FR / "fr_trace_1").read_bytes())
    f = tmp_path / "nccl_trace_rank_1.json"
    f.write_text(json.dumps(dump), encoding="utf-8")
    (e,) = FlightRecorderParser().parse_file(f.read_bytes(), str(f))
    assert (e.rank, e.fields["last_enqueued"]) == (1, 3)
