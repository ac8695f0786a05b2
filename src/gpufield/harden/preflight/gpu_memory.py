"""GPU memory health: ECC counts, retired pages, row remapping and the driver's recovery action.

Semantics (``../shared/reference/triage.md`` section 2.4; NVIDIA A100+ memory error management,
https://docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/): a *pending* row remap is applied at the
next GPU reset, a remap *failure* is an RMA condition; pre-Ampere GPUs retire pages instead and a
*pending* retirement waits for a driver reload. Volatile counters reset at driver load, aggregate
ones persist for the GPU's life.
"""

from __future__ import annotations

from typing import Any

from gpufield.harden.preflight._common import name_list, nvml_gate, per_gpu, result
from gpufield.harden.preflight.model import CheckResult, PreflightContext
from gpufield.telemetry.nvml_health import RECOVERY_ACTIONS

__all__ = ["EccErrors", "RetiredPages", "RowRemap"]

_RESET_FIX = ("drain the node, then reset the GPU (nvidia-smi -r -i <index>) so pending remaps/retirements "
              "take effect; RMA the GPU if errors come back")


class EccErrors:
    """Uncorrectable ECC errors since driver load (fail) or ever (warn); ECC switched off (warn)."""

    name = "gpu.ecc"
    description = "uncorrectable ECC error counts (volatile and aggregate), ECC mode"

    def run(self, ctx: PreflightContext) -> CheckResult:
        """See the class docstring."""
        st, gate = nvml_gate(ctx, self.name, "samples")
        if gate:
            return gate
        health = {h.index: h for h in st.health or []}
        rows: list[dict[str, Any]] = []
        vol, agg, off = [], [], []
        for s in st.samples:
            h = health.get(s.index)
            row = {"index": s.index, "volatile_uncorrected": s.ecc_volatile_uncorrected,
                   "aggregate_uncorrected": s.ecc_aggregate_uncorrected,
                   "volatile_corrected": s.ecc_volatile_corrected, "aggregate_corrected": s.ecc_aggregate_corrected,
                   "ecc_enabled": None if h is None else h.ecc_enabled}
            rows.append(row)
            if (s.ecc_volatile_uncorrected or 0) > 0:
                vol.append(f"GPU {s.index}: {s.ecc_volatile_uncorrected}")
            elif (s.ecc_aggregate_uncorrected or 0) > 0:
                agg.append(f"GPU {s.index}: {s.ecc_aggregate_uncorrected}")
            if row["ecc_enabled"] is False:
                off.append(f"GPU {s.index}")
        values = per_gpu(rows)
        if vol:
            return result(self.name, "fail", f"uncorrectable ECC errors since driver load ({name_list(vol)})",
                          values=values, fix=_RESET_FIX)
        if all(r["volatile_uncorrected"] is None and r["aggregate_uncorrected"] is None for r in rows) and not off:
            return result(self.name, "skip", "ECC counters not reported (ECC unsupported or off)", values=values)
        if agg or off:
            parts = ([f"uncorrectable ECC errors in the GPU's lifetime, none since driver load ({name_list(agg)})"]
                     if agg else []) + ([f"ECC is disabled on {name_list(off)}"] if off else [])
            return result(self.name, "warn", "; ".join(parts), values=values,
                          fix="watch the aggregate count for growth; enable ECC with nvidia-smi -e 1 and reboot"
                          if off else "watch the aggregate count for growth between runs")
        return result(self.name, "pass", f"no uncorrectable ECC errors on {len(rows)} GPU(s)", values=values)


class RetiredPages:
    """Pre-Ampere page retirement: a pending retirement fails; many retired pages warn."""

    name = "gpu.retired_pages"
    description = "retired memory pages (multiple SBE / DBE) and pending retirements"

    def run(self, ctx: PreflightContext) -> CheckResult:
        """See the class docstring."""
        st, gate = nvml_gate(ctx, self.name, "health")
        if gate:
            return gate
        limit = ctx.config.max_retired_pages
        rows, pending, many = [], [], []
        for h in st.health:
            rows.append({"index": h.index, "sbe": h.retired_pages_sbe, "dbe": h.retired_pages_dbe,
                         "pending": h.retired_pages_pending})
            if h.retired_pages_pending:
                pending.append(f"GPU {h.index}")
            total = (h.retired_pages_sbe or 0) + (h.retired_pages_dbe or 0)
            if total >= limit > 0:
                many.append(f"GPU {h.index}: {total}")
        values = per_gpu(rows)
        if all(r["sbe"] is None and r["dbe"] is None and r["pending"] is None for r in rows):
            return result(self.name, "skip", "page retirement not reported (Ampere and later remap rows "
                          "instead: see gpu.row_remap)", values=values)
        if pending:
            return result(self.name, "fail", f"page retirement pending on {name_list(pending)}", values=values,
                          fix="drain the node and reload the driver (or reboot) to retire the pages")
        if many:
            return result(self.name, "warn", f">= {limit} retired pages ({name_list(many)})", values=values,
                          fix="plan an RMA: the GPU is running out of spare pages")
        return result(self.name, "pass", "no page retirement pending", values=values)


class RowRemap:
    """Row-remap failure (RMA) or pending remap (reset needed) or a recovery action requested: fail."""

    name = "gpu.row_remap"
    description = "row remapping pending / failed, NVML recovery action"

    def run(self, ctx: PreflightContext) -> CheckResult:
        """See the class docstring."""
        st, gate = nvml_gate(ctx, self.name, "samples")
        if gate:
            return gate
        health = {h.index: h for h in st.health or []}
        rows, failed, pending, action = [], [], [], []
        for s in st.samples:
            h = health.get(s.index)
            rec = None if h is None else h.recovery_action
            rows.append({"index": s.index, "remap_pending": s.remap_pending, "remap_failure": s.remap_failure,
                         "correctable_rows": s.remapped_rows_correctable,
                         "uncorrectable_rows": s.remapped_rows_uncorrectable, "recovery_action": rec})
            if s.remap_failure:
                failed.append(f"GPU {s.index}")
            if s.remap_pending:
                pending.append(f"GPU {s.index}")
            if rec:
                action.append(f"GPU {s.index}: {RECOVERY_ACTIONS.get(rec, rec)}")
        values = per_gpu(rows)
        if failed:
            return result(self.name, "fail", f"row remapping failed on {name_list(failed)} (an RMA condition)",
                          values=values, fix="drain the node and RMA the GPU")
        if pending or action:
            parts = ([f"row remap pending on {name_list(pending)}"] if pending else []) + (
                [f"driver asks for recovery ({name_list(action)})"] if action else [])
            return result(self.name, "fail", "; ".join(parts), values=values, fix=_RESET_FIX)
        if all(r["remap_pending"] is None for r in rows):  # a recovery action would have failed above
            return result(self.name, "skip", "row remapping not reported (pre-Ampere GPU or unsupported)",
                          values=values)
        return result(self.name, "pass", f"no remap pending or failed on {len(rows)} GPU(s)", values=values)
