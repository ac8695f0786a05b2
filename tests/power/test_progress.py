"""Progress reports of the twin A/B and calibration (library callback + CLI rendering on stderr)."""

from __future__ import annotations

import json

import pytest

import gpufield.cli.power as cli_power
import gpufield.power.ab as ab
from gpufield.cli import main
from gpufield.power import SimProgress, load_scenario, simulate_ab
from gpufield.power.ab import calibrate_twin
from gpufield.power.controller import static_policy
from gpufield.power.twin.bench import TwinBench
from gpufield.power.twin.engine import simulate
from gpufield.power.types import LaneSetting

SHORT_BENCH = {"gate_s": 30.0, "warmup_s": 30.0}


def _check_monotone(calls: list[SimProgress]) -> None:
    assert calls, "no progress reported"
    done = [c.done for c in calls]
    assert done == sorted(done), "steps done went backwards"
    assert len({c.total for c in calls}) == 1
    assert calls[-1].done == calls[-1].total and calls[-1].stage == "done"
    assert all(0 <= c.done <= c.total for c in calls)
    # within one run, simulated seconds never go back and end at the run's length
    runs: dict[tuple, list[SimProgress]] = {}
    for i, c in enumerate(calls):
        if c.run:
            key = (c.stage, c.run, c.done)
            runs.setdefault(key, []).append((i, c))
    for key, seq in runs.items():
        # a label can repeat (e.g. the same setting measured twice): split on restarts at sim_s == 0
        sims = [c.sim_s for _, c in seq]
        assert all(0 <= c.sim_s <= c.sim_total_s for _, c in seq), key
        segs, cur = [], [sims[0]]
        for s in sims[1:]:
            if s < cur[-1]:
                segs.append(cur)
                cur = []
            cur.append(s)
        segs.append(cur)
        for seg in segs:
            assert seg == sorted(seg), key
        assert sims[-1] == seq[-1][1].sim_total_s, key


def test_engine_progress_is_monotone_and_ends_at_total():
    sc = load_scenario("dense-agentic-b200")
    w = sc.workload(duration_s=60)
    seen: list[tuple[float, float]] = []
    pol = static_policy(LaneSetting(), LaneSetting())
    r = simulate(sc.lane_pair(), w, pol, progress=lambda s, t: seen.append((s, t)))
    ref = simulate(sc.lane_pair(), w, pol)
    assert len(seen) > 3
    assert [s for s, _ in seen] == sorted(s for s, _ in seen)
    assert seen[-1] == (float(w.arrival_s[-1]), float(w.arrival_s[-1]))
    assert r.energy_j == ref.energy_j and r.tokens_per_j == ref.tokens_per_j  # observer only


def test_simulate_ab_progress_monotone_and_report_unchanged(monkeypatch):
    monkeypatch.setattr(ab.time, "perf_counter", lambda: 0.0)  # elapsed_s is wall time: pin it
    sc = load_scenario("dense-agentic-b200")
    kw = dict(duration_s=60, oracle=False, efficiency=False, bench_kw=SHORT_BENCH)
    calls: list[SimProgress] = []
    with_cb = simulate_ab(sc, progress=calls.append, **kw).to_dict()
    without = simulate_ab(sc, **kw).to_dict()
    assert json.dumps(with_cb, sort_keys=True, default=str) == json.dumps(without, sort_keys=True, default=str)
    _check_monotone(calls)
    assert calls[-1].total == 1 + 1 + 5  # setup, calibration, five arms
    stages = {c.stage for c in calls}
    assert {"setup", "calibrate balanced", "arm default", "arm balanced", "done"} <= stages
    assert all(c.scenario == "dense-agentic-b200" for c in calls)
    assert any(c.run.startswith("decode sweep") for c in calls)


def test_calibrate_twin_progress(tmp_path):
    calls: list[SimProgress] = []
    ps = calibrate_twin(load_scenario("dense-agentic-b200"), bench_kw=SHORT_BENCH, out_dir=str(tmp_path),
                        progress=calls.append)
    assert len(ps) == 2
    _check_monotone(calls)
    assert calls[-1].total == 2


def test_progress_exception_propagates_and_bench_unaffected():
    sc = load_scenario("dense-agentic-b200")

    def boom(p: SimProgress) -> None:
        if p.stage.startswith("calibrate"):
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        simulate_ab(sc, duration_s=60, oracle=True, efficiency=False, bench_kw=SHORT_BENCH, progress=boom)
    assert ab._ORACLE_CACHE == {}
    # TwinBench without a progress observer behaves as before
    b = TwinBench(sc, **SHORT_BENCH)
    assert b.progress is None and b.concurrency >= 1


@pytest.fixture
def short_cli(monkeypatch):
    """The CLI on a short bench, with elapsed_s pinned so stdout can be compared byte for byte."""
    real = ab.TwinBench
    monkeypatch.setattr(ab, "TwinBench", lambda sc, **kw: real(sc, **{**SHORT_BENCH, **kw}))
    monkeypatch.setattr(ab.time, "perf_counter", lambda: 0.0)


ARGS = ["power", "simulate", "dense-agentic-b200", "--json", "--duration", "60", "--no-oracle", "--no-efficiency"]


def test_cli_json_byte_identical_with_and_without_progress(short_cli, monkeypatch, capsys):
    monkeypatch.setattr(cli_power, "_stderr_is_terminal", lambda: True)  # draw the bar (on captured stderr)
    seen: list[SimProgress] = []
    real = ab.simulate_ab

    def spy(*a, progress=None, **kw):
        def both(p):
            seen.append(p)
            progress(p)
        return real(*a, progress=both, **kw)

    monkeypatch.setattr(ab, "simulate_ab", spy)
    monkeypatch.setattr("gpufield.power.simulate_ab", spy)
    assert main(ARGS) == 0
    shown = capsys.readouterr()
    assert seen and seen[-1].done == seen[-1].total
    assert '"scenario"' not in shown.err  # the bar (transient, so blank here) is on stderr, the JSON is not
    json.loads(shown.out)  # stdout is JSON alone

    monkeypatch.setattr(cli_power, "_stderr_is_terminal", lambda: False)
    assert main(ARGS) == 0
    plain = capsys.readouterr()
    assert plain.err == ""  # no terminal: no bar at all
    assert plain.out == shown.out  # byte-identical

    monkeypatch.setattr(cli_power, "_stderr_is_terminal", lambda: True)
    assert main([*ARGS, "--quiet"]) == 0
    quiet = capsys.readouterr()
    assert quiet.err == "" and quiet.out == shown.out


def test_cli_ctrl_c_exits_130_with_a_message(short_cli, monkeypatch, capsys):
    monkeypatch.setattr(cli_power, "_stderr_is_terminal", lambda: True)
    real = ab.simulate_ab

    def interrupted(*a, progress=None, **kw):
        def cb(p):
            progress(p)
            if p.stage == "arm balanced":
                raise KeyboardInterrupt
        return real(*a, progress=cb, **kw)

    monkeypatch.setattr("gpufield.power.simulate_ab", interrupted)
    assert main(ARGS) == 130
    out = capsys.readouterr()
    assert out.out == ""
    assert "power simulate interrupted during arm balanced" in out.err
    assert "Traceback" not in out.err


def test_cli_calibrate_ctrl_c_writes_nothing(short_cli, monkeypatch, capsys, tmp_path):
    real = ab.calibrate_twin

    def interrupted(*a, progress=None, **kw):
        def cb(p):
            progress(p)
            if p.stage.startswith("calibrate") and p.run:
                raise KeyboardInterrupt
        return real(*a, progress=cb, **kw)

    monkeypatch.setattr(ab, "calibrate_twin", interrupted)
    out_dir = tmp_path / "profiles"
    assert main(["power", "calibrate", "dense-agentic-b200", "--out", str(out_dir)]) == 130
    err = capsys.readouterr().err
    assert "power calibrate interrupted during calibrate balanced" in err
    assert not out_dir.exists() or not any(out_dir.iterdir())
