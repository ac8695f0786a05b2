"""`gpufield run [options] -- torchrun ... train.py ...`: command-line layer over
:func:`gpufield.harden.supervise.supervise`.

Prints one line per supervisor event on stderr (``--quiet``: detections and decisions only); the
job's own output goes to ``<run-dir>/attempt-<n>/console.log`` (``--echo`` copies it to stdout).
Exit status: 0 the job succeeded; 1 the policy stopped it after a failure; 93 it stopped because
restarts made no progress (nvrx-watch's code); 2 bad input. Ctrl-C ends the job's processes and
exits 130.
"""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path
from typing import Annotated

import typer

from gpufield.cli._interrupt import interrupted
from gpufield.errors import InputError

_KEEP_QUIET = ("detect", "decision", "end", "control", "control_rejected", "nodes")


def _line(ev: dict) -> str:
    e = dict(ev)
    name = e.pop("event")
    e.pop("t", None)
    if name == "launch":
        return f"gpufield run: launch {e['attempt']} on {','.join(e['hosts'])}: {' '.join(e['argv'])}"
    if name == "detect":
        return f"gpufield run: {e['kind'].upper()} ranks {e['ranks']}: {e['why']}"
    if name == "decision":
        return (f"gpufield run: decision {e['action']} ({e.get('retries_used')}/{e.get('budget')} restarts): "
                f"{e['reason']}")
    return f"gpufield run: {name} " + json.dumps(e, default=str)[:300]


def run(
    command: Annotated[list[str], typer.Argument(help="the job command, after --", metavar="-- COMMAND...")],
    run_dir: Annotated[Path | None, typer.Option("--run-dir", help="folder for events.jsonl and the attempts "
                                                 "(default: runs/run-<unix time>)")] = None,
    hang_floor_s: float = typer.Option(60.0, min=0.001, help="lower bound of the hang timeout, s"),
    hang_factor: float = typer.Option(3.0, min=0.001, help="hang timeout = max(this x p99 step time, floor)"),
    startup_timeout_s: float = typer.Option(900.0, min=0.001, help="time allowed before the first step, s"),
    phase_timeout_s: float = typer.Option(1800.0, min=0.001, help="timeout inside a checkpoint/eval phase, s"),
    straggler_slowdown: float = typer.Option(0.2, min=0.001, help="slowdown that names a straggler (0.2 = 20%)"),
    straggler_window: int = typer.Option(10, min=2, help="collectives/steps looked at for stragglers"),
    max_retries: int = typer.Option(3, min=0, help="restarts allowed for the whole job"),
    backoff_s: float = typer.Option(5.0, min=0.0, help="wait before the first restart, s (doubles)"),
    no_progress_restarts: int = typer.Option(3, min=1, help="stop after this many restarts without progress"),
    min_progress_steps: int = typer.Option(200, min=0, help="steps a restart must make to count as progress"),
    transient_retries: int = typer.Option(1, min=0, help="same-node retries of an unknown failure before excluding"),
    exclude_stragglers: bool = typer.Option(False, help="restart without a named straggler's host"),
    nodes: str | None = typer.Option(None, help="comma-separated hosts (default: SLURM_JOB_NODELIST, else this host)"),
    exclude_file: Annotated[Path | None, typer.Option(help="write excluded hosts here (srun --exclude=<file>)")] = None,
    hostfile: Annotated[Path | None, typer.Option(help="write the remaining hosts here")] = None,
    control_file: Annotated[Path | None, typer.Option(help="JSON of threshold changes, re-read while running")] = None,
    metrics_port: int | None = typer.Option(None, min=0, max=65535,
                                            help="serve Prometheus metrics on 127.0.0.1:PORT (0: a free port)"),
    step_pattern: str | None = typer.Option(None, help="regex with a named group 'step' for progress lines"),
    metric_pattern: str | None = typer.Option(None, help="regex a progress line must also match ('' : none)"),
    triage: bool = typer.Option(True, help="run the triage engine on each failed attempt"),
    validate_cmd: str | None = typer.Option(
        None, help="gate an excluded host must pass to return: a command, {host} replaced, exit 0 = pass "
                   "(e.g. 'ssh {host} gpufield preflight --skip comm'); default: none, excluded hosts stay out"),
    validate_timeout_s: float = typer.Option(300.0, min=0.001, help="limit for one gate run, s"),
    cluster: bool = typer.Option(False, "--cluster", help="one gpufield run per node: agree with the other nodes' "
                                 "supervisors through the store on the budget, decisions and exclusions"),
    store: str | None = typer.Option(None, help="with --cluster: HOST:PORT of the store node 0 hosts "
                                     "(default: the command's c10d --rdzv-endpoint)"),
    node_rank: int | None = typer.Option(None, min=0, help="with --cluster: this node's index in the node list "
                                         "(default: SLURM_NODEID)"),
    job_id: str | None = typer.Option(None, help="with --cluster: key prefix in the store (default: SLURM_JOB_ID, "
                                      "else the --rdzv-id)"),
    gather_s: float = typer.Option(60.0, min=0.001, help="with --cluster: wait for the other nodes' reports, s"),
    peer_dead_s: float = typer.Option(6.0, min=0.001, help="with --cluster: a node whose supervisor's heartbeat is "
                                      "this old is gone (its launch is ended and decided at once), s"),
    heartbeat_s: float = typer.Option(1.0, min=0.001, help="with --cluster: period of this supervisor's heartbeat, s"),
    echo: bool = typer.Option(False, help="copy the job's output to stdout"),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="print detections and decisions only"),
) -> int:
    """Launch a job, watch every rank, detect hangs/stragglers/crashes, triage, retry within one budget."""
    from gpufield.harden.gate import preflight_gate
    from gpufield.harden.policy import PolicyConfig
    from gpufield.harden.supervise import SuperviseConfig, supervise
    from gpufield.harden.supervise.parse import DEFAULT_METRIC_PATTERN, DEFAULT_STEP_PATTERN
    from gpufield.harden.supervise.progress import Thresholds

    if command and command[0] == "--":
        command = command[1:]
    for opt, v in (("--hang-floor-s", hang_floor_s), ("--hang-factor", hang_factor),
                   ("--startup-timeout-s", startup_timeout_s), ("--phase-timeout-s", phase_timeout_s),
                   ("--straggler-slowdown", straggler_slowdown), ("--backoff-s", backoff_s),
                   ("--validate-timeout-s", validate_timeout_s), ("--gather-s", gather_s),
                   ("--peer-dead-s", peer_dead_s), ("--heartbeat-s", heartbeat_s)):
        if not math.isfinite(v):  # the ranges are checked by typer; inf: --backoff-s inf waited forever
            raise InputError(f"{opt}: expected a finite number, got {v:g}")
    host_list = tuple(h for h in (nodes or "").split(",") if h)
    cl = None
    if cluster:
        from gpufield.harden.supervise.cluster import cluster_config

        try:
            cl = cluster_config(tuple(command), store=store, node_rank=node_rank, nodes=host_list, job_id=job_id,
                                gather_s=gather_s, peer_dead_s=peer_dead_s, heartbeat_s=heartbeat_s)
        except ValueError as e:
            raise InputError(f"gpufield run --cluster: {e}") from None
    elif store is not None or node_rank is not None:
        raise InputError("gpufield run: --store and --node-rank need --cluster")
    named = [(o, p) for o, p in (("--exclude-file", exclude_file), ("--hostfile", hostfile),
                                 ("--control-file", control_file)) if p is not None]
    for i, (o1, p1) in enumerate(named):  # an output over an input or over the other output
        for o2, p2 in named[i + 1:]:
            if os.path.abspath(p1) == os.path.abspath(p2):
                raise InputError(f"{o1} and {o2} name the same file", path=str(p1))
    cfg = SuperviseConfig(
        command=tuple(command), run_dir=run_dir or Path("runs") / f"run-{int(time.time())}",
        thresholds=Thresholds(hang_floor_s=hang_floor_s, hang_factor=hang_factor, startup_timeout_s=startup_timeout_s,
                              phase_timeout_s=phase_timeout_s, straggler_slowdown=straggler_slowdown,
                              straggler_window=straggler_window),
        policy=PolicyConfig(max_retries=max_retries, backoff_s=backoff_s, backoff_max_s=max(300.0, backoff_s),
                            no_progress_restarts=no_progress_restarts, min_progress_steps=min_progress_steps,
                            transient_retries=transient_retries, exclude_stragglers=exclude_stragglers),
        nodes=host_list, cluster=cl, exclude_file=exclude_file, hostfile=hostfile,
        control_file=control_file, metrics_port=metrics_port,
        step_pattern=DEFAULT_STEP_PATTERN if step_pattern is None else step_pattern,
        metric_pattern=DEFAULT_METRIC_PATTERN if metric_pattern is None else metric_pattern,
        triage=triage, echo=echo,
        validate_node=None if validate_cmd is None else preflight_gate(
            validate_cmd, timeout_s=validate_timeout_s, log=lambda m: typer.echo(f"gpufield run: {m}", err=True)))

    def show(ev: dict) -> None:
        if not quiet or ev["event"] in _KEEP_QUIET:
            typer.echo(_line(ev), err=True)

    try:
        res = supervise(cfg, on_event=show)
    except ConnectionError as e:  # the store could not be reached, or was lost mid-run (node 0 gone)
        typer.echo(f"gpufield run --cluster: {e}; events in {cfg.run_dir}", err=True)
        return 1
    except KeyboardInterrupt:
        interrupted(f"gpufield run: interrupted; the job's processes were ended; events in {cfg.run_dir}/events.jsonl")
    typer.echo(f"gpufield run: {'OK' if res.ok else 'FAILED'} after {res.attempts} launch(es); "
               f"events: {res.events_path}", err=True)
    return res.exit_code
