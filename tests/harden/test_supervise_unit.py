"""Fast tests of the supervisor's parts: step parser, detectors on a fake clock, command preparation,
node lists, control file, monitor records. Real-process tests are in test_supervise_real.py."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest

from gpufield.harden.supervise.evidence import LineFacts, MonitorTail, blame_hang
from gpufield.harden.supervise.export import Control, Metrics, write_atomic
from gpufield.harden.supervise.launch import expand_nodelist, job_nodes, prepare, world_size
from gpufield.harden.supervise.parse import LineParser
from gpufield.harden.supervise.progress import Progress, Thresholds

# Real lines: Megatron-LM iteration lines from https://github.com/epfLLM/Megatron-LLM/issues/11 ;
# HF Trainer dicts from https://github.com/huggingface/blog/issues/56 and
# https://github.com/huggingface/transformers/issues/28343 ; faultloop and torchrun lines as
# this repository's runs print them.
PROGRESS = [
    (" iteration      201/  250000 | consumed samples:       205824 | elapsed time per iteration (ms): 139113.4 | "
     "learning rate: 1.507E-05 | global batch size:  1024 | lm loss: 2.373574E+00 | loss scale: 1.0 | grad norm: "
     "0.811 | number of skipped iterations:   0 | number of nan iterations:   0 |", None, 201),
    ('{"loss": 7.152712148666382, "learning_rate": 4.8358287365379566e-05, "epoch": 0.03283425269240872, "step": 500}',
     None, 500),
    ("{'loss': 2.5234, 'learning_rate': 1.0344827586206896e-06, 'epoch': 0.0}", None, -1),
    ("[rank1]:[rank1] step 12 | loss 6.4009 | grad_norm 0.8697 | 0.010 s/step", 1, 12),
    ("[Rank 3] Step 40/1000, loss=2.31, lr=3e-4", 3, 40),
]
NOT_PROGRESS = [
    "[rank0]:[rank0] faultloop: world 2, backend gloo, wrap ddp, fault none at step 5 on rank 1",
    "[rank0]:[rank0] saving checkpoint to /tmp/faultloop-1/step6-rank0.pt",
    "W1201 21:33:52.078000 9078 torch/distributed/run.py:874] *****************************************",
    "[rank0]:[E1218 20:27:21.426415540 ProcessGroupNCCL.cpp:629] [Rank 0] Watchdog caught collective operation "
    "timeout: WorkNCCL(SeqNum=1, OpType=BROADCAST, NumelIn=131072000, Timeout(ms)=600000) ran for 600081 milliseconds",
]


@pytest.mark.parametrize(("line", "rank", "step"), PROGRESS)
def test_parser_reads_progress_lines(line, rank, step):
    p = LineParser().parse(line)
    assert (p.rank, p.step, p.nan) == (rank, step, False)


@pytest.mark.parametrize("line", NOT_PROGRESS)
def test_parser_ignores_step_mentions_without_a_metric(line):
    assert LineParser().parse(line).step is None


def test_parser_phase_and_nan():
    lp = LineParser()
    assert lp.parse("[rank0]:[rank0] saving checkpoint to /tmp/x/step6-rank0.pt").phase == "checkpoint"
    assert lp.parse("[rank1]:***** Running Evaluation *****").phase == "eval"
    assert lp.parse("[rank0]:[rank0] training done: 20 steps").phase == "teardown"
    nan = lp.parse("[rank0]:[rank0] step 7 | loss nan | grad_norm nan | 0.012 s/step")
    assert (nan.step, nan.nan) == (7, True)
    assert lp.parse(" iteration 9/ 10 | lm loss: NaN | number of nan iterations:   1 |").nan
    with pytest.raises(ValueError, match="named group"):
        LineParser(step_pattern=r"it (\d+)")


@pytest.mark.parametrize("line,seconds", [
    ("[rank0]:[rank0] step 3 | loss 6.41 | grad_norm 0.87 | 0.102 s/step", 0.102),  # faultloop / torchtitan-style
    ("[rank1]:[rank1] step 3 | loss 6.41 | grad_norm 0.87 | compute_time 0.3514 s | 0.420 s/step", 0.3514),
    (" iteration       12/    1000 | consumed samples: 96 | elapsed time per iteration (ms): 310.2 | "
     "learning rate: 3.0E-04 | lm loss: 2.3E+00 |", 0.3102),  # Megatron-LM's training log line
    ("[rank2]:Step 40/1000 lr 3e-4 loss 2.1 4.00 it/s", 0.25),  # tqdm-style rate, inverted
    ("[rank0]:step 5 loss 2.0 step_time: 12.5ms", 0.0125),
    ("[rank0]:step 5 loss 2.0 3.5 s/it", 3.5),
    ("[rank0]:step 5 | loss 2.0 | grad_norm 1.0", None),
    ("[rank0]:step 5 | loss 2.0 | 0.000 s/step", None),  # a time that is not > 0 is no time
])
def test_parser_reads_the_step_time_a_line_prints(line, seconds):
    got = LineParser().parse(line).step_time_s
    assert got == (pytest.approx(seconds, rel=1e-12) if seconds is not None else None)


def _steps(prog, ranks, start, n, dt, t0, late=None):
    """Feed ``n`` steps of every rank, ``dt`` s apart; ``late`` = {rank: extra s} on step lines."""
    t = t0
    for k in range(start, start + n):
        t += dt
        for r in ranks:
            prog.on_step(r, k, t + (late or {}).get(r, 0.0))
    return t


def test_hang_timeout_is_max_of_factor_p99_and_floor_and_names_the_rank_behind():
    th = Thresholds(hang_floor_s=5.0, hang_factor=3.0, startup_timeout_s=50.0)
    prog = Progress(world=2, start_t=0.0)
    assert prog.hang_timeout(th, 1.0) == (50.0, "startup")
    assert prog.check_hang(th, 49.0) is None and prog.check_hang(th, 51.0).stale == (0, 1)
    t = _steps(prog, [0, 1], 0, 10, 2.5, 0.0)  # p99 = 2.5 s -> 3 x 2.5 = 7.5 > floor 5
    assert prog.hang_timeout(th, t) == (7.5, None)
    prog.on_step(0, 10, t + 2.5)  # rank 1 never reports step 10
    assert prog.check_hang(th, t + 7.0) is None
    s = prog.check_hang(th, t + 8.0)
    assert s.stale == (1,) and s.behind == (1,) and s.steps == {0: 10, 1: 9}


def test_phase_moves_the_whole_job_to_the_phase_timeout():
    th = Thresholds(hang_floor_s=5.0, phase_timeout_s=100.0)
    prog = Progress(world=2, start_t=0.0)
    t = _steps(prog, [0, 1], 0, 5, 1.0, 0.0)
    prog.on_phase(1, "checkpoint", t)
    assert prog.check_hang(th, t + 60.0) is None  # rank 0 waits for rank 1's save: no alarm either
    late = prog.check_hang(th, t + 101.0)
    assert late is not None and late.in_phase == (1,)
    assert blame_hang({}, {}, (), (), late.stale, (0, 1), late.in_phase)[0] == (1,)
    # the save ends at +60 s: the peers' silence counts from there, not from their last step
    prog.on_phase(1, None, t + 60.0)
    assert prog.check_hang(th, t + 64.0) is None
    s = prog.check_hang(th, t + 66.0)
    assert s is not None and s.stale == (0, 1) and s.timeout_s == 5.0


def test_straggler_named_from_arrival_skew_not_from_noise():
    th = Thresholds(straggler_slowdown=0.2, straggler_window=10)
    prog = Progress(world=3, start_t=0.0)
    for seq in range(1, 12):  # rank 2 arrives 0.3 s late at every collective of 1.3 s rounds
        base = seq * 1.3
        prog.on_arrive(0, seq, base + 0.001 * (seq % 3))
        prog.on_arrive(1, seq, base + 0.001 * ((seq + 1) % 3))
        prog.on_arrive(2, seq, base + 0.3)
    st = prog.check_straggler(th)
    assert st.rank == 2 and st.source == "collective" and st.slowdown == pytest.approx(0.3 / 1.0, rel=0.02)
    assert prog.check_straggler(th) is None  # named once

    clean = Progress(world=2, start_t=0.0)
    for seq in range(1, 30):  # alternating 4 ms jitter: never 80 % last, never 20 % slow
        clean.on_arrive(seq % 2, seq, seq * 0.1 + 0.004)
        clean.on_arrive(1 - seq % 2, seq, seq * 0.1)
    assert clean.check_straggler(th) is None


def test_blame_order_proc_state_then_dumps_then_collective_then_step():
    allr = (0, 1, 2)
    assert blame_hang({0: "S", 1: "T", 2: "S"}, {}, (), (), (0, 1, 2), allr)[0] == (1,)
    assert blame_hang({0: "S", 1: "S", 2: "S"}, {0: True, 1: True, 2: False}, (), (), allr, allr)[0] == (2,)
    assert blame_hang({}, {}, (0,), (1,), allr, allr)[0] == (0,)
    assert blame_hang({}, {}, (), (1,), allr, allr)[0] == (1,)
    assert blame_hang({0: "S", 1: "S", 2: "S"}, {}, (), (), allr, allr)[0] == ()


def test_line_facts_tell_user_exceptions_from_communication_errors():
    f = LineFacts()
    for rank, text in [(1, "[rank1]: Traceback (most recent call last):"), (1, '[rank1]:   File "x.py", line 1'),
                       (1, "[rank1]: RuntimeError: corrupt sample in shard at step 3: cannot decode record"),
                       (0, "[rank0]: Traceback (most recent call last):"),
                       (0, "[rank0]: RuntimeError: [/__w/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] "
                           "Connection closed by peer [127.0.0.1]:19339.")]:
        f.feed(rank, text)
    assert f.user_exception() == (1, "RuntimeError: corrupt sample in shard at step 3: cannot decode record")
    g = LineFacts()
    g.feed(0, "Traceback (most recent call last):")
    g.feed(0, "RuntimeError: Connection reset by peer")
    assert g.user_exception() is None


def test_prepare_adds_tee_and_owns_restarts(tmp_path):
    cmd = ["torchrun", "--nnodes", "{nnodes}", "--max-restarts=3", "--nproc-per-node", "4", "train.py", "--lr", "1"]
    argv, notes = prepare(cmd, tmp_path, {"hosts": "a,b", "nnodes": "2", "exclude": "", "attempt": "0"})
    assert argv == ["torchrun", "--max-restarts", "0", "--tee", "3", "--log-dir", str(tmp_path), "--nnodes", "2",
                    "--nproc-per-node", "4", "train.py", "--lr", "1"]
    assert notes and "max-restarts" in notes[0] and world_size(argv) == 4
    argv, _ = prepare(["python", "-m", "torch.distributed.run", "--tee", "1", "-m", "pkg.train", "--max-restarts", "5"],
                      tmp_path, {})
    assert argv[:5] == ["python", "-m", "torch.distributed.run", "--max-restarts", "0"]
    assert argv[-2:] == ["--max-restarts", "5"]  # the script's own option is left alone
    assert prepare(["python", "train.py"], tmp_path, {}) == (["python", "train.py"], [])
    with pytest.raises(ValueError, match="placeholder"):
        prepare(["torchrun", "{nodes}"], tmp_path, {"hosts": ""})


def test_expand_slurm_nodelist():
    assert expand_nodelist("gpu[01-03,07],login1") == ["gpu01", "gpu02", "gpu03", "gpu07", "login1"]
    assert expand_nodelist("n[8-10]-ib") == ["n8-ib", "n9-ib", "n10-ib"]
    with pytest.raises(ValueError):
        expand_nodelist("gpu[01-x]")
    assert job_nodes({"SLURM_JOB_NODELIST": "gpu[1-2]", "SLURM_NNODES": "2"}) == ["gpu1", "gpu2"]
    assert job_nodes({}) == [socket.gethostname()]


def test_control_file_changes_thresholds_and_rejects_bad_ones(tmp_path):
    path = tmp_path / "control.json"
    c = Control(path, Thresholds())
    assert c.poll() == (Thresholds(), None, None)
    path.write_text(json.dumps({"hang_floor_s": 7.5}))
    th, changed, err = c.poll()
    assert th.hang_floor_s == 7.5 and changed == {"hang_floor_s": 7.5} and err is None
    path.write_text(json.dumps({"hang_floor_s": -1}))
    os.utime(path, ns=(1, 1))
    th, changed, err = c.poll()
    assert th.hang_floor_s == 7.5 and err and "hang_floor_s" in err


def test_write_atomic_and_metrics_text(tmp_path):
    target = tmp_path / "exclude.txt"
    write_atomic(target, "gpu07\n")
    assert target.read_text() == "gpu07\n" and [p.name for p in tmp_path.iterdir()] == ["exclude.txt"]
    with pytest.raises(OSError):
        write_atomic(tmp_path, "x")  # a directory is never replaced
    m = Metrics(None)
    m.step.labels(rank="1").set(12)
    m.decisions.labels(action="RETRY").inc()
    text = m.text()
    assert 'gpufield_run_rank_step{rank="1"} 12.0' in text and 'gpufield_run_decisions_total{action="RETRY"} 1.0' in text


def test_monitor_hook_records_and_tail(tmp_path):
    code = ("from gpufield.harden import monitor\n"
            "for s in range(3):\n"
            "    with monitor.collective():\n        pass\n"
            "    monitor.step(s)\n"
            "with monitor.phase('checkpoint'):\n    pass\n")
    env = dict(os.environ, GPUFIELD_MONITOR_DIR=str(tmp_path), RANK="3", LOCAL_RANK="1", CUDA_VISIBLE_DEVICES="4,5")
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=60)
    lines = (tmp_path / "rank3.log").read_text().splitlines()
    assert lines[0].split()[3:] == ["1", "5", "1"] and [ln[0] for ln in lines[1:]] == list("ADS" * 3 + "PE")
    prog = Progress(world=0, start_t=0.0)
    tail = MonitorTail(tmp_path)
    tail.poll(prog, 1.0)
    v = prog.view(3)
    assert (v.step, v.arrived_seq, v.done_seq, v.gpu, v.stacks, v.phase) == (2, 3, 3, "5", True, None)
    outside = subprocess.run([sys.executable, "-c", code], env={k: v for k, v in env.items() if k != "GPUFIELD_MONITOR_DIR"},
                             timeout=60)
    assert outside.returncode == 0


def test_harden_public_names_have_docstrings():
    import gpufield.harden as h

    public = {n for n, v in vars(h).items() if not n.startswith("_") and not isinstance(v, type(os))
              and n != "annotations"}
    assert set(h.__all__) == public
    assert all(getattr(h, n).__doc__ for n in h.__all__)


def test_cli_run_retries_within_the_budget_then_fails(tmp_path, capsys):
    from gpufield.cli import main

    rc = main(["run", "--run-dir", str(tmp_path / "r"), "--max-retries", "1", "--backoff-s", "0", "--no-triage",
               "--", sys.executable, "-c", "raise SystemExit(3)"])
    err = capsys.readouterr().err
    assert rc == 1 and "FAILED after 2 launch(es)" in err
    events = [json.loads(x) for x in (tmp_path / "r" / "events.jsonl").read_text().splitlines()]
    assert [e["rc"] for e in events if e["event"] == "detect"] == [3, 3]
    assert [e["action"] for e in events if e["event"] == "decision"] == ["RETRY", "STOP"]
    assert main(["run", "--run-dir", str(tmp_path / "r2"), "--", sys.executable, "-c", "pass"]) == 0


def test_cli_bad_input_is_one_line_exit_2(tmp_path, capsys):
    from gpufield.cli import main

    assert main(["run", "--run-dir", str(tmp_path / "a"), "--", str(tmp_path / "no-such-program")]) == 2
    err = capsys.readouterr().err
    last = err.strip().splitlines()[-1]
    assert last.startswith("gpufield: error: ") and "no-such-program: cannot start the job command" in last
    assert "Traceback" not in err
    assert main(["run", "--run-dir", str(tmp_path / "b"), "--step-pattern", "(?P<step>", "--", "true"]) == 2
    assert "Traceback" not in capsys.readouterr().err


def test_gpu_context_marks_the_blamed_gpu_and_survives_no_driver():
    from gpufield.harden.supervise.gputel import gpu_context
    from gpufield.testing import FakeNvml
    from gpufield.testing.fake_nvml import h200

    ctx = gpu_context("1", nvml=FakeNvml([h200(0), h200(1)]))
    assert [(g["index"], g["blamed"]) for g in ctx["gpus"]] == [(0, False), (1, True)]
    assert all(g["sm_clock_hz"] and g["power_w"] for g in ctx["gpus"])
    assert "unavailable" in gpu_context("0", nvml=FakeNvml(driver_loaded=False))
