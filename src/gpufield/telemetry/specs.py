"""GPU spec catalogue: peak rates, memory, clocks and power numbers per SKU, in SI units.

The numbers live in ``gpufield/telemetry/data/gpu_specs.json`` (one source of truth, each entry
naming its sources, retrieval date and which fields are derived or projected); this module only
loads them. Used by the fp64 model (HBM bandwidth, FP64, INT32 rates), the power twin (TDP,
minimum cap, clocks) and rooflines.

Example::

    >>> from gpufield.telemetry import gpu_spec
    >>> s = gpu_spec("NVIDIA H200")          # the name NVML reports
    >>> s.hbm_bandwidth_bytes_per_s / 1e12
    4.8
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from functools import cache
from importlib import resources
from typing import Any

from gpufield.errors import InputError

__all__ = ["GpuSpec", "gpu_spec", "gpu_specs"]

_RESOURCE = "gpu_specs.json"


@dataclass(frozen=True, kw_only=True, slots=True)
class GpuSpec:
    """Published (or projected) numbers of one GPU SKU. Rates are dense (no sparsity).

    Attributes:
        key: catalogue key, e.g. ``"H200-SXM"``.
        nvml_names: names this entry answers to (NVML product names first).
        status: ``"shipping"`` or ``"projected"`` (projected numbers are not hardware facts).
        architecture: e.g. ``"Hopper"``.
        sm_count: streaming multiprocessors, or None if unpublished.
        max_sm_clock_hz: maximum SM clock in Hz.
        int32_lanes_per_sm: INT32 lanes per SM (64 Hopper, 128 Blackwell).
        int32_ops_per_s: INT32 instructions/s (IMAD counts once) = SMs x lanes x clock.
        hbm_bytes: HBM capacity in bytes (datasheet decimal GB x 1e9).
        hbm_bandwidth_bytes_per_s: HBM bandwidth in bytes/s.
        nvlink_bandwidth_bytes_per_s: NVLink bandwidth per GPU in bytes/s, both directions summed
            (NVIDIA's "900 GB/s" for H100/H200); one direction is half.
        max_mem_clock_hz: highest supported memory clock in Hz (NVML ``SupportedMemoryClocks``).
        fp64_flops_per_s / fp64_tensor_flops_per_s / fp32_flops_per_s / bf16_flops_per_s /
            fp8_flops_per_s: dense peak flop/s.
        int8_ops_per_s: dense INT8 tensor op/s (None where unpublished).
        tdp_w: board power (TGP) and default power limit in W.
        min_power_limit_w: lowest settable power limit in W (NVML ``LimitConstraints`` min).
        idle_power_w: idle board power in W where measured or published.
        derived: names of fields computed from others rather than quoted.
        notes: field name -> caveat text.
        sources: list of ``{"url", "retrieved", "fields"}`` dicts.
    """

    key: str
    nvml_names: tuple[str, ...]
    status: str
    architecture: str
    sm_count: int | None
    max_sm_clock_hz: float | None
    int32_lanes_per_sm: int | None
    int32_ops_per_s: float | None
    hbm_bytes: float | None
    hbm_bandwidth_bytes_per_s: float | None
    nvlink_bandwidth_bytes_per_s: float | None
    max_mem_clock_hz: float | None
    fp64_flops_per_s: float | None
    fp64_tensor_flops_per_s: float | None
    fp32_flops_per_s: float | None
    bf16_flops_per_s: float | None
    fp8_flops_per_s: float | None
    int8_ops_per_s: float | None
    tdp_w: float | None
    min_power_limit_w: float | None
    idle_power_w: float | None
    derived: tuple[str, ...] = ()
    notes: dict[str, str] = field(default_factory=dict, hash=False, compare=False)
    sources: tuple[dict[str, Any], ...] = field(default=(), hash=False, compare=False)

    def __post_init__(self) -> None:
        if self.status not in ("shipping", "projected"):
            raise ValueError(f"{self.key}: status must be 'shipping' or 'projected', got {self.status!r}")
        if not self.sources:
            raise ValueError(f"{self.key}: a catalogue entry needs at least one source")

    @property
    def projected(self) -> bool:
        """True when the numbers are projections (not shipping hardware)."""
        return self.status == "projected"

    @property
    def unverified_fields(self) -> tuple[str, ...]:
        """Fields whose only source is marked ``unverified`` in the catalogue (check before relying on them)."""
        verified = {f for s in self.sources if not s["retrieved"].startswith("unverified") for f in s["fields"]}
        return tuple(sorted({f for s in self.sources if s["retrieved"].startswith("unverified")
                             for f in s["fields"]} - verified))

    @property
    def int32_ops_per_s_from_parts(self) -> float | None:
        """``sm_count x int32_lanes_per_sm x max_sm_clock_hz`` (None if a part is unknown)."""
        if None in (self.sm_count, self.int32_lanes_per_sm, self.max_sm_clock_hz):
            return None
        return float(self.sm_count * self.int32_lanes_per_sm * self.max_sm_clock_hz)


def _norm(name: str) -> str:
    return " ".join(name.lower().replace("-", " ").replace("_", " ").split())


@cache
def _load() -> tuple[GpuSpec, ...]:
    text = resources.files("gpufield.telemetry").joinpath("data", _RESOURCE).read_text("utf-8")
    raw = json.loads(text)
    known = {f.name for f in fields(GpuSpec)}
    out = []
    for i, entry in enumerate(raw["gpus"]):
        extra = set(entry) - known
        missing = known - set(entry) - {"derived", "notes", "sources"}
        if extra or missing:
            raise InputError(f"gpu entry {i}: unknown fields {sorted(extra)}, missing {sorted(missing)}",
                             path=_RESOURCE)
        entry = dict(entry)
        entry["nvml_names"] = tuple(entry["nvml_names"])
        entry["derived"] = tuple(entry.get("derived", ()))
        entry["sources"] = tuple(entry.get("sources", ()))
        out.append(GpuSpec(**entry))
    return tuple(out)


def gpu_specs() -> tuple[GpuSpec, ...]:
    """All catalogue entries, in file order.

    Returns:
        Tuple of :class:`GpuSpec`.
    """
    return _load()


def gpu_spec(name: str) -> GpuSpec:
    """Look up a GPU by catalogue key or the product name NVML reports.

    Matching ignores case, ``-``/``_`` and repeated spaces; an exact alias wins (also after a leading
    ``"NVIDIA "``: ``"NVIDIA H100"`` -> H100-SXM), else the longest alias that is a word prefix of ``name``
    (``"NVIDIA B300 SXM6 AC"`` -> B300; ``"NVIDIA H100 CNX"`` matches nothing). Names containing
    ``PCIe`` or ``NVL`` are refused rather than guessed: those variants have other SM counts,
    clocks and TDPs and are not in the catalogue.

    Args:
        name: e.g. ``"NVIDIA H200"``, ``"NVIDIA H100 80GB HBM3"``, ``"B200"``, ``"H100-SXM"``.

    Returns:
        The matching :class:`GpuSpec`.

    Raises:
        InputError: no entry matches; the message lists the known names.
    """
    full = _norm(name)
    specs = _load()
    # the name as given, then without the vendor word ("NVIDIA H100" -> "h100", an alias)
    wants = [full] + ([full[len("nvidia "):]] if full.startswith("nvidia ") else [])
    for want in wants:
        for s in specs:
            if want in {_norm(s.key), *(_norm(n) for n in s.nvml_names)}:
                return s
    if not any(tag in full.split() for tag in ("pcie", "nvl")):  # word prefixes of the name as given only
        best: tuple[int, GpuSpec] | None = None
        for s in specs:
            for n in (s.key, *s.nvml_names):
                a = _norm(n)
                if full.startswith(a + " ") and (best is None or len(a) > best[0]):
                    best = (len(a), s)
        if best is not None:
            return best[1]
    known = ", ".join(f"{s.key} ({s.nvml_names[0]!r})" for s in specs)
    raise InputError(f"unknown GPU {name!r}; the catalogue knows {known} (PCIe/NVL variants are not catalogued)")
