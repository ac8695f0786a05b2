"""Catalogues: hashes of the embedded upstream file, values against independent sources, unknown
codes, and consistency with the parsers (style convention 7)."""

from __future__ import annotations

import hashlib
import json
import re
from importlib import resources

import pytest

from gpufield.triage.catalog import UNKNOWN_BUCKET, ib_status, nccl_result, xid_catalog, xid_info
from gpufield.triage.parsers.kernel import SPECIAL_XIDS

DATA = resources.files("gpufield.triage").joinpath("data")

#: every immediate bucket an action table must handle (NVSentinel vocabulary + ours)
BUCKETS = {"RESTART_APP", "RESET_GPU", "RESTART_BM", "RESTART_VM", "IGNORE", "CONTACT_SUPPORT",
           "UNEXPECTED_ERR_REPORT_ISSUE", "WORKFLOW_XID_45", "WORKFLOW_XID_48", "WORKFLOW_NVLINK_ERR",
           "WORKFLOW_NVLINK5_ERR", "CHECK_MECHANICALS", "UPDATE_SWFW", "CHECK_UVM", "FOLLOW_LINKED_XID"}


def test_sources_hashes():
    sources = json.loads(DATA.joinpath("SOURCES.json").read_text("utf-8"))
    files = [k for k in sources if not k.startswith("_")]
    assert set(files) == {p.name for p in DATA.iterdir() if p.name.endswith(".csv")}
    for name in files:
        digest = hashlib.sha256(DATA.joinpath(name).read_bytes()).hexdigest()
        assert digest == sources[name]["sha256"], f"{name} changed: regenerate it and update SOURCES.json"


def test_nvsentinel_file_is_upstream_shape():
    rows = DATA.joinpath("xiderrorsmapping.csv").read_text("utf-8").splitlines()
    assert len(rows) == 162 and rows[78] == "79,ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS,RESTART_BM,FATAL"


def _triage_md_table(shared_dir) -> list[list[str]]:
    text = (shared_dir / "reference/triage.md").read_text("utf-8")
    section = text[text.index("### 2.1 Xid catalogue"):text.index("### 2.2")]
    rows = [[c.strip() for c in ln.strip().strip("|").split("|")] for ln in section.splitlines() if ln.startswith("| ")]
    return [r for r in rows if re.fullmatch(r"\d+", r[0])]


def test_xid_catalogue_matches_research_notes(shared_dir):
    """triage.md §2.1 restates mnemonic / bucket / fatal for the Xids that matter; compare each."""
    rows = _triage_md_table(shared_dir)
    assert len(rows) >= 25
    for code, mnemonic, short, bucket, fatal, _ in rows:
        info = xid_info(code)
        assert info.known, code
        assert info.mnemonic.split(" / ")[0] == mnemonic.split(" / ")[0], code
        assert info.description.startswith(short), code
        if bucket.isupper():
            assert info.bucket == bucket, code
        if fatal in ("yes", "no"):
            assert info.fatal is (fatal == "yes"), code


@pytest.mark.parametrize(("code", "bucket", "fatal"), [
    (79, "RESTART_BM", True), (48, "WORKFLOW_XID_48", True), (13, "RESTART_APP", False), (63, "IGNORE", False),
    (119, "RESET_GPU", True), (94, "RESTART_APP", False), (95, "RESET_GPU", True), (154, "FOLLOW_LINKED_XID", False),
])
def test_xid_examples(code, bucket, fatal):
    info = xid_info(code)
    assert (info.bucket, info.fatal) == (bucket, fatal)
    assert info.triage_meaning, "every Xid the triage notes discuss carries a meaning"


def test_newer_and_unknown_xids():
    assert xid_info(171).description == "Uncorrectable DRAM Error" and xid_info(171).bucket == UNKNOWN_BUCKET
    assert xid_info("172").known
    for bad in (9999, -1, "abc", ""):
        info = xid_info(bad)
        assert not info.known and info.bucket == UNKNOWN_BUCKET and "unknown Xid" in info.description


def test_every_bucket_is_in_the_vocabulary():
    assert {i.bucket for i in xid_catalog().values()} <= BUCKETS


def test_parser_special_cases_exist_in_catalogue():
    for code in SPECIAL_XIDS:
        assert xid_info(code).known and xid_info(code).mnemonic, f"parser special-cases Xid {code}: add it to the catalogue"


def test_ib_status_against_notes(shared_dir):
    text = (shared_dir / "reference/triage.md").read_text("utf-8")
    for code, name in re.findall(r"(\d+) `(IBV_WC_\w+)`", text):
        assert ib_status(code).name == name
    assert ib_status(13).name == "IBV_WC_RNR_RETRY_EXC_ERR" and ib_status(13).text == "RNR retry counter exceeded"
    assert ib_status(12).text == "transport retry counter exceeded"
    assert not ib_status(99).known and ib_status("x").name == "unknown"


def test_nccl_results_against_notes(shared_dir):
    text = (shared_dir / "reference/triage.md").read_text("utf-8")
    listed = dict(re.findall(r"(\d) `([^`]+)`", text[text.index("`ncclGetErrorString`"):text.index("PyTorch wraps")]))
    assert set(listed) == {str(i) for i in range(1, 9)}
    for code, msg in listed.items():
        assert nccl_result(code).text.startswith(msg.replace("(…)", "").rstrip()), code
    names = [nccl_result(i).name for i in range(8)]
    assert names == ["ncclSuccess", "ncclUnhandledCudaError", "ncclSystemError", "ncclInternalError",
                     "ncclInvalidArgument", "ncclInvalidUsage", "ncclRemoteError", "ncclInProgress"]
    assert not nccl_result(42).known


def test_top_level_reexports_are_the_catalogue_and_ingest_api():
    import sys

    import gpufield.triage as t
    from gpufield.triage import catalog

    # the function shadows the submodule attribute (as ``evaluate`` does); the module stays in sys.modules
    mod = sys.modules["gpufield.triage.ingest"]
    assert t.xid_info is catalog.xid_info and t.ib_status is catalog.ib_status and t.nccl_result is catalog.nccl_result
    assert t.ingest is mod.ingest and t.iter_events is mod.iter_events and t.IngestOptions is mod.IngestOptions
    assert t.xid_info(79).mnemonic == "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS"
    assert t.ib_status(12).name == "IBV_WC_RETRY_EXC_ERR" and t.nccl_result(6).name == "ncclRemoteError"


def test_meanings_with_commas_are_read_whole():
    """Fields with commas are quoted in the data files (they were cut at the first comma before)."""
    from gpufield.triage import nccl_result, xid_info

    assert nccl_result(5).triage_meaning.endswith("comm reuse): application bug")
    assert xid_info(48).triage_meaning.endswith("reset; recurring means RMA")
