"""Measurement harness on the twin: what calibration would measure on hardware, with noise.

* :meth:`TwinBench.decode_measure`: closed-loop decode at the load bucket's concurrency and context,
  settle then measure, throughput and power multiplied by independent log-normal noise (default 2%,
  the level power.md 7.7 asks calibration to tolerate).
* :meth:`TwinBench.decode_gate`: open-loop replay of the peak-rate segment with the prefill lane at
  defaults; ITL p99 and mean e2e.
* :meth:`TwinBench.prefill_point`: the peak segment's prompts (after prefix-cache hits) prefilled one
  by one with the clock locked, under the default power limit (the firmware may refuse the floor),
  for service times; energy per prefilled token from the lane replaying the peak segment with the
  lock, idle gaps included (what an energy counter over the replay reads).
* :func:`maxq_standin`: the vendor Max-Q stand-in sized to NVIDIA's published target (>= 97% of
  performance on compute-bound work, power.md 2.1).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from gpufield.power.calibrate.decode import GateResult, SweepPoint
from gpufield.power.calibrate.prefill import PrefillPoint
from gpufield.power.controller import static_policy
from gpufield.power.scenario import Scenario
from gpufield.power.twin.engine import (
    prefix_new_tokens,
    simulate,
    simulate_prefill,
    weighted_quantile,
)
from gpufield.power.twin.gpu import Firmware, GpuModel
from gpufield.power.twin.load import fixed_concurrency
from gpufield.power.types import LaneSetting

__all__ = ["TwinBench", "maxq_standin"]


def _idle_copy(fw: Firmware, duration_s: float) -> float:
    c = Firmware.__new__(Firmware)
    c.__dict__.update(fw.__dict__)
    return c.idle(duration_s)


def maxq_standin(gpu: GpuModel, perf_frac: float = 0.97) -> tuple[float, int]:
    """Max-Q stand-in: ``(power_limit_w, sm_clock_ceiling_mhz)`` keeping ``perf_frac`` of GEMM speed.

    The GEMM clock under the default limit is found with the firmware model; the ceiling is the
    highest supported clock <= ``perf_frac`` of it, and the limit is the GEMM power at that clock.
    """
    c = gpu.sm_clocks_mhz
    table = np.stack([gpu.power_w(c, m, 1.0, gpu.gemm_mem_activity) for m in range(len(gpu.mem_clocks_mhz))], 1)
    fw = Firmware(gpu)
    for _ in range(400):
        op = fw.choose(table, 0.05)
    f_def = float(c[op.clock_index])
    ceil = gpu.snap_clock_mhz(perf_frac * f_def, up=False)
    return float(gpu.power_w(ceil, 0, 1.0, gpu.gemm_mem_activity)), int(ceil)


@dataclass
class TwinBench:
    """Calibration measurements on a scenario's twin.

    Args:
        scenario: the scenario. settle_s / measure_s: per sweep point (simulated seconds).
        gate_s: length of the peak-rate replay, measured after ``warmup_s`` of the same load.
        noise: relative measurement noise. seed: noise seed.
        progress: optional observer ``progress(run, sim_s, sim_total_s)`` of every simulation the bench
            runs: ``run`` names it (``"decode sweep cap 900 W"``, ...), then simulated seconds done of the
            run's length (see :func:`~gpufield.power.twin.engine.simulate`). No effect on the results.
    """

    scenario: Scenario
    settle_s: float = 3.0
    measure_s: float = 12.0
    gate_s: float = 150.0
    warmup_s: float = 300.0
    noise: float = 0.02
    seed: int = 7
    progress: Callable[[str, float, float], None] | None = None

    def _obs(self, run: str):
        """A ``(sim_s, sim_total_s)`` observer for one simulation named ``run`` (None without progress)."""
        cb = self.progress
        if cb is None:
            return None
        return lambda sim_s, total_s: cb(run, sim_s, total_s)

    def __post_init__(self) -> None:
        sc = self.scenario
        self.pair = sc.lane_pair()
        # the peak segment is taken from steady state: sessions started during the warm-up carry
        # their grown contexts into it (a fresh start would under-state context and KV traffic)
        self.peak = sc.workload(duration_s=self.warmup_s + self.gate_s, rate_factor=sc.peak_rate_factor,
                                seed=sc.seed + 1, spikes=False)
        self._in = self.peak.arrival_s >= self.warmup_s
        self._pre = simulate_prefill(self.pair, self.peak, static_policy(LaneSetting(), LaneSetting()),
                                     progress=self._obs("peak replay, prefill lane"))
        base = simulate(self.pair, self.peak, static_policy(LaneSetting(), LaneSetting()), prefill=self._pre,
                        progress=self._obs("peak replay, decode lane"))
        k = int(np.searchsorted(base.it_end_s, self.warmup_s))
        self.concurrency = max(1, int(np.percentile(base.it_tokens[k:], 90))) if len(base.it_tokens) > k else 1
        inp, out = self.peak.input_tokens[self._in], self.peak.output_tokens[self._in]
        self.context_tokens = int(np.mean(inp + out / 2))
        self.kv_transfer_p99_s = float(np.percentile([self.pair.prefill.kv_transfer_s(float(x)) for x in inp], 99))
        self.first_decode_s = float(np.percentile(base.it_dt_s[k:], 99)) if len(base.it_dt_s) > k else 0.0
        self.peak_rate_per_s = int(self._in.sum()) / self.gate_s
        self._rng = np.random.default_rng(self.seed)
        self.calls = 0

    def decode_measure(self, setting: LaneSetting) -> SweepPoint:
        """Closed-loop decode at the peak bucket under ``setting`` (noisy, like hardware)."""
        self.calls += 1
        c = self.concurrency
        w = fixed_concurrency(concurrency=c, context_tokens=self.context_tokens, output_tokens=400, n=c)
        horizon = self.settle_s + self.measure_s
        r = simulate(self.pair, w, static_policy(LaneSetting(), setting), horizon_s=horizon, window_s=1.0,
                     seed=self.calls, progress=self._obs(f"decode sweep {setting.label}"))
        i = int(np.searchsorted(r.it_end_s, self.settle_s))
        tokens = float(r.it_tokens[i:].sum())
        span = float(r.it_end_s[-1] - r.it_end_s[i - 1]) if i > 0 else float(r.it_end_s[-1])
        energy = float(r.energy_windows_j[int(self.settle_s):].sum())
        nt, npw = np.exp(self._rng.normal(0.0, self.noise, 2))
        thr = tokens / span * nt
        power = energy / max(span, 1e-9) / self.pair.decode_gpus * npw
        return SweepPoint(x=math.nan, setting=setting, throughput_tok_s=thr,
                          itl_p50_s=weighted_quantile(r.it_dt_s[i:], r.it_tokens[i:], 0.5),
                          itl_p99_s=weighted_quantile(r.it_dt_s[i:], r.it_tokens[i:], 0.99),
                          power_w=power, j_per_token=power * self.pair.decode_gpus / thr)

    def decode_gate(self, setting: LaneSetting) -> GateResult:
        """Peak-rate replay with the decode lane at ``setting`` (metrics after the warm-up)."""
        r = simulate(self.pair, self.peak, static_policy(LaneSetting(), setting), prefill=self._pre,
                     progress=self._obs(f"decode gate {setting.label}"))
        k = int(np.searchsorted(r.it_end_s, self.warmup_s))
        late = r.arrival_s >= self.warmup_s
        return GateResult(itl_p99_s=weighted_quantile(r.it_dt_s[k:], r.it_tokens[k:], 0.99),
                          e2e_mean_s=float(r.e2e_s[late].mean()))

    def prefill_gate(self, setting: LaneSetting) -> float:
        """Peak-rate replay with the prefill lane at ``setting``: TTFT p99 (s) after the warm-up."""
        r = simulate(self.pair, self.peak, static_policy(setting, LaneSetting()),
                     progress=self._obs(f"prefill gate {setting.label}"))
        return float(np.percentile(r.ttft_s[r.arrival_s >= self.warmup_s], 99))

    def prefill_point(self, clock_mhz: int) -> PrefillPoint:
        """Prefill the peak segment's prompts one by one with the clock locked at ``clock_mhz``."""
        cost = self.pair.prefill
        gpu = cost.gpu
        new = prefix_new_tokens(self.peak, cost.engine)
        fw = Firmware(gpu, None, (clock_mhz, clock_mhz))
        i_lock = int(np.nonzero(gpu.sm_clocks_mhz == gpu.snap_clock_mhz(clock_mhz, up=True))[0][0])
        times, energy, peak_p, held = [], 0.0, 0.0, True
        for r in np.nonzero(self._in)[0]:
            n_new = float(new[r])
            prior = float(self.peak.input_tokens[r]) - n_new
            t_tab, p_tab = cost.prefill(n_new, n_new * (prior + n_new / 2))
            op = fw.choose(p_tab, float(t_tab[i_lock, 0]))
            t = float(t_tab[op.clock_index, op.mem_state])
            held &= op.clock_index <= i_lock
            times.append(t)
            energy += op.power_w * t * cost.tp
            peak_p = max(peak_p, float(p_tab[i_lock, 0]))
        nt, ne = np.exp(self._rng.normal(0.0, self.noise, 2))
        times_a = np.asarray(times) * nt
        # energy as the meter sees it: the lane replaying the peak segment, idle gaps included
        lock = LaneSetting(clock_window_mhz=(int(clock_mhz), int(clock_mhz)))
        po = simulate_prefill(self.pair, self.peak, static_policy(lock, LaneSetting()),
                              progress=self._obs(f"prefill lock {int(clock_mhz)} MHz"))
        lane_j = po.energy.total_j + sum(
            _idle_copy(fw, max(0.0, self.warmup_s + self.gate_s - t)) * cost.tp
            for fw, t in zip(po.firmwares, po.free_at_s, strict=True))
        return PrefillPoint(clock_mhz=int(clock_mhz), service_mean_s=float(times_a.mean()),
                            service_p99_s=float(np.percentile(times_a, 99)),
                            j_per_token=lane_j * ne / float(new.sum()), power_peak_w=peak_p, held=bool(held))
