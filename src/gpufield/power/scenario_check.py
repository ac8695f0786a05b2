"""Validation of scenario JSON before anything is built from it (file, key and expectation named).

JSON gives Python strings for quoted numbers and (as Python's ``json`` accepts them) NaN and
Infinity; unchecked, ``"5"`` became 5.0 through ``float()``, a NaN control period ran a meaningless
simulation, and a huge arrival rate reached ``numpy`` as a request count and ended in MemoryError.
:func:`check_scenario_dict` refuses each with :class:`~gpufield.errors.InputError` naming the file,
the dotted key (``load.rate_per_s``) and what was expected. Ranges are sanity bounds, not physics.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from gpufield.errors import InputError

__all__ = ["check_scenario_dict", "check_request_budget", "MAX_REQUESTS"]

#: most requests one twin run may generate (about 2 GB of per-request arrays; a 10-minute paper-scale
#: scenario has a few thousand)
MAX_REQUESTS = 2_000_000

_LANES = {"prefill_gpus": (1, 4096), "prefill_tp": (1, 4096), "decode_gpus": (1, 4096), "decode_tp": (1, 4096),
          "kv_capacity_tokens": (1, 10**12)}
_LOAD_KINDS = {"agentic", "poisson", "mooncake"}


def _num(v: Any, key: str, where: str, *, lo: float, hi: float, integer: bool = False,
         lo_open: bool = False) -> float:
    kind = "an integer" if integer else "a number"
    rng = f"{'(' if lo_open else '['}{lo:g}, {hi:g}]"
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        got = f"the string {v!r}" if isinstance(v, str) else type(v).__name__
        raise InputError(f"{key}: expected {kind} in {rng}, got {got}", path=where)
    if not math.isfinite(v):
        raise InputError(f"{key}: expected {kind} in {rng}, got {v}", path=where)
    if integer and not float(v).is_integer():
        raise InputError(f"{key}: expected {kind} in {rng}, got {v}", path=where)
    if v < lo or v > hi or (lo_open and v == lo):
        raise InputError(f"{key}: expected {kind} in {rng}, got {v:g}", path=where)
    return v


def _obj(d: dict, key: str, where: str) -> dict:
    if key not in d:
        raise InputError(f"missing key {key!r} (see moe-agentic-b200.json for the shape)", path=where)
    if not isinstance(d[key], dict):
        raise InputError(f"{key}: expected an object, got {type(d[key]).__name__}", path=where)
    return d[key]


def _spec_numbers(d: dict, cls: type, prefix: str, where: str) -> None:
    """Numeric fields of a spec dataclass must be finite numbers >= 0 (the spec checks the rest)."""
    types = {f.name: str(f.type) for f in dataclasses.fields(cls)}
    for k, v in d.items():
        t = types.get(k)
        if t is None:
            raise InputError(f"{prefix}.{k}: unknown key (expected one of {', '.join(sorted(types))})", path=where)
        if t in ("float", "int"):
            _num(v, f"{prefix}.{k}", where, lo=0, hi=1e15, integer=t == "int")
        elif t == "bool" and not isinstance(v, bool):
            raise InputError(f"{prefix}.{k}: expected true or false, got {v!r}", path=where)


def _check_spikes(v: Any, kind: Any, where: str) -> None:
    """``load.spikes``: a list of ``{start_s, duration_s, rate_factor}`` (agentic and poisson loads)."""
    if kind not in ("agentic", "poisson"):
        raise InputError(f"load.spikes: only agentic and poisson loads take spikes, not {kind!r}", path=where)
    if not isinstance(v, list) or len(v) > 100:
        raise InputError(f"load.spikes: expected a list of at most 100 objects, got {v!r}", path=where)
    for i, sp in enumerate(v):
        key = f"load.spikes[{i}]"
        if not isinstance(sp, dict) or set(sp) != {"start_s", "duration_s", "rate_factor"}:
            raise InputError(f"{key}: expected an object with exactly start_s, duration_s, rate_factor, got {sp!r}",
                             path=where)
        _num(sp["start_s"], f"{key}.start_s", where, lo=0, hi=1e9)
        _num(sp["duration_s"], f"{key}.duration_s", where, lo=0, hi=1e9, lo_open=True)
        _num(sp["rate_factor"], f"{key}.rate_factor", where, lo=1.0, hi=100.0)


def check_request_budget(load: dict, where: str, *, rate_factor: float = 1.0,
                         duration_s: float | None = None) -> None:
    """Refuse loads that would generate more than :data:`MAX_REQUESTS` requests.

    Raises:
        InputError: the expected request count (rate x duration x turns x factor) is too large.
    """
    kind = load.get("kind")
    dur = load.get("duration_s") if duration_s is None else duration_s
    # a spike adds (factor - 1) x the rate over its duration
    dur = dur + sum((sp["rate_factor"] - 1.0) * sp["duration_s"] for sp in load.get("spikes", ()))
    if kind == "poisson":
        n, what = load["rate_per_s"] * dur * rate_factor, "load.rate_per_s x load.duration_s"
    elif kind == "agentic":
        n = load["session_rate_per_s"] * dur * load["turns_mean"] * rate_factor
        what = "load.session_rate_per_s x load.duration_s x load.turns_mean"
    else:
        return
    if n > MAX_REQUESTS:
        raise InputError(f"{what} (x rate factor {rate_factor:g}) would generate ~{n:.3g} requests; the twin "
                         f"accepts at most {MAX_REQUESTS:,} per run (lower the rate or the duration)", path=where)


def check_scenario_dict(d: Any, where: str) -> None:
    """Check a parsed scenario (see the module docstring).

    Raises:
        InputError: the first problem found, naming ``where``, the key and the expectation.
    """
    from gpufield.power.twin.model import EngineSpec, ModelSpec

    if not isinstance(d, dict):
        raise InputError(f"expected a JSON object at the top level, got {type(d).__name__}", path=where)
    for k in ("name", "gpu"):
        if k not in d:
            raise InputError(f"missing key {k!r} (see moe-agentic-b200.json for the shape)", path=where)
        if not isinstance(d[k], str) or not d[k]:
            raise InputError(f"{k}: expected a non-empty string, got {d[k]!r}", path=where)
    _spec_numbers(_obj(d, "model", where), ModelSpec, "model", where)
    if "engine" in d:
        _spec_numbers(_obj(d, "engine", where), EngineSpec, "engine", where)
    lanes = _obj(d, "lanes", where)
    for k, (lo, hi) in _LANES.items():
        if k not in lanes:
            raise InputError(f"missing key 'lanes.{k}'", path=where)
        _num(lanes[k], f"lanes.{k}", where, lo=lo, hi=hi, integer=True)
    for lane in ("prefill", "decode"):
        if lanes[f"{lane}_gpus"] % lanes[f"{lane}_tp"]:
            raise InputError(f"lanes.{lane}_gpus ({lanes[f'{lane}_gpus']}) must be a multiple of "
                             f"lanes.{lane}_tp ({lanes[f'{lane}_tp']})", path=where)
    slo = _obj(d, "slo", where)
    for k, hi in (("ttft_p99_s", 3600.0), ("itl_p99_s", 60.0)):
        if k not in slo:
            raise InputError(f"missing key 'slo.{k}'", path=where)
        _num(slo[k], f"slo.{k}", where, lo=0, hi=hi, lo_open=True)
    if "control_period_s" in d:
        _num(d["control_period_s"], "control_period_s", where, lo=0.1, hi=3600.0)
    if "seed" in d:
        _num(d["seed"], "seed", where, lo=0, hi=2**63 - 1, integer=True)
    if "peak_rate_factor" in d:
        _num(d["peak_rate_factor"], "peak_rate_factor", where, lo=0, hi=100.0, lo_open=True)
    load = _obj(d, "load", where)
    kind = load.get("kind")
    if kind not in _LOAD_KINDS:
        raise InputError(f"load.kind: expected one of {', '.join(sorted(_LOAD_KINDS))}, got {kind!r}", path=where)
    for k, v in load.items():
        if k == "kind":
            continue
        if k == "path":
            if not isinstance(v, str):
                raise InputError(f"load.path: expected a string, got {v!r}", path=where)
            continue
        if k == "spikes":
            _check_spikes(v, kind, where)
            continue
        _num(v, f"load.{k}", where, lo=0, hi=1e9)
    need = {"poisson": ("rate_per_s", "duration_s"), "agentic": ("session_rate_per_s", "duration_s", "turns_mean"),
            "mooncake": ("path",)}[kind]
    for k in need:
        if k not in load:
            raise InputError(f"missing key 'load.{k}' (load.kind {kind!r} needs {', '.join(need)})", path=where)
    for k in ("rate_per_s", "session_rate_per_s", "duration_s", "time_scale"):
        if k in load:
            _num(load[k], f"load.{k}", where, lo=0, hi=1e9, lo_open=True)
    check_request_budget(load, where, rate_factor=float(d.get("peak_rate_factor", 1.0)))
