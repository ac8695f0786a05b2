"""``gpufield run``: launch a training job, watch every rank live, detect hangs, stragglers and
crashes, triage them, and retry within one budget (issue 25; triage.md 5.7, 5.8, 5.10).

Quick start::

    $ gpufield run --run-dir runs/job1 --hang-floor-s 60 -- \\
        torchrun --standalone --nproc-per-node 8 train.py --config cfg.yaml

From Python::

    from gpufield.harden import supervise, SuperviseConfig
    result = supervise(SuperviseConfig(command=("torchrun", "--standalone", "--nproc-per-node", "2",
                                                "-m", "gpufield.testing.faultloop"), run_dir="runs/x"))
    print(result.ok, [d.kind for d in result.detections], result.decisions)

**Per attempt** (``<run_dir>/attempt-<n>/``): ``console.log`` (the launcher's merged output, each
rank line prefixed ``[rank<R>]:``), ``torchrun/`` (torchrun's per-rank files), ``monitor/`` (the
hook's records and stack dumps). ``<run_dir>/events.jsonl`` is the event log of the whole run.

**On a detection** (hang: stack dumps are requested first; crash; non-zero exit; NaN loss) the
attempt is ended, :func:`gpufield.triage.analyze` runs on its ``console.log``, and
:class:`gpufield.harden.policy.RetryPolicy` decides: RETRY, EXCLUDE (a host) or STOP. Stragglers
are reported (event, metric) while the job goes on. Exclusions are written to ``exclude_file`` /
``hostfile``; an excluded host returns before a later launch only when ``validate_node(host)``
returns True (the preflight gate; without a gate it stays out).

**Several nodes** (``cluster``): one supervisor per node, each around its own torchrun, agreeing
through a torch.distributed store on one restart budget, one decision per incident and one exclude
list (:mod:`gpufield.harden.supervise.cluster`; Slurm: :mod:`gpufield.harden.supervise.slurm`).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpufield.harden.policy import (
    CONTINUE,
    STOP,
    Decision,
    Failure,
    PolicyConfig,
    RetryPolicy,
)
from gpufield.harden.supervise.cluster import ClusterConfig
from gpufield.harden.supervise.coord import LocalCoordinator, StoreCoordinator
from gpufield.harden.supervise.evidence import COMM_RE
from gpufield.harden.supervise.export import Control, EventLog, Metrics, write_atomic
from gpufield.harden.supervise.launch import (
    job_nodes,
    prepare,
    rdzv_endpoint,
    with_rdzv_id,
    world_size,
)
from gpufield.harden.supervise.parse import DEFAULT_METRIC_PATTERN, DEFAULT_STEP_PATTERN, LineParser
from gpufield.harden.supervise.progress import Thresholds
from gpufield.harden.supervise.runner import Attempt, Detection, _public
from gpufield.harden.supervise.slurm import exclude_text, hostfile_text


@dataclass(frozen=True, kw_only=True, slots=True)
class SuperviseConfig:
    """Configuration of :func:`supervise`.

    Attributes:
        command: the job command (``torchrun ...``), placeholders as in
            :mod:`gpufield.harden.supervise.launch`.
        run_dir: folder for the event log and the attempts (created).
        thresholds: detector thresholds (changeable while it runs through ``control_file``).
        policy: retry policy thresholds.
        nodes: the job's hosts; empty: ``SLURM_JOB_NODELIST`` expanded, else this host.
        exclude_file: where excluded hosts are written (one comma-separated line: ``--exclude=$(cat FILE)``), or None.
        hostfile: where the remaining hosts are written (one per line), or None.
        validate_node: the gate an excluded host must pass to return (``host -> ok``), or None.
        control_file: JSON file of threshold changes, re-read while running, or None.
        metrics_port: serve Prometheus metrics on ``127.0.0.1:<port>`` (0: a free port), None: off.
        step_pattern / metric_pattern: progress-line patterns (:mod:`...supervise.parse`).
        tick_s: loop period, seconds.
        scan_s: period of the ``/proc`` scan of rank processes, seconds.
        stack_wait_s: wait for stack dumps after SIGUSR1, seconds.
        crash_grace_s: after a rank exits, time the launcher gets to end on its own, seconds.
        kill_grace_s: SIGTERM to SIGKILL, seconds.
        triage: run the triage engine on each failed attempt.
        echo: copy the job's output to stdout.
        env: extra environment of the job.
        gpu_telemetry: put one NVML sample of the local GPUs beside a straggler report.
        nvml: a ``pynvml``-like module for that sample (``gpufield.testing.FakeNvml`` in tests), None: the real one.
        nvml_timeout_s: give up on NVML after this many seconds (a wedged driver blocks its calls).
        cluster: one supervisor per node agreeing through a store (:mod:`...supervise.cluster`), or
            None (this supervisor decides alone; ``nodes`` are then only names for the exclude list).
            With it, this node's events and attempts go to ``run_dir/<node name>/``.
    """

    command: tuple[str, ...]
    run_dir: Path
    thresholds: Thresholds = field(default_factory=Thresholds)
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    nodes: tuple[str, ...] = ()
    exclude_file: Path | None = None
    hostfile: Path | None = None
    validate_node: Callable[[str], bool] | None = None
    control_file: Path | None = None
    metrics_port: int | None = None
    step_pattern: str = DEFAULT_STEP_PATTERN
    metric_pattern: str = DEFAULT_METRIC_PATTERN
    tick_s: float = 0.25
    scan_s: float = 0.5
    stack_wait_s: float = 2.0
    crash_grace_s: float = 15.0
    kill_grace_s: float = 5.0
    triage: bool = True
    echo: bool = False
    env: dict[str, str] = field(default_factory=dict)
    gpu_telemetry: bool = True
    nvml: Any = None
    nvml_timeout_s: float = 5.0
    cluster: ClusterConfig | None = None

    def __post_init__(self) -> None:
        if not self.command:
            raise ValueError("command is empty: give the job command after --")
        object.__setattr__(self, "command", tuple(self.command))
        object.__setattr__(self, "run_dir", Path(self.run_dir))
        for name in ("tick_s", "scan_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0")
        for name in ("stack_wait_s", "crash_grace_s", "kill_grace_s"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0")
        if self.metrics_port is not None and not 0 <= self.metrics_port < 65536:
            raise ValueError(f"metrics_port {self.metrics_port} is not a TCP port")
        LineParser(self.step_pattern, self.metric_pattern)  # raises on a bad pattern


@dataclass(slots=True)
class RunResult:
    """What :func:`supervise` did.

    Attributes:
        ok: the last attempt exited 0.
        attempts: launches made (1 + restarts).
        detections: every detection (stragglers included), in order.
        decisions: every policy decision, in order.
        excluded: hosts excluded at the end.
        exit_code: 0 ok; 1 stopped after a failure; 93 stopped for no progress (nvrx-watch's code).
        events_path: the JSON-lines event log.
        metrics_text: the final Prometheus text.
    """

    ok: bool
    attempts: int
    detections: list[Detection]
    decisions: list[Decision]
    excluded: list[str]
    exit_code: int
    events_path: Path
    metrics_text: str = ""
    triage: list[dict[str, Any]] = field(default_factory=list)


def _triage(console: Path) -> dict[str, Any]:
    from gpufield.triage import analyze

    try:
        res = analyze([str(console)])
    except Exception as e:  # the engine must never take the supervisor down
        return {"error": f"{type(e).__name__}: {e}"}
    v = res.verdict
    if v is None:
        return {"cls": None}
    return {"cls": v.cls, "action_kind": v.action_kind, "confidence": v.confidence, "host": v.host,
            "rank": v.rank, "established": v.established, "action": v.action}


def supervise(config: SuperviseConfig, *, on_event: Callable[[dict[str, Any]], None] | None = None) -> RunResult:
    """Run the job under supervision until it succeeds or the policy stops it.

    Args:
        config: the :class:`SuperviseConfig`.
        on_event: called with each event dict as it is logged (the CLI prints them).

    Returns:
        The :class:`RunResult`.

    Raises:
        OSError: ``run_dir`` cannot be created or written.
        ValueError: the command has an unknown placeholder.
        InputError: the command cannot be started (no such program).
    """
    cfg = config
    if cfg.cluster is not None:  # one run folder may be shared by every node: each writes below its name
        cfg = dataclasses.replace(cfg, run_dir=cfg.run_dir / cfg.cluster.node)
    if cfg.run_dir.exists() and not cfg.run_dir.is_dir():  # mkdir would say only "File exists"
        from gpufield.errors import InputError

        raise InputError("--run-dir exists and is not a directory; expected a folder for events.jsonl and the "
                         "attempts", path=str(cfg.run_dir))
    cfg.run_dir.mkdir(parents=True, exist_ok=True)
    log = EventLog(cfg.run_dir / "events.jsonl", echo=on_event)
    metrics = Metrics(cfg.metrics_port)
    control = Control(cfg.control_file, cfg.thresholds)
    policy = RetryPolicy(config=cfg.policy)
    if cfg.cluster is not None:
        from gpufield.harden.supervise.cluster import Cluster

        try:
            coord: LocalCoordinator | StoreCoordinator = StoreCoordinator(Cluster(cfg.cluster), policy, log,
                                                                          cfg.validate_node)
        except BaseException:
            metrics.close()
            log.close()
            raise
        nodes = list(cfg.cluster.nodes)
    else:
        nodes = list(cfg.nodes) or job_nodes()
        coord = LocalCoordinator(nodes, policy, log, cfg.validate_node)
    excluded: list[str] = []
    detections: list[Detection] = []
    decisions: list[Decision] = []
    triages: list[dict[str, Any]] = []
    metrics.budget.set(cfg.policy.max_retries)
    last_ckpt: str | None = None
    result_code, ok, attempt_no = 1, False, 0
    log.emit("start", command=list(cfg.command), nodes=nodes, node=coord.me, metrics_port=metrics.port,
             thresholds=dataclasses.asdict(cfg.thresholds), policy=dataclasses.asdict(cfg.policy))
    try:
        while True:
            hosts, excluded = coord.plan(attempt_no)
            _write_nodes(cfg, hosts, excluded)
            metrics.excluded.set(len(excluded))
            if not hosts:
                log.emit("decision", action=STOP, reason="no hosts left after exclusions", excluded=excluded)
                break
            if coord.me is not None and coord.me not in hosts:  # excluded: this node sits the launch out
                log.emit("nodes", attempt=attempt_no, sitting_out=coord.me, hosts=hosts)
                user_exc = None
                if coord.sit_out(attempt_no, hosts):
                    ok, result_code = True, 0
                    break
                dec = coord.follow(attempt_no)
            else:
                user_exc = None
                det, att, folder = _launch(cfg, attempt_no, hosts, excluded, log, metrics, control, coord, last_ckpt)
                detections.extend(att.stragglers)
                detections.append(det)
                if det.kind == "ok" and coord.finished(attempt_no, hosts):
                    ok, result_code = True, 0
                    break
                if det.kind == "ok":  # this node was fine; another node's incident decides
                    dec = coord.follow(attempt_no)
                else:
                    metrics.detections.labels(kind=det.kind).inc()
                    log.emit("detect", attempt=attempt_no, **_public(det))
                    tri = _triage(folder / "console.log") if cfg.triage and det.kind != "peer" else {}
                    triages.append(tri)
                    if tri:
                        log.emit("triage", attempt=attempt_no, **tri)
                    rep = _report(det, att, tri, last_ckpt)
                    user_exc = rep["user_exception"]
                    dec = coord.resolve(attempt_no, hosts, rep)
                last_ckpt = att.facts.checkpoint or last_ckpt
            decisions.append(dec)
            metrics.decisions.labels(action=dec.action).inc()
            metrics.retries.set(dec.retries_used)
            log.emit("decision", attempt=attempt_no, action=dec.action, reason=dec.reason, host=dec.host,
                     delay_s=dec.delay_s, retries_used=dec.retries_used, budget=cfg.policy.max_retries,
                     user_exception=user_exc)
            if dec.action in (STOP, CONTINUE):
                result_code = 93 if dec.no_progress else 1
                break
            time.sleep(dec.delay_s)
            coord.after(attempt_no, dec)
            attempt_no += 1
    except ConnectionError as e:  # the store is gone, or the deciding node's supervisor: this node's part ends
        log.emit("cluster", attempt=attempt_no, error=str(e))
        raise
    finally:
        text = metrics.text()
        metrics.close()
        coord.close()
        log.emit("end", ok=ok, attempts=attempt_no + 1, exit_code=result_code, excluded=excluded)
        log.close()
    return RunResult(ok=ok, attempts=attempt_no + 1, detections=detections, decisions=decisions,
                     excluded=excluded, exit_code=result_code, events_path=cfg.run_dir / "events.jsonl",
                     metrics_text=text, triage=triages)


def _launch(cfg: SuperviseConfig, attempt_no: int, hosts: list[str], excluded: list[str], log: EventLog,
            metrics: Metrics, control: Control, coord, last_ckpt: str | None) -> tuple[Detection, Attempt, Path]:
    """Run launch ``attempt_no`` on this node to its detection."""
    folder = cfg.run_dir / f"attempt-{attempt_no}"
    folder.mkdir(parents=True, exist_ok=True)
    subst = {"hosts": ",".join(hosts), "nnodes": str(len(hosts)), "exclude": ",".join(excluded),
             "attempt": str(attempt_no)}
    argv, notes = prepare(cfg.command, folder / "torchrun", subst)
    if cfg.cluster is not None and rdzv_endpoint(argv) is not None:
        argv, note = with_rdzv_id(argv, attempt_no)
        notes.append(note)
    metrics.attempt.set(attempt_no)
    log.emit("launch", attempt=attempt_no, argv=argv, notes=notes, hosts=hosts, resume=last_ckpt)
    att = Attempt(argv, folder, cfg, log, metrics, control, world_size(argv), peer=coord.peer_check(attempt_no, hosts),
                  node=coord.me)
    t_launch = time.time()
    det = att.run()
    if det.kind == "ok":
        log.emit("exit", attempt=attempt_no, rc=0, steps=att.progress.steps_made(),
                 seconds=round(time.time() - t_launch, 2))
    return det, att, folder


def _report(det: Detection, att: Attempt, tri: dict[str, Any], last_ckpt: str | None) -> dict[str, Any]:
    """This node's report of a failed launch: the detection and the policy's :class:`Failure` fields
    (None for a launch another node's incident ended, unless a rank here is stopped)."""
    host = att.blamed_host(det.ranks) or tri.get("host")
    if tri.get("host") and tri.get("action_kind") in ("EXCLUDE_NODE", "RESET_GPU"):
        host = tri["host"]
    exc = att.facts.user_exception()
    kind = det.kind
    if kind == "peer":
        kind = "hang" if det.ranks else None  # a rank stopped here (state T/D) explains the others' wait
    failure = None if kind is None else dataclasses.asdict(Failure(
        kind=kind, cls=tri.get("cls") or ("HANG" if kind == "hang" else None),
        action_kind=tri.get("action_kind"),
        confidence=float(tri.get("confidence") or 1.0) if tri.get("cls") else 1.0, host=host,
        rank=det.ranks[0] if det.ranks else None, steps=att.progress.steps_made(), nan=kind == "nan",
        checkpoint=last_ckpt, user_exception=exc is not None))
    victim = bool(det.ranks) and all(r in att.facts.exceptions and COMM_RE.search(att.facts.exceptions[r])
                                     for r in det.ranks)
    return {"kind": det.kind, "t": det.t, "ranks": list(det.ranks), "why": det.why, "victim": victim,
            "failure": failure, "triage": tri, "user_exception": exc[1] if exc else None}


def _write_nodes(cfg: SuperviseConfig, hosts: list[str], excluded: list[str]) -> None:
    ins = [cfg.control_file] if cfg.control_file is not None else []
    if cfg.exclude_file is not None:
        write_atomic(cfg.exclude_file, exclude_text(excluded), inputs=ins)
    if cfg.hostfile is not None:
        write_atomic(cfg.hostfile, hostfile_text(hosts), inputs=ins)


__all__ = ["ClusterConfig", "Detection", "RunResult", "SuperviseConfig", "Thresholds", "supervise"]
