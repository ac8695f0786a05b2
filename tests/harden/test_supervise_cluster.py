"""Multi-node ``gpufield run``: Slurm environment and host lists, the store protocol under concurrency
(real ``TCPStore``, one process per node), and two real supervisors on localhost acting as two nodes
of one torchrun job (c10d rendezvous through the supervisors' store, gloo, a SIGKILLed rank)."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from gpufield.harden.policy import PolicyConfig, RetryPolicy
from gpufield.harden.supervise.cluster import (
    ClusterConfig,
    cluster_config,
    parse_endpoint,
    pick_root,
)
from gpufield.harden.supervise.launch import rdzv_endpoint, with_rdzv_id
from gpufield.harden.supervise.slurm import exclude_text, expand_hostlist, parse_hostlist, slurm_job

SRC = Path(__file__).resolve().parents[2] / "src"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- Slurm -------------------------------------------------------------------------------------------
def test_hostlist_syntax_of_the_slurm_documentation():
    # forms from Slurm's documentation (srun/sbatch --nodelist, scontrol show hostnames)
    assert parse_hostlist("tux[1-3]") == ["tux1", "tux2", "tux3"]
    assert parse_hostlist("lx[10-12,20]") == ["lx10", "lx11", "lx12", "lx20"]
    assert parse_hostlist("gpu[008-010],login1") == ["gpu008", "gpu009", "gpu010", "login1"]
    assert parse_hostlist("rack[1-2]-node[01-02]") == ["rack1-node01", "rack1-node02", "rack2-node01", "rack2-node02"]
    for bad in ("gpu[1-", "gpu]1[", "gpu[3-1]", "gpu[a-b]", "a,,b"):
        with pytest.raises(ValueError):
            parse_hostlist(bad)
    # without scontrol on the PATH the parser answers; a given scontrol that is absent too
    assert expand_hostlist("tux[1-2]", scontrol="no-such-scontrol-here") == ["tux1", "tux2"]


def test_slurm_job_from_the_environment(tmp_path):
    env = {"SLURM_JOB_ID": "4242", "SLURM_JOB_NODELIST": "gpu[01-02]", "SLURM_JOB_NUM_NODES": "2", "SLURM_NODEID": "1"}
    job = slurm_job(env, scontrol=None)
    assert job.job_id == "4242" and job.nodes == ("gpu01", "gpu02") and job.node == "gpu02"
    assert slurm_job({}, scontrol=None) is None
    with pytest.raises(ValueError, match="SLURM_JOB_NUM_NODES is 3"):
        slurm_job({**env, "SLURM_JOB_NUM_NODES": "3"}, scontrol=None)
    cmd = ["torchrun", "--nnodes", "{nnodes}", "--rdzv-backend", "c10d", "--rdzv-endpoint", "gpu01:29500",
           "--rdzv-id", "ft", "train.py"]
    cfg = cluster_config(cmd, env=env)
    assert (cfg.node, cfg.store_host, cfg.store_port, cfg.job_id) == ("gpu02", "gpu01", 29500, "4242")
    with pytest.raises(ValueError, match="--store HOST:PORT"):
        cluster_config(["torchrun", "--standalone", "train.py"], env=env)
    with pytest.raises(ValueError, match="--nodes"):
        cluster_config(cmd, env={})
    assert parse_endpoint("[::1]:29500") == ("::1", 29500)
    # the exclude file is one word for --exclude=$(cat FILE) and a host list for --exclude=/path/FILE
    assert exclude_text(["gpu01", "gpu07"]) == "gpu01,gpu07\n" and exclude_text([]) == ""


def test_every_launch_gets_its_own_rendezvous_id():
    cmd = ["torchrun", "--rdzv-backend=c10d", "--rdzv-endpoint=h:1234", "--rdzv-id=job", "t.py"]
    assert rdzv_endpoint(cmd) == ("h", 1234)
    assert with_rdzv_id(cmd, 2)[0][3] == "--rdzv-id=job-a2"
    argv, note = with_rdzv_id(["torchrun", "--nnodes", "2", "t.py"], 1)
    assert argv[1:3] == ["--rdzv-id", "none-a1"] and "none-a1" in note
    assert rdzv_endpoint(["torchrun", "--rdzv-backend", "static", "--rdzv-endpoint", "h:1", "t.py"]) is None
    argv, _ = with_rdzv_id(["torchrun", "--nnodes", "2", "t.py", "--rdzv-id", "mine"], 0)  # the script's own option
    assert argv == ["torchrun", "--rdzv-id", "none-a0", "--nnodes", "2", "t.py", "--rdzv-id", "mine"]


def test_pick_root_prefers_the_quiet_crash_over_its_victims():
    f = {"kind": "crash", "user_exception": False, "action_kind": None, "confidence": 1.0, "host": None}
    reports = {  # node a's rank died of "connection closed by peer" first in wall time; b's rank was killed
        "a": {"node": "a", "kind": "crash", "t": 10.0, "ranks": [0], "victim": True, "failure": {**f, "host": "a"}},
        "b": {"node": "b", "kind": "crash", "t": 10.4, "ranks": [1], "victim": False, "failure": {**f, "host": "b"}},
        "c": {"node": "c", "kind": "peer", "t": 9.0, "ranks": [], "victim": False, "failure": None},
    }
    assert pick_root(reports)["node"] == "b"
    reports["a"]["failure"] = {**f, "user_exception": True}
    assert pick_root(reports)["node"] == "a"  # an exception in user code explains everything else
    assert pick_root({"c": reports["c"]}) is None
    # a hang: the healthy node saw it first and names no rank; the other node, ended by the incident,
    # finds its rank stopped (/proc state T): that node is the root
    h = {**f, "kind": "hang"}
    hang = {"a": {"node": "a", "kind": "hang", "t": 5.0, "ranks": [], "victim": False, "failure": {**h, "host": "a"}},
            "b": {"node": "b", "kind": "peer", "t": 5.6, "ranks": [1], "victim": False, "failure": {**h, "host": "b"}}}
    assert pick_root(hang)["node"] == "b"


# -- the store protocol, one process per node -------------------------------------------------------
def _node_worker(port: int, rank: int, q) -> None:
    from gpufield.harden.policy import Failure
    from gpufield.harden.supervise.cluster import Cluster
    from gpufield.harden.supervise.coord import StoreCoordinator
    from gpufield.harden.supervise.export import EventLog

    cfg = ClusterConfig(nodes=("n0", "n1"), node_rank=rank, store_host="127.0.0.1", store_port=port, job_id="t",
                        gather_s=20.0, wait_s=60.0, gate_wait_s=5.0, end_wait_s=30.0)
    cl = Cluster(cfg)  # node 0 hosts the store, node 1 connects

    def barrier(name: str) -> None:
        cl.store.add(name, 1)
        while int(cl.store.add(name, 0)) < 2:
            pass

    # 1. two deciders racing for one budget: 40 restart requests each, at the same moment
    race = RetryPolicy(config=PolicyConfig(max_retries=5, transient_retries=10**6, no_progress_restarts=10**6,
                                           backoff_s=0.0), budget=lambda d: cl.store.add("race", d))
    barrier("race-go")
    raced = [race.decide(Failure(kind="crash")).action for _ in range(40)]
    # 2. the protocol, as supervise() drives it: every node on the plan fails at the same moment;
    # n0's validation gate fails once, then passes; n1 has none (an excluded n1 stays out)
    calls: list[str] = []
    gate = (lambda h: calls.append(h) is None and len(calls) > 1) if rank == 0 else None
    coord = StoreCoordinator(cl, RetryPolicy(config=PolicyConfig(max_retries=2, backoff_s=0.0, transient_retries=0,
                                                                 min_progress_steps=0)), EventLog(os.devnull), gate)
    plans, out = [], []
    for attempt in range(5):
        hosts, excluded = coord.plan(attempt)
        plans.append((hosts, excluded))
        if not hosts:
            break
        if cl.me not in hosts:
            if coord.sit_out(attempt, hosts):
                break
            dec, role = coord.follow(attempt), "out"
        else:
            if len(hosts) == 2:
                barrier(f"barrier/{attempt}")
            rep = {"kind": "crash", "t": 1.0, "ranks": [rank], "victim": False,
                   "failure": {"kind": "crash", "host": cl.me, "rank": rank}}
            dec = coord.resolve(attempt, hosts, rep)
            role = "decide" if coord.deciding else "follow"
        out.append((dec.action, dec.host, dec.retries_used, role))
        if dec.action == "STOP":
            break
        coord.after(attempt, dec)
    q.put((rank, raced, plans, out, int(cl.store.add("budget", 0))))
    coord.close()


def test_two_node_processes_share_one_budget_and_take_one_decision_per_incident():
    port = _free_port()
    pytest.importorskip("torch.distributed")  # imported here once: the forked nodes share it
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    procs = [ctx.Process(target=_node_worker, args=(port, r, q)) for r in (0, 1)]
    for p in procs:
        p.start()
    res = {rank: rest for rank, *rest in (q.get(timeout=120) for _ in procs)}
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    (race0, plans0, out0, b0), (race1, plans1, out1, b1) = res[0], res[1]
    assert sum(a == "RETRY" for a in race0 + race1) == 5  # 80 requests at once from two processes: the budget
    # one plan per launch, the same on both nodes: n0 out after launch 0, back (gate passed) when n1 goes out
    assert plans0 == plans1 == [(["n0", "n1"], []), (["n1"], ["n0"]), (["n0"], ["n1"])]
    # the same decisions on both nodes; the budget (2) is spent once across them, then STOP
    assert [o[:3] for o in out0] == [o[:3] for o in out1] == [("EXCLUDE", "n0", 1), ("EXCLUDE", "n1", 2), ("STOP", None, 2)]
    assert sorted([out0[0][3], out1[0][3]]) == ["decide", "follow"]  # one decider for the simultaneous failure
    assert (out0[1][3], out1[1][3], out0[2][3], out1[2][3]) == ("out", "decide", "decide", "out")
    assert b0 == b1 == 2  # the job's budget counter: two restarts granted


# -- two real supervisors, one torchrun job over two "nodes" on localhost -----------------------------
def test_two_supervisors_take_one_decision_when_a_rank_of_one_node_is_killed(tmp_path):
    """Two ``gpufield run --cluster`` processes as two nodes of one torchrun job (``--nnodes 2``, c10d
    through node 0's store); global rank 1 SIGKILLs itself. Budget 0: the one decision is STOP, taken
    once, with the killed rank's node as the root; the other node's launch is ended by the incident.
    (The retry, exclusion and rejoin paths with real torchrun: ``benchmarks/harden_multinode.py``.)"""
    pytest.importorskip("torch")
    port = _free_port()
    py = sys.executable
    env = {**os.environ, "PYTHONPATH": str(SRC), "OMP_NUM_THREADS": "1"}
    procs = []
    for n in (0, 1):
        cmd = [py, "-m", "gpufield", "run", "--cluster", "--nodes", "nodeA,nodeB", "--node-rank", str(n), "-q",
               "--run-dir", str(tmp_path / "run"), "--hang-floor-s", "30", "--startup-timeout-s", "150",
               "--max-retries", "0", "--backoff-s", "0", "--gather-s", "30", "--no-triage",
               "--exclude-file", str(tmp_path / f"exclude{n}.txt"),
               "--", py, "-m", "torch.distributed.run", "--nnodes", "{nnodes}", "--nproc-per-node", "1",
               "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "t",
               "-m", "gpufield.testing.faultloop", "--steps", "30", "--fault", "sigkill", "--fault-rank", "1",
               "--fault-step", "1", "--pg-timeout-s", "60"]
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
    errs = [p.communicate(timeout=170)[1] for p in procs]
    assert [p.returncode for p in procs] == [1, 1], errs
    name = {0: "nodeA", 1: "nodeB"}
    run = {n: tmp_path / "run" / name[n] for n in (0, 1)}  # one --run-dir: each node writes below its name
    ev = {n: [json.loads(line) for line in (run[n] / "events.jsonl").read_text().splitlines()] for n in (0, 1)}
    # which node ran global rank 1 (c10d assigns node ranks by arrival): its console log says
    killed = [n for n in (0, 1) if "[rank1]:" in (run[n] / "attempt-0" / "console.log").read_text()]
    assert len(killed) == 1
    bad = name[killed[0]]
    crash = [e for e in ev[killed[0]] if e["event"] == "detect"]
    assert crash[0]["kind"] == "crash" and crash[0]["ranks"] == [1]
    decisions = {n: [(e["action"], e["retries_used"]) for e in ev[n] if e["event"] == "decision"] for n in (0, 1)}
    assert decisions[0] == decisions[1] == [("STOP", 0)]
    roles = [e for n in (0, 1) for e in ev[n] if e["event"] == "cluster" and "role" in e]
    assert sorted(e["role"] for e in roles) == ["decide", "follow"] and len({e["decider"] for e in roles}) == 1
    roots = {e["root"] for n in (0, 1) for e in ev[n] if e["event"] == "cluster" and "root" in e}
    assert roots == {bad}  # both nodes name the killed rank's node as the root
    for n in (0, 1):
        assert [e["event"] for e in ev[n]].count("launch") == 1
        assert (tmp_path / f"exclude{n}.txt").read_text() == ""


def _orphans(marker: Path) -> list[int]:
    """Pids of processes started by a supervisor of this test (their environment names its run folder)."""
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            env = Path(f"/proc/{name}/environ").read_bytes()
        except OSError:
            continue
        if f"GPUFIELD_MONITOR_DIR={marker}".encode() in env:
            out.append(int(name))
    return out


def test_a_supervisor_killed_mid_job_is_noticed_by_its_heartbeat(tmp_path):
    """Two real supervisors around one ``torchrun --nnodes 2`` gloo job; node B's supervisor is
    SIGKILLed while the job runs (its torchrun and rank live on, orphaned). Node A must end its launch
    and decide within ``--peer-dead-s`` of the kill (margin 15 s for a loaded machine), not after
    ``--gather-s`` (120 s here) or the job's end: the decision names node B as the root (lost), and
    with budget 0 it is STOP, exit status 1. (Restart without the lost node and the store host's
    death: ``benchmarks/harden_multinode.py``, scenarios ``supervisor-killed*``.)"""
    import signal
    import time

    pytest.importorskip("torch")
    port, py, dead_s = _free_port(), sys.executable, 3.0
    env = {**os.environ, "PYTHONPATH": str(SRC), "OMP_NUM_THREADS": "1"}
    procs = []
    try:
        for n in (0, 1):
            cmd = [py, "-m", "gpufield", "run", "--cluster", "--nodes", "nodeA,nodeB", "--node-rank", str(n), "-q",
                   "--run-dir", str(tmp_path / "run"), "--hang-floor-s", "60", "--startup-timeout-s", "150",
                   "--max-retries", "0", "--backoff-s", "0", "--gather-s", "120", "--no-triage",
                   "--peer-dead-s", str(dead_s), "--heartbeat-s", "0.5",
                   "--", py, "-m", "torch.distributed.run", "--nnodes", "{nnodes}", "--nproc-per-node", "1",
                   "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "hb",
                   "-m", "gpufield.testing.faultloop", "--steps", "2000", "--step-sleep-s", "0.05",
                   "--pg-timeout-s", "60"]
            procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
        console = tmp_path / "run" / "nodeB" / "attempt-0" / "console.log"
        deadline = time.monotonic() + 150
        while not (console.exists() and " step 1 " in console.read_text()):  # the job runs on both nodes
            assert time.monotonic() < deadline and procs[0].poll() is None and procs[1].poll() is None, \
                [p.poll() for p in procs]
            time.sleep(0.2)
        procs[1].send_signal(signal.SIGKILL)
        t_kill = time.time()
        err = procs[0].communicate(timeout=120)[1]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        for pid in _orphans(tmp_path / "run"):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    assert procs[0].returncode == 1, err
    ev = [json.loads(line) for line in (tmp_path / "run" / "nodeA" / "events.jsonl").read_text().splitlines()]
    det = [e for e in ev if e["event"] == "detect"]
    assert len(det) == 1 and det[0]["kind"] == "peer" and "nodeB's supervisor is gone" in det[0]["why"], det
    assert det[0]["t"] - t_kill <= dead_s + 15  # behavioural deadline: the heartbeat's bound, not --gather-s
    decided = [e for e in ev if e["event"] == "cluster" and "decided" in e]
    assert decided and decided[0]["root"] == "nodeB" and decided[0]["lost"] == ["nodeB"]
    dec = [e for e in ev if e["event"] == "decision"]
    assert [d["action"] for d in dec] == ["STOP"] and "nodeB is gone" in dec[0]["reason"], dec
    assert dec[0]["t"] - t_kill <= dead_s + 15


def test_cli_cluster_bad_input_is_one_line(capsys, monkeypatch, tmp_path):
    from gpufield.cli import main

    for k in ("SLURM_JOB_ID", "SLURM_JOB_NODELIST", "SLURM_NODELIST", "SLURM_NODEID"):
        monkeypatch.delenv(k, raising=False)
    assert main(["run", "--cluster", "--run-dir", str(tmp_path), "--", "true"]) == 2
    assert "--nodes" in capsys.readouterr().err
    assert main(["run", "--cluster", "--nodes", "a,b", "--node-rank", "0", "--run-dir", str(tmp_path), "--",
                 "torchrun", "--standalone", "t.py"]) == 2
    assert "--store HOST:PORT" in capsys.readouterr().err
    assert main(["run", "--store", "h:1", "--run-dir", str(tmp_path), "--", "true"]) == 2
    assert "need --cluster" in capsys.readouterr().err


def test_expand_hostlist_asks_scontrol_show_hostnames_when_present(tmp_path):
    # a stand-in scontrol on this machine (no Slurm here): it records its arguments and answers like Slurm
    log = tmp_path / "args.txt"
    exe = tmp_path / "scontrol"
    exe.write_text(f"#!/bin/sh\necho \"$@\" > {log}\n[ \"$3\" = bad ] && {{ echo 'Invalid hostlist' >&2; exit 1; }}\n"
                   "printf 'gpu01\\ngpu02\\n'\n")
    exe.chmod(0o755)
    assert expand_hostlist("gpu[01-02]", scontrol=str(exe)) == ["gpu01", "gpu02"]
    assert log.read_text().split() == ["show", "hostnames", "gpu[01-02]"]  # only ever asked to show
    with pytest.raises(ValueError, match="Invalid hostlist"):
        expand_hostlist("bad", scontrol=str(exe))


def _until(pred, limit_s: float = 30.0):
    import time

    deadline = time.monotonic() + limit_s
    while not (v := pred()) and time.monotonic() < deadline:
        time.sleep(0.05)
    return v


def test_heartbeats_name_a_silent_supervisor_dead_and_a_lost_store():
    import gc

    from gpufield.harden.supervise.cluster import Cluster

    pytest.importorskip("torch.distributed")
    kw = dict(nodes=("a", "b", "c"), store_host="127.0.0.1", store_port=_free_port(), connect_timeout_s=20, wait_s=5,
              gather_s=60, heartbeat_s=0.2, peer_dead_s=1.0)
    host, b, c = (Cluster(ClusterConfig(node_rank=r, **kw)) for r in (0, 1, 2))
    assert _until(lambda: set(host.heartbeat._seen) == {"b", "c"})  # both peers have beaten
    c.close()  # c ends normally: its last heartbeat says so, it is never judged dead
    assert b.claim(0)  # b decides launch 0's incident, then its supervisor stops beating (as when SIGKILLed)
    b.heartbeat._stop.set()
    b.heartbeat._thread.join()
    dead = _until(lambda: host.dead())
    assert list(dead) == ["b"] and dead["b"] >= kw["peer_dead_s"]
    # waits do not wait for a dead node: its report is missing at once, not after gather_s (60 s)
    assert host.gather(0, ["b"]) == {}
    assert host.outcome(1, ["b"]) == "lost"
    host.done(1)
    assert host.outcome(1, ["a", "b"]) == "ok"  # the live node is done, the dead one is not waited for
    with pytest.raises(ConnectionError, match="node b's supervisor is gone .* before it published the decision"):
        host.decision(0)  # b decided launch 0 and died before publishing: no wait of wait_s
    # the store goes (node 0's supervisor ends): a client's heartbeat and its next step say so
    client = Cluster(ClusterConfig(node_rank=1, **{**kw, "nodes": ("a", "b")}))
    assert client.incident(2) is False and client.claim(2) and host.decider(2) == "b"
    host.heartbeat.close()
    host.store = host._raw = None  # node 0's supervisor ends: its store server goes with it
    host = None
    gc.collect()
    assert "lost the store at 127.0.0.1" in _until(client.heartbeat.lost)
    with pytest.raises(ConnectionError, match="node b: lost the store at 127.0.0.1"):
        client.incident(0)
