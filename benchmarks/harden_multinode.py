"""Two ``gpufield run --cluster`` supervisors on one machine acting as two nodes of one torchrun job.

Each "node" is one supervisor process around one ``torchrun --nnodes {nnodes} --nproc-per-node 1
--rdzv-backend c10d --rdzv-endpoint 127.0.0.1:<port>`` of ``gpufield.testing.faultloop`` (gloo, DDP);
node 0's supervisor hosts the store at the rendezvous endpoint, so torchrun's c10d rendezvous and
the supervisors share it. Scenarios: a transient SIGKILL of global rank 1 (retry), a repeating
SIGKILL (exclusion of that node, the other goes on alone with ``--nnodes 1``), a transient SIGKILL
with exclusion and the excluded node's preflight gate passing (it rejoins), a SIGKILL of every
rank at the same step, repeating (both nodes fail together; budget 2), a SIGSTOP of rank 1
(hang), and a SIGKILL of one node's *supervisor* mid-job (node 1's: the other decides on its
heartbeat; node 0's, the store host: the other exits naming the lost store), with the seconds from
that kill to the other node's detection, decision and exit. Per scenario: each node's decisions,
who decided, the root node named against the node that really ran the faulting rank (from its
console), restarts spent, launches per node, exit codes.

Usage::

    PYTHONPATH=src python benchmarks/harden_multinode.py --out benchmarks/results/harden_multinode.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
NAMES = ("nodeA", "nodeB")

SCENARIOS = {
    "sigkill-once": dict(fault=["--fault", "sigkill", "--fault-rank", "1", "--fault-step", "3"], once=True,
                         opts=["--max-retries", "2", "--transient-retries", "1"]),
    "sigkill-repeating": dict(fault=["--fault", "sigkill", "--fault-rank", "1", "--fault-step", "3"], once=False,
                              opts=["--max-retries", "2", "--transient-retries", "0"]),
    "sigkill-both-nodes": dict(fault=["--fault", "sigkill", "--fault-rank", "-1", "--fault-step", "3"], once=False,
                               opts=["--max-retries", "2", "--transient-retries", "10"]),
    "sigkill-once-exclude-gate": dict(
        fault=["--fault", "sigkill", "--fault-rank", "1", "--fault-step", "3"], once=True,
        opts=["--max-retries", "2", "--transient-retries", "0", "--validate-cmd",
              f"{sys.executable} -m gpufield preflight --only host,kernel --min-free-disk-gib 0 --checkpoint-dir /tmp"]),
    "sigstop-once": dict(fault=["--fault", "sigstop", "--fault-rank", "1", "--fault-step", "3"], once=True,
                         opts=["--max-retries", "2", "--transient-retries", "1"]),
    # a node's supervisor SIGKILLed mid-job (its torchrun and rank live on, orphaned): the other node's
    # heartbeat watch ends its launch and decides within --peer-dead-s (EXCLUDE the lost node, go on alone)
    "supervisor-killed": dict(fault=[], once=False, kill=1, steps=150,
                              opts=["--max-retries", "2", "--transient-retries", "1", "--peer-dead-s", "4"]),
    # the store host's supervisor (node 0) SIGKILLed: node 1 ends its launch and exits 1 naming the store
    "store-supervisor-killed": dict(fault=[], once=False, kill=0, steps=150,
                                    opts=["--max-retries", "2", "--transient-retries", "1", "--peer-dead-s", "4"]),
}


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _orphans(marker: Path) -> list[int]:
    """Pids of processes a supervisor of this run started (their environment names its run folder)."""
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if f"GPUFIELD_MONITOR_DIR={marker}".encode() in Path(f"/proc/{name}/environ").read_bytes():
                    out.append(int(name))
            except OSError:
                pass
    return out


def run(name: str, spec: dict, root: Path, steps: int) -> dict:
    port, py = _port(), sys.executable
    env = {**os.environ, "PYTHONPATH": str(SRC), "OMP_NUM_THREADS": "1"}
    once = ["--fault-once-file", str(root / "once")] if spec["once"] else []
    procs = []
    t0 = time.time()
    for n in (0, 1):
        cmd = [py, "-m", "gpufield", "run", "--cluster", "--nodes", ",".join(NAMES), "--node-rank", str(n), "-q",
               "--run-dir", str(root / "run"), "--hang-floor-s", "15", "--startup-timeout-s", "180",
               "--backoff-s", "0.5", "--min-progress-steps", "0", "--gather-s", "30", "--no-triage",
               "--exclude-file", str(root / f"exclude{n}.txt"), "--hostfile", str(root / f"hosts{n}.txt"),
               *spec["opts"],
               "--", py, "-m", "torch.distributed.run", "--nnodes", "{nnodes}", "--nproc-per-node", "1",
               "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", name,
               "-m", "gpufield.testing.faultloop", "--steps", str(spec.get("steps", steps)), "--step-sleep-s", "0.05",
               "--pg-timeout-s", "120", "--harden-monitor", *spec["fault"], *once]
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
    t_kill = None
    if "kill" in spec:  # SIGKILL that node's supervisor once the job runs on both nodes
        console = root / "run" / NAMES[spec["kill"]] / "attempt-0" / "console.log"
        while not (console.exists() and " step 3 " in console.read_text()) and all(p.poll() is None for p in procs):
            time.sleep(0.1)
        procs[spec["kill"]].send_signal(signal.SIGKILL)
        t_kill = time.time()
    errs = [p.communicate(timeout=900)[1] for p in procs]
    t_exit = time.time()
    wall = t_exit - t0
    for pid in _orphans(root / "run"):  # the killed supervisor's torchrun and rank, if still there
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    nodes = {}
    for n in (0, 1):
        ev = [json.loads(line) for line in (root / "run" / NAMES[n] / "events.jsonl").read_text().splitlines()]
        rank1 = "[rank1]:" in (root / "run" / NAMES[n] / "attempt-0" / "console.log").read_text()
        nodes[NAMES[n]] = {
            "rc": procs[n].returncode, "ran_rank1_first_launch": rank1,
            "launches": sum(e["event"] == "launch" for e in ev),
            "detections": [(e["attempt"], e["kind"], e["ranks"]) for e in ev if e["event"] == "detect"],
            "decisions": [(e["action"], e["host"], e["retries_used"]) for e in ev if e["event"] == "decision"],
            "roles": [e["role"] for e in ev if e["event"] == "cluster" and "role" in e],
            "roots": [e["root"] for e in ev if e["event"] == "cluster" and "root" in e],
            "returned": [e["returned"] for e in ev if e["event"] == "nodes" and "returned" in e],
            "hosts_per_launch": [e["hosts"] for e in ev if e["event"] == "launch"],
            "exclude_file": (root / f"exclude{n}.txt").read_text(),
            "stderr_tail": errs[n][-300:] if procs[n].returncode not in (0, 1) or t_kill else "",
        }
        if t_kill is not None and n != spec["kill"]:  # seconds from the supervisor's SIGKILL, this node
            first = {k: next((e["t"] for e in ev if e["event"] == k), None) for k in ("detect", "decision")}
            nodes[NAMES[n]]["from_kill_s"] = {k: None if v is None else round(v - t_kill, 2) for k, v in first.items()}
            nodes[NAMES[n]]["from_kill_s"]["exit"] = round(t_exit - t_kill, 2)  # an upper bound (both waited)
            nodes[NAMES[n]]["lost_store_message"] = "lost the store" in errs[n]
        det = [e for e in ev if e["event"] == "detect" and e["kind"] in ("crash", "hang")]
        dec = [e for e in ev if e["event"] == "decision"]
        if det and dec:
            nodes[NAMES[n]]["detect_to_decision_s"] = round(dec[0]["t"] - det[0]["t"], 2)
    faulty = [k for k, v in nodes.items() if v["ran_rank1_first_launch"]] if t_kill is None else [NAMES[spec["kill"]]]
    a, b = nodes.values()
    return {"scenario": name, "wall_s": round(wall, 1), "fault_node": faulty[0] if faulty else None,
            "same_decisions": a["decisions"] == b["decisions"], "nodes": nodes}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--only", nargs="*", default=None, choices=sorted(SCENARIOS))
    a = ap.parse_args()
    rows = []
    for name, spec in SCENARIOS.items():
        if a.only and name not in a.only:
            continue
        with tempfile.TemporaryDirectory(prefix=f"gpufield-mn-{name}-") as d:
            row = run(name, spec, Path(d), a.steps)
        rows.append(row)
        print(json.dumps(row), flush=True)
    if a.out:
        a.out.write_text(json.dumps({"load_avg_end": os.getloadavg(), "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
