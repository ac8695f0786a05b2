"""The terminal evidence table wraps file:line instead of cutting it (80 and 160 columns)."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from gpufield.triage import analyze, render
from gpufield.triage.report.summary import where_of

HOST = "gpu-node-with-a-rather-long-name-b17.cluster-west.example.com"


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    d = tmp_path_factory.mktemp("wrap") / HOST
    d.mkdir()
    f = d / "kern.log-20260321-rotated.1"
    lines = [f"Mar 21 01:14:{s:02d} {HOST} kernel: usb 1-1: port {s} reset\n" for s in range(40)]
    lines.append(f"Mar 21 01:14:59 {HOST} kernel: NVRM: Xid (PCI:0000:ab:00): 79, pid=1234, name=python, "
                 "GPU has fallen off the bus.\n")
    f.write_text("".join(lines))
    return analyze([f])


def _cells(text: str) -> list[str]:
    """The 'where / line' column of every panel line."""
    lines = text.splitlines()
    head = next(ln for ln in lines if "where / line" in ln)
    start = head.index("where / line")
    return [ln[start:].rstrip().rstrip("│").rstrip() for ln in lines if len(ln) > start]


@pytest.mark.parametrize("width", [80, 160])
def test_file_line_is_whole_at_any_width(result, width):
    con = Console(width=width, record=True, file=io.StringIO())
    render(result, con)
    text = con.export_text()
    where = where_of(result.verdict.root)
    assert where == f"{HOST}/kern.log-20260321-rotated.1:41" and len(where) > 80 - 20
    cells = _cells(text)
    i = next(k for k, c in enumerate(cells) if c and where.startswith(c))
    joined = ""
    while len(joined) < len(where):
        joined += cells[i]
        i += 1
    assert joined == where  # folded over lines when narrow, never cut with an ellipsis
    assert (where in text) == (width == 160)
