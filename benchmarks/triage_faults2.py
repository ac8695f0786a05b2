"""Generate the second fault-injection corpus ``faults2``: real torchrun runs of ``faultloop2``.

Sibling of ``benchmarks/triage_faults.py`` (same run record, same recording of what torchrun
printed, same MANIFEST/INDEX layout); the runs differ from ``faults`` in the ways real users' jobs
differ: :mod:`gpufield.testing.faultloop2` (three models, gradient accumulation, a DataLoader with
worker processes, ``torch.distributed.checkpoint`` saves, python ``logging`` with timestamps,
rank-0-only step lines, a per-rank timing breakdown), faults on the last rank / rank != 0 / step 1
vs late, 3-4 ranks, torch's verbose modes (``TORCH_DISTRIBUTED_DEBUG=DETAIL`` with FSDP2,
``TORCH_CPP_LOG_LEVEL=INFO``), and fault kinds the first set lacks (a NaN gradient norm with a
finite loss, an exception inside a DataLoader worker, a rank exiting 0 early, a stalling DCP save,
a growing leak under ``RLIMIT_AS``). Labels are by construction (the injected fault, its rank).

Usage::

    PYTHONPATH=src .venv/bin/python benchmarks/triage_faults2.py --out tests/triage/corpus/faults2 \\
        [--only ID ...] [--jobs 2] [--list] [--index-only]
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import triage_faults as tf  # noqa: E402

ROOT = tf.ROOT
DEAD_PORT = 29733  # the dead rendezvous endpoint of this set: nothing may listen on it
H = tf.H
DETAIL = {"TORCH_DISTRIBUTED_DEBUG": "DETAIL"}
CPPINFO = {"TORCH_CPP_LOG_LEVEL": "INFO"}
HANG = ("--pg-timeout-s", "15")


def _closed_port() -> int:
    with socket.socket() as s:
        s.settimeout(1.0)
        if s.connect_ex(("127.0.0.1", DEAD_PORT)) == 0:
            raise SystemExit(f"port {DEAD_PORT} has a listener; the dead-endpoint runs need it closed")
    return DEAD_PORT


_CLS = {"sigkill": ("PEER_PROCESS_EXIT", "COLLECT"), "sigstop": ("NCCL_COLLECTIVE_TIMEOUT", "COLLECT"),
        "desync": ("COLLECTIVE_DESYNC", "FIX_CONFIG"), "nan": ("NAN_LOSS", "FIX_CONFIG"),
        "nangrad": ("clean", "-"), "worker_exception": ("PEER_PROCESS_EXIT", "FIX_CONFIG"),
        "sleep": ("STRAGGLER_COMPUTE", "-"), "ckpt_stall": ("CHECKPOINT_SAVE_TIMEOUT", "FIX_CONFIG"),
        "oom": ("HOST_OOM_KILL", "FIX_CONFIG"), "exit0": ("PEER_PROCESS_EXIT", "FIX_CONFIG"),
        "none": ("clean", "-")}

_NOTE = {
    "sigkill": "rank {r} sends itself SIGKILL at step {s}",
    "sigstop": "rank {r} SIGSTOPs itself at step {s}: its peers hang in the next collective until the 15 s "
               "process-group timeout; torchrun then kills the stopped rank",
    "desync": "rank {r} issues one extra {op} at step {s}",
    "nan": "the loss is multiplied by NaN from step {s} on {who}; the all-reduced loss is NaN on every rank",
    "nangrad": "from step {s} for {arg} steps rank {r}'s forward adds 0*sqrt(0*h): the loss stays finite, the "
               "gradient norm is NaN on every rank, the loop warns and skips the optimizer step; ends normally",
    "worker_exception": "rank {r}'s dataset raises RuntimeError inside a DataLoader worker at step {s}",
    "sleep": "rank {r} sleeps {arg} s inside every step's compute from step {s} (run ends normally)",
    "ckpt_stall": "every rank saves a checkpoint ({ckpt}) at step {s}; rank {r} stalls {arg} s before entering "
                  "the save (process-group timeout {pg} s)",
    "oom": "rank {r} sets RLIMIT_AS {arg} MiB above its peak RSS at step {s} and grows a 64 MiB/micro-batch "
           "cache until allocation fails (torch's CPU allocator error; no kernel OOM kill)",
    "exit0": "rank {r}'s data runs out at step {s}: it logs 'epoch done', destroys its process group and exits "
             "with code 0 while its peers wait in the next collective",
    "none": "no fault; ends with exit code 0",
}


def _run(fault: str, n: int, r: int, s: int, *, wrap: str = "ddp", model: str = "mlp", accum: int = 1,
         workers: int = 0, ckpt: str = "none", every: int = 0, log: str = "print", rank0: bool = False,
         timing: bool = False, arg: str | None = None, op: str = "all_reduce", pg: str = "15",
         steps: int = 10, env: dict | None = None, shape: str = "stream", tag: str = "", seed: int = 0) -> tf.Run:
    cls, action = _CLS[fault]
    args = ["--model", model, "--accum", str(accum), "--workers", str(workers), "--ckpt", ckpt,
            "--ckpt-every", str(every), "--log-style", log, "--steps", str(steps), "--pg-timeout-s", pg,
            "--desync-op", op, "--seed", str(seed)]
    args += ["--rank0-log"] * rank0 + ["--timing"] * timing + (["--fault-arg", arg] if arg else [])
    who = "every rank" if r < 0 else f"rank {r}"
    rid = (f"{'clean' if fault == 'none' else fault.replace('_', '')}-{wrap}-{model}-{n}r" + (f"-rank{'all' if r < 0 else r}-step{s}"
           if fault != "none" else "") + (f"-{tag}" if tag else "") + ("-logdir" if shape == "logdir" else ""))
    # a host is labelled only where the log names one (docs/triage-labels.md: "as it appears in the logs"): a run
    # that ends normally has no torchrun failure block ("host : localhost"), so a straggler row blames the rank only
    blame = "-" if cls in ("clean", "NAN_LOSS") else f"rank={r}" if fault == "sleep" else f"{H} rank={r}"
    variant = [f"model {model}", f"accum {accum}"] + ([f"DataLoader workers {workers}"] if workers else []) + \
        ([f"ckpt {ckpt} every {every}" if every else f"ckpt {ckpt}"] if ckpt != "none" else []) + \
        [f"log {log}"] + (["rank-0 step lines"] if rank0 else []) + (["timing breakdown"] if timing else []) + \
        [f"{k}={v}" for k, v in (env or {}).items()]
    note = _NOTE[fault].format(r=r, s=s, op=op, who=who, arg=arg, ckpt=ckpt, pg=pg) + "; " + ", ".join(variant)
    return tf.Run(id=rid, fault=fault, nproc=n, wrap=wrap, rank=r, step=s, args=tuple(args), shape=shape,
                  cls=cls, blame=blame, action=action, note=note, env=dict(env or {}),
                  module="gpufield.testing.faultloop2")


def runs(port: int) -> list[tf.Run]:
    """The run list of ``faults2`` (ids are stable)."""
    R = _run
    out = [
        R("sigkill", 3, 2, 1, wrap="fsdp2", model="transformer", log="logging"),
        R("sigkill", 4, 1, 6, model="conv", workers=2, accum=2),
        R("sigkill", 2, 0, 4, wrap="fsdp2", ckpt="dcp", every=2, shape="logdir"),
        R("sigstop", 3, 1, 4, model="transformer", accum=2, log="logging"),
        R("sigstop", 4, 3, 2, wrap="fsdp2", shape="logdir"),
        R("sigstop", 2, 0, 1, model="conv", workers=2, env=CPPINFO),
        R("desync", 3, 2, 3, wrap="fsdp2", env=DETAIL),
        R("desync", 4, 1, 5, op="broadcast", model="conv"),
        R("desync", 2, 1, 2, op="barrier", log="logging", env=CPPINFO),
        R("nan", 2, -1, 4, wrap="fsdp2", model="transformer", log="logging"),
        R("nan", 3, 2, 1, accum=2, workers=2, rank0=True),
        R("nangrad", 2, 1, 3, wrap="fsdp2"),
        R("nangrad", 4, 3, 5, model="transformer", log="logging"),
        R("nangrad", 3, 0, 1, arg="3", timing=True),
        R("worker_exception", 2, 1, 3, workers=2, log="logging"),
        R("worker_exception", 3, 2, 5, wrap="fsdp2", model="transformer", workers=1),
        R("worker_exception", 4, 0, 2, workers=2, shape="logdir"),
        R("sleep", 2, 1, 1, arg="0.3", timing=True, steps=12),
        R("sleep", 3, 2, 2, arg="0.4", wrap="fsdp2", log="logging", steps=12),
        R("sleep", 4, 3, 2, arg="0.25", model="conv", steps=12),
        R("ckpt_stall", 2, 1, 3, wrap="fsdp2", ckpt="dcp", arg="30", pg="10"),
        R("ckpt_stall", 3, 2, 4, ckpt="dcp", arg="25", pg="10", log="logging"),
        R("ckpt_stall", 4, 0, 2, ckpt="torch", arg="20", pg="8", shape="logdir"),
        R("oom", 2, 1, 2),
        R("oom", 3, 2, 4, wrap="fsdp2", model="transformer", log="logging"),
        R("oom", 4, 0, 1, workers=2),
        R("exit0", 2, 1, 3),
        R("exit0", 3, 2, 5, wrap="fsdp2", log="logging"),
        R("none", 2, 1, 0, model="transformer", accum=2, workers=2, ckpt="dcp", every=3, log="logging", tag="a"),
        R("none", 3, 1, 0, wrap="fsdp2", model="conv", ckpt="dcp", every=4, env=DETAIL, tag="b"),
        R("none", 4, 1, 0, env=CPPINFO, shape="logdir", tag="c"),
        R("none", 2, 1, 0, wrap="fsdp2", rank0=True, timing=True, tag="d"),
        R("none", 3, 1, 0, workers=2, ckpt="torch", every=3, log="logging", tag="e"),
        R("none", 4, 1, 0, wrap="fsdp2", model="transformer", accum=2, log="logging", tag="f"),
        R("none", 2, 1, 0, model="conv", env=CPPINFO, log="logging", ckpt="dcp", every=5, tag="g"),
    ]
    for n, conf in ((2, "is_host=false,join_timeout=10,read_timeout=5"), (4, "is_host=false,join_timeout=8,read_timeout=4")):
        rdzv = ("--nnodes", "1", "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-conf", conf)
        base = R("none", n, 1, 0, wrap="fsdp2" if n == 4 else "ddp")
        out.append(tf.Run(**{**{f: getattr(base, f) for f in base.__dataclass_fields__},
                             "id": f"rdzvdead-{n}r", "rdzv": rdzv, "cls": "RENDEZVOUS_UNREACHABLE",
                             "blame": f"peer=127.0.0.1:{port}", "action": "FIX_CONFIG",
                             "note": f"c10d rendezvous endpoint 127.0.0.1:{port} has no listener (rdzv-conf {conf})"}))
    return out


_INDEX_HEAD = """# Triage corpus faults2 — fault-injection runs of other training loops

Real runs of `gpufield.testing.faultloop2` under real torchrun (torch 2.13 CPU, gloo), generated by
`benchmarks/triage_faults2.py` on the shared 2-core development VM (hostname `vm`; torchrun
`--standalone` prints `host : localhost`). Logs are what torchrun printed, unedited (`.log`: stdout
and stderr merged; folders: `--log-dir ... --tee 3` per-rank files plus `console.log`). Labels are by
construction (the injected fault and its rank). Commands, exit codes and wall times: `MANIFEST.json`.

How this set differs from `../faults/`: three models (MLP, 2-layer TransformerEncoder, Conv1d), DDP
and FSDP2, gradient accumulation (DDP `no_sync`, FSDP2 `set_requires_gradient_sync`), a
`torch.utils.data.DataLoader` with worker processes, `torch.distributed.checkpoint` saves, python
`logging` with timestamps, rank-0-only step lines, a per-rank data/compute/comm breakdown,
`TORCH_DISTRIBUTED_DEBUG=DETAIL` (FSDP2 only) and `TORCH_CPP_LOG_LEVEL=INFO`, faults on the last rank
and on step 1, and new fault kinds: NaN gradient norm with a finite loss (labelled clean: the loop
skips those optimizer steps and finishes), an exception inside a DataLoader worker, a rank leaving
with exit code 0 (uneven data), a stalling DCP save, a growing leak under RLIMIT_AS.

Label grammar: `docs/triage-labels.md`. Split: `benchmarks/triage_corpus_split.py` (seed 23,
stratified by expected class), assigned before triage was run on any of these runs.

Notes on what the runs really did (measured, not intended):
- `oom-ddp-mlp-4r-rank0-step1` (DataLoader with 2 workers): the first allocation to fail under the
  RLIMIT_AS was the DataLoader's shared-memory mmap (`unable to mmap 1056 bytes ...: Cannot allocate
  memory (12)`), not torch's CPU allocator; the label stays HOST_OOM_KILL (host memory exhausted).
- `desync` with `broadcast` / `barrier` as the extra collective: under gloo every rank hangs until the
  process-group timeout (`Timed out waiting 15000ms`), no size-mismatch error; with
  `TORCH_DISTRIBUTED_DEBUG=DETAIL` (FSDP2) torch's wrapper reports `Detected mismatch between collectives`.
- `sigstop`: the stopped rank ignores torchrun's SIGTERM; torchrun SIGKILLs it 30 s later.
- `ckpt_stall` with DCP: the stalling rank enters `dcp.save` after its peers' collective timed out.
- After the first scoring, 8 runs (the checkpoint-saving ones and one log-dir run) were regenerated: their temp
  folder names carried the run id, which the loop prints in checkpoint paths (a label leak).
- `sleep`: the loss all_reduce equalises the printed per-step wall times; only the `--timing` run prints
  the per-rank compute time separately.

| # | Case file | Expected class | blame | action | split | Run | Notes |
|---|---|---|---|---|---|---|---|
"""


def write_index(out: Path, spec: list[tf.Run]) -> Path:
    """``out/INDEX.md`` for the runs whose files exist (splits already assigned are kept)."""
    def class_cell(r: tf.Run) -> str | None:
        return "clean (NaN grad-norm warnings only)" if r.fault == "nangrad" else None

    return tf.write_index(out, spec, head=_INDEX_HEAD, class_cell=class_cell)


def main(argv: list[str] | None = None) -> int:
    """Generate the runs; write MANIFEST.json and INDEX.md."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=ROOT / "tests/triage/corpus/faults2")
    ap.add_argument("--only", nargs="*", default=None)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--index-only", action="store_true")
    a = ap.parse_args(argv)
    spec = runs(_closed_port() if not (a.list or a.index_only) else DEAD_PORT)
    if len({r.id for r in spec}) != len(spec):
        raise SystemExit("duplicate run ids")
    if a.index_only:
        print(write_index(a.out, spec))
        return 0
    if a.list:
        for r in spec:
            print(f"{r.id:52s} {r.cls:26s} {r.blame}")
        return 0
    todo = [r for r in spec if a.only is None or r.id in a.only]
    a.out.mkdir(parents=True, exist_ok=True)
    mpath = a.out / "MANIFEST.json"
    manifest = json.loads(mpath.read_text()) if mpath.exists() else {}
    with ThreadPoolExecutor(max_workers=max(1, min(a.jobs, 2))) as ex:
        for m in ex.map(lambda r: tf.execute(r, a.out, timeout_s=120.0), todo):
            manifest[m["id"]] = m
            print(json.dumps(m), flush=True)
            mpath.write_text(json.dumps(dict(sorted(manifest.items())), indent=1) + "\n")
    write_index(a.out, spec)
    return 0


if __name__ == "__main__":
    sys.exit(main())
