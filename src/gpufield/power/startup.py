"""Start-up of ``gpufield power run``: the write interlock, NVML, and the check of every lane.

:func:`check_write` refuses write mode unless every GPU of every lane is allowed and every allowed
UUID belongs to a lane. :func:`check_lanes` checks each lane before anything starts: its GPUs present
by UUID and of one SKU, its plan (twin-derived for the SKU, a calibration profile for this GPU and
lane role, or a fixed point) inside the GPU's own limits, and its metric URLs reachable and parsed by
the lane's engine adapter with the lane's SLO histogram (decode: ITL, prefill: TTFT) and, for decode,
a KV gauge present. See :mod:`gpufield.power.serve`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from gpufield.errors import ActuationError, GpufieldError, InputError
from gpufield.power.lanes_config import LaneConfig, RunConfig
from gpufield.power.types import GpuCaps, LaneSetting

__all__ = ["check_lanes", "check_write", "open_nvml"]


def open_nvml(cfg: RunConfig, write: bool) -> Any:
    """The NVML module of ``cfg``: ``pynvml``, or ``FakeNvml`` H200s (spy mode unless ``write``)."""
    if cfg.nvml_backend == "fake":
        from gpufield.testing import FakeNvml, h200

        fake = FakeNvml([h200(i) for i in range(cfg.fake_gpus)], read_only=not write, clock=time.monotonic)
        for i in range(cfg.fake_gpus):
            fake.gpus[i].load = cfg.fake_load
        return fake
    import pynvml

    return pynvml


def check_write(cfg: RunConfig, write: bool, allow: Sequence[str]) -> None:
    """Refuse ``allow`` without ``write``, ``write`` without ``allow``, a lane GPU not allowed or an allowed
    UUID in no lane.

    Raises:
        ActuationError: naming the GPUs and their lanes.
    """
    if not write:
        if allow:
            raise ActuationError("--allow only means something with --write (shadow mode writes nothing)")
        return
    if not allow:
        raise ActuationError("--write needs --allow UUID for every GPU it may change; refusing to start")
    lane_of = {u: ln.name for ln in cfg.lanes for u in ln.gpus}
    stray = [u for u in allow if u not in lane_of]
    missing = [f"{u} (lane {lane_of[u]})" for u in lane_of if u not in allow]
    if stray or missing:
        parts = ([f"not allowed by --allow: {', '.join(missing)}"] if missing else []) + \
                ([f"--allow names GPUs in no lane of {cfg.path}: {', '.join(stray)}"] if stray else [])
        raise ActuationError("refusing to start in write mode: " + "; ".join(parts) +
                             " (allow every GPU of every lane, or run --shadow)")


def _plan(lane: LaneConfig, caps: GpuCaps) -> tuple[LaneSetting, Any, str]:
    """(setting, twin model or None, where the setting came from) for one lane."""
    from gpufield.power.twin.gpu import load_gpu_model

    try:
        model = load_gpu_model(caps.name)
    except ValueError:
        model = None
    if lane.plan == "fixed":
        parts = ([f"cap {lane.power_limit_w:g} W"] if lane.power_limit_w is not None else []) + \
                ([f"clocks {lane.clock_window_mhz[0]}-{lane.clock_window_mhz[1]} MHz"] if lane.clock_window_mhz else []) + \
                ([f"profile {lane.workload_profile}"] if lane.workload_profile else [])
        return (LaneSetting(power_limit_w=lane.power_limit_w, clock_window_mhz=lane.clock_window_mhz,
                            workload_profile=lane.workload_profile,
                            label=" + ".join(parts) + " (fixed)"), model, "fixed in the lanes file")
    if lane.plan == "twin":
        if model is None:
            raise ValueError(f"the twin has no model of {caps.name!r}: give this lane a calibration profile")
        from gpufield.power.shadow import shadow_plan

        return shadow_plan(model, step_w=lane.step_w)[lane.role], model, f"twin plan for {model.name}"
    import json

    from gpufield._files import read_text
    from gpufield.power.profiles import ProfileKey, load_profile

    try:  # read_text: a FIFO is refused (never a hang), invalid UTF-8 names the line
        saved = ProfileKey(**json.loads(read_text(lane.profile, what="a profile JSON from gpufield power calibrate"))
                           ["key"])
    except InputError:
        raise
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise InputError(f"cannot read the profile's key ({e}); expected a profile JSON from gpufield power "
                         "calibrate", path=str(lane.profile)) from None
    fields = {f: getattr(saved, f) for f in saved.__dataclass_fields__}
    fields.update(gpu=caps.name, lane=lane.role.value)  # what this run can check: SKU and lane role
    prof = load_profile(lane.profile, ProfileKey(**fields))
    return prof.setting, model, f"profile {lane.profile}"


def _check_profile(act: Any, lane: LaneConfig, name: str, gpus: list[str]) -> None:
    """Raise ValueError unless every GPU offers workload power profile ``name`` (read-only queries)."""
    from gpufield.power.actuators.wpp import PROFILE_IDS

    if name not in PROFILE_IDS:
        raise ValueError(f"unknown workload power profile {name!r} (known: {', '.join(PROFILE_IDS)})")
    profiles = getattr(act, "profiles", None)
    if profiles is None:
        raise ValueError(f"workload power profile {name} needs an actuator with profiles")
    for u in gpus:
        wp = profiles(u)
        if not wp.supported:
            raise ValueError(f"workload power profile {name}: {u} has none ({wp.reason})")
        if PROFILE_IDS[name] not in wp.available:
            raise ValueError(f"workload power profile {name} (id {PROFILE_IDS[name]}) not offered by {u} "
                             f"(offers {list(wp.available)})")


def check_lanes(cfg: RunConfig, act: Any, get: Callable[[str], str]) -> tuple[dict, list[str], list[str]]:
    """Check every lane (module docstring).

    Args:
        cfg: the lanes file. act: an entered actuator (``gpus``, ``capabilities``). get: ``url -> text``.

    Returns:
        ``(info, gpu_problems, metrics_problems)``: per lane name its setting, twin model (or None),
        origin, caps and :class:`PromLaneSource`; and the problems found (empty when all is well).
    """
    from gpufield.power.engines import PromLaneSource

    present = set(act.gpus)
    info, probs, mprobs = {}, [], []
    for ln in cfg.lanes:
        absent = [u for u in ln.gpus if u not in present]
        if absent:
            probs.append(f"lane {ln.name}: GPU not found by UUID: {', '.join(absent)} "
                         f"(NVML sees {', '.join(sorted(present)) or 'none'})")
        caps = {u: act.capabilities(u) for u in ln.gpus if u in present}
        if len({c.name for c in caps.values()}) > 1:
            probs.append(f"lane {ln.name}: mixes GPU models {sorted({c.name for c in caps.values()})}")
        src = PromLaneSource({ln.role: list(ln.metrics)}, ln.engine, fast_s=cfg.fast_window_s, slow_s=cfg.slow_window_s,
                             get=get)
        mprobs += [f"lane {ln.name}: {p}" for p in src.check(ln.role)]
        if not caps:
            continue
        c0 = next(iter(caps.values()))
        try:
            setting, model, origin = _plan(ln, c0)
            if setting.clock_window_mhz is not None:
                c0.check_window(*setting.clock_window_mhz)
            if setting.power_limit_w is not None and not c0.min_limit_w <= setting.power_limit_w <= c0.max_limit_w:
                raise ValueError(f"power limit {setting.power_limit_w:g} W outside {c0.min_limit_w:g}-"
                                 f"{c0.max_limit_w:g} W")
            if setting.workload_profile is not None:
                _check_profile(act, ln, setting.workload_profile, list(caps))
        except (ValueError, GpufieldError) as e:
            probs.append(f"lane {ln.name}: plan: {e}")
            continue
        info[ln.name] = {"setting": setting, "model": model, "origin": origin, "caps": c0, "source": src}
    return info, probs, mprobs
