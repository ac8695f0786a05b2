"""HTML report: lanes per host and rank with the blamed host/rank highlighted, corrected and raw
timelines labelled, a legend, evidence with file:line, Xid and telemetry charts, no network."""

from __future__ import annotations

import html
import re
from pathlib import Path

import pytest

from gpufield.triage import analyze, render_html
from gpufield.triage.report.html import timeline_svg_data
from gpufield.triage.telemetry_input import read_telemetry

SMI_CSV = Path(__file__).parent / "telemetry_data" / "node-b" / "smi-query.csv"


@pytest.fixture(scope="module")
def example():
    return analyze()


def test_lanes_per_host_and_rank_with_the_blamed_ones_marked(example):
    # the example's labelled root: Xid 79 on node-b, GPU 0000:ab:00.0, rank 13 (tests/triage/test_report.py)
    svg = timeline_svg_data(example)
    labels = {ln["label"]: ln["blamed"] for ln in svg["lanes"]}
    assert labels["node-b / rank 13"] == "rank"
    assert labels["node-b (host)"] == "host" and labels["node-b / rank 8"] == "host"
    assert labels["node-a / rank 0"] == ""
    roots = [d for d in svg["dots"] if d.role == "root"]
    assert roots and all("node-b/kern.log" in d.title for d in roots)


def test_corrected_and_raw_times_are_separate_views(example):
    off_ns = example.clock_offsets_s["node-b"] * 1e9
    cor, raw = timeline_svg_data(example, corrected=True), timeline_svg_data(example, corrected=False)
    assert cor["corrected"] and not raw["corrected"]
    page = render_html(example)
    assert "skew-corrected times" in page and "raw logged times" in page
    assert "node-b +40.012 s" in page  # the offset the corrected view subtracts
    # node-b's Xid: logged 40 s after the corrected time; each tooltip gives both
    xid = example.verdict.root
    t_cor = example.engine.timeline.t(xid)
    assert (xid.ts_ns - t_cor) == pytest.approx(off_ns, abs=1e6)
    tip = next(d.title for d in cor["dots"] if d.role == "root" and f":{xid.line} " in d.title)
    assert "logged 2026-03-21T01:14:17.000Z" in tip and "corrected 2026-03-21T01:13:36.988Z" in tip


def test_legend_evidence_and_no_network(example):
    page = render_html(example)
    for word in ("root evidence", "cascade evidence", "blamed rank", "blamed host"):
        assert word in page
    text = html.unescape(page)
    for inc in example.incidents:
        for x in inc.evidence:
            assert f"{x.event.file}:{x.event.line}" in text
    assert not re.search(r"""(?:src|href)\s*=\s*["']?(?:https?:)?//""", page, re.IGNORECASE)
    assert "<script" not in page.lower() and "@import" not in page and "url(" not in page
    assert 'class="blame">rank 13' in page and 'class="blame">GPU 0000:ab:00.0' in page


def test_xid_and_telemetry_charts(example):
    bare = render_html(example)
    assert "Xid events (cumulative" in bare and "GPU power" not in bare
    samples = read_telemetry(SMI_CSV)
    page = render_html(example, telemetry=samples)
    for title in ("GPU power (W)", "SM clock (MHz)", "memory clock (MHz)", "ECC error counters (count)"):
        assert title in page
    # one line per GPU in the power chart (2 GPUs in the CSV), labelled with the host from its folder
    power = page[page.index("GPU power (W)"):page.index("SM clock (MHz)")]
    assert power.count("<polyline") == 2 and "node-b GPU 1" in power

