"""Twin scenarios: a GPU, a model, lane sizes, SLOs and a load, bundled as JSON data files.

Bundled scenarios live in ``gpufield/power/data/scenarios/<name>.json``; a path to any JSON file of
the same shape works too (see ``moe-agentic-b200.json`` for every key). Load kinds: ``agentic``
(:func:`~gpufield.power.twin.load.agentic_sessions`), ``poisson`` and ``mooncake`` (``path`` relative
to the scenario file). Agentic and poisson loads take ``"spikes": [{"start_s", "duration_s",
"rate_factor"}]``: during each spike, extra sessions (requests) arrive at ``(rate_factor - 1)`` times
the base rate, drawn from the same distributions with their own seed and prefix blocks (the shared
system prompts stay shared).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from gpufield._files import read_text
from gpufield.errors import InputError
from gpufield.power.scenario_check import check_request_budget, check_scenario_dict
from gpufield.power.twin.engine import LanePair
from gpufield.power.twin.gpu import GpuModel, load_gpu_model
from gpufield.power.twin.load import Workload, agentic_sessions, poisson, read_mooncake
from gpufield.power.twin.model import CostModel, EngineSpec, ModelSpec

__all__ = ["Scenario", "SloTargets", "load_scenario", "bundled_scenarios"]


@dataclass(frozen=True, kw_only=True, slots=True)
class SloTargets:
    """Latency SLOs (s): p99 TTFT at the frontend and p99 ITL at the decode lane.

    Raises:
        ValueError: non-positive targets.
    """

    ttft_p99_s: float
    itl_p99_s: float

    def __post_init__(self) -> None:
        if self.ttft_p99_s <= 0 or self.itl_p99_s <= 0:
            raise ValueError(f"SLOs must be > 0 s, got ttft {self.ttft_p99_s}, itl {self.itl_p99_s}")


@dataclass(frozen=True, kw_only=True, slots=True)
class Scenario:
    """A loaded scenario (see the module docstring); build lanes with :meth:`lane_pair`."""

    name: str
    description: str
    gpu: GpuModel
    model: ModelSpec
    engine: EngineSpec
    lanes: dict[str, int]
    slo: SloTargets
    load: dict[str, Any]
    control_period_s: float
    seed: int
    peak_rate_factor: float
    base_dir: Path = field(default=Path("."))
    source: str = "<scenario>"

    def lane_pair(self) -> LanePair:
        """Fresh :class:`LanePair` (cost-model caches are per pair)."""
        ln = self.lanes
        return LanePair(prefill=CostModel(self.gpu, self.model, self.engine, ln["prefill_tp"]),
                        decode=CostModel(self.gpu, self.model, self.engine, ln["decode_tp"]),
                        prefill_gpus=ln["prefill_gpus"], decode_gpus=ln["decode_gpus"],
                        kv_capacity_tokens=ln["kv_capacity_tokens"],
                        control_period_s=self.control_period_s)

    @property
    def n_gpus(self) -> int:
        """GPUs in the lane pair."""
        return self.lanes["prefill_gpus"] + self.lanes["decode_gpus"]

    def workload(self, *, duration_s: float | None = None, rate_factor: float = 1.0,
                 seed: int | None = None, spikes: bool = True) -> Workload:
        """Generate (or read) the scenario's load.

        Args:
            duration_s: override the load duration (tests use short horizons).
            rate_factor: scale the arrival rate (the peak bucket uses ``peak_rate_factor``).
            seed: override the seed.
            spikes: include ``load.spikes`` (calibration's peak bucket leaves them out: it stands
                for the steady load a profile is calibrated on, and a spike is what the guard is for).

        Raises:
            InputError: the override would generate more requests than the twin accepts.
        """
        if duration_s is not None and not (isinstance(duration_s, (int, float)) and 0 < duration_s < 1e9):
            raise InputError(f"duration override must be a number of seconds in (0, 1e9), got {duration_s!r}",
                             path=self.source)
        check_request_budget(self.load, self.source, rate_factor=rate_factor, duration_s=duration_s)
        d = dict(self.load)
        kind = d.pop("kind")
        s = self.seed if seed is None else seed
        if duration_s is not None:
            d["duration_s"] = duration_s
        spike_list = d.pop("spikes", [])
        if not spikes:
            spike_list = []
        if kind in ("agentic", "poisson"):
            rate_key, gen = (("session_rate_per_s", agentic_sessions) if kind == "agentic"
                             else ("rate_per_s", poisson))
            d[rate_key] *= rate_factor
            parts = [gen(seed=s, **d)]
            for i, sp in enumerate(spike_list):
                if sp["rate_factor"] <= 1.0 or sp["start_s"] >= d["duration_s"]:
                    continue
                extra = gen(seed=s + 7919 * (i + 1), **{**d, rate_key: d[rate_key] * (sp["rate_factor"] - 1.0),
                                                         "duration_s": min(sp["duration_s"], d["duration_s"] - sp["start_s"])})
                parts.append((extra, float(sp["start_s"]), (i + 1) * 10**9))
            return _merge(parts[0], parts[1:])
        if kind == "mooncake":
            w = read_mooncake(self.base_dir / d["path"], time_scale=d.get("time_scale", 1.0) / rate_factor)
            return w.window(0.0, d["duration_s"]) if "duration_s" in d else w
        raise InputError(f"load.kind must be agentic, poisson or mooncake, got {kind!r}")


def _merge(base: Workload, extras: list[tuple[Workload, float, int]]) -> Workload:
    """``base`` plus each ``(workload, shift_s, id_offset)``: arrivals shifted, own prefix blocks offset.

    Block ids below 1e6 are the agents' system prompts (:func:`agentic_sessions`) and stay shared.
    """
    if not extras:
        return base
    arr = [base.arrival_s] + [w.arrival_s + t for w, t, _ in extras]
    hids = list(base.hash_ids) + [tuple(h + off if h >= 1_000_000 else h for h in ids)
                                  for w, _t, off in extras for ids in w.hash_ids]
    a = np.concatenate(arr)
    order = np.argsort(a, kind="stable")
    inp = np.concatenate([base.input_tokens] + [w.input_tokens for w, _, _ in extras])
    out = np.concatenate([base.output_tokens] + [w.output_tokens for w, _, _ in extras])
    return Workload(a[order], inp[order], out[order], tuple(hids[i] for i in order))


def bundled_scenarios() -> list[str]:
    """Names of the scenarios shipped with gpufield."""
    root = resources.files("gpufield.power.data").joinpath("scenarios")
    return sorted(p.name[:-5] for p in root.iterdir() if p.name.endswith(".json"))


def load_scenario(name_or_path: str | Path) -> Scenario:
    """Load a bundled scenario by name, or a scenario JSON file by path.

    Raises:
        InputError: unknown name, unreadable file, or a missing/invalid key (file named).
    """
    p = Path(name_or_path)
    if p.suffix == ".json" or p.exists():
        if not p.is_file():
            what = ("is a directory" if p.is_dir() else "is not a regular file (a FIFO, device or socket)"
                    if p.exists() else "scenario file not found")
            raise InputError(f"{what}; expected a scenario JSON file or a bundled scenario name"
                             if p.exists() else what, path=str(p))
        text, base, where = read_text(p, what="a scenario JSON file"), p.parent, str(p)
    else:
        names = bundled_scenarios()
        if str(name_or_path) not in names:
            raise InputError(f"unknown scenario {name_or_path!r}; bundled: {', '.join(names)}")
        res = resources.files("gpufield.power.data").joinpath("scenarios", f"{name_or_path}.json")
        text, base, where = res.read_text(), Path("."), f"<bundled>/{name_or_path}.json"
    try:
        d = json.loads(text)
    except json.JSONDecodeError as e:
        raise InputError(f"invalid JSON: {e.msg}", path=where, line=e.lineno, column=e.colno) from e
    check_scenario_dict(d, where)
    try:
        return Scenario(name=d["name"], description=d.get("description", ""),
                        gpu=load_gpu_model(d["gpu"]), model=ModelSpec(**d["model"]),
                        engine=EngineSpec(**d.get("engine", {})), lanes=dict(d["lanes"]),
                        slo=SloTargets(**d["slo"]), load=dict(d["load"]),
                        control_period_s=float(d.get("control_period_s", 5.0)),
                        seed=int(d.get("seed", 0)), peak_rate_factor=float(d.get("peak_rate_factor", 1.3)),
                        base_dir=base, source=where)
    except KeyError as e:
        raise InputError(f"missing key {e.args[0]!r} (see moe-agentic-b200.json for the shape)", path=where) from e
    except (TypeError, ValueError) as e:
        raise InputError(f"invalid scenario: {e}", path=where) from e
