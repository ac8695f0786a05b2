"""gpufield.power: phase-decoupled power control for prefill/decode-disaggregated LLM serving.

What it does
------------
Each lane of a disaggregated deployment gets its own actuator, chosen by calibration:

* **prefill**: an SM-clock *window* whose floor is the TTFT guarantee (prefill is compute-bound:
  ``t_p ~ f^-beta``; floor = lowest clock meeting ``(1-h) SLO - t_x - t_d1`` including p99 queueing at
  the provisioned peak rate, checked enforceable under the power limit) and whose top is the energy
  sweet spot of the smoothed clock sweep (:func:`calibrate_prefill`);
* **decode**: the Pareto-best of a power cap at *cliff + margin*, an SM-clock ceiling, or a vendor
  profile stand-in (:func:`calibrate_decode`): a two-pass sweep, a knee with a bootstrap
  interval on the end of the flat part (:func:`fit_knee`, a two-phase fit that allows a step), a
  margin of ``max(step, 5% TGP)``, then a latency gate at peak load;
* a runtime **SLO guard** per lane (:class:`SloGuard`, an explicit state machine: fast breach ->
  defaults at once, slow breach / leading indicators -> one notch up, relax slowly, fail-safe to
  defaults on stale telemetry, NVML errors or thermal slowdown).

Design and sources: ``../shared/reference/power.md`` sections 1.3, 6 and 7 (the target paper's
design is reconstructed from its abstract; parameters marked [RECON] there are ours).

Safety
------
Read-only is the default. :class:`NvmlActuator` writes a GPU only when its UUID is in
``WriteConfig.allow_uuids`` *and* ``i_own_this_gpu`` is set; it clamps to the limit constraints and
supported clocks, verifies every write by reading back, saves the original settings before the first
write and restores them on exit, SIGTERM and SIGINT, and restores GPUs left changed by a crashed run.
:class:`DryRunActuator` (shadow mode) holds NVML only behind :class:`ReadOnlyNvml`, so no setter can
be reached; it logs every intended write with time, lane, value and reason.

Digital twin
------------
:func:`simulate` runs a prefill lane and a decode lane on N GPUs (per-GPU power model with a cap
enforced on a ~1 s average, clock windows, HBM clock states, idle power; H200 fitted to the project's
probe, B200/B300 from public figures: ``power/data/twin_gpus.json`` names every source), MoE or dense
cost models (expected experts touched ``E(1-(1-k/E)^b)``), continuous batching, KV transfer and
queueing, under Poisson, agentic-session or Mooncake-trace load. :class:`TwinMetricsServer` serves the
twin's vLLM-style ``/metrics`` over HTTP so :class:`PromLaneSource` reads it exactly as a real engine.

Quick start
-----------
A/B in the twin (default, Max-Q stand-in, static clock lock, static cap, balanced, efficiency, and the
exhaustive static oracle) on a bundled scenario::

    gpufield power simulate moe-agentic-b200 --json

    from gpufield.power import load_scenario, simulate_ab
    report = simulate_ab(load_scenario("moe-agentic-b200"), duration_s=300)
    print(report.arm("balanced").tokens_per_j, report.oracle.tokens_per_j)

Shadow mode on a real GPU (nothing is written)::

    PYTHONPATH=src python3 benchmarks/power_shadow_gpu.py --out results/

A long-running controller beside a serving deployment (shadow by default; example config and
systemd unit in ``examples/power/``)::

    gpufield power run --config lanes.toml --shadow
    sudo gpufield power run --config lanes.toml --write --allow GPU-... --allow GPU-...

Calibrating a lane against a real engine (an OpenAI-compatible endpoint; shadow by default: one
as-is step, nothing written; gated on the engine's own TTFT/ITL histograms)::

    gpufield power calibrate --engine http://127.0.0.1:8000 --lane decode --itl-p99-slo-s 0.05 \
        --ttft-p99-slo-s 2 --concurrency 1,4,16 --duration-s 60 --out decode-profile.json

    from gpufield.power import EngineSweepConfig, calibrate_engine, engine_profile

Controlling real GPUs from Python (root, explicit flag, allow-listed UUIDs)::

    from gpufield.power import NvmlActuator, WriteConfig, RuntimeLoop
    with NvmlActuator(WriteConfig(allow_uuids=frozenset({"GPU-..."}), i_own_this_gpu=True)) as act:
        RuntimeLoop(lanes, controllers, source, act, period_s=5).run(3600)

Modes: ``performance`` (defaults), ``balanced`` (h = 10%, margin max(step, 5% TGP)), ``efficiency``
(h = 5%, margin = one step), ``vendor-maxq`` / ``vendor-maxp`` (one stand-in on every GPU),
``shadow`` (balanced decisions logged through the dry-run actuator).
"""

from gpufield.power.ab import AbReport, ArmResult, SimProgress, calibrate_twin, simulate_ab
from gpufield.power.actuators.dryrun import DryRunActuator, ReadOnlyNvml
from gpufield.power.actuators.nvml import NvmlActuator
from gpufield.power.actuators.sim import SimActuator
from gpufield.power.calibrate.decode import (
    DecodeCalibration,
    GateResult,
    SweepPoint,
    calibrate_decode,
)
from gpufield.power.calibrate.engine import (
    EngineCalibration,
    EngineSweepConfig,
    calibrate_engine,
    engine_profile,
)
from gpufield.power.calibrate.knee import KneeFit, fit_knee
from gpufield.power.calibrate.prefill import PrefillCalibration, PrefillPoint, calibrate_prefill
from gpufield.power.config import CalibrationConfig, GuardConfig, WriteConfig, mode_calibration
from gpufield.power.controller import (
    LaneController,
    LaneLimits,
    PairPolicy,
    static_policy,
    vendor_setting,
)
from gpufield.power.engines import ENGINES, EngineAdapter, PromLaneSource
from gpufield.power.guard import AtCalibrated, Fallback, Raised, SloGuard
from gpufield.power.lanes_config import LaneConfig, RunConfig, load_run_config
from gpufield.power.profiles import Profile, ProfileKey, load_profile, save_profile
from gpufield.power.protocols import Actuator, Policy, TelemetrySource
from gpufield.power.runtime import RuntimeLoop, apply_setting
from gpufield.power.scenario import Scenario, SloTargets, bundled_scenarios, load_scenario
from gpufield.power.serve import RunSummary, run_lanes
from gpufield.power.shadow import (
    LatencyWindowSource,
    attest,
    attestation_unchanged,
    run_shadow,
    shadow_plan,
)
from gpufield.power.twin.engine import LanePair, SimResult, simulate
from gpufield.power.twin.fit import PowerFit, fit_power_model
from gpufield.power.twin.gpu import Firmware, GpuModel, load_gpu_model
from gpufield.power.twin.server import TwinMetricsServer
from gpufield.power.types import GpuCaps, GpuState, Intent, Lane, LaneSetting, LaneSignals, Mode

__all__ = [
    "AbReport", "ArmResult", "SimProgress", "simulate_ab", "calibrate_twin",
    "DryRunActuator", "ReadOnlyNvml", "NvmlActuator", "SimActuator",
    "DecodeCalibration", "GateResult", "SweepPoint", "calibrate_decode", "KneeFit", "fit_knee",
    "EngineCalibration", "EngineSweepConfig", "calibrate_engine", "engine_profile",
    "PrefillCalibration", "PrefillPoint", "calibrate_prefill",
    "CalibrationConfig", "GuardConfig", "WriteConfig", "mode_calibration",
    "LaneController", "LaneLimits", "PairPolicy", "static_policy", "vendor_setting",
    "ENGINES", "EngineAdapter", "PromLaneSource",
    "AtCalibrated", "Fallback", "Raised", "SloGuard",
    "Profile", "ProfileKey", "load_profile", "save_profile",
    "Actuator", "Policy", "TelemetrySource",
    "RuntimeLoop", "apply_setting",
    "LaneConfig", "RunConfig", "load_run_config", "RunSummary", "run_lanes",
    "Scenario", "SloTargets", "bundled_scenarios", "load_scenario",
    "LatencyWindowSource", "attest", "attestation_unchanged", "run_shadow", "shadow_plan",
    "LanePair", "SimResult", "simulate",
    "Firmware", "GpuModel", "load_gpu_model", "TwinMetricsServer", "PowerFit", "fit_power_model",
    "GpuCaps", "GpuState", "Intent", "Lane", "LaneSetting", "LaneSignals", "Mode",
]
