"""GPU inventory and links: count and model, PCIe link, NVLink, clock-event reasons, foreign processes.

Clock-event bits (``../shared/reference/triage.md`` section 2.3): HW slowdown 0x8, HW thermal
0x40 and HW power brake 0x80 are hardware or facility faults (fail); SW thermal 0x20 and locked /
application clocks 0x2 slow a job without a fault (warn); SW power cap 0x4 and idle 0x1 are normal.

PCIe: a GPU lowers its link *generation* when idle to save power (``nvidia-smi`` shows
``Current 1`` / ``Max 5``), so a lower generation only counts while the GPU is busy; a narrower
*width* than the maximum is link down-training at any time.
"""

from __future__ import annotations

import os

from gpufield.harden.preflight._common import MIB, name_list, nvml_gate, per_gpu, result
from gpufield.harden.preflight.model import CheckResult, PreflightContext

__all__ = ["ClockEvents", "ForeignProcesses", "GpusVisible", "NvLinks", "PcieLink"]

_HW_BITS = {0x8: "hw_slowdown", 0x40: "hw_thermal_slowdown", 0x80: "hw_power_brake_slowdown"}
_WARN_BITS = {0x20: "sw_thermal_slowdown", 0x2: "applications_clocks_setting"}
_IDLE = 0x1


def model_matches(name: str, expected: str) -> bool:
    """Whether NVML product ``name`` is the ``expected`` model (catalogue key or alias, else substring).

    Args:
        name: e.g. ``"NVIDIA H200"``.
        expected: e.g. ``"H200"``, ``"H200-SXM"``, ``"NVIDIA H100 80GB HBM3"``.

    Returns:
        True when both resolve to the same :func:`gpufield.telemetry.gpu_spec` entry, or (when
        either is not catalogued) when ``expected`` is a case-insensitive substring of ``name``.
    """
    from gpufield.errors import InputError
    from gpufield.telemetry.specs import gpu_spec

    try:
        return gpu_spec(name).key == gpu_spec(expected).key
    except InputError:
        return " ".join(expected.lower().split()) in " ".join(name.lower().split())


class GpusVisible:
    """NVML sees the expected number of GPUs, of the expected model, none lost."""

    name = "gpu.visible"
    description = "GPUs visible to NVML; count and model as expected; none fallen off the bus"

    def run(self, ctx: PreflightContext) -> CheckResult:
        """See the class docstring."""
        cfg = ctx.config
        st, gate = nvml_gate(ctx, self.name, "gpus")
        if gate:
            if gate.status == "skip" and cfg.expected_gpu_count:
                return result(self.name, "fail", f"expected {cfg.expected_gpu_count} GPU(s) but {gate.reason}",
                              fix="check that the NVIDIA driver is loaded (nvidia-smi) and the devices are "
                              "passed into the container")
            return gate
        gpus = [{"index": g.index, "name": g.name, "uuid": g.uuid, "pci_bdf": g.pci_bdf} for g in st.gpus]
        # NoPermission: a GPU the job's cgroup does not grant (Slurm ConstrainDevices), not a lost one
        lost_l = [(i, e) for i, e in st.lost if e != "NVMLError_NoPermission"]
        values = {"count": len(st.gpus) + len(lost_l), "opened": len(st.gpus), "driver_version": st.driver_version,
                  "lost": [{"index": i, "error": e} for i, e in lost_l],
                  "not_permitted": [i for i, e in st.lost if e == "NVMLError_NoPermission"], "gpus": gpus}
        if lost_l:
            lost = [f"GPU {i}: {e}" for i, e in lost_l]
            return result(self.name, "fail", f"NVML cannot open {name_list(lost)}", values=values,
                          fix="drain the node; a lost GPU needs a reset or reboot (see gpu.* and kernel.xid)")
        if cfg.expected_gpu_count is not None and len(st.gpus) != cfg.expected_gpu_count:
            return result(self.name, "fail", f"NVML sees {len(st.gpus)} GPU(s), expected {cfg.expected_gpu_count}",
                          values=values, fix="check CUDA_VISIBLE_DEVICES / the scheduler's GPU binding, and "
                          "nvidia-smi -L for missing devices")
        if cfg.expected_gpu_model is not None:
            wrong = [f"GPU {g.index}: {g.name}" for g in st.gpus if not model_matches(g.name, cfg.expected_gpu_model)]
            if wrong:
                return result(self.name, "fail", f"expected model {cfg.expected_gpu_model!r}, found {name_list(wrong)}",
                              values=values, fix="the job was placed on the wrong node type")
        kinds = sorted({g.name for g in st.gpus})
        return result(self.name, "pass", f"{len(st.gpus)} GPU(s): {', '.join(kinds)} (driver {st.driver_version})",
                      values=values)


class PcieLink:
    """PCIe width below its maximum (any time) or generation below it (while busy): warn."""

    name = "gpu.pcie_link"
    description = "PCIe link generation and width against the maximum"

    def run(self, ctx: PreflightContext) -> CheckResult:
        """See the module docstring for the idle rule."""
        st, gate = nvml_gate(ctx, self.name, "samples")
        if gate:
            return gate
        rows, bad, idle_low = [], [], []
        for s in st.samples:
            idle = bool((s.clock_event_reasons or 0) & _IDLE) or s.util_gpu == 0.0
            rows.append({"index": s.index, "gen": s.pcie_gen, "max_gen": s.pcie_max_gen, "width": s.pcie_width,
                         "max_width": s.pcie_max_width, "idle": idle})
            if None not in (s.pcie_width, s.pcie_max_width) and s.pcie_width < s.pcie_max_width:
                bad.append(f"GPU {s.index} x{s.pcie_width} of x{s.pcie_max_width}")
            if None not in (s.pcie_gen, s.pcie_max_gen) and s.pcie_gen < s.pcie_max_gen:
                (idle_low if idle else bad).append(f"GPU {s.index} gen {s.pcie_gen} of {s.pcie_max_gen}")
        values = per_gpu(rows)
        if all(r["width"] is None and r["gen"] is None for r in rows):
            return result(self.name, "skip", "PCIe link state not reported", values=values)
        if bad:
            return result(self.name, "warn", f"PCIe link below its maximum: {name_list(bad)}", values=values,
                          fix="reseat the GPU / riser or check the slot; lspci -vv shows LnkSta against LnkCap")
        note = f" ({name_list(idle_low)} while idle: power saving, recheck under load)" if idle_low else ""
        return result(self.name, "pass", f"PCIe links at maximum width on {len(rows)} GPU(s){note}", values=values)


class NvLinks:
    """Every NVLink NVML lists is up (and at least ``expected_nvlinks`` per GPU when configured)."""

    name = "gpu.nvlink"
    description = "NVLink links up"

    def run(self, ctx: PreflightContext) -> CheckResult:
        """See the class docstring."""
        st, gate = nvml_gate(ctx, self.name, "health")
        if gate:
            return gate
        want = ctx.config.expected_nvlinks
        rows = [{"index": h.index, "up": len(h.nvlink_up), "down": list(h.nvlink_down),
                 "error": h.errors.get("nvlink")} for h in st.health]
        values = per_gpu(rows)
        if all(r["up"] == 0 and not r["down"] for r in rows) and not want:
            return result(self.name, "skip", "no NVLink reported (PCIe-only GPUs or not supported)", values=values)
        bad = [f"GPU {r['index']} links {r['down']} down" for r in rows if r["down"]]
        if want:
            bad += [f"GPU {r['index']} {r['up']} of {want} up" for r in rows if r["up"] < want and not r["down"]]
        if bad:
            return result(self.name, "fail", f"NVLink down: {name_list(bad)}", values=values,
                          fix="check nvidia-smi nvlink -s and the Fabric Manager (systemctl status "
                          "nvidia-fabricmanager); a link that stays down needs a reset or service")
        errs = [f"GPU {r['index']}: {r['error']}" for r in rows if r["error"]]
        if errs:
            return result(self.name, "warn", f"NVLink state unreadable ({name_list(errs)})", values=values)
        return result(self.name, "pass", f"{sum(r['up'] for r in rows)} NVLink(s) up on {len(rows)} GPU(s)",
                      values=values)


class ClockEvents:
    """HW slowdown / HW thermal / HW power brake active: fail; SW thermal or locked clocks: warn."""

    name = "gpu.clock_events"
    description = "clock-event (throttle) reasons: HW slowdown, thermal, power brake, locked clocks"

    def run(self, ctx: PreflightContext) -> CheckResult:
        """See the module docstring for the bits."""
        st, gate = nvml_gate(ctx, self.name, "samples")
        if gate:
            return gate
        rows, hw, soft = [], [], []
        for s in st.samples:
            mask = s.clock_event_reasons
            rows.append({"index": s.index, "mask": mask, "reasons": list(s.clock_event_reason_names),
                         "temperature_c": s.temperature_c})
            if mask is None:
                continue
            hw += [f"GPU {s.index} {n}" for b, n in _HW_BITS.items() if mask & b]
            soft += [f"GPU {s.index} {n}" for b, n in _WARN_BITS.items() if mask & b]
        values = per_gpu(rows)
        if all(r["mask"] is None for r in rows):
            return result(self.name, "skip", "clock-event reasons not reported", values=values)
        if hw:
            return result(self.name, "fail", f"hardware clock slowdown active: {name_list(hw)}", values=values,
                          fix="check cooling, PSU and rack power (power brake is an external signal); "
                          "nvidia-smi -q -d PERFORMANCE shows the counters")
        if soft:
            return result(self.name, "warn", f"clocks held back: {name_list(soft)}", values=values,
                          fix="sw thermal: check cooling; application/locked clocks: nvidia-smi -rgc / -rac")
        return result(self.name, "pass", f"no clock slowdown on {len(rows)} GPU(s)", values=values)


class ForeignProcesses:
    """Another process holding GPU memory above ``max_foreign_gpu_memory_mib``: fail (a leftover job)."""

    name = "gpu.processes"
    description = "GPU memory held by other processes"

    def run(self, ctx: PreflightContext) -> CheckResult:
        """See the class docstring. In a container NVML may not list other containers' processes;
        memory in use with no process listed is then a warning."""
        st, gate = nvml_gate(ctx, self.name, "health")
        if gate:
            return gate
        limit = ctx.config.max_foreign_gpu_memory_mib * MIB
        used = {s.index: s.mem_used_bytes for s in st.samples or []}
        me = os.getpid()
        rows, big, unknown, hidden = [], [], [], []
        for h in st.health:
            procs = [p for p in h.processes if p.pid != me]
            rows.append({"index": h.index, "mem_used_mib": None if used.get(h.index) is None else used[h.index] / MIB,
                         "processes": [{"pid": p.pid, "used_mib": None if p.used_bytes is None else p.used_bytes / MIB}
                                       for p in procs]})
            big += [f"pid {p.pid} on GPU {h.index}" for p in procs if p.used_bytes is not None and p.used_bytes >= limit]
            unknown += [f"pid {p.pid} on GPU {h.index}" for p in procs if p.used_bytes is None]
            if not procs and (used.get(h.index) or 0) >= limit:
                hidden.append(f"GPU {h.index} ({used[h.index] / MIB:.0f} MiB)")
        values = per_gpu(rows)
        if big:
            return result(self.name, "fail", f"other processes hold GPU memory: {name_list(big)}", values=values,
                          fix="kill the leftover processes (nvidia-smi --query-compute-apps=pid,used_memory "
                          "--format=csv) or drain the node")
        if unknown or hidden:
            what = ([f"processes with unknown memory: {name_list(unknown)}"] if unknown else []) + (
                [f"memory in use with no process visible: {name_list(hidden)}"] if hidden else [])
            return result(self.name, "warn", "; ".join(what), values=values,
                          fix="check nvidia-smi on the host (another container may hold the GPU)")
        return result(self.name, "pass", f"no other process holds GPU memory on {len(rows)} GPU(s)", values=values)
