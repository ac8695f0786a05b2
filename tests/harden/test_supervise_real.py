"""``gpufield run`` on real torchrun jobs (gloo, 2 CPU ranks of gpufield.testing.faultloop) with real
faults: SIGSTOP (hang), SIGKILL repeated (crash, budget, exclusion), a slow rank (straggler), an
exception in user code, and a clean run. Each test is one to three torchrun launches (~5-8 s each)."""

from __future__ import annotations

import json
import re
import socket
import sys
import urllib.request
from pathlib import Path

import pytest

from gpufield.harden import PolicyConfig, SuperviseConfig, Thresholds, supervise
from gpufield.testing import FakeNvml, h200

pytest.importorskip("torch")

SRC = Path(__file__).resolve().parents[2] / "src"
HOST = socket.gethostname()


def _cmd(*args: str, launcher: tuple[str, ...] = ()) -> tuple[str, ...]:
    return (sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", *launcher,
            "-m", "gpufield.testing.faultloop", "--pg-timeout-s", "60", *args)


def _cfg(tmp_path: Path, *args: str, launcher: tuple[str, ...] = (), **kw) -> SuperviseConfig:
    base = dict(run_dir=tmp_path / "run", thresholds=Thresholds(hang_floor_s=3.0, startup_timeout_s=120.0),
                policy=PolicyConfig(max_retries=0, backoff_s=0.0), stack_wait_s=1.5, kill_grace_s=2.0,
                env={"PYTHONPATH": str(SRC)})
    base.update(kw)
    return SuperviseConfig(command=_cmd(*args, launcher=launcher), **base)


def _events(res) -> list[dict]:
    return [json.loads(line) for line in res.events_path.read_text().splitlines()]


def test_sigstop_hang_names_the_stopped_rank_with_stacks_and_metrics(tmp_path):
    seen: dict[str, str] = {}

    def on_event(ev):  # read the live Prometheus endpoint at the moment of the detection
        if ev["event"] == "start":
            seen["port"] = ev["metrics_port"]
        if ev["event"] == "detect" and "metrics" not in seen:
            with urllib.request.urlopen(f"http://127.0.0.1:{seen['port']}/metrics", timeout=10) as r:
                seen["metrics"] = r.read().decode()

    cfg = _cfg(tmp_path, "--steps", "30", "--fault", "sigstop", "--fault-rank", "1", "--fault-step", "4",
               "--step-sleep-s", "0.05", "--harden-monitor", metrics_port=0)
    res = supervise(cfg, on_event=on_event)
    hang = res.detections[-1]
    assert not res.ok and res.attempts == 1 and res.exit_code == 1
    assert hang.kind == "hang" and hang.ranks == (1,)
    assert hang.details["states"] == {0: "S", 1: "T"}  # /proc/<pid>/stat: rank 0 waits, rank 1 is stopped
    assert hang.details["steps"] == {0: 3, 1: 3}  # both printed step 3; rank 1 stopped before step 4
    assert hang.details["dumped"] == {0: True, 1: False}  # a stopped process cannot dump its stack
    dump = (tmp_path / "run" / "attempt-0" / "monitor" / "stack-rank0.txt").read_text()
    assert "faultloop.py" in dump and "Current thread" in dump  # faulthandler's real all-threads dump
    assert 'gpufield_run_rank_step{rank="0"} 3.0' in seen["metrics"]
    kinds = [e["event"] for e in _events(res)]
    assert kinds.count("triage") == 1 and kinds[-2] == "decision"
    assert res.decisions[-1].action == "STOP" and "budget" in res.decisions[-1].reason


def test_repeated_sigkill_crash_budget_and_exclusion(tmp_path):
    gate_calls: list[str] = []
    excl, hostfile = tmp_path / "exclude.txt", tmp_path / "hosts.txt"
    cfg = _cfg(tmp_path, "--steps", "20", "--fault", "sigkill", "--fault-rank", "1", "--fault-step", "2",
               launcher=("--max-restarts", "3"),  # torchrun's own per-agent restarts: the supervisor removes them
               nodes=(HOST, "spare-1"), exclude_file=excl, hostfile=hostfile,
               validate_node=lambda h: gate_calls.append(h) is not None,
               policy=PolicyConfig(max_retries=1, backoff_s=0.1, transient_retries=0, min_progress_steps=0))
    res = supervise(cfg)
    assert res.attempts == 2 and not res.ok  # the fault repeats: 1 restart of a budget of 1, then stop
    assert [d.kind for d in res.detections] == ["crash"] * 2
    assert all(d.ranks == (1,) for d in res.detections)
    assert [d.action for d in res.decisions] == ["EXCLUDE", "STOP"]
    assert max(d.retries_used for d in res.decisions) == 1 and "budget" in res.decisions[-1].reason
    assert res.decisions[0].host == HOST and res.excluded == [HOST]
    assert excl.read_text() == f"{HOST}\n" and hostfile.read_text() == "spare-1\n"
    assert gate_calls == [HOST]  # asked before the second launch; it said no, so the host stays out
    ev = _events(res)
    launches = [e for e in ev if e["event"] == "launch"]
    assert [e["hosts"] for e in launches] == [[HOST, "spare-1"], ["spare-1"]]
    for e in launches:
        i = e["argv"].index("--max-restarts")
        assert e["argv"].count("--max-restarts") == 1 and e["argv"][i + 1] == "0"
    tri = [e for e in ev if e["event"] == "triage"]
    assert len(tri) == 2 and all(t.get("cls") for t in tri)  # the engine ran on each attempt's console log
    for n in range(2):
        log = (tmp_path / "run" / f"attempt-{n}" / "console.log").read_text()
        assert "[rank1]:" in log and "exitcode" in log  # torchrun's failure block, with global-rank prefixes


def test_slow_rank_is_named_as_straggler_and_the_job_goes_on(tmp_path):
    # rank 1 sleeps 0.045 s more per step than the 0.15 s every rank sleeps: ~30 % slower
    cfg = _cfg(tmp_path, "--steps", "18", "--fault", "sleep", "--fault-rank", "1", "--fault-step", "0",
               "--fault-arg", "0.045", "--step-sleep-s", "0.15", "--harden-monitor",
               thresholds=Thresholds(hang_floor_s=10.0, startup_timeout_s=120.0),
               nvml=FakeNvml([h200(0), h200(1)]))  # no GPU here: the telemetry beside the report is faked
    res = supervise(cfg)
    assert res.ok and res.exit_code == 0
    strag = [d for d in res.detections if d.kind == "straggler"]
    assert [d.ranks for d in strag] == [(1,)]
    d = strag[0].details
    assert d["host"] == HOST and d["gpu"] == "1" and d["source"] == "collective"
    assert 0.15 < d["slowdown"] < 0.6 and d["round"] <= 20
    assert [g["blamed"] for g in d["telemetry"]["gpus"]] == [False, True]  # GPU 1 = rank 1's LOCAL_RANK


def test_slow_rank_is_named_from_the_compute_times_its_lines_print_without_the_hook(tmp_path):
    # no hook: rank 1 sleeps 0.3 s per step after its backward; every rank prints the time it spent
    # before the loss all-reduce (compute_time) and the whole step's time (s/step, equalised by it)
    import numpy as np

    from gpufield.harden.supervise.parse import LineParser
    from gpufield.harden.supervise.progress import Progress

    cfg = _cfg(tmp_path, "--steps", "16", "--fault", "sleep", "--fault-rank", "1", "--fault-step", "0",
               "--fault-arg", "0.3", "--step-sleep-s", "0.05", "--print-compute-time",
               thresholds=Thresholds(hang_floor_s=10.0, startup_timeout_s=120.0), gpu_telemetry=False)
    res = supervise(cfg)
    assert res.ok and res.exit_code == 0
    strag = [d for d in res.detections if d.kind == "straggler"]
    assert [d.ranks for d in strag] == [(1,)]
    d = strag[0].details
    assert d["source"] == "step_time" and d["round"] <= 20  # named within 20 steps
    # the slowdown against the printed numbers, read here with a plain split (numpy, float64)
    console = (tmp_path / "run" / "attempt-0" / "console.log").read_text().splitlines()
    ct = {r: np.array([float(x.split("compute_time ")[1].split()[0]) for x in console
                       if x.startswith(f"[rank{r}]:") and "compute_time " in x], dtype=np.float64) for r in (0, 1)}
    win = slice(d["round"] - 9, d["round"] + 1)  # the detector's window: the 10 steps up to the round named
    expect = np.median(ct[1][win]) / np.median(ct[0][win]) - 1.0
    assert d["slowdown"] == pytest.approx(expect, abs=6e-4)  # the detail is rounded to 3 decimals
    assert np.median(ct[1] - ct[0]) > 0.25  # the 0.3 s sleep is in rank 1's printed time
    # the same real lines without compute_time: the whole-step times are equalised by the all-reduce
    parser, prog = LineParser(), Progress(world=2, start_t=0.0)
    for i, line in enumerate(console):
        p = parser.parse(re.sub(r" \| compute_time \S+ s", "", line))
        if p.rank is not None and p.step is not None:
            prog.on_step(p.rank, p.step, 0.001 * i, step_time_s=p.step_time_s)
    assert prog.rounds["step_time"] and prog._step_time(Thresholds()) is None


def test_clean_run_raises_no_alarm_and_reads_the_control_file(tmp_path):
    control = tmp_path / "control.json"
    control.write_text(json.dumps({"straggler_slowdown": 0.25}))
    cfg = _cfg(tmp_path, "--steps", "20", "--step-sleep-s", "0.02", "--harden-monitor", control_file=control)
    res = supervise(cfg)
    assert res.ok and [d.kind for d in res.detections] == ["ok"] and res.decisions == []
    ev = _events(res)
    assert [e["changed"] for e in ev if e["event"] == "control"] == [{"straggler_slowdown": 0.25}]
    assert [e for e in ev if e["event"] == "exit"][0]["steps"] == 20


def test_exception_in_user_code_stops_without_retry(tmp_path):
    # floor 10 s: on a loaded VM a rank can take > 3 s to print its traceback and exit
    cfg = _cfg(tmp_path, "--steps", "20", "--fault", "exception", "--fault-rank", "1", "--fault-step", "2",
               policy=PolicyConfig(max_retries=3, backoff_s=0.0),
               thresholds=Thresholds(hang_floor_s=10.0, startup_timeout_s=120.0))
    res = supervise(cfg)
    assert res.attempts == 1 and [d.action for d in res.decisions] == ["STOP"]
    assert res.detections[0].kind == "crash" and res.detections[0].ranks == (1,)
    dec = [e for e in _events(res) if e["event"] == "decision"][0]
    assert "corrupt sample" in dec["user_exception"]
