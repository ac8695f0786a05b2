"""Renderers of a triage result: rich one-screen summary, JSON, self-contained HTML (internal)."""

from __future__ import annotations

from gpufield.triage.report.html import render_html, write_html
from gpufield.triage.report.json_export import dumps, to_dict
from gpufield.triage.report.summary import one_line, render

__all__ = ["dumps", "one_line", "render", "render_html", "to_dict", "write_html"]
