"""PCI bus ids and clock-event reason bits: identifiers shared by NVML, DCGM and kernel logs (internal).

Public names are re-exported from :mod:`gpufield.telemetry` (and :mod:`gpufield.telemetry.nvml`).
"""

from __future__ import annotations

import json
import re
from functools import cache
from importlib import resources
from typing import Any

from gpufield.errors import InputError

_BDF = re.compile(
    r"^(?:(?P<dom>[0-9a-fA-F]{1,8}):)?(?P<bus>[0-9a-fA-F]{1,2}):(?P<dev>[0-9a-fA-F]{1,2})(?:\.(?P<fn>[0-7]))?$")


def normalize_bdf(bus_id: str | bytes) -> str:
    """Normalise a PCI bus id to ``dddd:bb:dd.f`` lower case (the form ``Event.gpu_bdf`` uses).

    Accepts NVML's ``00000000:1B:00.0``, sysfs ``0000:1b:00.0``, kernel-log ``1b:00.0`` and
    ``0000:1b:00`` (``.0`` added).

    Args:
        bus_id: the id as text or bytes.

    Returns:
        e.g. ``"0000:1b:00.0"``.

    Raises:
        InputError: not a PCI bus id, or a domain above 0xffff.
    """
    text = bus_id.decode() if isinstance(bus_id, bytes) else bus_id
    m = _BDF.match(text.strip())
    if not m or int(m["dom"] or "0", 16) > 0xFFFF:
        raise InputError(f"not a PCI bus id: {text!r}; expected [domain:]bus:device[.function]")
    return f"{int(m['dom'] or '0', 16):04x}:{int(m['bus'], 16):02x}:{int(m['dev'], 16):02x}.{m['fn'] or '0'}"


@cache
def clock_event_reason_table() -> tuple[dict[str, Any], ...]:
    """The clock-event reason bits (``data/clock_event_reasons.json``, from nvidia-ml-py 13.615.71).

    Returns:
        Tuple of dicts with ``bit`` (int), ``nvml_constant``, ``name``, ``meaning``, ``triage_use``.
    """
    text = resources.files("gpufield.telemetry").joinpath("data", "clock_event_reasons.json").read_text("utf-8")
    return tuple(json.loads(text)["reasons"])


def decode_clock_event_reasons(mask: int) -> tuple[str, ...]:
    """Names of the bits set in an NVML/DCGM clock-event reason bitmask, low bit first.

    Args:
        mask: ``nvmlDeviceGetCurrentClocksEventReasons`` value (or DCGM field 112).

    Returns:
        e.g. ``("sw_power_cap",)`` for 0x4; unknown bits come out as ``"unknown_0x800"``.
    """
    names, rest = [], int(mask)
    for r in clock_event_reason_table():
        if mask & r["bit"]:
            names.append(r["name"])
            rest &= ~r["bit"]
    bit = 1
    while rest:
        if rest & bit:
            names.append(f"unknown_{bit:#x}")
            rest &= ~bit
        bit <<= 1
    return tuple(names)
