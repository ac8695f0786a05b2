"""A small real training loop with injectable faults, for fault-injection runs under torchrun.

Run it as a torchrun entry point (gloo on CPU, NCCL on GPUs)::

    torchrun --nproc-per-node 2 -m gpufield.testing.faultloop --steps 20 \\
        --fault sigkill --fault-rank 1 --fault-step 5

Every rank trains the same small MLP language-model stand-in under DDP (or FSDP2's
``fully_shard`` with ``--wrap fsdp2``) on random tokens, and prints one step line per step in the
shape FSDP training loops print (``step 3 | loss 10.61 | grad_norm 1.23 | 0.051 s/step``).
The faults are real: the process really receives the signal, really issues the extra
collective, really runs out of memory under an address-space limit. The output is torch's and
torchrun's own, so logs of these runs are real logs (the triage corpus and the supervisor's
fault benchmark are built from them).

Faults (``--fault``), applied on ``--fault-rank`` (``-1``: every rank) from ``--fault-step``
(with ``--fault-once-file F`` only in the first run that finds no ``F``: a transient fault, so a
supervisor's restart can succeed; ``--harden-monitor`` calls :mod:`gpufield.harden.monitor`):

- ``none``: the clean run.
- ``sigkill``: the rank sends itself SIGKILL (a crashed or OOM-killed rank).
- ``sigstop``: the rank sends itself SIGSTOP (a hang inside the next collective for its peers).
- ``desync``: the rank issues one extra ``all_reduce`` (collective sequences diverge).
- ``nan``: the loss is multiplied by NaN (the NaN reaches the gradients and the step lines).
- ``exception``: the rank's dataset raises ``RuntimeError`` while loading the step's batch.
- ``sleep``: the rank sleeps ``--fault-arg`` seconds inside every step's compute (a straggler).
- ``ckpt_stall``: at the fault step every rank saves a checkpoint and enters the save barrier;
  the faulting rank sleeps ``--fault-arg`` seconds before writing its part (a stalling save).
- ``oom``: the rank limits its address space (``RLIMIT_AS``) and allocates past it (host OOM
  as torch's CPU allocator reports it).

``--benign-noise`` adds what healthy runs print and a triage must not read as a failure: DDP
built with ``find_unused_parameters=True`` (torch's own reducer warning), a checkpoint every
``--ckpt-every`` steps whose *first* save is aimed at a folder that does not exist yet (torch's
real ``torch.save`` error, caught, its traceback printed, then retried into the created folder and
succeeding), and the FSDP2 variant's own warnings. The run still ends with exit code 0.

The process group timeout is ``--pg-timeout-s`` (gloo and NCCL both honour it), so hangs end
in the real watchdog or gloo timeout messages within a test's time.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import os
import resource
import signal
import sys
import time

FAULTS = ("none", "sigkill", "sigstop", "desync", "nan", "exception", "sleep", "ckpt_stall", "oom")


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m gpufield.testing.faultloop", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=20, help="optimizer steps to run")
    p.add_argument("--fault", choices=FAULTS, default="none")
    p.add_argument("--fault-rank", type=int, default=1, help="rank that faults (-1: every rank)")
    p.add_argument("--fault-step", type=int, default=5, help="first step (0-based) of the fault")
    p.add_argument("--fault-arg", type=float, default=0.3,
                   help="seconds for sleep/ckpt_stall; unused otherwise")
    p.add_argument("--pg-timeout-s", type=float, default=30.0, help="process group timeout")
    p.add_argument("--hidden", type=int, default=64, help="model width")
    p.add_argument("--vocab", type=int, default=512, help="vocabulary size")
    p.add_argument("--batch", type=int, default=8, help="sequences per rank and step")
    p.add_argument("--seq", type=int, default=32, help="tokens per sequence")
    p.add_argument("--step-sleep-s", type=float, default=0.0,
                   help="extra compute time per step on every rank (makes steps long enough to watch)")
    p.add_argument("--wrap", choices=("ddp", "fsdp2"), default="ddp")
    p.add_argument("--ckpt-every", type=int, default=0, help="save a checkpoint every N steps (0: never)")
    p.add_argument("--ckpt-dir", default=None, help="checkpoint folder (default: a temp folder)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--print-compute-time", action="store_true",
                   help="step lines also carry 'compute_time X s': the rank's time before the loss all-reduce "
                        "(with DDP the gradient all-reduce is inside it; the straggler's sleep is after it)")
    p.add_argument("--fault-once-file", default=None,
                   help="a transient fault: it fires only while this file does not exist, and the faulting "
                        "rank creates it first (a restarted job then runs clean)")
    p.add_argument("--benign-noise", action="store_true",
                   help="healthy-run noise: DDP find_unused_parameters warning, a first checkpoint save that "
                        "fails (missing folder), is logged with its traceback and succeeds on retry")
    p.add_argument("--harden-monitor", dest="monitor", action="store_true",
                   help="call the gpufield.harden.monitor hook (step, collective arrival, checkpoint phase)")
    a = p.parse_args(argv)
    if a.steps < 1 or a.fault_step < 0 or a.pg_timeout_s <= 0 or a.fault_arg < 0:
        p.error("--steps >= 1, --fault-step >= 0, --pg-timeout-s > 0 and --fault-arg >= 0 are required")
    return a


class _Tokens:
    """Random token batches; raises on the faulting rank's step when ``fail_at`` is set."""

    def __init__(self, vocab: int, batch: int, seq: int, seed: int, fail_at: int | None):
        import torch

        self.g = torch.Generator().manual_seed(seed)
        self.vocab, self.batch, self.seq, self.fail_at = vocab, batch, seq, fail_at

    def get(self, step: int):
        import torch

        if self.fail_at is not None and step >= self.fail_at:
            raise RuntimeError(f"corrupt sample in shard at step {step}: cannot decode record")
        return torch.randint(0, self.vocab, (self.batch, self.seq + 1), generator=self.g)


def _model(a: argparse.Namespace):
    import torch

    return torch.nn.Sequential(
        torch.nn.Embedding(a.vocab, a.hidden),
        torch.nn.Linear(a.hidden, 4 * a.hidden), torch.nn.GELU(),
        torch.nn.Linear(4 * a.hidden, a.hidden), torch.nn.LayerNorm(a.hidden),
        torch.nn.Linear(a.hidden, a.vocab),
    )


def _wrap(model, a: argparse.Namespace, device):
    import torch

    if a.wrap == "ddp":
        return torch.nn.parallel.DistributedDataParallel(model.to(device), find_unused_parameters=a.benign_noise)
    from torch.distributed.fsdp import fully_shard

    model.to(device)
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer)
    return fully_shard(model)


def _say(text: str) -> None:
    """One line in one write, so the lines of ranks sharing a pipe do not interleave."""
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def _flaky_first_save(model, step: int, path: str, rank: int) -> None:
    """The first save of ``--benign-noise``: torch.save into a folder not created yet fails for real; the
    error and its traceback are printed as a training script's retry wrapper does, then the caller retries."""
    import traceback

    import torch

    try:
        torch.save({"step": step + 1, "model": model.state_dict()}, path)
    except (RuntimeError, OSError):
        sys.stderr.write(f"[rank{rank}] checkpoint save attempt 1 failed, creating the folder and retrying:\n"
                         + traceback.format_exc())
        sys.stderr.flush()


def _hits(a: argparse.Namespace, rank: int, step: int) -> bool:
    return a.fault != "none" and a.fault_rank in (-1, rank) and step >= a.fault_step


def _once(a: argparse.Namespace, rank: int) -> None:
    """With ``--fault-once-file``: turn the fault off if it fired in an earlier run, else mark it as fired."""
    if a.fault_once_file is None or a.fault == "none" or a.fault_rank not in (-1, rank):
        return
    try:
        fd = os.open(a.fault_once_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        a.fault = "none"
        return
    os.close(fd)


def main(argv: list[str] | None = None) -> int:
    """Run the loop on this rank (``RANK``/``WORLD_SIZE``/``MASTER_ADDR`` from torchrun).

    Returns:
        0 after the last step; faults end the process their own way (signal, exception).
    """
    a = _parse(argv)
    import torch
    import torch.distributed as dist

    backend = "nccl" if torch.cuda.is_available() else "gloo"
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=a.pg_timeout_s))
    rank, world = dist.get_rank(), dist.get_world_size()
    local = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device(f"cuda:{local}") if backend == "nccl" else torch.device("cpu")
    if backend == "nccl":
        torch.cuda.set_device(device)
    torch.manual_seed(a.seed)  # same initial weights on every rank
    model = _wrap(_model(a), a, device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    _once(a, rank)
    fail_at = a.fault_step if a.fault == "exception" and a.fault_rank in (-1, rank) else None
    data = _Tokens(a.vocab, a.batch, a.seq, a.seed + 1000 + rank, fail_at)
    ckpt_dir = a.ckpt_dir or os.path.join(os.environ.get("TMPDIR", "/tmp"), f"faultloop-{os.getppid()}")
    if a.monitor:
        from gpufield.harden import monitor
    else:
        monitor = None
    _say(f"[rank{rank}] faultloop: world {world}, backend {backend}, wrap {a.wrap}, "
          f"fault {a.fault} at step {a.fault_step} on rank {a.fault_rank}")
    for step in range(a.steps):
        t0 = time.perf_counter()
        hit = _hits(a, rank, step)
        if hit and step == a.fault_step and a.fault == "sigkill":
            os.kill(os.getpid(), signal.SIGKILL)
        if hit and step == a.fault_step and a.fault == "sigstop":
            os.kill(os.getpid(), signal.SIGSTOP)
        if hit and step == a.fault_step and a.fault == "oom":
            soft = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 + (256 << 20)
            resource.setrlimit(resource.RLIMIT_AS, (soft, resource.getrlimit(resource.RLIMIT_AS)[1]))
            torch.empty((8 << 30) // 4, dtype=torch.float32, device="cpu").fill_(1.0)
        tokens = data.get(step).to(device)
        logits = model(tokens[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, a.vocab), tokens[:, 1:].reshape(-1))
        if hit and a.fault == "nan":
            loss = loss * float("nan")
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if a.step_sleep_s:
            time.sleep(a.step_sleep_s)
        if hit and a.fault == "sleep":
            time.sleep(a.fault_arg)  # inside the compute, before the step's collectives finish
        if hit and step == a.fault_step and a.fault == "desync":
            dist.all_reduce(torch.ones(7, device=device))
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        loss_t = loss.detach().clone()
        t_compute = time.perf_counter() - t0  # this rank's own time before the step's last collective
        if monitor is not None:
            with monitor.collective():
                dist.all_reduce(loss_t)
        else:
            dist.all_reduce(loss_t)
        dt = time.perf_counter() - t0
        compute = f" | compute_time {t_compute:.4f} s" if a.print_compute_time else ""
        _say(f"[rank{rank}] step {step} | loss {loss_t.item() / world:.4f} | "
             f"grad_norm {float(grad_norm):.4f}{compute} | {dt:.3f} s/step")
        if monitor is not None:
            monitor.step(step)
        save = a.ckpt_every and (step + 1) % a.ckpt_every == 0
        if a.fault == "ckpt_stall" and step == a.fault_step:
            save = True  # every rank saves at the fault step; only the faulting rank stalls
        if save:
            path = os.path.join(ckpt_dir, f"step{step + 1}-rank{rank}.pt")
            _say(f"[rank{rank}] saving checkpoint to {path}")
            with monitor.phase("checkpoint") if monitor is not None else contextlib.nullcontext():
                if hit and a.fault == "ckpt_stall":
                    time.sleep(a.fault_arg)
                if a.benign_noise and not os.path.isdir(ckpt_dir):
                    _flaky_first_save(model, step, path, rank)
                os.makedirs(ckpt_dir, exist_ok=True)
                torch.save({"step": step + 1, "model": model.state_dict()}, path)
            dist.barrier()
    _say(f"[rank{rank}] training done: {a.steps} steps")
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
