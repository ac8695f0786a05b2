"""Report tests: JSON schema and values, self-contained HTML with the evidence lines, no overwrite."""

from __future__ import annotations

import html
import json
import re

import pytest
from rich.console import Console

from gpufield.errors import InputError
from gpufield.triage import analyze, dumps, render, render_html, store_events, write_html
from gpufield.triage.engine.actions import ACTION_KINDS
from gpufield.triage.engine.model import TAXONOMY


@pytest.fixture(scope="module")
def example():
    return analyze()


def test_json_schema_and_example_verdict(example):
    d = json.loads(dumps(example))
    assert d["schema"] == "gpufield.triage.result/1" and d["example"] is True
    assert d["verdict"]["class"] == "GPU_FELL_OFF_BUS"
    incs = d["incidents"]
    assert incs, "incidents list must not be empty"
    for inc in incs:
        assert inc["class"] in TAXONOMY
        assert 0.0 <= inc["confidence"] <= 1.0
        assert inc["action_kind"] in ACTION_KINDS and isinstance(inc["action"], str) and inc["action"]
        assert set(inc["root"]) >= {"host", "rank", "gpu", "file", "line"}
        assert isinstance(inc["cascade_count"], int) and inc["cascade_count"] >= 0
        assert inc["evidence"] and all({"file", "line", "raw", "count", "role"} <= set(x) for x in inc["evidence"])
        assert inc["root_cause"] in (inc["class"], "UNKNOWN")
    top = incs[0]
    # values from the example's own files: node-b kern.log holds the Xid 79 for bus 0000:ab:00
    assert top["root"]["host"] == "node-b" and top["root"]["gpu"] == "0000:ab:00.0"
    # rank 13 from the NCCL init line "rank 13 ... busId ab000" on node-b (topology join)
    assert top["blamed"] == {"host": "node-b", "gpu": "0000:ab:00.0", "rank": 13}
    # host side (Xid on 0000:ab:00) and job side (rank 13 silent at SeqNum 48213) agree
    assert "Rank 13, the only rank that never reported" in top["note"] and top["confidence"] == 0.95
    assert top["root"]["file"].endswith("node-b/kern.log")
    line_no = top["root"]["line"]
    text = open(top["root"]["file"], encoding="utf-8").read().splitlines()[line_no - 1]
    assert "Xid (PCI:0000:ab:00): 79" in text
    # the cascade: 15 watchdog timeouts (every rank but 13) are one deduplicated evidence line
    wd = [x for x in top["evidence"] if x["kind"] == "watchdog_timeout"]
    assert len(wd) == 1 and wd[0]["count"] == 15 and sorted(wd[0]["ranks"]) == [r for r in range(16) if r != 13]
    assert d["clock_offsets_s"]["node-b"] == pytest.approx(40.0, abs=0.5)


def test_html_is_self_contained_and_holds_the_evidence(example):
    page = render_html(example)
    assert page.lstrip().lower().startswith("<!doctype html>")
    # no external assets: no src=/href= to anything, no stylesheets or scripts fetched
    assert not re.search(r"""(?:src|href)\s*=\s*["']?(?:https?:)?//""", page, re.IGNORECASE)
    assert "<script" not in page.lower() and "<link" not in page.lower() and "@import" not in page
    assert "<svg" in page and "<circle" in page
    for inc in example.incidents:
        for x in inc.evidence:
            assert x.event.raw in html.unescape(page)
    assert "name=<unknown>" not in page  # log text is escaped, never interpreted as markup
    # lanes by host and rank
    assert "node-b / rank 8" in page and "node-a / rank 0" in page


def test_write_html_refuses_to_overwrite(example, tmp_path):
    out = tmp_path / "r.html"
    out.write_text("user data", encoding="utf-8")
    with pytest.raises(InputError, match="refusing to overwrite"):
        write_html(example, out)
    assert out.read_text(encoding="utf-8") == "user data"
    write_html(example, out, force=True)
    assert "GPU_FELL_OFF_BUS" in out.read_text(encoding="utf-8")
    fresh = write_html(example, tmp_path / "new.html")
    assert fresh.stat().st_size > 1000 and not list(tmp_path.glob(".*.tmp"))
    import os
    import stat

    old = os.umask(0o027)  # the report gets a new file's mode (0666 less the umask), not mkstemp's 0600
    try:
        assert stat.S_IMODE(write_html(example, tmp_path / "m.html").stat().st_mode) == 0o640
    finally:
        os.umask(old)


def test_store_events_to_duckdb(example, tmp_path):
    pytest.importorskip("duckdb")
    from gpufield.telemetry.store import Store

    db = tmp_path / "ev.duckdb"
    n = store_events(example, db)
    assert n == len(example.events)
    with Store(db, mode="r") as st:
        rows = st.query("select kind, count(*) as n from events where kind = 'xid' group by kind")
    assert rows == [{"kind": "xid", "n": 1}]
    with pytest.raises(InputError, match="refusing to overwrite"):
        store_events(example, db)
    store_events(example, db, force=True)  # appends
    with Store(db, mode="r") as st:
        assert st.query("select count(*) as n from events")[0]["n"] == 2 * n


def test_summary_fits_one_screen(example):
    console = Console(width=100, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    render(example, console)
    out = console.export_text()
    assert "GPU_FELL_OFF_BUS" in out and "EXCLUDE_NODE" in out and "node-b" in out
    assert "Xid (PCI:0000:ab:00): 79" in out
    assert len(out.splitlines()) <= 40
