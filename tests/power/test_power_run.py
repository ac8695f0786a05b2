"""`gpufield power run` as a real process: shadow controller beside a local /metrics server.

The server serves the real-format fixtures of tests/power/data/engine_metrics (vLLM with two
data-parallel engines for the decode lane; Dynamo frontend + worker on two paths for the prefill
lane) with histogram counts that grow on every scrape. NVML is gpufield.testing.FakeNvml in spy
mode (config ``[nvml] backend = "fake"``): any setter would raise. Expected values come from the
fixtures' text and from the fake's documented toy power model, not from the controller's code.
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from gpufield.cli import main
from gpufield.errors import InputError
from gpufield.power.lanes_config import load_run_config
from gpufield.telemetry.prometheus import parse_text
from gpufield.testing import h200

REPO = Path(__file__).resolve().parents[2]
DATA = Path(__file__).parent / "data" / "engine_metrics"
ENV = {**os.environ, "PYTHONPATH": str(REPO / "src")}
LOAD = 0.9
# FakeGpu's model at load L and max clock: idle + L * (tdp - idle) (gpufield/testing/fake_nvml.py)
P_FAKE_W = (h200(0).idle_power_mw + LOAD * (h200(0).tdp_mw - h200(0).idle_power_mw)) / 1000.0


def _page(name: str, k: int, **values: object) -> str:
    out = []
    for line in (DATA / name).read_text().splitlines():
        for key, v in values.items():
            if line.endswith(f"}} {key}"):
                line = line[: -len(key)] + str(v)
        if not line.startswith("#") and ("_bucket" in line or "_count" in line or "_sum" in line):
            head, val = line.rsplit(" ", 1)
            line = f"{head} {float(val) * k}"
        out.append(line)
    return "\n".join(out) + "\n"


class _Engine:
    """A local HTTP server: /decode (vLLM DP2), /fe and /worker (Dynamo); counts grow per scrape."""

    def __init__(self) -> None:
        self.k = 0
        self.drop_itl = False
        eng = self

        class H(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server name)
                eng.k += 1
                if self.path == "/decode":
                    body = _page("vllm_dp2.prom", eng.k, KV0=0.3, KV1=0.7, W0=1.0, W1=2.0)
                    if eng.drop_itl:
                        body = "\n".join(x for x in body.splitlines() if "inter_token" not in x) + "\n"
                elif self.path == "/fe":
                    body = _page("dynamo_frontend.prom", eng.k)
                elif self.path == "/worker":
                    body = _page("dynamo_worker_vllm.prom", eng.k, KV=0.2, WAITING=0.0)
                else:
                    self.send_error(404)
                    return
                data = body.encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *a: object) -> None:
                pass

        self.srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.url = f"http://127.0.0.1:{self.srv.server_port}"
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.srv.shutdown()
        self.srv.server_close()


@pytest.fixture()
def engine():
    e = _Engine()
    yield e
    e.close()


def _config(d: Path, url: str, *, extra: str = "", decode_metrics: str | None = None) -> Path:
    p = d / "lanes.toml"
    p.write_text(f"""\
[controller]
period_s = 0.25
state_dir = "state"
decision_log = "decisions.jsonl"
metrics_port = 0
{extra}
[guard]
stale_periods = 2

[nvml]
backend = "fake"
fake_gpus = 3
fake_load = {LOAD}

[lanes.decode]
gpus = ["{h200(0).uuid}", "{h200(1).uuid}"]
engine = "vllm"
metrics = [{decode_metrics or f'"{url}/decode"'}]
itl_p99_slo_s = 0.05
ttft_p99_slo_s = 10.0

[lanes.prefill]
gpus = ["{h200(2).uuid}"]
engine = "dynamo"
metrics = ["{url}/fe", "{url}/worker"]
itl_p99_slo_s = 0.05
ttft_p99_slo_s = 10.0
""")
    return p


def _records(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def _wait(pred, timeout_s: float = 20.0):
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        v = pred()
        if v:
            return v
        time.sleep(0.05)
    raise AssertionError("timed out")


def _gauges(port: int) -> dict:
    fams = parse_text(httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text)
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for f in fams.values() for s in f.samples}


def test_shadow_run_exports_gauges_logs_and_stops_cleanly_on_sigterm(tmp_path, engine):
    cfg = _config(tmp_path, engine.url)
    log = tmp_path / "decisions.jsonl"
    proc = subprocess.Popen([sys.executable, "-m", "gpufield", "power", "run", "--config", str(cfg), "--shadow"],
                            env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        start = _wait(lambda: next((r for r in _records(log) if r["event"] == "start"), None))
        port = start["metrics_port"]
        cap = start["lanes"]["decode"]["setting"]["power_limit_w"]
        assert start["pid"] == proc.pid and cap is not None and cap < P_FAKE_W
        _wait(lambda: sum(r["event"] == "tick_end" for r in _records(log)) >= 4)
        g = _gauges(port)
        d, pf = (("lane", "decode"),), (("lane", "prefill"),)
        assert g[("gpufield_power_lane_kv_usage", d)] == pytest.approx(0.7)  # max of the two engines
        assert g[("gpufield_power_lane_queue_depth", d)] == 3.0  # waiting requests add (1 + 2)
        assert g[("gpufield_power_lane_kv_usage", pf)] == pytest.approx(0.2)  # from the worker URL
        assert g[("gpufield_power_lane_guard_state", (("lane", "decode"), ("state", "at_calibrated")))] == 1.0
        assert g[("gpufield_power_lane_power_limit_watts", d)] == cap
        # 597 of every 598 ITL observations lie in the first bucket (le 0.01): p99 interpolates inside it
        assert 0.0 < g[("gpufield_power_lane_itl_p99_seconds", (("lane", "decode"), ("window", "fast")))] <= 0.01
        for i in (0, 1):
            key = ("gpufield_power_gpu_power_watts", (("gpu", h200(i).uuid), ("lane", "decode")))
            assert g[key] == pytest.approx(P_FAKE_W, rel=1e-3)  # mJ counter, read-time skew
        assert g[("gpufield_power_intents_total", (("action", "power_limit"), ("lane", "decode")))] == 2.0
        assert g[("gpufield_power_info", (("mode", "shadow"),))] == 1.0
        # a second controller on the same state directory is refused by the lock, naming the PID
        cfg2 = tmp_path / "second" / "lanes.toml"
        cfg2.parent.mkdir()
        cfg2.write_text(cfg.read_text().replace('state_dir = "state"', f'state_dir = "{tmp_path / "state"}"'))
        second = subprocess.run([sys.executable, "-m", "gpufield", "power", "run", "--config", str(cfg2)],
                                env=ENV, capture_output=True, text=True, timeout=60)
        assert second.returncode == 4 and f"PID {proc.pid}" in second.stderr and "locked" in second.stderr
        assert not (cfg2.parent / "decisions.jsonl").exists()
        # the decode lane's ITL histogram disappears: stale telemetry -> fallback to defaults
        engine.drop_itl = True
        _wait(lambda: _gauges(port)[("gpufield_power_lane_guard_state",
                                     (("lane", "decode"), ("state", "fallback")))] == 1.0)
        g = _gauges(port)
        assert g[("gpufield_power_lane_power_limit_watts", d)] != g[("gpufield_power_lane_power_limit_watts", d)]
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    recs = _records(log)
    assert recs[0]["event"] == "start" and recs[-1]["event"] == "stop"
    stop = recs[-1]
    assert stop["stop_reason"] == "SIGTERM" and stop["unchanged"] is True and stop["mode"] == "shadow"
    ticks = [r for r in recs if r["event"] == "tick"]
    assert stop["ticks"] == sum(r["event"] == "tick_end" for r in recs) == len(ticks) // 2
    fb = [r for r in ticks if r["lane"] == "decode" and r["guard"] == "fallback"]
    assert fb and fb[0]["reason"] == "stale telemetry" and fb[0]["setting"]["power_limit_w"] is None
    # would-have-saved: (P - cap) x dt per GPU while the cap was wanted, from the fake's exact energy counter
    dec = [r for r in ticks if r["lane"] == "decode"]
    assert stop["would_save_j"]["decode"] == pytest.approx(sum(r["would_save_j"] for r in dec))
    assert stop["would_save_j"]["decode"] > 0 and stop["energy_j"]["decode"] > 0
    assert stop["would_save_j"]["decode"] <= stop["energy_j"]["decode"] * (P_FAKE_W - cap) / P_FAKE_W * (1 + 1e-3)
    intents = [r for r in recs if r["event"] == "intent"]
    assert {(r["lane"], r["action"]) for r in intents} >= {("decode", "power_limit"), ("prefill", "clock_window")}
    assert stop["intents"] == len(intents)
    # lock released: the PID is cleared and the flock is free
    lock = tmp_path / "state" / "actuator.lock"
    assert lock.read_text() == ""
    fd = os.open(lock, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    finally:
        os.close(fd)
    assert "stopped (SIGTERM)" in err and "shadow:" in out


def test_write_without_allow_and_allow_outside_lanes_are_refused(tmp_path, capsys):
    cfg = _config(tmp_path, "http://127.0.0.1:9")
    assert main(["power", "run", "--config", str(cfg), "--write"]) == 2
    assert "--write needs --allow" in capsys.readouterr().err
    rc = main(["power", "run", "--config", str(cfg), "--write", "--allow", h200(0).uuid])
    err = capsys.readouterr().err
    assert rc == 4 and h200(1).uuid in err and "(lane decode)" in err and "not allowed by --allow" in err
    rc = main(["power", "run", "--config", str(cfg), "--write", "--allow", h200(0).uuid, "--allow", h200(1).uuid,
               "--allow", h200(2).uuid, "--allow", "GPU-ffffffff-0000-0000-0000-000000000000"])
    assert rc == 4 and "GPUs in no lane" in capsys.readouterr().err
    assert not (tmp_path / "state").exists() and not (tmp_path / "decisions.jsonl").exists()


def test_startup_check_refuses_a_lane_without_its_itl_metric(tmp_path, engine, capsys):
    cfg = _config(tmp_path, engine.url, decode_metrics=f'"{engine.url}/worker"')  # worker page: no ITL histogram
    assert main(["power", "run", "--config", str(cfg), "--max-ticks", "1"]) == 4
    err = capsys.readouterr().err
    assert "vllm:inter_token_latency_seconds not found" in err and "lane decode" in err
    assert "lane prefill" not in err and not (tmp_path / "decisions.jsonl").exists()
    # a GPU that NVML does not show (3 named, 2 present)
    cfg = _config(tmp_path, engine.url)
    cfg.write_text(cfg.read_text().replace("fake_gpus = 3", "fake_gpus = 2"))
    assert main(["power", "run", "--config", str(cfg), "--max-ticks", "1"]) == 4
    err = capsys.readouterr().err
    assert f"lane prefill: GPU not found by UUID: {h200(2).uuid}" in err and "lane decode" not in err
    # an existing decision log is never replaced
    cfg = _config(tmp_path, engine.url)
    (tmp_path / "decisions.jsonl").write_text("user data\n")
    assert main(["power", "run", "--config", str(cfg), "--max-ticks", "1"]) == 2
    assert "refusing to overwrite" in capsys.readouterr().err
    assert (tmp_path / "decisions.jsonl").read_text() == "user data\n"


@pytest.mark.parametrize(("edit", "key", "what"), [
    (("period_s = 0.25", 'period_s = "5"'), "controller.period_s", "expected a number"),
    (("itl_p99_slo_s = 0.05", "itl_p99_slo_s = nan"), "lanes.decode.itl_p99_slo_s", "> 0"),
    (('engine = "vllm"', 'engine = "tgi"'), "lanes.decode.engine", "one of dynamo, sglang, vllm"),
    (("fake_load = 0.9", "fake_load = 0.9\nfake_lod = 1"), "nvml.fake_lod", "unknown key"),
    (("stale_periods = 2", "stale_periods = -1"), "guard.stale_periods", ">= 0"),
    ((f'gpus = ["{h200(2).uuid}"]', f'gpus = ["{h200(1).uuid}"]'), "lanes.prefill.gpus", "also in lane"),
    (("[lanes.prefill]", "[lanes.prefill"), "", "invalid TOML"),
    (('engine = "dynamo"', 'engine = "dynamo"\nplan = "fixed"'), "lanes.prefill.plan", "needs power_limit_w"),
    (('engine = "dynamo"', 'engine = "dynamo"\nclock_window_mhz = [1500, 900]'), "lanes.prefill.clock_window_mhz",
     "low <= high"),
])
def test_config_errors_name_file_line_and_key(tmp_path, edit, key, what):
    cfg = _config(tmp_path, "http://127.0.0.1:9")
    text = cfg.read_text().replace(*edit)
    cfg.write_text(text)
    new = edit[1].splitlines()[-1]
    line = next(n for n, x in enumerate(text.splitlines(), 1) if x == new)  # the edited line, by text search
    with pytest.raises(InputError) as ei:
        load_run_config(cfg)
    e = ei.value
    assert e.path == str(cfg) and e.line == line and key in e.message and what in e.message
    assert str(e).startswith(f"{cfg}:{line}: ")


def test_fixed_plan_and_example_config_load(tmp_path):
    cfg = _config(tmp_path, "http://127.0.0.1:9")
    cfg.write_text(cfg.read_text().replace('engine = "dynamo"', 'engine = "dynamo"\nplan = "fixed"\n'
                                           'clock_window_mhz = [900, 1500]\npower_limit_w = 450'))
    pre = load_run_config(cfg).lanes[1]
    assert (pre.plan, pre.power_limit_w, pre.clock_window_mhz) == ("fixed", 450.0, (900, 1500))
    cfg = load_run_config(REPO / "examples" / "power" / "lanes.toml")  # the example shipped in the repo
    assert [ln.name for ln in cfg.lanes] == ["prefill", "decode"] and cfg.metrics_addr == "127.0.0.1"
    assert len(cfg.lanes[0].metrics) == 2 and cfg.lanes[1].profile == str(REPO / "examples/power/decode-profile.json")


def test_write_mode_applies_the_cap_and_sigint_restores_it(tmp_path, engine):
    """Write mode on the fake with setters allowed: the ticks read back the cap, SIGINT restores."""
    cfg = _config(tmp_path, engine.url)
    cfg.write_text(cfg.read_text().replace("[lanes.prefill]", "[lanes.unused]\nrole = 'prefill'").replace(
        f'gpus = ["{h200(2).uuid}"]', f'gpus = ["{h200(2).uuid}"]\nplan = "fixed"\npower_limit_w = 650'))
    log = tmp_path / "decisions.jsonl"
    allow = [a for i in range(3) for a in ("--allow", h200(i).uuid)]
    proc = subprocess.Popen([sys.executable, "-m", "gpufield", "power", "run", "--config", str(cfg), "--write", *allow],
                            env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        start = _wait(lambda: next((r for r in _records(log) if r["event"] == "start"), None))
        cap = start["lanes"]["decode"]["setting"]["power_limit_w"]
        _wait(lambda: sum(r["event"] == "tick_end" for r in _records(log)) >= 3)
        g = _gauges(start["metrics_port"])
        assert g[("gpufield_power_info", (("mode", "write"),))] == 1.0
        assert g[("gpufield_power_gpu_enforced_limit_watts", (("gpu", h200(0).uuid), ("lane", "decode")))] == cap
        assert g[("gpufield_power_gpu_enforced_limit_watts", (("gpu", h200(2).uuid), ("lane", "unused")))] == 650.0
        state = sorted(p.name for p in (tmp_path / "state").iterdir())
        assert state == sorted(["actuator.lock"] + [f"{h200(i).uuid}.json" for i in range(3)])  # saved originals
    finally:
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    recs = _records(log)
    stop = recs[-1]
    assert stop["event"] == "stop" and stop["stop_reason"] == "SIGINT" and stop["mode"] == "write"
    assert stop["unchanged"] is True  # restored: limits read back as before the run
    assert all(stop["attest_after"][h200(i).uuid]["enforced_limit_w"] == 700.0 for i in range(3))
    writes = [r for r in recs if r["event"] == "write" and r["action"] == "power_limit"]
    assert {(r["gpu"], r["value"]) for r in writes} == {(h200(0).uuid, cap), (h200(1).uuid, cap), (h200(2).uuid, 650.0)}
    assert sorted(p.name for p in (tmp_path / "state").iterdir()) == ["actuator.lock"]  # state files gone


def test_an_external_change_is_read_back_and_reconciled(tmp_path, engine):
    from gpufield.power.serve import run_lanes
    from gpufield.testing import FakeNvml

    cfg_path = _config(tmp_path, engine.url)
    fake = FakeNvml([h200(i) for i in range(3)], clock=time.monotonic)
    for g in fake.gpus:
        g.load = LOAD
    stop = threading.Event()
    res = {}
    th = threading.Thread(target=lambda: res.update(s=run_lanes(
        load_run_config(cfg_path), write=True, allow=[h200(i).uuid for i in range(3)], nvml=fake, stop=stop,
        echo=lambda m: None)))
    th.start()
    log = tmp_path / "decisions.jsonl"
    try:
        _wait(lambda: sum(r["event"] == "tick_end" for r in _records(log)) >= 2)
        cap_mw = fake.gpus[0].power_limit_mw
        assert cap_mw < fake.gpus[0].default_limit_mw
        fake.gpus[0].power_limit_mw = 300_000  # another tool writes the GPU behind the controller's back
        _wait(lambda: any(r["event"] == "tick" and r["drift"] for r in _records(log)))
        _wait(lambda: fake.gpus[0].power_limit_mw == cap_mw)  # re-applied
    finally:
        stop.set()
        th.join(30)
    recs = _records(log)
    drift = next(r for r in recs if r["event"] == "tick" and r["drift"])
    assert drift["lane"] == "decode" and "300.0" in drift["drift"][0] and h200(0).uuid in drift["drift"][0]
    again = [r for r in recs if r["event"] == "write" and "reconcile after an external change" in r["reason"]]
    assert {r["gpu"] for r in again if r["action"] == "power_limit"} == {h200(0).uuid, h200(1).uuid}
    assert res["s"].unchanged and fake.gpus[0].power_limit_mw == fake.gpus[0].default_limit_mw


def test_log_ticks_changes_writes_tick_records_only_on_changes(tmp_path, engine):
    from gpufield.power.serve import run_lanes

    cfg = _config(tmp_path, engine.url, extra='log_ticks = "changes"\n')
    s = run_lanes(load_run_config(cfg), max_ticks=6, echo=lambda m: None)
    recs = _records(tmp_path / "decisions.jsonl")
    ticks = [r for r in recs if r["event"] == "tick"]
    assert s.ticks == 6 and recs[-1]["event"] == "stop" and recs[-1]["stop_reason"] == "max_ticks"
    assert [r["lane"] for r in ticks] == ["decode", "prefill"]  # first tick (the intents), then nothing changed
    assert not any(r["event"] == "tick_end" for r in recs)
    assert s.would_save_j["decode"] > 0 and s.unchanged


def test_a_killed_writer_leaves_a_partial_log_and_the_next_run_restores_its_orphans(tmp_path, engine):
    cfg = _config(tmp_path, engine.url)
    allow = [a for i in range(3) for a in ("--allow", h200(i).uuid)]
    cmd = [sys.executable, "-m", "gpufield", "power", "run", "--config", str(cfg), "--write", *allow]
    log = tmp_path / "decisions.jsonl"
    proc = subprocess.Popen(cmd, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait(lambda: sum(r["event"] == "tick_end" for r in _records(log)) >= 2)
    finally:
        proc.kill()  # SIGKILL: no handler, no restore
        proc.wait(30)
    text = log.read_text()
    assert text.endswith("\n") and all(json.loads(x) for x in text.splitlines())  # complete lines only
    assert _records(log)[-1]["event"] != "stop"
    left = sorted(p.name for p in (tmp_path / "state").iterdir() if p.name.startswith("GPU-"))
    assert left == sorted(f"{h200(i).uuid}.json" for i in range(3))
    log.rename(tmp_path / "killed.jsonl")  # the next run refuses to write over it otherwise
    second = subprocess.run([*cmd, "--max-ticks", "1"], env=ENV, capture_output=True, text=True, timeout=60)
    assert second.returncode == 0, second.stderr
    start = _records(log)[0]
    assert f"PID {proc.pid}" in start["lock_takeover"] and "no longer running" in start["lock_takeover"]
    assert sorted(start["orphans_restored"]) == sorted(h200(i).uuid for i in range(3))
    assert not any(p.name.startswith("GPU-") for p in (tmp_path / "state").iterdir())
