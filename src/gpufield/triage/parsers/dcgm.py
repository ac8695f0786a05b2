"""dcgm-exporter text parser (Prometheus exposition lines of ``DCGM_*`` metrics).

Sample syntax is read by :func:`gpufield.telemetry.prometheus.iter_samples` (exposition format
0.0.4); this module maps the metrics triage cares about to event kinds:

* ``DCGM_FI_DEV_CLOCK_THROTTLE_REASONS`` / ``DCGM_FI_DEV_CLOCKS_EVENT_REASONS`` (field 112,
  bitmask) -> ``clock_event`` (bits decoded by :func:`gpufield.telemetry.decode_clock_event_reasons`);
* ECC counters (fields 310-313, retired pages 390-392) -> ``ecc_counter``;
* remapped rows (393-396) -> ``row_remap``;
* everything else -> ``metric_sample``.

Example (``../shared/reference/triage.md`` §2.6)::

    DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-…",pci_bus_id="00000000:1B:00.0",device="nvidia0",modelName="NVIDIA H200",hostname="node-a"} 41

Labels: ``gpu`` -> gpu_index, ``UUID`` -> gpu_uuid, ``pci_bus_id`` -> gpu_bdf, ``hostname``
(``Hostname`` before dcgm-exporter PR #655) -> host. Source: https://github.com/NVIDIA/dcgm-exporter
"""

from __future__ import annotations

import math

from gpufield.errors import InputError
from gpufield.triage.events import Event
from gpufield.triage.parsers import _regex as rx
from gpufield.triage.parsers._common import event, prefix_of, to_int
from gpufield.triage.parsers._prefix import Prefix
from gpufield.triage.protocols import LineContext

DCGM_LINE_RE = rx.compile(r"^DCGM_\w+(?:\{|\s)")
# fast path for the common shape (no escapes in label values); anything else goes to the full
# exposition-format parser: DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-…",Hostname="n1"} 41 [1700000000000]
SIMPLE_RE = rx.compile(r'^(?P<name>DCGM_\w+)(?:\{(?P<labels>[^{}\\]*)\})? (?P<value>[-+\w.]+)(?: (?P<ts>-?\d+))?\s*$')
# decoded reason names that mean a hardware-side slowdown: "hw slowdown", "sw thermal slowdown", ...
HW_REASON_RE = rx.compile(r"hw|thermal|power brake")
LABEL_RE = rx.compile(r'\s*(?P<k>[A-Za-z_]\w*)="(?P<v>[^"]*)"\s*,?')
# DCGM health-watch text (nv-hostengine log, dcgmi health -c): the DCGM_FR_CLOCKS_EVENT_* / older
# DCGM_FR_CLOCK_THROTTLE_* messages of dcgm_errors.h (https://github.com/NVIDIA/DCGM):
# "... health system Thermal: 'Detected clocks event due to thermal violation in GPU 2. Verify that the cooling ..."
# "Detected clock throttling due to power violation in GPU 0"
HEALTH_RE = rx.compile(r"Detected (?:clocks? events?|clock throttling) due to (?P<why>[\w ]+?) violation in GPU (?P<gpu>\d+)")
_CLOCK = ("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "DCGM_FI_DEV_CLOCKS_EVENT_REASONS")
_ECC = {"DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": ("SBE volatile total", True),
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": ("DBE volatile total", True),
        "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL": ("SBE aggregate total", False),
        "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL": ("DBE aggregate total", False),
        "DCGM_FI_DEV_RETIRED_SBE": ("retired pages SBE", False),
        "DCGM_FI_DEV_RETIRED_DBE": ("retired pages DBE", False),
        "DCGM_FI_DEV_RETIRED_PENDING": ("retired pages pending", False)}
_REMAP = {"DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": "uncorrectable",
          "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": "correctable",
          "DCGM_FI_DEV_ROW_REMAP_FAILURE": "failure",
          "DCGM_FI_DEV_ROW_REMAP_PENDING": "pending"}


class DcgmParser:
    """dcgm-exporter ``/metrics`` text (one sample per line)."""

    name = "dcgm"
    source = "dcgm"
    prefilter = r"^DCGM_\w+(?:\{|\s)|Detected (?:clocks? events?|clock throttling) due to"
    keywords = ("DCGM_", "Detected clock")

    def parse_line(self, line: str, ctx: LineContext) -> Event | None:
        """Parse one ``DCGM_...{labels} value [ts]`` sample; a malformed one returns None."""
        h = HEALTH_RE.search(line)
        if h:  # a health-watch verdict: the clock-event reason is active on that GPU now
            why = h["why"].strip().lower()
            reason = "HW thermal slowdown" if why == "thermal" else ("HW power brake slowdown" if why == "power"
                                                                    else f"{why} violation")
            return event("dcgm", "clock_event", ctx, line, prefix_of(line, ctx), code=f"health:{why}",
                         severity="warning", gpu_index=int(h["gpu"]),
                         fields={"reason": reason, "active": True, "health": True, "message": line[h.start():].strip()})
        if not DCGM_LINE_RE.match(line):
            return None
        s = _simple(line) or _full(line, ctx.file)
        if s is None:
            return None
        lab = s.labels
        kw = {"bdf": lab.get("pci_bus_id"), "uuid": lab.get("UUID"), "gpu_index": to_int(lab.get("gpu")),
              "host": lab.get("hostname") or lab.get("Hostname"),
              "ts_ns": s.timestamp_ms * 1_000_000 if s.timestamp_ms is not None else None}
        pre = Prefix(body=line)
        v = s.value
        finite = not (math.isnan(v) or math.isinf(v))
        if s.name in _CLOCK and finite:
            from gpufield.telemetry.nvml import decode_clock_event_reasons

            mask = int(v)
            names = decode_clock_event_reasons(mask)
            readable = [n.replace("_", " ") for n in names]
            hw = any(HW_REASON_RE.search(n) for n in readable)
            return event("dcgm", "clock_event", ctx, line, pre, code=mask, severity="warning" if hw else "info",
                         fields={"reason": ", ".join(readable) or "none", "reasons": list(names), "mask": mask,
                                 "active": bool(mask)}, **kw)
        if s.name in _ECC and finite:
            counter, vol = _ECC[s.name]
            bad = v > 0 and ("DBE" in counter or "pending" in counter)
            return event("dcgm", "ecc_counter", ctx, line, pre, code=s.name,
                         severity="error" if bad else ("warning" if v > 0 else "info"),
                         fields={"counter": counter, "value": int(v), "volatile": vol, "metric": s.name}, **kw)
        if s.name in _REMAP and finite:
            key = _REMAP[s.name]
            val: int | bool = bool(v) if key in ("failure", "pending") else int(v)
            return event("dcgm", "row_remap", ctx, line, pre, code=s.name,
                         severity="error" if key in ("failure", "pending") and v > 0 else "info",
                         fields={key: val, "metric": s.name}, **kw)
        sev = "warning" if s.name == "DCGM_FI_DEV_XID_ERRORS" and finite and v > 0 else "debug"
        return event("dcgm", "metric_sample", ctx, line, pre, code=s.name, severity=sev,
                     fields={"metric": s.name, "value": v if finite else str(v), "labels": dict(lab)}, **kw)


class _Sample:
    """The parts of a PromSample this module uses."""

    __slots__ = ("name", "labels", "value", "timestamp_ms")

    def __init__(self, name: str, labels: dict[str, str], value: float, timestamp_ms: int | None) -> None:
        self.name, self.labels, self.value, self.timestamp_ms = name, labels, value, timestamp_ms


def _simple(line: str) -> _Sample | None:
    m = SIMPLE_RE.match(line)
    if not m:
        return None
    body = m["labels"] or ""
    labels = {x["k"]: x["v"] for x in LABEL_RE.finditer(body)}
    if LABEL_RE.sub("", body).strip():          # something the simple grammar does not cover
        return None
    try:
        value = float(m["value"])
    except ValueError:
        return None
    return _Sample(m["name"], labels, value, int(m["ts"]) if m["ts"] else None)


def _full(line: str, path: str):
    from gpufield.telemetry.prometheus import iter_samples

    try:
        return next(iter(iter_samples([line], path=path)), None)
    except InputError:
        return None
