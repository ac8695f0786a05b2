"""Prometheus text-format parser: real exporter text, prometheus_client as oracle, malformed input."""

from __future__ import annotations

import io
import math
from pathlib import Path

import pytest

from gpufield.errors import InputError
from gpufield.telemetry import iter_samples, parse_file, parse_text

DATA = Path(__file__).parent / "data"
FIXTURES = ["dcgm_exporter.prom", "node_exporter.prom", "prometheus_docs_example.prom",
            "vllm_scrape_t0.prom", "vllm_scrape_t1.prom"]


def test_docs_example():
    fams = parse_file(str(DATA / "prometheus_docs_example.prom"))
    req = fams["http_requests_total"]
    assert req.type == "counter" and req.help == "The total number of HTTP requests."
    assert [(s.labels, s.value, s.timestamp_ms) for s in req.samples] == [
        ({"method": "post", "code": "200"}, 1027.0, 1395066363000),
        ({"method": "post", "code": "400"}, 3.0, 1395066363000)]
    (ms,) = fams["msdos_file_access_time_seconds"].samples
    assert ms.labels == {"path": "C:\\DIR\\FILE.TXT", "error": 'Cannot find file:\n"FILE.TXT"'}
    assert ms.value == 1.458255915e9 and ms.type == "untyped"
    (w,) = fams["something_weird"].samples
    assert w.value == math.inf and w.timestamp_ms == -3982045
    h = fams["http_request_duration_seconds"]
    assert h.type == "histogram" and len(h.samples) == 8
    assert {s.family for s in h.samples} == {"http_request_duration_seconds"}
    assert h.samples[5].labels == {"le": "+Inf"} and h.samples[5].value == 144320
    s = fams["rpc_duration_seconds"]
    assert s.type == "summary" and [x.labels.get("quantile") for x in s.samples][:2] == ["0.01", "0.05"]
    assert s.samples[-1].name == "rpc_duration_seconds_count" and s.samples[-1].value == 2693
    assert fams["escaped_help"].help == "A help with a backslash \\ and a newline \n in it."
    assert math.isnan(fams["escaped_help"].samples[0].value)
    assert fams["negative_inf_value"].samples[0].labels == {"a": "b"}  # trailing comma allowed
    assert fams["negative_inf_value"].samples[0].value == -math.inf


def test_dcgm_exporter_text():
    fams = parse_file(str(DATA / "dcgm_exporter.prom"))
    xid = {s.labels["gpu"]: s for s in fams["DCGM_FI_DEV_XID_ERRORS"].samples}
    assert xid["1"].value == 79 and xid["1"].labels["err_msg"] == "GPU has fallen off the bus"
    assert xid["1"].labels["pci_bus_id"] == "00000000:28:00.0" and xid["1"].labels["Hostname"] == "node-a"
    power = [s.value for s in fams["DCGM_FI_DEV_POWER_USAGE"].samples]
    assert power == [691.93, 80.364]
    assert fams["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"].type == "counter"
    old = [s.value for s in fams["DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"].samples]
    new = [s.value for s in fams["DCGM_FI_DEV_CLOCKS_EVENT_REASONS"].samples]
    assert old == new == [4.0, 72.0]
    assert fams["DCGM_FI_DEV_ROW_REMAP_FAILURE"].samples[1].value == 1
    lines = (DATA / "dcgm_exporter.prom").read_text().splitlines()
    for fam in fams.values():
        for s in fam.samples:  # line numbers point at the sample's own text
            assert lines[s.line - 1].startswith(s.name + "{")


def _norm(name: str) -> str:
    # prometheus_client names counter samples "<family>_total" even when the text wrote no _total
    return name[: -len("_total")] if name.endswith("_total") else name


@pytest.mark.parametrize("name", FIXTURES)
def test_agrees_with_prometheus_client_parser(name):
    """Every sample (name, labels, value, timestamp) equals what prometheus_client parses."""
    oracle = pytest.importorskip("prometheus_client.parser")
    text = (DATA / name).read_text()
    ours = {(_norm(s.name), tuple(sorted(s.labels.items()))): (s.value, s.timestamp_ms)
            for s in iter_samples(text.splitlines())}
    theirs = {}
    for fam in oracle.text_string_to_metric_families(text):
        for s in fam.samples:
            ts = None if s.timestamp is None else round(float(s.timestamp) * 1000)
            theirs[(_norm(s.name), tuple(sorted(s.labels.items())))] = (s.value, ts)
    assert ours.keys() == theirs.keys()
    for k, (v, ts) in ours.items():
        tv, tts = theirs[k]
        assert ts == tts, k
        assert v == tv or (math.isnan(v) and math.isnan(tv)), k
    assert len(ours) == sum(1 for line in text.splitlines() if line.strip() and not line.startswith("#"))


def test_streams_from_a_file_object():
    f = io.StringIO("# TYPE a gauge\r\na 1\r\nb{x=\"y\"} 2\n")
    got = [(s.name, s.value, s.line, s.type) for s in iter_samples(f)]
    assert got == [("a", 1.0, 2, "gauge"), ("b", 2.0, 3, "untyped")]


@pytest.mark.parametrize(("text", "line", "col", "match"), [
    ("ok 1\nbad{gpu=\"0\" 1\n", 2, 13, "expected ',' or '}'"),
    ("x{gpu=0} 1\n", 1, 7, "expected '\"' to open the value of label 'gpu'"),
    ("x{gpu} 1\n", 1, 6, "expected '=' after label name 'gpu'"),
    ("x{9gpu=\"0\"} 1\n", 1, 3, "expected a label name"),
    ("x{gpu=\"0} 1\n", 1, 8, "unterminated value"),
    ("\n\nx abc\n", 3, 3, "invalid value 'abc'"),
    ("x\n", 1, 2, "missing value"),
    ("x 1 12.5\n", 1, None, "invalid timestamp '12.5'"),
    ("x 1 2 3\n", 1, None, "unexpected text '3'"),
    ("x{a=\"1\",a=\"2\"} 1\n", 1, 9, "duplicate label 'a'"),
    ("# TYPE x countr\n", 1, None, "unknown type 'countr'"),
    ("# TYPE x gauge\n# TYPE x gauge\n", 2, None, "second # TYPE"),
    ("x 1\n# TYPE x gauge\n", 2, None, "after its samples"),
    ("# TYPE h histogram\nh_bucket 1\n", 2, None, "without an 'le' label"),
    ("# TYPE s summary\ns 1\n", 2, None, "without a 'quantile' label"),
    ("1x 1\n", 1, 1, "expected a metric name"),
    ("x{gpu=\"0\"}1\n", 1, None, "expected a space"),
])
def test_malformed_lines_name_file_line_and_expectation(text, line, col, match):
    with pytest.raises(InputError, match=match) as e:
        list(iter_samples(text.splitlines(), path="scrape.prom"))
    assert e.value.path == "scrape.prom" and e.value.line == line
    if col is not None:
        assert e.value.column == col
    assert str(e.value).startswith(f"scrape.prom:{line}")


def test_parse_file_error_names_the_file(tmp_path):
    p = tmp_path / "m.prom"
    p.write_text("a 1\nb{ 2\n")
    with pytest.raises(InputError) as e:
        parse_file(str(p))
    assert str(e.value).startswith(f"{p}:2:")


def test_family_without_samples_keeps_metadata():
    fams = parse_text("# HELP z Zed.\n# TYPE z counter\n")
    assert fams["z"].type == "counter" and fams["z"].help == "Zed." and fams["z"].samples == []


def test_round_trip_of_prometheus_client_output_property():
    """Labels with any text and any float survive prometheus_client's writer and our parser."""
    pc = pytest.importorskip("prometheus_client")
    from hypothesis import given, settings
    from hypothesis import strategies as st

    @settings(max_examples=60, deadline=None)
    @given(st.lists(st.tuples(st.text(max_size=12), st.floats(allow_nan=True, allow_infinity=True)),
                    min_size=1, max_size=5, unique_by=lambda t: t[0]))
    def check(rows):
        reg = pc.CollectorRegistry()
        g = pc.Gauge("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", ["err_msg"], registry=reg)
        for label, value in rows:
            g.labels(err_msg=label).set(value)
        fam = parse_text(pc.generate_latest(reg).decode())["DCGM_FI_DEV_POWER_USAGE"]
        got = {s.labels["err_msg"]: s.value for s in fam.samples}
        assert got.keys() == {lab for lab, _ in rows}
        for label, value in rows:
            assert got[label] == value or (math.isnan(value) and math.isnan(got[label]))

    check()
