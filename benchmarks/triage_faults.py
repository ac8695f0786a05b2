"""Generate the fault-injection half of the triage corpus: real torchrun runs of the faultloop.

Every run is ``torchrun`` (gloo on CPU) launching :mod:`gpufield.testing.faultloop` with one
injected fault (or none), 2-4 ranks, DDP or FSDP2. What torchrun and the ranks print is recorded
unedited:

- ``stream`` runs: stdout and stderr of torchrun merged as a terminal shows them
  (``2>&1``), one ``<id>.log`` file;
- ``logdir`` runs: torchrun's ``--log-dir`` per-rank files (``--tee 3``: the ranks' stdout and
  stderr go to ``attempt_0/<rank>/stdout.log``/``stderr.log``) plus torchrun's own merged output
  as ``console.log``, in one folder ``<id>/`` (a case that is a directory).

The label of each run is known by construction (the fault, its rank and step) and written to
``faults/INDEX.md`` by :func:`index_rows`; the exact command, exit code and wall time of each run
go to ``faults/MANIFEST.json`` (kept out of the case files so that no echoed command line can fire
a rule).

Usage::

    PYTHONPATH=src .venv/bin/python benchmarks/triage_faults.py --out tests/triage/corpus/faults \\
        [--only ID ...] [--jobs 2]

At most ``--jobs`` torchrun runs at a time (2 by default: the CPU is shared).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TORCHRUN = Path(sys.executable).with_name("torchrun")


@dataclass(frozen=True, kw_only=True, slots=True)
class Run:
    """One fault-injection run and its label.

    Attributes:
        id: case id and file stem.
        fault: faultloop ``--fault``.
        nproc: ranks (torchrun ``--nproc-per-node``).
        wrap: ``ddp`` or ``fsdp2``.
        rank: faulting rank (``-1``: every rank).
        step: first fault step.
        args: extra faultloop arguments.
        shape: ``stream`` (one merged file) or ``logdir`` (torchrun ``--log-dir --tee 3``).
        rdzv: torchrun rendezvous arguments replacing ``--standalone`` (dead-endpoint runs).
        cls: expected class (triage.md 5.3), or ``clean``.
        blame: blame label (``rank=1`` ...) or ``-``.
        action: action keywords or ``-``.
        note: what the run is.
        env: extra environment of the run.
        launcher: extra torchrun arguments (``--max-restarts 1``).
        module: the training loop torchrun runs (``-m``); ``faultloop2`` runs (benchmarks/triage_faults2.py)
            take their arguments from ``args`` only.
    """

    id: str
    fault: str
    nproc: int = 2
    wrap: str = "ddp"
    rank: int = 1
    step: int = 5
    args: tuple[str, ...] = ()
    shape: str = "stream"
    rdzv: tuple[str, ...] = ()
    cls: str
    blame: str = "-"
    action: str = "-"
    note: str = ""
    env: dict[str, str] = field(default_factory=dict)
    launcher: tuple[str, ...] = ()
    module: str = "gpufield.testing.faultloop"

    def __post_init__(self) -> None:
        if self.shape not in ("stream", "logdir") or self.wrap not in ("ddp", "fsdp2") or not 1 <= self.nproc <= 4:
            raise ValueError(f"bad run spec {self.id}")


DEAD_PORT = 29731  # the dead rendezvous endpoint's port: nothing may listen on it


def _closed_port() -> int:
    """``DEAD_PORT``, after checking that nothing listens on it (on 127.0.0.1)."""
    with socket.socket() as s:
        s.settimeout(1.0)
        if s.connect_ex(("127.0.0.1", DEAD_PORT)) == 0:
            raise SystemExit(f"port {DEAD_PORT} has a listener; the dead-endpoint runs need it closed")
    return DEAD_PORT


H = "host=localhost,vm"  # torchrun --standalone prints "host : localhost"; the machine is "vm"


def _k(nproc: int, rank: int, step: int, wrap: str = "ddp", shape: str = "stream", **kw) -> Run:
    rid = f"sigkill-{wrap}-{nproc}r-rank{rank}-step{step}" + ("-logdir" if shape == "logdir" else "")
    return Run(id=rid, fault="sigkill", nproc=nproc, wrap=wrap, rank=rank, step=step, shape=shape,
               cls="PEER_PROCESS_EXIT", blame=f"{H} rank={rank}", action="COLLECT",
               note=f"rank {rank} sends itself SIGKILL at step {step}; no OOM-killer line exists", **kw)


def runs(port: int) -> list[Run]:
    """The run list (ids are stable; ``port`` is a closed local port for the dead rendezvous)."""
    hang = ("--pg-timeout-s", "10")
    out = [
        _k(2, 1, 5), _k(3, 2, 3), _k(2, 0, 4, "fsdp2"), _k(4, 3, 7, "fsdp2", "logdir"), _k(4, 1, 2, shape="logdir"),
    ]
    for n, r, s, w, sh in ((2, 1, 4, "ddp", "stream"), (3, 0, 6, "fsdp2", "stream"), (4, 2, 3, "ddp", "logdir"),
                           (2, 0, 2, "fsdp2", "stream")):
        out.append(Run(id=f"sigstop-{w}-{n}r-rank{r}-step{s}" + ("-logdir" if sh == "logdir" else ""),
                       fault="sigstop", nproc=n, wrap=w, rank=r, step=s, args=hang, shape=sh,
                       cls="NCCL_COLLECTIVE_TIMEOUT", blame=f"{H} rank={r}", action="COLLECT",
                       note=f"rank {r} SIGSTOPs itself at step {s}: its peers hang in the next collective "
                            "until the 10 s process-group timeout; torchrun then kills the stopped rank"))
    for n, r, s, w in ((2, 1, 5, "ddp"), (3, 0, 3, "fsdp2"), (4, 2, 6, "ddp")):
        out.append(Run(id=f"desync-{w}-{n}r-rank{r}-step{s}", fault="desync", nproc=n, wrap=w, rank=r, step=s,
                       args=hang, cls="COLLECTIVE_DESYNC", blame=f"{H} rank={r}", action="FIX_CONFIG",
                       note=f"rank {r} issues one extra all_reduce (7 elements) at step {s}"))
    for n, r, s, w in ((2, 1, 3, "ddp"), (2, -1, 6, "fsdp2"), (3, 2, 0, "ddp")):
        out.append(Run(id=f"nan-{w}-{n}r-rank{'all' if r < 0 else r}-step{s}", fault="nan", nproc=n, wrap=w,
                       rank=r, step=s, args=("--steps", "10"), cls="NAN_LOSS", action="FIX_CONFIG",
                       note=f"loss times NaN from step {s} on {'every rank' if r < 0 else f'rank {r}'}; the "
                            "all-reduced loss is NaN on every rank, so no rank can be named from the log; "
                            "the run ends with exit code 0"))
    for n, r, s, w, sh in ((2, 1, 4, "ddp", "stream"), (3, 0, 2, "fsdp2", "stream"), (4, 3, 5, "ddp", "logdir")):
        out.append(Run(id=f"exception-{w}-{n}r-rank{r}-step{s}" + ("-logdir" if sh == "logdir" else ""),
                       fault="exception", nproc=n, wrap=w, rank=r, step=s, shape=sh, args=hang,
                       cls="PEER_PROCESS_EXIT", blame=f"{H} rank={r}", action="FIX_CONFIG",
                       note=f"rank {r}'s dataset raises RuntimeError at step {s} (corrupt record); the "
                            "taxonomy has no data-error class, the root is this rank's exit"))
    for n, r, w, sec in ((2, 1, "ddp", "0.3"), (3, 2, "fsdp2", "0.5"), (4, 0, "ddp", "0.25")):
        out.append(Run(id=f"sleep-{w}-{n}r-rank{r}-{sec}s", fault="sleep", nproc=n, wrap=w, rank=r, step=2,
                       args=("--fault-arg", sec, "--step-sleep-s", "0.05", "--steps", "12"),
                       cls="STRAGGLER_COMPUTE", blame=f"{H} rank={r}",
                       note=f"rank {r} sleeps {sec} s inside every step's compute from step 2 (run ends "
                            "normally); step times are equalised by the loss all_reduce"))
    for n, r, s, w, sec, pg, cls in ((2, 1, 4, "ddp", "25", "6", "CHECKPOINT_SAVE_TIMEOUT"),
                                     (3, 0, 3, "fsdp2", "25", "8", "CHECKPOINT_SAVE_TIMEOUT"),
                                     (2, 0, 5, "ddp", "3", "60", "CHECKPOINT_SAVE_TIMEOUT")):
        out.append(Run(id=f"ckptstall-{w}-{n}r-rank{r}-step{s}-{sec}s", fault="ckpt_stall", nproc=n, wrap=w,
                       rank=r, step=s, args=("--fault-arg", sec, "--pg-timeout-s", pg, "--steps", "10"),
                       cls=cls, blame=f"{H} rank={r}", action="FIX_CONFIG",
                       note=f"rank {r} announces a checkpoint save at step {s} and stalls {sec} s before "
                            f"writing it (process-group timeout {pg} s); only the saving rank enters the "
                            "save's barrier, so its peers time out in their next collective even when the "
                            "stall is shorter than the timeout"))
    for n, r, s, w in ((2, 1, 3, "ddp"), (3, 0, 5, "fsdp2"), (4, 2, 2, "ddp")):
        out.append(Run(id=f"oom-{w}-{n}r-rank{r}-step{s}", fault="oom", nproc=n, wrap=w, rank=r, step=s, args=hang,
                       cls="HOST_OOM_KILL", blame=f"{H} rank={r}", action="FIX_CONFIG",
                       note=f"rank {r} sets RLIMIT_AS 256 MiB above its RSS at step {s} and allocates 8 GiB "
                            "(host memory exhaustion as torch's CPU allocator reports it; no kernel OOM kill)"))
    dead = (("127.0.0.1", "is_host=false,join_timeout=10,read_timeout=5"),
            ("127.0.0.2", "join_timeout=10,read_timeout=5"),
            ("127.0.0.1", "is_host=false,join_timeout=6,read_timeout=3"))
    for i, (ip, conf) in enumerate(dead):
        n = 2 + (i == 2)
        rdzv = ("--nnodes", "1", "--rdzv-backend", "c10d", "--rdzv-endpoint", f"{ip}:{port}", "--rdzv-conf", conf)
        if "is_host=false" not in conf:
            # torchrun treats 127.0.0.2 as this machine and hosts the store itself: the run succeeds
            # (measured: exit code 0), so it is a clean run with the c10d launcher's log shape
            out.append(Run(id=f"clean-c10d-{ip.replace('.', '_')}-{n}r", fault="none", nproc=n, rdzv=rdzv,
                           cls="clean", note=f"c10d rendezvous on {ip}:{port}, hosted by this torchrun; "
                                             "no fault, exit code 0"))
            continue
        out.append(Run(id=f"rdzv-dead-{ip.replace('.', '_')}-{n}r-{i}", fault="none", nproc=n, rdzv=rdzv,
                       cls="RENDEZVOUS_UNREACHABLE", blame=f"peer={ip}:{port}", action="FIX_CONFIG",
                       note=f"c10d rendezvous endpoint {ip}:{port} has no listener (rdzv-conf {conf})"))
    for n, w, seed, extra, sh in ((2, "ddp", 0, (), "stream"), (2, "fsdp2", 1, (), "stream"),
                                  (3, "ddp", 2, ("--hidden", "128"), "stream"), (4, "fsdp2", 3, (), "stream"),
                                  (2, "ddp", 4, ("--steps", "30"), "logdir"),
                                  (3, "fsdp2", 5, ("--ckpt-every", "4"), "stream")):
        out.append(Run(id=f"clean-{w}-{n}r-seed{seed}" + ("-logdir" if sh == "logdir" else ""), fault="none",
                       nproc=n, wrap=w, shape=sh, args=("--seed", str(seed), *extra), cls="clean",
                       note="no fault; ends with exit code 0" + (", checkpoints every 4 steps" if extra[:1] ==
                                                                 ("--ckpt-every",) else "")))
    # healthy runs that print what healthy runs print: torch's INFO logging (TORCH_CPP_LOG_LEVEL=INFO,
    # TORCH_DISTRIBUTED_DEBUG=INFO: c10d store/socket lines, the DDP configuration dump), NCCL_DEBUG=INFO
    # (inert under gloo: no NCCL on CPU), DDP's find_unused_parameters warning, checkpoint saves and a first
    # save that fails (torch.save into a missing folder), is logged with its traceback and succeeds on retry.
    # TORCH_DISTRIBUTED_DEBUG=DETAIL is not used: with gloo and DDP it made both ranks segfault (measured).
    noisy = {"TORCH_CPP_LOG_LEVEL": "INFO", "TORCH_DISTRIBUTED_DEBUG": "INFO", "NCCL_DEBUG": "INFO"}
    for n, w, seed, sh, env in ((2, "ddp", 6, "stream", noisy), (3, "fsdp2", 7, "stream", noisy),
                                (4, "ddp", 8, "logdir", noisy), (2, "fsdp2", 9, "stream", {"NCCL_DEBUG": "INFO"})):
        out.append(Run(id=f"clean-noisy-{w}-{n}r-seed{seed}" + ("-logdir" if sh == "logdir" else ""), fault="none",
                       nproc=n, wrap=w, shape=sh, env=dict(env),
                       args=("--seed", str(seed), "--ckpt-every", "4", "--benign-noise"), cls="clean",
                       note="no fault; ends with exit code 0; benign noise: " + ", ".join(f"{k}={v}" for k, v in env.items())
                            + ", checkpoints every 4 steps, the first save fails (missing folder), its traceback is "
                              "printed and the retry succeeds" + (", DDP find_unused_parameters warning" if w == "ddp"
                                                                 else "")))
    # branch triage-v3: more dev runs of the same fault families in shapes the dev half lacked (FSDP2 with 2-3
    # ranks, log-dir SIGKILL / exception), generated after the split; labels by construction as above
    for fault, n, r, s, w, sh in (("sigkill", 3, 1, 3, "fsdp2", "logdir"), ("sigstop", 2, 1, 3, "fsdp2", "stream"),
                                  ("desync", 2, 0, 4, "fsdp2", "stream"), ("nan", 3, 1, 4, "fsdp2", "stream"),
                                  ("exception", 2, 0, 3, "fsdp2", "logdir"), ("oom", 2, 0, 4, "fsdp2", "stream")):
        suffix = ("-logdir" if sh == "logdir" else "") + "-v3"
        if fault == "sigkill":
            k = _k(n, r, s, w, sh)
            out.append(Run(**{**{f: getattr(k, f) for f in k.__dataclass_fields__}, "id": k.id + "-v3"}))
            continue
        cls, action, note, args = {
            "sigstop": ("NCCL_COLLECTIVE_TIMEOUT", "COLLECT", f"rank {r} SIGSTOPs itself at step {s}: its peers hang in "
                        "the next collective until the 10 s process-group timeout; torchrun then kills the stopped rank",
                        hang),
            "desync": ("COLLECTIVE_DESYNC", "FIX_CONFIG", f"rank {r} issues one extra all_reduce (7 elements) at step {s}",
                       hang),
            "nan": ("NAN_LOSS", "FIX_CONFIG", f"loss times NaN from step {s} on rank {r}; the all-reduced loss is NaN "
                    "on every rank, so no rank can be named from the log", ("--steps", "10")),
            "exception": ("PEER_PROCESS_EXIT", "FIX_CONFIG", f"rank {r}'s dataset raises RuntimeError at step {s} "
                          "(corrupt record); the root is this rank's exit", hang),
            "oom": ("HOST_OOM_KILL", "FIX_CONFIG", f"rank {r} sets RLIMIT_AS 256 MiB above its RSS at step {s} and "
                    "allocates 8 GiB (host memory exhaustion as torch's CPU allocator reports it)", hang),
        }[fault]
        blame = "-" if fault == "nan" else f"{H} rank={r}"
        out.append(Run(id=f"{fault}-{w}-{n}r-rank{r}-step{s}{suffix}", fault=fault, nproc=n, wrap=w, rank=r, step=s,
                       shape=sh, args=args, cls=cls, blame=blame, action=action, note=note))
    # a transient fault and torchrun's own restart: rank r's dataset raises once (--fault-once-file, relative to
    # the run's temp cwd) and torchrun restarts the group (--max-restarts 1). Intended: the second attempt runs
    # clean. Measured (torch 2.11, gloo, --standalone): the second attempt fails at start-up in gloo's connect
    # (connection reset / connectFullMesh timed out) on every rank, so the job ends with exit code 1; the root
    # is still the first attempt's exception
    for n, r, s, w, sh in ((2, 1, 3, "ddp", "stream"), (3, 0, 2, "fsdp2", "logdir")):
        out.append(Run(id=f"restart-exception-{w}-{n}r-rank{r}-step{s}" + ("-logdir" if sh == "logdir" else ""),
                       fault="exception", nproc=n, wrap=w, rank=r, step=s, shape=sh, launcher=("--max-restarts", "1"),
                       args=(*hang, "--fault-once-file", "fault-fired"), cls="PEER_PROCESS_EXIT",
                       blame=f"{H} rank={r}", action="FIX_CONFIG",
                       note=f"rank {r}'s dataset raises RuntimeError at step {s} in the first attempt only; torchrun "
                            "restarts the worker group once (--max-restarts 1); measured: the second attempt fails at "
                            "start-up in gloo's connect on every rank (exit code 1), a consequence, not the root"))
    return out


def command(r: Run, logdir: Path | None) -> list[str]:
    """The torchrun command line of a run."""
    cmd = [str(TORCHRUN), *(r.rdzv or ("--standalone",)), "--nproc-per-node", str(r.nproc), *r.launcher]
    if logdir is not None:
        cmd += ["--log-dir", str(logdir), "--tee", "3", "--redirects", "3"]
    cmd += ["-m", r.module, "--wrap", r.wrap, "--fault", r.fault,
            "--fault-rank", str(r.rank), "--fault-step", str(r.step)]
    if r.module == "gpufield.testing.faultloop" and not any(a == "--steps" for a in r.args):
        cmd += ["--steps", "12"]
    return cmd + list(r.args)


def execute(r: Run, out: Path, timeout_s: float = 180.0) -> dict:
    """Run one case and write its files under ``out``; returns its manifest entry."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), **r.env}
    # the prefix carries no run id: the loops print temp paths (checkpoint folders), which would leak the label
    with tempfile.TemporaryDirectory(prefix="tf-") as tmp:
        logdir = Path(tmp) / "logs" if r.shape == "logdir" else None
        env["TMPDIR"] = tmp  # faultloop's checkpoints land here and are deleted
        cmd = command(r, logdir)
        t0 = time.monotonic()
        try:
            p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, cwd=tmp,
                               timeout=timeout_s, check=False)
            rc, text = p.returncode, p.stdout
        except subprocess.TimeoutExpired as e:
            rc, text = "timeout", e.stdout or b""
        wall = time.monotonic() - t0
        if r.shape == "stream":
            (out / f"{r.id}.log").write_bytes(text)
        else:
            dst = out / r.id
            shutil.rmtree(dst, ignore_errors=True)
            dst.mkdir(parents=True)
            (dst / "console.log").write_bytes(text)
            for f in sorted(logdir.rglob("*.log")) if logdir and logdir.exists() else []:
                rel = f.relative_to(logdir)
                parts = rel.parts[1:] if len(rel.parts) > 1 else rel.parts  # drop the run-id folder
                target = dst.joinpath(*parts)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(f, target)
    shown = [c if not c.startswith(str(ROOT)) else os.path.relpath(c, ROOT) for c in cmd]
    shown[0] = "torchrun"
    entry = {"id": r.id, "cmd": " ".join(shown), "rc": rc, "wall_s": round(wall, 1), "cls": r.cls}
    if r.env:
        entry["env"] = dict(r.env)
    return entry


_INDEX_HEAD = """# Triage corpus v2 — fault-injection runs

Real runs of `gpufield.testing.faultloop` under real torchrun (gloo, CPU), generated by
`benchmarks/triage_faults.py` on the shared 2-core development VM (hostname `vm`; torchrun
`--standalone` prints `host : localhost`). Logs are what torchrun printed, unedited: `.log` files
are stdout+stderr merged as a terminal shows them; folders are `--log-dir ... --tee 3` runs with
the per-rank `attempt_0/<rank>/stdout.log`/`stderr.log` files plus torchrun's own `console.log`
(one job per folder). Labels are by construction (the injected fault, its rank and step). Exact
commands, exit codes and wall times: `MANIFEST.json` (kept out of the case files).

Label grammar: `docs/triage-labels.md` (branch triage-engine). Split: assigned by
`benchmarks/triage_corpus_split.py` (seed 23, stratified by expected class) before any rule was
written against these runs.

Not producible on CPU (no GPU, driver, NIC or fabric here), so not in this half: Xid errors of
any kind, ECC/row remapping, NVLink, PCIe AER, GSP, IB/RoCE completion errors, NCCL socket /
shm transport selection, CUDA OOM (allocator messages), NCCL watchdog / heartbeat / Flight
Recorder messages (gloo has no watchdog thread: hangs end in gloo's own "Timed out waiting Nms"
errors), thermal stragglers, restart loops (`--max-restarts` was not exercised), loss-scale
collapse (no fp16 scaler on CPU). Those classes come from the public half (`../public/`).

Notes on what the runs really did (measured, not intended):
- `ckpt_stall`: only the stalling rank enters the save's `dist.barrier()`, so its peers hang in
  their next collective and time out even when the stall (3 s) is far below the process-group
  timeout (60 s): every ckpt_stall run ends as a checkpoint-save timeout; there is no
  "slow but successful save" (CHECKPOINT_IO_SLOW) run.
- `rdzv` to `127.0.0.2` without `is_host=false`: torchrun considers the address its own, hosts
  the store and the run succeeds, so that run is labelled `clean`.
- `nan-ddp-3r-rank2-step0`: every rank finished its 10 NaN steps, then rank 2 aborted (-6) in
  teardown; the label stays NAN_LOSS (the teardown abort is secondary).
- `sleep`: the per-step all_reduce of the loss equalises the printed step times, so the sleeping
  rank cannot be read from step times (a masked compute straggler).
- `restart-exception` (added by branch triage-v3, dev rows): torchrun's `--max-restarts 1` restart of
  the group after the first attempt's exception does not recover: the second attempt's ranks fail at
  start-up in gloo's connect (connection reset / connectFullMesh timed out); the root stays the first
  attempt's exception.
- `*-v3` (added by branch triage-v3, dev rows, after the split): the same fault families in shapes the
  dev half lacked (FSDP2 with 2-3 ranks, log-dir runs). In `desync-fsdp2-2r-rank0-step4-v3` the rank
  that issued the extra all_reduce (0) aborted inside gloo on the size mismatch (SIGABRT, no Python
  traceback) while its peer's traceback sits in the regular clip_grad_norm_ call: the log does not say
  which rank deviated.
- `clean-noisy` (added by branch triage-v3, dev rows, after the split): clean runs with torch INFO
  logging, NCCL_DEBUG=INFO (inert under gloo), DDP's find_unused_parameters warning and a first
  checkpoint save that fails, prints its traceback and succeeds on retry. TORCH_DISTRIBUTED_DEBUG=DETAIL
  was tried and made both ranks of a gloo DDP run segfault, so it is not used.

| # | Case file | Expected class | blame | action | split | Run | Notes |
|---|---|---|---|---|---|---|---|
"""


def write_index(out: Path, spec: list[Run], *, head: str = _INDEX_HEAD,
                class_cell: Callable[[Run], str | None] | None = None) -> Path:
    """Write ``out/INDEX.md`` (``head`` + one row per run whose files exist), keeping splits already
    assigned (``dev``, ``test`` and ``retired-test``), through a temporary file and a rename.
    ``class_cell`` may give a run's expected-class cell (``None``: the default, the run's class)."""
    from gpufield._files import atomic_write

    idx = out / "INDEX.md"
    old: dict[str, str] = {}
    if idx.exists():
        for line in idx.read_text(encoding="utf-8").splitlines():
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if len(cells) >= 6 and cells[5] in ("dev", "test", "retired-test"):
                old[cells[0]] = cells[5]
    rows = []
    for r in spec:
        name = f"{r.id}.log" if r.shape == "stream" else f"{r.id}/"
        if not (out / name).exists():
            continue
        cls = (class_cell(r) if class_cell else None) or ("clean" if r.cls == "clean" else f"`{r.cls}`")
        run = f"{r.fault}, {r.nproc} ranks, {r.wrap}" + (", log-dir" if r.shape == "logdir" else "")
        rows.append(f"| {r.id} | `{name}` | {cls} | {r.blame} | {r.action} | {old.get(r.id, '')} | {run} | "
                    f"{r.note.replace('|', '/')} |")
    atomic_write(idx, head + "\n".join(rows) + "\n", force=True)
    return idx


def main(argv: list[str] | None = None) -> int:
    """Generate the runs; write MANIFEST.json and INDEX.md (``--index-only``: the index only)."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=ROOT / "tests/triage/corpus/faults")
    ap.add_argument("--only", nargs="*", default=None, help="run only these ids")
    ap.add_argument("--jobs", type=int, default=2, help="torchrun runs at a time (<= 2 on a shared CPU)")
    ap.add_argument("--list", action="store_true", help="print the run ids and labels, run nothing")
    ap.add_argument("--index-only", action="store_true", help="rewrite INDEX.md from the existing files")
    a = ap.parse_args(argv)
    spec = runs(_closed_port() if not (a.list or a.index_only) else DEAD_PORT)
    if a.index_only:
        print(write_index(a.out, spec))
        return 0
    if a.list:
        for r in spec:
            print(f"{r.id:48s} {r.cls:26s} {r.blame}")
        return 0
    todo = [r for r in spec if a.only is None or r.id in a.only]
    a.out.mkdir(parents=True, exist_ok=True)
    mpath = a.out / "MANIFEST.json"
    manifest = json.loads(mpath.read_text()) if mpath.exists() else {}
    with ThreadPoolExecutor(max_workers=max(1, min(a.jobs, 2))) as ex:
        for m in ex.map(lambda r: execute(r, a.out), todo):
            manifest[m["id"]] = m
            print(json.dumps(m), flush=True)
            mpath.write_text(json.dumps(dict(sorted(manifest.items())), indent=1) + "\n")
    write_index(a.out, spec)
    return 0


if __name__ == "__main__":
    sys.exit(main())
