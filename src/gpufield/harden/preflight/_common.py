"""Helpers shared by the check modules (internal)."""

from __future__ import annotations

from typing import Any

from gpufield.harden.preflight.model import CheckResult, NvmlState, PreflightContext

GIB = 2**30
MIB = 2**20

WEDGED_FIX = ("the NVIDIA driver is not answering: drain the node, collect nvidia-bug-report.sh, "
              "then reset the GPU (nvidia-smi -r) or reboot")


def result(name: str, status: str, reason: str, *, severity: str | None = None, values: dict[str, Any] | None = None,
           fix: str | None = None) -> CheckResult:
    """A :class:`CheckResult` with the default severity of its status (fail: critical, warn: warning)."""
    sev = severity or {"fail": "critical", "warn": "warning"}.get(status, "info")
    return CheckResult(name=name, status=status, severity=sev, reason=reason, values=values or {}, fix=fix)


def nvml_gate(ctx: PreflightContext, name: str, need: str) -> tuple[NvmlState, CheckResult | None]:
    """The NVML state, and a skip / fail result when it cannot serve a check needing ``need``.

    Args:
        ctx: the context.
        name: the asking check's name.
        need: ``"gpus"`` (enumeration), ``"samples"`` or ``"health"``.

    Returns:
        ``(state, None)`` when the readings are there, else ``(state, result)``: skip when there is
        no NVIDIA driver / NVML, fail when an NVML call timed out before the readings were taken.
    """
    st = ctx.nvml_state()
    if st.unavailable is not None:
        return st, result(name, "skip", f"no NVIDIA driver / NVML not found: {st.unavailable}")
    missing = {"gpus": not st.gpus, "samples": st.samples is None, "health": st.health is None}[need]
    if st.timeout is not None and missing:
        return st, result(name, "fail", st.timeout, values={"nvml_stage": st.stage}, fix=WEDGED_FIX)
    return st, None


def per_gpu(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """``{"gpus": rows}``: the per-GPU part of a result's values."""
    return {"gpus": rows}


def name_list(xs: list[str], limit: int = 4) -> str:
    """``"a, b, c"`` shortened to ``limit`` items plus a count."""
    head = ", ".join(xs[:limit])
    return head + (f" and {len(xs) - limit} more" if len(xs) > limit else "")
