"""Twin GPU model vs the earlier H200 probe (h200-baseline.json: not used by the refit, so an
independent check of it) and the shared GPU catalogue. The refit itself is tested in test_twin_refit.py."""

from __future__ import annotations

import json

import numpy as np
import pytest

from gpufield.power.twin.gpu import Firmware, load_gpu_model
from gpufield.telemetry.specs import gpu_spec


@pytest.fixture(scope="module")
def baseline(shared_dir):
    return json.loads((shared_dir / "reference" / "h200-baseline.json").read_text())


def _gemm_table(m):
    c = m.sm_clocks_mhz
    return np.stack([m.power_w(c, s, 1.0, m.gemm_mem_activity) for s in range(len(m.mem_clocks_mhz))], 1)


def _steady_clocks(m, table, cap_w=None, n=400):
    fw = Firmware(m, cap_w)
    ops = [fw.choose(table, 0.05) for _ in range(n)]
    return ops[n // 2:]


def test_h200_gemm_lands_on_the_probe_clock_under_700w(baseline):
    m = load_gpu_model("H200")
    ops = _steady_clocks(m, _gemm_table(m))
    clocks = m.sm_clocks_mhz[[o.clock_index for o in ops]]
    probe = baseline["phase_compute_bf16_gemm"]["sm_mhz_median"]
    assert abs(np.median(clocks) - probe) <= 15  # one H200 clock step
    assert np.mean([o.power_w for o in ops]) <= 700.5  # cap holds on the 1 s average
    assert all(o.cap_bound for o in ops)  # SwPowerCap, as the probe's reason 0x4


def test_h200_gemm_throughput_at_twin_clock_matches_measured_tflops(baseline):
    # independent check: the probe's TFLOPS were not used to fit the power model
    m = load_gpu_model("H200")
    ops = _steady_clocks(m, _gemm_table(m))
    f = float(np.mean(m.sm_clocks_mhz[[o.clock_index for o in ops]]))
    tflops = float(m.flops_per_s(f, fp8=False)) / 1e12
    assert tflops == pytest.approx(baseline["bf16_tflops"], rel=0.03)


def test_h200_refit_predicts_the_earlier_probe_gemm_and_idle_within_10pct(baseline):
    # the earlier probe (another H200 board, other kernels) was not used by the refit
    m = load_gpu_model("H200")
    assert float(m.idle_power_w(1980)) == pytest.approx(baseline["phase_idle"]["power_w_median"], rel=0.10)
    assert m.idle_w == pytest.approx(baseline["power_mw"] / 1000, rel=0.10)
    g = baseline["phase_compute_bf16_gemm"]
    a_c = baseline["bf16_tflops"] * 1e12 / float(m.flops_per_s(g["sm_mhz_median"], fp8=False))
    assert float(m.power_w(g["sm_mhz_median"], 0, min(a_c, 1.0), m.gemm_mem_activity)) == pytest.approx(
        g["power_w_median"], rel=0.10)


@pytest.mark.xfail(strict=True, reason="known disagreement (power_RESULTS.md section 6): the refit predicts 580 W for "
                   "the earlier probe's 4.24 TB/s copy, which drew 480 W (+21%); our copies at the same rate drew 552 W "
                   "and 626 W on two other boards")
def test_h200_refit_predicts_the_earlier_probe_copy_within_10pct(baseline):
    m = load_gpu_model("H200")
    copy = baseline["phase_membound_copy"]
    a_m = baseline["copy_tb_s_rw"] * 1e12 / m.hbm_bandwidth_bytes_per_s
    assert float(m.power_w(copy["sm_mhz_median"], 0, 0.0, a_m)) == pytest.approx(copy["power_w_median"], rel=0.10)


def test_a_copy_runs_uncapped_at_max_clock(baseline):
    # the copy kernel runs uncapped at max clock in both probes; so must the twin
    m = load_gpu_model("H200")
    a_m = baseline["copy_tb_s_rw"] * 1e12 / m.hbm_bandwidth_bytes_per_s
    c = m.sm_clocks_mhz
    copy_tab = np.stack([m.power_w(c, s, 0.0, a_m) for s in (0, 1)], 1)
    ops = _steady_clocks(m, copy_tab)
    assert all(m.sm_clocks_mhz[o.clock_index] == 1980 and not o.cap_bound for o in ops)


@pytest.mark.parametrize("sku", ["H200", "B200", "B300"])
def test_twin_parameters_agree_with_the_gpu_catalogue(sku):
    m, s = load_gpu_model(sku), gpu_spec(sku)
    assert m.tdp_w == s.tdp_w
    assert m.sm_clock_max_mhz * 1e6 == s.max_sm_clock_hz
    assert m.hbm_bandwidth_bytes_per_s == s.hbm_bandwidth_bytes_per_s
    assert m.bf16_flops_per_clock * m.sm_clock_max_mhz * 1e6 == pytest.approx(
        s.bf16_flops_per_s, rel=0.01 if sku != "H200" else 0.09)  # H200 spec is quoted at 1830 MHz boost
    if s.min_power_limit_w is not None:
        assert m.min_limit_w == s.min_power_limit_w
    if s.idle_power_w is not None:  # H200: the twin's idle_w is refitted from our own probe run
        assert m.idle_w == pytest.approx(s.idle_power_w, rel=0.05 if sku == "H200" else 1e-9)
    if s.max_mem_clock_hz is not None:
        assert m.mem_clocks_mhz[0] * 1e6 == s.max_mem_clock_hz


@pytest.mark.parametrize("sku", ["H200", "B200"])
def test_power_is_monotone_in_clock_and_cap(sku):
    m = load_gpu_model(sku)
    p = m.power_w(m.sm_clocks_mhz, 0, 0.5, 0.5)
    assert np.all(np.diff(p) < 0)  # clocks highest first
    table = _gemm_table(m)
    clocks = [np.mean([o.clock_index for o in _steady_clocks(m, table, cap)]) for cap in
              np.linspace(m.min_limit_w, m.tdp_w, 6)]
    assert np.all(np.diff(clocks) <= 0)  # higher cap -> lower index -> higher clock


def test_cap_is_enforced_on_the_one_second_average_not_instantly():
    m = load_gpu_model("H200")
    table = _gemm_table(m)
    fw = Firmware(m, 400.0)
    t, powers = 0.0, []
    for _ in range(200):  # bursty prefill: 50 ms busy, 450 ms idle
        op = fw.choose(table, 0.05)
        powers.append((t, 0.05, op.power_w))
        e = fw.idle(0.45)
        powers.append((t + 0.05, 0.45, e / 0.45))
        t += 0.5
    burst = [p for (_t, d, p) in powers if d == 0.05]
    assert max(burst) > 400.0  # transient overshoot above the cap is allowed (LACT #1128)
    seg = np.array(powers[100:])
    avg = np.sum(seg[:, 1] * seg[:, 2]) / np.sum(seg[:, 1])
    assert avg <= 400.0


@pytest.mark.xfail(strict=True, reason="not reproduced by the refit (power_RESULTS.md section 6): with the measured "
                   "busy term and idle-with-context slope on the SM clock, a fully busy decode at 186-300 W recovers "
                   "up to 42% by clock locking in the twin; Illusion measured at most 32%")
def test_h200_clock_locking_recovers_at_most_32pct_of_decode_energy_at_illusion_power_levels():
    # "The Illusion of Power Capping in LLM Decode" (arXiv 2605.11999, power.md 2.6) measured H200
    # decode at 137-300 W and SM-clock locking recovering up to 32% of decode energy with minimal
    # throughput loss. In the twin decode throughput holds down to the HBM gate, so the recoverable
    # share is 1 - min P(f >= gate) / P(f_max) at the same streaming rate. The former memory-path
    # split (252.9 W of it on the SM clock) gave up to 45% here.
    m = load_gpu_model("H200")
    shares = []
    for bw in np.linspace(0.01, m.mem_efficiency, 200):
        a_c = m.stream_sm_activity * bw / m.mem_efficiency
        p_max = float(m.power_w(m.sm_clock_max_mhz, 0, a_c, bw))
        if 137.0 <= p_max <= 300.0:
            c = m.sm_clocks_mhz[m.sm_clocks_mhz >= m.hbm_gate_mhz]
            shares.append(1.0 - float(m.power_w(c, 0, a_c, bw).min()) / p_max)
    assert len(shares) > 20
    assert max(shares) <= 0.32 + 1e-3
    assert min(shares) > 0.15  # clock locking still pays (Illusion: it Pareto-dominates capping)
