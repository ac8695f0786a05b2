"""nvidia-smi parser: ``nvidia-smi -q`` GPU sections (clock-event reasons, ECC counters, retired
pages, remapped rows), the CUDA samples' ``p2pBandwidthLatencyTest`` matrices, and the
"Unable to determine the device handle" / NVML lost-GPU errors.

``nvidia-smi -q`` layout: a ``GPU 00000000:18:00.0`` header, then key/value lines indented by
4 spaces per level (https://docs.nvidia.com/deploy/nvidia-smi/); the reason section is called
``Clocks Event Reasons`` on newer drivers and ``Clocks Throttle Reasons`` on older ones.
Reference: ``../shared/reference/triage.md`` §2.2-2.4 and corpus cases 16, 32.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from gpufield.triage.events import Event
from gpufield.triage.parsers import _regex as rx
from gpufield.triage.parsers._common import at_line, event, prefix_of, to_int
from gpufield.triage.protocols import LineContext

# GPU 00000000:18:00.0
SMI_GPU_RE = rx.compile(r"^GPU (?P<bdf>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])\s*$")
#         Idle                              : Active
SMI_KV_RE = rx.compile(r"^(?P<ind> *)(?P<key>\S[^:]*?)\s*: ?(?P<val>.*?)\s*$")
SMI_HEAD_RE = rx.compile(r"^(?P<ind> *)(?P<key>\S.*?)\s*$")
_ACTIVE = {"Active": True, "Not Active": False}
_HW_REASONS = rx.compile(r"HW|Thermal|Power Brake", ignore_case=True)
#         SW Power Capping                               : 0 us
US_RE = rx.compile(r"(?P<us>\d+) us")
# ECC counter names meaning uncorrectable: "Volatile DRAM Uncorrectable", "Volatile Double Bit Total"
UNCORRECTABLE_RE = rx.compile(r"Uncorr|Double|DBE", ignore_case=True)
# Unidirectional P2P=Enabled Bandwidth (P2P Writes) Matrix (GB/s)
# P2P=Disabled Latency Matrix (us)
P2P_HEAD_RE = rx.compile(
    r"(?:(?P<dir>Unidirectional|Bidirectional) )?P2P=(?P<en>Enabled|Disabled) (?P<what>Bandwidth|Latency)"
    r"(?: \((?P<mode>[^)]*)\))? Matrix(?: \((?P<unit>[^)]*)\))?")
#    D\D     0      1      2        /    GPU     0      1
P2P_COLS_RE = rx.compile(r"^\s*(?:D\\D|GPU|CPU)(?:\s+\d+)+\s*$")
#      0 673.49   2.60   1.58
P2P_ROW_RE = rx.compile(r"^\s*(?P<dev>\d+)(?P<vals>(?:\s+[\d.]+)+)\s*$")
# Device=0 CAN Access Peer Device=1
P2P_ACCESS_RE = rx.compile(r"Device=(?P<a>\d+) (?P<can>CAN|CANNOT) Access Peer Device=(?P<b>\d+)")
# Unable to determine the device handle for GPU0000:03:00.0: Unknown Error
HANDLE_RE = rx.compile(r"Unable to determine the device handle for GPU ?(?P<bdf>[0-9A-Fa-f:.]+): (?P<err>.*)$"
                       r"|(?P<nvml>NVMLError_\w+|NVML_ERROR_GPU_IS_LOST|GPU is lost)")


class SmiParser:
    """nvidia-smi / CUDA-samples tool output."""

    name = "smi"
    source = "smi"
    prefilter = (r"^GPU 0[0-9A-Fa-f]{3,7}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]\s*$|P2P=(?:En|Dis)abled [BL]|"
                 r"Access Peer Device|Unable to determine the device handle|NVMLError_|NVML_ERROR_GPU_IS_LOST|GPU is lost|"
                 r"^\s*GPU0\s.*CPU Affinity")
    keywords = ("GPU 0", "P2P=", "Access Peer Device", "device handle", "NVML", "GPU is lost", "CPU Affinity")

    def parse_line(self, line: str, ctx: LineContext) -> Event | None:
        """Single-line records: p2p access, NVML lost-GPU errors (sections go through records)."""
        m = P2P_ACCESS_RE.search(line)
        if m:
            can = m["can"] == "CAN"
            return event("smi", "p2p_access", ctx, line, prefix_of(line, ctx), severity="info" if can else "warning",
                         gpu_index=int(m["a"]), fields={"peer": int(m["b"]), "can_access": can})
        m = HANDLE_RE.search(line)
        if m:
            return event("smi", "gpu_handle_error", ctx, line, prefix_of(line, ctx), severity="error",
                         code=m["nvml"] or "NVML_ERROR", bdf=m["bdf"],
                         fields={"message": (m["err"] or m["nvml"]).strip()})
        return None

    def opens_record(self, line: str) -> bool:
        """A ``GPU <bus id>`` section header, a p2p matrix title or an ``nvidia-smi topo -m`` header."""
        return bool(SMI_GPU_RE.match(line) or P2P_HEAD_RE.search(line) or TOPO_HEAD_RE.match(line))

    def continues_record(self, lines: Sequence[str], line: str) -> bool:
        """Indented lines of a GPU section; column header and rows of a matrix."""
        if TOPO_HEAD_RE.match(lines[0]):
            return bool(TOPO_ROW_RE.match(line))
        if SMI_GPU_RE.match(lines[0]):
            return line.startswith(" ") and bool(line.strip())
        if len(lines) == 1:
            return bool(P2P_COLS_RE.match(line))
        return bool(P2P_ROW_RE.match(line))

    def parse_record(self, lines: Sequence[str], ctx: LineContext) -> list[Event]:
        """Events of one GPU section or one matrix (one ``p2p_bandwidth`` event per row)."""
        if TOPO_HEAD_RE.match(lines[0]):
            return _topo_matrix(lines, ctx)
        if SMI_GPU_RE.match(lines[0]):
            return _gpu_section(lines, ctx)
        return _p2p_matrix(lines, ctx)


#         GPU0    GPU1    NIC0    CPU Affinity    NUMA Affinity        (nvidia-smi topo -m; tab-separated)
TOPO_HEAD_RE = rx.compile(r"^\s*GPU0(?:\s+(?:GPU|NIC|mlx)\S*)*\s+CPU Affinity")
# GPU0     X      PXB     SYS     0-27,56-83      0
TOPO_ROW_RE = rx.compile(r"^\s*(?:GPU|NIC|mlx)\S*\s+(?:X|PIX|PXB|PHB|NODE|SYS|SOC|NV\d+)\s")
_TOPO_LINKS = frozenset({"X", "PIX", "PXB", "PHB", "NODE", "SYS", "SOC"})


def _topo_matrix(lines: Sequence[str], ctx: LineContext) -> list[Event]:
    """One ``gpu_topology`` event: ``links`` maps ``"i-j"`` (GPU ordinals, i < j) to the link type."""
    cols = lines[0].split()
    cols = cols[: cols.index("CPU")] if "CPU" in cols else cols
    links: dict[str, str] = {}
    for x in lines[1:]:
        parts = x.split()
        name, vals = parts[0], parts[1:1 + len(cols)]
        if not name.startswith("GPU") or not name[3:].isdigit():
            continue
        i = int(name[3:])
        for col, v in zip(cols, vals, strict=False):
            if col.startswith("GPU") and col[3:].isdigit() and int(col[3:]) > i and (
                    v in _TOPO_LINKS or v.startswith("NV")):
                links[f"{i}-{int(col[3:])}"] = v
    if not links:
        return []
    gpus = sorted({int(g) for k in links for g in k.split("-")})
    return [event("smi", "gpu_topology", ctx, "\n".join(lines), prefix_of(lines[0], ctx), severity="info",
                  fields={"links": links, "gpus": gpus})]


def _gpu_section(lines: Sequence[str], ctx: LineContext) -> list[Event]:
    bdf = SMI_GPU_RE.match(lines[0])["bdf"]
    pre = prefix_of(lines[0], ctx)
    uuid = index = None
    path: list[tuple[int, str]] = []
    out: list[Event] = []
    remap: dict = {}
    remap_line = 0
    for i, x in enumerate(lines[1:], 1):
        kv = SMI_KV_RE.match(x)
        if kv is None or (kv["val"] == "" and ":" not in x):
            h = SMI_HEAD_RE.match(x)
            if h:
                ind = len(h["ind"])
                path = [p for p in path if p[0] < ind] + [(ind, h["key"])]
            continue
        ind, key, val = len(kv["ind"]), kv["key"], kv["val"]
        path = [p for p in path if p[0] < ind]
        names = [p[1] for p in path]
        lctx = at_line(ctx, i)
        if key == "GPU UUID":
            uuid = val
        elif key == "Minor Number":
            index = to_int(val)
        section = names[0] if names else ""
        if section in ("Clocks Event Reasons", "Clocks Throttle Reasons") and val in _ACTIVE:
            active = _ACTIVE[val]
            hw = bool(_HW_REASONS.search(key))
            out.append(event("smi", "clock_event", lctx, x, pre, code=key, bdf=bdf, uuid=uuid, gpu_index=index,
                             severity="warning" if active and hw else "info",
                             fields={"reason": key, "active": active, "parent": names[-1] if len(names) > 1 else None}))
        elif section in ("Clocks Event Reasons Counters", "Clocks Throttle Reasons Counters"):
            us = US_RE.match(val)
            if us:
                out.append(event("smi", "clock_event", lctx, x, pre, code=key, bdf=bdf, uuid=uuid, gpu_index=index, severity="info",
                                 fields={"reason": key, "counter_us": int(us.group(1))}))
        elif section in ("ECC Errors", "Retired Pages") and to_int(val) is not None:
            volatile = None
            if section == "ECC Errors" and len(names) > 1:
                volatile = names[1] == "Volatile"
            counter = " ".join([*names[1 if section == "ECC Errors" else 0:], key])
            value = int(val)
            bad = value > 0 and UNCORRECTABLE_RE.search(counter)
            out.append(event("smi", "ecc_counter", lctx, x, pre, code=counter, bdf=bdf, uuid=uuid, gpu_index=index,
                             severity="error" if bad else ("warning" if value else "info"),
                             fields={"counter": counter, "value": value, "volatile": volatile,
                                     "location": key.split()[0] if key.split()[0] in ("SRAM", "DRAM") else None}))
        elif section == "Remapped Rows" and len(names) == 1:
            remap_line = remap_line or i
            if key == "Correctable Error":
                remap["correctable"] = to_int(val)
            elif key == "Uncorrectable Error":
                remap["uncorrectable"] = to_int(val)
            elif key == "Pending":
                remap["pending"] = {"Yes": True, "No": False}.get(val)
            elif key == "Remapping Failure Occurred":
                remap["failure"] = {"Yes": True, "No": False}.get(val)
        elif section == "Remapped Rows" and "Histogram" in (names[-1] if names else ""):
            remap[f"banks_{key.lower()}"] = to_int(val.split()[0]) if val else None
    if remap:
        lctx = at_line(ctx, remap_line)
        bad = remap.get("failure") or remap.get("pending")
        out.append(event("smi", "row_remap", lctx, "\n".join(lines[remap_line - 1:remap_line + 4]), pre,
                         bdf=bdf, uuid=uuid, gpu_index=index, severity="error" if bad else "info", fields=remap))
    return [e if e.gpu_uuid and e.gpu_index is not None else _with(e, uuid, index) for e in out]


def _with(e: Event, uuid: str | None, index: int | None) -> Event:
    return replace(e, gpu_uuid=e.gpu_uuid or uuid, gpu_index=e.gpu_index if e.gpu_index is not None else index)


def _p2p_matrix(lines: Sequence[str], ctx: LineContext) -> list[Event]:
    h = P2P_HEAD_RE.search(lines[0])
    pre = prefix_of(lines[0], ctx)
    enabled = h["en"] == "Enabled"
    latency = h["what"] == "Latency"
    out = []
    for i, x in enumerate(lines[1:], 1):
        r = P2P_ROW_RE.match(x)
        if not r:
            continue
        vals = [float(v) for v in r["vals"].split()]
        lctx = at_line(ctx, i)
        f = {"p2p_enabled": enabled, "direction": (h["dir"] or "").lower() or None,
             "writes": True if h["mode"] and "Writes" in h["mode"] else None, "matrix": lines[0].strip()}
        f["latency_us" if latency else "gb_per_s"] = vals
        out.append(event("smi", "p2p_bandwidth", lctx, x, pre, severity="info", gpu_index=int(r["dev"]), fields=f))
    return out
