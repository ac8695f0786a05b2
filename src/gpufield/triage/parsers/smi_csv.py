"""GPU query CSVs: ``nvidia-smi --query-gpu=... --format=csv`` and NVML sampler CSVs.

nvidia-smi's CSV (``nvidia-smi --help-query-gpu``): a header of the queried field names separated by
``", "`` (units in brackets: ``power.draw [W]``), one row per GPU and sample, values such as
``00000000:3B:00.0``, ``GPU-...``, ``Active`` / ``Not Active``, ``[N/A]``::

    timestamp, index, pci.bus_id, uuid, clocks_event_reasons.hw_slowdown, ecc.errors.uncorrected.volatile.total
    2026/03/21 01:30:00.123, 0, 00000000:3B:00.0, GPU-6b2e..., Not Active, 0

An NVML sampler CSV (a ``pynvml`` loop writing ``csv.DictWriter`` rows) has the same shape with
plain ``,`` and names such as ``bus_id``/``pci_bus_id``, ``gpu_uuid``, ``host``. A header qualifies
when it names a bus id or UUID column. Each row gives a ``gpu_map`` event (joins the GPU's bus id
and UUID for blame), a ``clock_event`` per hardware slowdown column that is active, and an
``ecc_counter`` per uncorrectable-ECC column that is > 0.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpufield.triage.events import Event
from gpufield.triage.parsers import _regex as rx
from gpufield.triage.parsers._common import at_line, event, prefix_of, to_int
from gpufield.triage.protocols import LineContext

_BUS = ("pci.bus_id", "gpu_bus_id", "bus_id", "pci_bus_id")  # full domain:bus:device.function ids only
_UUID = ("uuid", "gpu_uuid")
_HOST = ("host", "hostname", "node")
# clocks_event_reasons.hw_slowdown / clocks_throttle_reasons.hw_thermal_slowdown / ..._hw_power_brake_slowdown
_HW_COL = rx.compile(r"clocks_(?:event|throttle)_reasons\.(hw_\w+|sw_thermal_slowdown)")
_ECC_COL = rx.compile(r"ecc\.errors\.uncorrected\.(volatile|aggregate)\.(\w+)|uncorrected_ecc|ecc_dbe")


def _cols(line: str) -> list[str]:
    return [c.strip().split(" [", 1)[0].strip().lower() for c in line.split(",")]


def _value(vals: list[str], i: int | None) -> str | None:
    return None if i is None or vals[i] in ("", "[N/A]", "N/A") else vals[i]


class SmiCsvParser:
    """``nvidia-smi --query-gpu --format=csv`` and NVML sampler CSV tables."""

    name = "smi_csv"
    source = "smi"
    prefilter = r"^(?:[\w.]+, ?)*(?:pci\.bus_id|gpu_bus_id|bus_id|pci_bus_id|uuid|gpu_uuid)(?:, ?[\w.]+(?: \[[^\]]*\])?)*\s*$"
    keywords = ("bus_id", "uuid")

    def parse_line(self, line: str, ctx: LineContext) -> Event | None:
        """A header line alone yields nothing (rows are read as a record)."""
        return None

    def opens_record(self, line: str) -> bool:
        """A CSV header naming a bus id or UUID column."""
        cols = _cols(line)
        return len(cols) >= 2 and any(c in _BUS or c in _UUID for c in cols) and "," in line

    def continues_record(self, lines: Sequence[str], line: str) -> bool:
        """Rows with the header's number of fields."""
        return bool(line.strip()) and line.count(",") == lines[0].count(",")

    def parse_record(self, lines: Sequence[str], ctx: LineContext) -> list[Event]:
        """One ``gpu_map`` per row, plus active hardware slowdowns and non-zero uncorrectable ECC counts."""
        cols = _cols(lines[0])
        idx = {c: i for i, c in enumerate(cols)}
        bus = next((idx[c] for c in _BUS if c in idx), None)
        uid = next((idx[c] for c in _UUID if c in idx), None)
        hst = next((idx[c] for c in _HOST if c in idx), None)
        gi = idx.get("index")
        out: list[Event] = []
        for n, row in enumerate(lines[1:], start=1):
            vals = [v.strip() for v in row.split(",")]
            if len(vals) != len(cols):
                continue
            rctx = at_line(ctx, n)
            pre = prefix_of(row, rctx)
            common = {"bdf": _value(vals, bus), "uuid": _value(vals, uid), "host": _value(vals, hst),
                      "gpu_index": to_int(_value(vals, gi))}
            if common["bdf"] or common["uuid"]:
                out.append(event("smi", "gpu_map", rctx, row, pre, severity="info", **common))
            for c, i in idx.items():
                m = _HW_COL.search(c)
                if m and vals[i] == "Active":
                    out.append(event("smi", "clock_event", rctx, row, pre, severity="warning", code=m.group(1),
                                     fields={"reason": m.group(1).replace("_", " ").upper().replace("HW ", "HW "),
                                             "active": "Active"}, **common))
                e = _ECC_COL.search(c)
                if e and (to_int(vals[i]) or 0) > 0:
                    out.append(event("smi", "ecc_counter", rctx, row, pre, severity="error", code=vals[i],
                                     fields={"counter": c, "value": to_int(vals[i]),
                                             "volatile": "aggregate" not in c}, **common))
        return out
