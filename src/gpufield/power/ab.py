"""A/B in the twin: vendor default, Max-Q stand-in, static clock lock, static cap, our modes, oracle.

Every arm runs on the same trace and seed. Metrics: tokens/J (output tokens / board energy of all
GPUs of both lanes), mean e2e, TTFT p99, ITL p99, SLO attainment (fraction of 30 s windows whose ITL
p99 meets the SLO), with 95% bootstrap intervals (tokens/J: windows resampled; e2e: requests
resampled). The oracle is the best *static* per-lane setting by exhaustive search over a grid (caps
every ``step_w`` and SM-clock ceilings every ``clock_step_mhz`` on decode; locked clocks on prefill)
subject to TTFT p99 and every-window ITL p99 meeting their SLOs and, for ``oracle``, the latency
budget our modes also commit to (mean e2e <= (1 + gate_e2e_tolerance) x default); ``oracle_slo_only``
drops that budget and shows how much more energy a slower service would save. The lanes meet only at the KV
handoff, so the search is separable: decode candidates run against the default prefill lane's
handoffs, prefill candidates alone; the best feasible pair is then re-simulated jointly.

Both entry points take an optional ``progress`` callback receiving :class:`SimProgress` reports (what
is being simulated, simulated seconds of the current run, steps done of the total); the library
draws nothing itself (the CLI renders the reports with rich on stderr).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import numpy as np

from gpufield.power.calibrate.decode import DecodeCalibration, calibrate_decode
from gpufield.power.calibrate.prefill import PrefillCalibration, calibrate_prefill
from gpufield.power.config import CalibrationConfig, GuardConfig, mode_calibration
from gpufield.power.controller import (
    LaneController,
    LaneLimits,
    PairPolicy,
    static_policy,
    vendor_setting,
)
from gpufield.power.profiles import Profile, ProfileKey, save_profile
from gpufield.power.scenario import Scenario
from gpufield.power.twin.bench import TwinBench, maxq_standin
from gpufield.power.twin.engine import SimResult, simulate, simulate_prefill
from gpufield.power.types import MIN_CLOCK_TOP_FRAC, Lane, LaneSetting, Mode

__all__ = ["ArmResult", "AbReport", "SimProgress", "simulate_ab", "arm_metrics", "calibrate_twin"]


@dataclass(frozen=True, kw_only=True, slots=True)
class SimProgress:
    """One progress report of :func:`simulate_ab` / :func:`calibrate_twin`.

    Attributes:
        scenario: scenario name.
        stage: what is being simulated: ``"setup"`` (the calibration bench's peak replay),
            ``"calibrate balanced"`` / ``"calibrate efficiency"``, ``"arm <name>"``, ``"oracle grid"``,
            ``"oracle search"``, ``"oracle search (SLO only)"``, or ``"done"`` (the last report).
        run: the simulation under way in the stage (``"decode sweep cap 900 W"``, an oracle
            candidate's label, ...), ``""`` between runs.
        sim_s / sim_total_s: simulated seconds of that run done / its load length (0 between runs).
        done / total: steps finished / planned (each arm, each oracle grid candidate, each calibration
            is one step). ``done`` never decreases and the last report has ``done == total``.
    """

    scenario: str
    stage: str
    run: str
    sim_s: float
    sim_total_s: float
    done: int
    total: int


ProgressCallback = Callable[[SimProgress], None]


class _Reporter:
    """Turns engine/bench observations into :class:`SimProgress` reports (no-op without a callback)."""

    def __init__(self, cb: ProgressCallback | None, scenario: str, total: int) -> None:
        self.cb, self.scenario, self.total, self.done, self.stage = cb, scenario, total, 0, "setup"

    def emit(self, run: str = "", sim_s: float = 0.0, sim_total_s: float = 0.0) -> None:
        if self.cb is not None:
            self.cb(SimProgress(scenario=self.scenario, stage=self.stage, run=run, sim_s=float(sim_s),
                                sim_total_s=float(sim_total_s), done=self.done, total=self.total))

    def start(self, stage: str) -> None:
        self.stage = stage
        self.emit()

    def step(self) -> None:
        self.done = min(self.total, self.done + 1)
        self.emit()

    def finish(self) -> None:
        self.done, self.stage = self.total, "done"
        self.emit()

    def bench_cb(self) -> Callable[[str, float, float], None] | None:
        return None if self.cb is None else self.emit

    def run(self, label: str) -> Callable[[float, float], None] | None:
        """A ``(sim_s, sim_total_s)`` engine observer for one run called ``label``."""
        if self.cb is None:
            return None
        return lambda sim_s, total_s: self.emit(label, sim_s, total_s)


@dataclass(frozen=True, kw_only=True, slots=True)
class ArmResult:
    """Metrics of one arm (latencies in s; ``*_ci`` are 95% bootstrap intervals).

    Attributes:
        name: arm; prefill / decode: the lanes' settings at the end of the run.
        tokens_per_j, e2e_mean_s, ttft_p99_s, itl_p99_s: headline metrics.
        slo_attainment: fraction of windows with ITL p99 <= SLO; itl_slo_every_window: all of them.
        ttft_slo_met: TTFT p99 <= SLO. energy_j, output_tokens: totals.
        n_changes / changes: setting changes ``(t_s, lane, label)`` (first 40).
    """

    name: str
    prefill: str
    decode: str
    tokens_per_j: float
    tokens_per_j_ci: tuple[float, float]
    e2e_mean_s: float
    e2e_mean_ci: tuple[float, float]
    ttft_p99_s: float
    itl_p99_s: float
    slo_attainment: float
    itl_slo_every_window: bool
    ttft_slo_met: bool
    energy_j: float
    output_tokens: float
    n_changes: int = 0
    changes: tuple[tuple[float, str, str], ...] = ()


@dataclass(kw_only=True)
class AbReport:
    """Result of :func:`simulate_ab` (``to_dict`` gives the JSON the CLI prints)."""

    scenario: str
    description: str
    gpu: str
    model: str
    n_gpus: int
    duration_s: float
    requests: int
    slo: dict
    arms: list[ArmResult]
    oracle: ArmResult | None
    oracle_slo_only: ArmResult | None
    oracle_grid: int
    calibration: dict
    elapsed_s: float
    notes: list[str] = field(default_factory=list)

    def arm(self, name: str) -> ArmResult:
        """The arm called ``name``."""
        return next(a for a in self.arms if a.name == name)

    def to_dict(self) -> dict:
        """Plain-JSON form with relative changes vs the default arm."""
        base = self.arm("default")
        out = asdict(self)
        for a in out["arms"] + [o for o in (out["oracle"], out["oracle_slo_only"]) if o]:
            a["tokens_per_j_vs_default"] = a["tokens_per_j"] / base.tokens_per_j - 1.0
            a["e2e_mean_vs_default"] = a["e2e_mean_s"] / base.e2e_mean_s - 1.0
        if self.oracle is not None:
            out["balanced_over_oracle_tokens_per_j"] = self.arm("balanced").tokens_per_j / self.oracle.tokens_per_j
        if self.oracle_slo_only is not None:
            out["balanced_over_oracle_slo_only_tokens_per_j"] = (
                self.arm("balanced").tokens_per_j / self.oracle_slo_only.tokens_per_j)
        return out


def _boot_ratio(num: np.ndarray, den: np.ndarray, rng: np.random.Generator, n: int = 400) -> tuple[float, float]:
    if len(num) < 2:
        return (math.nan, math.nan)
    idx = rng.integers(0, len(num), (n, len(num)))
    r = num[idx].sum(1) / den[idx].sum(1)
    lo, hi = np.percentile(r, [2.5, 97.5])
    return float(lo), float(hi)


def arm_metrics(name: str, r: SimResult, sc: Scenario, seed: int = 0) -> ArmResult:
    """Summarise one run (see the module docstring for the definitions)."""
    rng = np.random.default_rng(seed)
    nb = len(r.energy_windows_j)
    tok = np.zeros(nb)
    # tokens counted in the window they were generated in (decode iterations + first tokens),
    # so each window's tokens and energy belong together
    np.add.at(tok, np.minimum((r.it_end_s // r.window_s).astype(int), nb - 1), r.it_tokens)
    np.add.at(tok, np.minimum((r.first_token_s // r.window_s).astype(int), nb - 1), 1.0)
    e2e = r.e2e_s
    idx = rng.integers(0, len(e2e), (400, len(e2e)))
    e_lo, e_hi = np.percentile(e2e[idx].mean(1), [2.5, 97.5])
    win = r.itl_p99_windows()
    last = {lane: None for lane in ("prefill", "decode")}
    for _t, lane, s in r.settings:
        last[lane] = s.label
    ttft99 = float(np.percentile(r.ttft_s, 99))
    return ArmResult(name=name, prefill=last["prefill"] or "default", decode=last["decode"] or "default",
                     tokens_per_j=r.tokens_per_j, tokens_per_j_ci=_boot_ratio(tok, r.energy_windows_j, rng),
                     e2e_mean_s=float(e2e.mean()), e2e_mean_ci=(float(e_lo), float(e_hi)),
                     ttft_p99_s=ttft99, itl_p99_s=r.itl_p99_s(),
                     slo_attainment=float(np.mean(win <= sc.slo.itl_p99_s)) if len(win) else math.nan,
                     itl_slo_every_window=bool(np.all(win <= sc.slo.itl_p99_s)),
                     ttft_slo_met=ttft99 <= sc.slo.ttft_p99_s, energy_j=r.energy_j,
                     output_tokens=float(r.output_tokens.sum()), n_changes=len(r.settings),
                     changes=tuple((round(t, 1), lane, st.label) for t, lane, st in r.settings[:40]))


def _calibrate(bench: TwinBench, sc: Scenario, cfg: CalibrationConfig, maxq: LaneSetting
               ) -> tuple[DecodeCalibration, PrefillCalibration]:
    gpu = sc.gpu
    dc = calibrate_decode(measure=bench.decode_measure, gate=bench.decode_gate, default_limit_w=gpu.tdp_w,
                          min_limit_w=gpu.min_limit_w, sm_clocks_mhz=list(gpu.sm_clocks_mhz),
                          slo_itl_p99_s=sc.slo.itl_p99_s, cfg=cfg, vendor={"vendor-maxq": maxq})
    pc = calibrate_prefill(measure=bench.prefill_point, sm_clocks_mhz=list(gpu.sm_clocks_mhz),
                           clock_step_mhz=cfg.clock_step_mhz, peak_rate_per_s=bench.peak_rate_per_s,
                           instances=sc.lanes["prefill_gpus"] // sc.lanes["prefill_tp"],
                           ttft_p99_slo_s=sc.slo.ttft_p99_s, headroom=cfg.headroom,
                           kv_transfer_p99_s=bench.kv_transfer_p99_s, first_decode_s=bench.first_decode_s,
                           enforced_limit_w=gpu.tdp_w, gate=bench.prefill_gate)
    return dc, pc


def _guarded(sc: Scenario, dc: DecodeCalibration, pc: PrefillCalibration, cfg: CalibrationConfig) -> PairPolicy:
    g = GuardConfig(itl_p99_slo_s=sc.slo.itl_p99_s, ttft_p99_slo_s=sc.slo.ttft_p99_s, period_s=sc.control_period_s)
    lim = LaneLimits(default_limit_w=sc.gpu.tdp_w, max_clock_mhz=sc.gpu.sm_clock_max_mhz, step_w=cfg.step_w,
                     clock_step_mhz=cfg.clock_step_mhz)
    return PairPolicy(LaneController(Lane.PREFILL, pc.setting, lim, g),
                      LaneController(Lane.DECODE, dc.best.chosen or LaneSetting(), lim, g))


def _oracle_grid(sc: Scenario, cfg: CalibrationConfig) -> tuple[list[LaneSetting], list[LaneSetting]]:
    """The oracle's static candidates: ``(decode settings, prefill settings)``."""
    gpu, d = sc.gpu, LaneSetting()
    decs = [d] + [LaneSetting(power_limit_w=float(c), label=f"cap {c:.0f} W")
                  for c in np.arange(gpu.tdp_w - cfg.step_w, gpu.min_limit_w - 1e-9, -cfg.step_w)]
    fmin = int(gpu.sm_clocks_mhz[-1])
    # only windows an actuator accepts (GpuCaps.check_window): the top at >= MIN_CLOCK_TOP_FRAC of the
    # maximum clock. The grid used to run down to the lowest supported clock, so the "oracle" could
    # pick settings (prefill locked at 435 MHz on B200) that no actuator may apply.
    top_min = MIN_CLOCK_TOP_FRAC * gpu.sm_clock_max_mhz
    clocks = sorted({c for k in range(1, int((gpu.sm_clock_max_mhz - fmin) / cfg.clock_step_mhz) + 1)
                     if (c := gpu.snap_clock_mhz(gpu.sm_clock_max_mhz - k * cfg.clock_step_mhz, up=True)) >= top_min},
                    reverse=True)
    decs += [LaneSetting(clock_window_mhz=(fmin, f), label=f"clocks <= {f} MHz") for f in clocks]
    pres = [d] + [LaneSetting(clock_window_mhz=(f, f), label=f"clocks {f}-{f} MHz") for f in clocks]
    return decs, pres


def _oracle(sc: Scenario, w, cfg: CalibrationConfig, ref: SimResult, e2e_tol: float | None,
            rep: _Reporter | None = None) -> tuple[ArmResult | None, int]:
    """Best static pair by tokens/J under the SLOs (and mean e2e <= (1 + e2e_tol) x default).

    The arm is named ``oracle`` with the e2e budget and ``oracle-slo-only`` without it.
    """
    name = "oracle" if e2e_tol is not None else "oracle-slo-only"
    rep = rep or _Reporter(None, sc.name, 0)
    pair = sc.lane_pair()
    d = LaneSetting()
    e2e_max = math.inf if e2e_tol is None else (1 + e2e_tol) * float(ref.e2e_s.mean())
    decs, pres = _oracle_grid(sc, cfg)
    key = (id(w), len(w))
    cache = _ORACLE_CACHE.get(key)
    rep.start("oracle grid" if cache is None or cache[0] is not sc else
              "oracle search" if e2e_tol is not None else "oracle search (SLO only)")
    pre0 = simulate_prefill(pair, w, static_policy(d, d), progress=rep.run("prefill lane default"))
    if cache is None or cache[0] is not sc:
        runs_d, runs_p = [], []
        for s in decs:
            runs_d.append((s, simulate(pair, w, static_policy(d, s), prefill=pre0,
                                       progress=rep.run(f"decode {s.label}"))))
            rep.step()
        for s in pres:
            runs_p.append((s, simulate_prefill(pair, w, static_policy(s, d), progress=rep.run(f"prefill {s.label}"))))
            rep.step()
        _ORACLE_CACHE.clear()
        _ORACLE_CACHE[key] = (sc, runs_d, runs_p)
    else:
        _sc, runs_d, runs_p = cache
    feas_d = [(r.decode_energy_j, s) for s, r in runs_d
              if np.all(r.itl_p99_windows() <= sc.slo.itl_p99_s)
              and np.percentile(r.ttft_s, 99) <= sc.slo.ttft_p99_s and r.e2e_s.mean() <= e2e_max]
    feas_p = []
    for s, po in runs_p:
        shift = po.handoff_s[:len(ref.handoff_s)] - pre0.handoff_s[:len(ref.handoff_s)]
        ttft = ref.ttft_s + shift
        if np.percentile(ttft, 99) > sc.slo.ttft_p99_s or (ref.e2e_s + shift).mean() > e2e_max:
            continue
        e = po.energy.total_j + sum(_copy_idle(fw, max(0.0, ref.end_s - t)) * pair.prefill.tp
                                    for fw, t in zip(po.firmwares, po.free_at_s, strict=True))
        feas_p.append((e, s))
    best = None
    rep.start("oracle search" if e2e_tol is not None else "oracle search (SLO only)")
    for _e, sp in sorted(feas_p, key=lambda x: x[0])[:2]:
        for _e2, sd in sorted(feas_d, key=lambda x: x[0])[:2]:
            m = arm_metrics(name, simulate(pair, w, static_policy(sp, sd),
                                               progress=rep.run(f"prefill {sp.label} + decode {sd.label}")), sc)
            ok = m.itl_slo_every_window and m.ttft_slo_met and m.e2e_mean_s <= e2e_max
            if ok and (best is None or m.tokens_per_j > best.tokens_per_j):
                best = m
    rep.step()
    return best, len(decs) + len(pres)


_ORACLE_CACHE: dict = {}


def _copy_idle(fw, duration_s: float) -> float:
    from gpufield.power.twin.engine import _copy_fw
    return _copy_fw(fw).idle(duration_s)


def simulate_ab(sc: Scenario, *, duration_s: float | None = None, oracle: bool = True,
                efficiency: bool = True, bench_kw: dict | None = None,
                cfg: CalibrationConfig | None = None, progress: ProgressCallback | None = None) -> AbReport:
    """Run the A/B of :mod:`gpufield.power.ab` on a scenario.

    Args:
        sc: scenario. duration_s: override its load duration (tests use short horizons).
        oracle: also run the exhaustive static search. efficiency: also run efficiency mode.
        bench_kw: :class:`TwinBench` overrides (gate length, noise, ...).
        cfg: calibration config; default steps are 25 W (H100/H200) or 50 W (B200/B300) and 90 MHz.
        progress: optional ``progress(SimProgress)`` callback, called often (every simulated control
            period of every run) with what is being simulated and the steps done of the total; it only
            observes (the report is the same with or without it). Steps: the bench set-up, each
            calibration, each arm, each oracle grid candidate and each oracle search; the last report
            has ``stage == "done"`` and ``done == total``. An exception it raises (e.g.
            ``KeyboardInterrupt``) ends the run; nothing partial is returned.
    """
    t0 = time.perf_counter()
    cfg = cfg or CalibrationConfig(step_w=25.0 if sc.gpu.tdp_w <= 700 else 50.0, settle_s=3.0, measure_s=12.0)
    n_grid = sum(map(len, _oracle_grid(sc, cfg))) if oracle else 0
    rep = _Reporter(progress, sc.name, 1 + 1 + int(efficiency) + 5 + int(efficiency)
                    + (n_grid + 2 if oracle else 0))
    rep.start("setup")
    w = sc.workload(duration_s=duration_s)
    bench = TwinBench(sc, **{**(bench_kw or {}), "progress": rep.bench_cb()})
    rep.step()
    q_w, q_clock = maxq_standin(sc.gpu)
    maxq = vendor_setting(Mode.VENDOR_MAXQ, maxq_limit_w=q_w, maxq_clock_mhz=q_clock,
                          min_clock_mhz=int(sc.gpu.sm_clocks_mhz[-1]))
    rep.start("calibrate balanced")
    dc, pc = _calibrate(bench, sc, cfg, maxq)
    rep.step()
    d = LaneSetting()
    fam = {f.family: f for f in dc.families}
    arms_cfg: list[tuple[str, object]] = [
        ("default", static_policy(d, d)),
        ("vendor-maxq", static_policy(maxq, maxq)),
        ("static-clock-lock", static_policy(d, fam["clock_lock"].chosen or d)),
        ("static-cap", static_policy(d, fam["power_cap"].chosen or d)),
        ("balanced", _guarded(sc, dc, pc, cfg)),
    ]
    calib = {"balanced": _calib_summary(dc, pc)}
    if efficiency:
        ecfg = mode_calibration(Mode.EFFICIENCY, cfg)
        rep.start("calibrate efficiency")
        edc, epc = _calibrate(bench, sc, ecfg, maxq)
        rep.step()
        arms_cfg.append(("efficiency", _guarded(sc, edc, epc, ecfg)))
        calib["efficiency"] = _calib_summary(edc, epc)
    pair = sc.lane_pair()
    arms, runs = [], {}
    for name, pol in arms_cfg:
        rep.start(f"arm {name}")
        runs[name] = simulate(pair, w, pol, seed=sc.seed, progress=rep.run(name))
        arms.append(arm_metrics(name, runs[name], sc, seed=sc.seed))
        rep.step()
    best, grid, best_e2e = None, 0, None
    if oracle:
        try:
            best_e2e, grid = _oracle(sc, w, cfg, runs["default"], cfg.gate_e2e_tolerance, rep)
            best, _ = _oracle(sc, w, cfg, runs["default"], None, rep)
        finally:
            _ORACLE_CACHE.clear()
    rep.finish()
    notes = [f"vendor-maxq is a stand-in: {maxq.label} on every GPU (sized to >= 97% GEMM speed)",
             "simulated in the twin; not a hardware measurement"]
    return AbReport(scenario=sc.name, description=sc.description, gpu=sc.gpu.name, model=sc.model.name,
                    n_gpus=sc.n_gpus, duration_s=float(w.arrival_s[-1]) if len(w) else 0.0, requests=len(w),
                    slo={"ttft_p99_s": sc.slo.ttft_p99_s, "itl_p99_s": sc.slo.itl_p99_s}, arms=arms,
                    oracle=best_e2e, oracle_slo_only=best, oracle_grid=grid, calibration=calib,
                    elapsed_s=time.perf_counter() - t0, notes=notes)


def _calib_summary(dc: DecodeCalibration, pc: PrefillCalibration) -> dict:
    fams = {}
    for f in dc.families:
        fams[f.family] = {"chosen": f.chosen.label if f.chosen else None, "j_per_token": f.j_per_token,
                          "flat_min": f.flat_min, "knee": None if f.knee is None else
                          {"x": f.knee.knee, "ci": [f.knee.ci_low, f.knee.ci_high]}, "gate_tries": f.gate_tries}
    return {"decode_best": dc.best.family, "decode_setting": (dc.best.chosen or LaneSetting()).label,
            "decode_families": fams, "decode_baseline_j_per_token": dc.baseline.j_per_token,
            "prefill_setting": pc.setting.label, "prefill_beta": pc.beta, "prefill_budget_s": pc.budget_s,
            "prefill_reason": pc.reason}





def calibrate_twin(sc: Scenario, *, mode: Mode = Mode.BALANCED, out_dir: str | None = None,
                   cfg: CalibrationConfig | None = None, bench_kw: dict | None = None,
                   progress: ProgressCallback | None = None) -> list[Profile]:
    """Calibrate both lanes of a scenario in the twin and return (and optionally save) the profiles.

    The profile key records ``engine="twin"`` and ``driver="simulated"`` so a real deployment's key can
    never match a twin profile by accident (:func:`gpufield.power.profiles.load_profile` refuses it).

    ``progress``: optional ``progress(SimProgress)`` callback, as for :func:`simulate_ab` (two steps:
    the bench set-up and the calibration); it only observes. Profiles are written only after the
    calibration finishes, so an interrupted run writes none.
    """
    base = cfg or CalibrationConfig(step_w=25.0 if sc.gpu.tdp_w <= 700 else 50.0, settle_s=3.0, measure_s=12.0)
    ccfg = mode_calibration(mode, base)
    rep = _Reporter(progress, sc.name, 2)
    rep.start("setup")
    bench = TwinBench(sc, **{**(bench_kw or {}), "progress": rep.bench_cb()})
    rep.step()
    q_w, q_clock = maxq_standin(sc.gpu)
    maxq = vendor_setting(Mode.VENDOR_MAXQ, maxq_limit_w=q_w, maxq_clock_mhz=q_clock,
                          min_clock_mhz=int(sc.gpu.sm_clocks_mhz[-1]))
    rep.start(f"calibrate {mode.value}")
    dc, pc = _calibrate(bench, sc, ccfg, maxq)
    rep.step()
    summary = _calib_summary(dc, pc)
    profiles = []
    for lane, setting, actuator, tp in ((Lane.DECODE, dc.best.chosen or LaneSetting(), dc.best.family,
                                         sc.lanes["decode_tp"]),
                                        (Lane.PREFILL, pc.setting, "clock_window" if not pc.setting.is_default
                                         else "default", sc.lanes["prefill_tp"])):
        key = ProfileKey(model=sc.model.name, model_revision="twin", quantization=sc.model.quantization,
                         engine="twin", engine_version="gpufield-twin", gpu=sc.gpu.nvml_name, driver="simulated",
                         vbios="simulated", tp=tp, ep=1, dp=1, lane=lane.value, load_bucket="peak", mode=mode.value)
        p = Profile(key=key, setting=setting, actuator=actuator,
                    slo={"ttft_p99_s": sc.slo.ttft_p99_s, "itl_p99_s": sc.slo.itl_p99_s}, evidence=summary,
                    trace_hash=f"{sc.name}:seed{sc.seed}")
        profiles.append(p)
        if out_dir is not None:
            from pathlib import Path

            Path(out_dir).mkdir(parents=True, exist_ok=True)
            save_profile(p, Path(out_dir) / f"{sc.name}.{lane.value}.{mode.value}.json")
    rep.finish()
    return profiles
