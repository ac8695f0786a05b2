"""`gpufield power calibrate --engine`: a load sweep against a real OpenAI-compatible streaming process.

The engine is ``python -m gpufield.testing.openai_server`` started as a subprocess: it computes its
tokens with a seeded numpy bigram model and emits them on a known schedule (first token ``TTFT_S``
after the request arrives, then one every ``ITL_S``), observing its own emission timestamps into
vLLM-format histograms and listing them at ``/debug/requests``. Expected values come from those
configured delays and the server's own timestamps, never from the calibration code.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import numpy as np
import pytest

from gpufield.cli import main
from gpufield.errors import ActuationError
from gpufield.power.actuators.nvml import NvmlActuator
from gpufield.power.calibrate.engine import (
    EngineSweepConfig,
    bootstrap_ci,
    calibrate_engine,
    engine_profile,
)
from gpufield.power.config import WriteConfig
from gpufield.power.profiles import load_profile
from gpufield.power.types import LaneSetting
from gpufield.testing import FakeNvml, h200
from gpufield.testing.openai_server import ITL_BUCKETS_S, TTFT_BUCKETS_S

REPO = Path(__file__).resolve().parents[2]
TTFT_S, ITL_S, TOKENS = 0.03, 0.02, 6


@pytest.fixture(scope="module")
def server():
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    p = subprocess.Popen([sys.executable, "-m", "gpufield.testing.openai_server", "--ttft-s", str(TTFT_S),
                          "--itl-s", str(ITL_S)], stdout=subprocess.PIPE, text=True, env=env)
    try:
        info = json.loads(p.stdout.readline())
        yield f"http://127.0.0.1:{info['port']}"
    finally:
        os.kill(p.pid, signal.SIGTERM)
        p.wait(timeout=10)


def _server_requests(url: str) -> list[dict]:
    return httpx.get(url + "/debug/requests").json()


def _cfg(url: str, **kw) -> EngineSweepConfig:
    base = dict(engine_url=url, concurrency=(1, 3), duration_s=0.3, max_tokens=TOKENS, settle_s=0.0, n_boot=200,
                itl_p99_slo_s=0.2, ttft_p99_slo_s=1.0)
    return EngineSweepConfig(**{**base, **kw})


def _bucket(bounds: tuple[float, ...], x: float) -> tuple[float, float]:
    """(lower, upper] edges of the vLLM bucket holding x."""
    i = int(np.searchsorted(np.asarray(bounds), x, side="left"))
    return (bounds[i - 1] if i else 0.0), bounds[i]


def test_shadow_sweep_measures_the_servers_known_delays(server):
    before = len(_server_requests(server))
    cal = calibrate_engine(_cfg(server))
    reqs = _server_requests(server)[before:]
    assert not cal.wrote and cal.chosen.label == "as-is" and cal.gate_passed and cal.model == "tiny-bigram"
    assert [r.concurrency for r in cal.results] == [1, 3]
    # the server's own timestamps: TTFT = first emission - arrival, ITL = gaps between emissions
    s_ttft = np.array([r["emitted"][0] - r["received"] for r in reqs[1:]])  # [0] is the warm-up request
    s_gaps = np.concatenate([np.diff(r["emitted"]) for r in reqs[1:]])
    n_itl = sum(r.engine["itl_count"] for r in cal.results)
    assert n_itl == len(s_gaps) == sum(r.client["itl_count"] for r in cal.results)
    assert sum(r.requests for r in cal.results) == len(reqs) - 1 == sum(r.engine["ttft_count"] for r in cal.results)
    # engine means are the histograms' _sum/_count deltas: exactly the server's recorded delays
    eng_ttft_sum = sum(r.engine["ttft_mean"] * r.engine["ttft_count"] for r in cal.results)
    eng_itl_sum = sum(r.engine["itl_mean"] * r.engine["itl_count"] for r in cal.results)
    assert eng_ttft_sum == pytest.approx(s_ttft.sum(), rel=1e-9)
    assert eng_itl_sum == pytest.approx(s_gaps.sum(), rel=1e-9)
    lo, _ = _bucket(TTFT_BUCKETS_S, s_ttft.min())
    _, hi = _bucket(TTFT_BUCKETS_S, s_ttft.max())
    for r in cal.results:
        c, e = r.client, r.engine
        assert r.errors == 0 and r.tokens == r.requests * TOKENS
        # the server never emits a first token before TTFT_S after arrival, nor a later one before ITL_S after the
        # first, and the client sends before the server receives: hard lower bounds
        assert c["ttft_p50"] >= TTFT_S
        assert c["itl_mean"] * (TOKENS - 1) >= ITL_S * (TOKENS - 1) - 0.5 * ITL_S
        assert c["itl_p50"] == pytest.approx(ITL_S, rel=0.25)
        assert c["ttft_p50"] == pytest.approx(TTFT_S, abs=0.05)
        # PromQL p99 of the window lies in the vLLM buckets that hold the server's own observations
        assert lo <= e["ttft_p99"] <= hi
        assert _bucket(ITL_BUCKETS_S, ITL_S)[0] <= e["itl_p99"] <= ITL_BUCKETS_S[-1]
        for k in ("itl_p99", "itl_mean", "ttft_p99", "ttft_mean"):
            a, b = c[k + "_ci"]
            assert a <= c[k] <= b, (r.concurrency, k, a, c[k], b)
    # client ITL mean against the server's own mean gap (network jitter only)
    c_mean = sum(r.client["itl_mean"] * r.client["itl_count"] for r in cal.results) / n_itl
    assert c_mean == pytest.approx(s_gaps.mean(), abs=0.25 * ITL_S)


def test_gate_fails_an_itl_slo_below_the_servers_delay(server):
    cal = calibrate_engine(_cfg(server, concurrency=(1,), duration_s=0.1, itl_p99_slo_s=ITL_S * 0.75,
                                warmup_requests=0))
    (r,) = cal.results
    assert not r.gate_passed and any("ITL p99" in w for w in r.gate_reasons)
    assert not cal.gate_passed and cal.chosen.is_default


def test_bootstrap_matches_numpy_on_the_concatenated_resamples():
    rng = np.random.default_rng(3)
    groups = [rng.exponential(0.02, int(rng.integers(1, 9))) for _ in range(7)]
    for q in (0.99, 0.5, None):
        est, lo, hi = bootstrap_ci(groups, q, n_boot=200, seed=5)
        idx = np.random.default_rng(5).integers(0, 7, (200, 7))
        stat = np.mean if q is None else (lambda x, q=q: np.quantile(x, q))
        boots = [stat(np.concatenate([groups[i] for i in row])) for row in idx]
        assert est == pytest.approx(stat(np.concatenate(groups)), rel=1e-12)
        assert (lo, hi) == pytest.approx(tuple(np.quantile(boots, [0.025, 0.975])), rel=1e-12)


def test_write_steps_need_an_allowed_actuator_and_are_restored(server, tmp_path):
    gpu = h200(0)
    steps = (LaneSetting(power_limit_w=650.0, label="cap 650 W"), LaneSetting(power_limit_w=500.0, label="cap 500 W"))
    cfg = _cfg(server, concurrency=(1,), duration_s=0.05, gpus=(gpu.uuid,), steps=steps, warmup_requests=0)
    n0 = len(_server_requests(server))
    with pytest.raises(ActuationError, match="writing is not allowed"):
        calibrate_engine(cfg)
    assert len(_server_requests(server)) == n0  # refused before any request
    nv = FakeNvml([gpu], clock=lambda: 0.0)
    wc = WriteConfig(allow_uuids=frozenset({gpu.uuid}), i_own_this_gpu=True, state_dir=str(tmp_path / "st"))
    with NvmlActuator(wc, nvml=nv, install_signal_handlers=False) as act:
        cal = calibrate_engine(cfg, actuator=act)
    limits = [a[1] for n, a in nv.calls if n == "nvmlDeviceSetPowerManagementLimit"]
    assert limits == [650_000, 500_000, gpu.default_limit_mw]  # the two steps, then the restore
    assert cal.wrote and cal.chosen.power_limit_w == 500.0 and cal.gpu_name == gpu.name
    prof = engine_profile(cal)
    assert prof.actuator == "power_cap" and prof.key.mode == "balanced" and prof.key.gpu == gpu.name


def engine_profile_key(d: dict):
    from gpufield.power.profiles import ProfileKey

    return ProfileKey(**d["key"])


def test_cli_unreachable_engine_is_one_line_naming_the_url(tmp_path, capsys):
    with __import__("socket").socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    rc = main(["power", "calibrate", "--engine", url, "--lane", "decode", "--itl-p99-slo-s", "0.05",
               "--ttft-p99-slo-s", "1", "--out", str(tmp_path / "p.json")])
    err = capsys.readouterr().err
    assert rc == 4 and f"cannot reach {url}/v1/models" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "p.json").exists()


def test_cli_with_a_lanes_file_reads_energy_and_steps_caps_only_with_write(server, tmp_path, capsys):
    load = 0.9
    g = h200(0)
    p_fake_w = (g.idle_power_mw + load * (g.tdp_mw - g.idle_power_mw)) / 1000.0  # FakeGpu's toy model at max clock
    cfg = tmp_path / "lanes.toml"
    cfg.write_text(f"""[controller]
state_dir = "state"
[nvml]
backend = "fake"
fake_gpus = 1
fake_load = {load}
[lanes.dec]
role = "decode"
gpus = ["{g.uuid}"]
engine = "vllm"
metrics = ["{server}/metrics"]
itl_p99_slo_s = 0.2
ttft_p99_slo_s = 1.0
""")
    args = ["power", "calibrate", "--engine", server, "--config", str(cfg), "--lane", "dec", "--concurrency", "2",
            "--duration-s", "0.1", "--max-tokens", "4", "--settle-s", "0", "--quiet"]
    out = tmp_path / "shadow.json"
    assert main([*args, "--out", str(out)]) == 0  # read-only fake: a setter would raise
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lanes.toml", "shadow.json"]  # no temp file left beside it
    d = json.loads(out.read_text())
    prof = load_profile(out, engine_profile_key(d))
    assert prof.setting.is_default and prof.key.gpu == g.name and prof.key.mode == "shadow"
    w = d["evidence"]["windows"][0]
    assert w["power_w"] == pytest.approx(p_fake_w, rel=0.02)  # energy counter delta / window wall time
    assert w["tokens_per_j"] == pytest.approx(w["tokens"] / w["energy_j"])
    assert main([*args, "--caps-w", "600", "--out", str(tmp_path / "x.json")]) == 2  # --caps-w without --write
    assert main([*args, "--write", "--allow", g.uuid, "--caps-w", "650,600", "--out", str(tmp_path / "w.json")]) == 0
    d = json.loads((tmp_path / "w.json").read_text())
    assert [x["setting"]["power_limit_w"] for x in d["evidence"]["windows"]] == [650.0, 600.0]
    assert d["setting"]["power_limit_w"] == 600.0 and d["key"]["mode"] == "balanced" and d["key"]["gpu"] == g.name
    # the toy model: 650 W does not bind (p_fake_w ~ 638 W); at 600 W it runs the highest clock within the cap
    assert d["evidence"]["windows"][0]["power_w"] == pytest.approx(p_fake_w, rel=0.02)
    assert 0.9 * 600.0 < d["evidence"]["windows"][1]["power_w"] <= 600.0 * 1.01
    assert not list((tmp_path / "state").glob("GPU-*.json"))  # restored: no saved-state file left
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    capsys.readouterr()
    assert main([*args, "--out", str(fifo)]) == 2  # refused before any load: a special file is never replaced
    assert "named pipe" in capsys.readouterr().err
