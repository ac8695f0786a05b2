"""A second real training loop with injectable faults, in the shapes other users' jobs have.

Sibling of :mod:`gpufield.testing.faultloop` (same contract: a torchrun entry point, gloo on CPU,
real faults, real torch/torchrun output) for the fault-injection corpus ``faults2``. What differs
is what real jobs differ in:

- the model (``--model``): ``mlp`` (embedding + MLP), ``transformer`` (a 2-layer
  ``nn.TransformerEncoder`` language model) or ``conv`` (a 1-D conv net over token embeddings);
- the wrapper (``--wrap``): DDP or FSDP2 ``fully_shard``;
- gradient accumulation (``--accum N``: N micro-batches per optimizer step, DDP ``no_sync`` /
  FSDP2 ``set_requires_gradient_sync(False)`` on all but the last);
- the input pipeline (``--workers N``): a ``torch.utils.data.DataLoader`` over a map-style
  dataset with a ``DistributedSampler`` and N worker processes (0: batches built in the loop);
- checkpoints (``--ckpt``): ``torch.save`` of the local state dict plus a barrier, or
  ``torch.distributed.checkpoint.save`` (DCP, a collective save of the sharded state);
- logging (``--log-style``): ``print`` lines, or python ``logging`` with timestamps and levels
  (``2026-12-02 04:01:02,345 INFO train: step 3 ...``); ``--rank0-log`` prints step lines on
  rank 0 only (as most trainers do); ``--timing`` adds a per-rank data/compute/comm breakdown.

Faults (``--fault``) on ``--fault-rank`` (``-1``: every rank) at ``--fault-step``:

- ``none``: the clean run.
- ``sigkill`` / ``sigstop``: the rank sends itself the signal (crash / hang for its peers).
- ``desync``: the rank issues one extra collective (``--desync-op all_reduce|broadcast|barrier``).
- ``nan``: the loss is multiplied by NaN from the fault step on (NaN loss in the step lines).
- ``nangrad``: from the fault step, for ``--fault-arg`` steps (default 2), the rank's forward adds
  ``0 * sqrt(0 * h)``: the loss stays finite, its backward is NaN, so every rank's gradient norm
  is NaN; the loop logs a warning and skips the optimizer step (as mixed-precision loops do). The
  run ends normally: a clean run with NaN grad-norm warnings.
- ``worker_exception``: the rank's dataset raises inside a DataLoader worker process at the fault
  step (needs ``--workers >= 1``); torch re-raises it in the rank as ``Caught RuntimeError in
  DataLoader worker process N``.
- ``sleep``: the rank sleeps ``--fault-arg`` s inside every step's compute from the fault step.
- ``ckpt_stall``: every rank saves at the fault step; the faulting rank sleeps ``--fault-arg`` s
  before entering the save (DCP's collectives or the save barrier make its peers wait).
- ``oom``: the rank limits its address space (``RLIMIT_AS``) to ``--fault-arg`` MiB above its
  current peak and then grows an activation cache by 64 MiB per micro-batch until allocation fails.
- ``exit0``: the rank's data runs out at the fault step (an uneven shard): it logs "epoch done",
  leaves the loop, destroys its process group and exits with code 0 while its peers still train.

The process-group timeout is ``--pg-timeout-s``.
"""

from __future__ import annotations

import argparse
import datetime
import logging
import os
import resource
import signal
import sys
import time

FAULTS = ("none", "sigkill", "sigstop", "desync", "nan", "nangrad", "worker_exception", "sleep",
          "ckpt_stall", "oom", "exit0")


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m gpufield.testing.faultloop2", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=10, help="optimizer steps")
    p.add_argument("--model", choices=("mlp", "transformer", "conv"), default="mlp")
    p.add_argument("--wrap", choices=("ddp", "fsdp2"), default="ddp")
    p.add_argument("--accum", type=int, default=1, help="micro-batches per optimizer step")
    p.add_argument("--workers", type=int, default=0, help="DataLoader worker processes (0: no DataLoader)")
    p.add_argument("--ckpt", choices=("none", "torch", "dcp"), default="none")
    p.add_argument("--ckpt-every", type=int, default=0, help="save every N steps (0: only a ckpt_stall save)")
    p.add_argument("--log-style", choices=("print", "logging"), default="print")
    p.add_argument("--rank0-log", action="store_true", help="step lines on rank 0 only")
    p.add_argument("--timing", action="store_true", help="per-rank data/compute/comm times in the step line")
    p.add_argument("--fault", choices=FAULTS, default="none")
    p.add_argument("--fault-rank", type=int, default=1)
    p.add_argument("--fault-step", type=int, default=3)
    p.add_argument("--fault-arg", type=float, default=None, help="seconds (sleep, ckpt_stall), MiB (oom), steps (nangrad)")
    p.add_argument("--desync-op", choices=("all_reduce", "broadcast", "barrier"), default="all_reduce")
    p.add_argument("--pg-timeout-s", type=float, default=20.0)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--vocab", type=int, default=256)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=32)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    if a.steps < 1 or a.accum < 1 or a.workers < 0 or a.fault_step < 0 or a.pg_timeout_s <= 0:
        p.error("--steps >= 1, --accum >= 1, --workers >= 0, --fault-step >= 0, --pg-timeout-s > 0 required")
    if a.fault == "worker_exception" and a.workers < 1:
        p.error("--fault worker_exception needs --workers >= 1")
    if a.fault == "ckpt_stall" and a.ckpt == "none":
        p.error("--fault ckpt_stall needs --ckpt torch|dcp")
    return a


class _Shard:
    """Map-style dataset of random token rows; item ``i`` raises when ``bad`` contains it."""

    def __init__(self, n: int, vocab: int, seq: int, seed: int, bad: frozenset[int]):
        self.n, self.vocab, self.seq, self.seed, self.bad = n, vocab, seq, seed, bad

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        import torch

        if i in self.bad:
            raise RuntimeError(f"shard record {i}: unexpected end of stream while decoding sample")
        g = torch.Generator().manual_seed(self.seed * 100003 + i)
        return torch.randint(0, self.vocab, (self.seq + 1,), generator=g)


def _model(a: argparse.Namespace):
    import torch
    from torch import nn

    class LM(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(a.vocab, a.hidden)
            if a.model == "mlp":
                self.body = nn.Sequential(nn.Linear(a.hidden, 4 * a.hidden), nn.GELU(), nn.Linear(4 * a.hidden, a.hidden))
            elif a.model == "transformer":
                layer = nn.TransformerEncoderLayer(a.hidden, 4, 2 * a.hidden, dropout=0.0, batch_first=True)
                self.body = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
            else:
                self.body = nn.Sequential(nn.Conv1d(a.hidden, a.hidden, 3, padding=1), nn.ReLU(),
                                          nn.Conv1d(a.hidden, a.hidden, 3, padding=1))
            self.norm = nn.LayerNorm(a.hidden)
            self.head = nn.Linear(a.hidden, a.vocab)
            self.poison = False  # nangrad: finite forward, NaN backward

        def forward(self, x):
            h = self.emb(x)
            if a.model == "conv":
                h = self.body(h.transpose(1, 2)).transpose(1, 2)
            else:
                h = self.body(h)
            if self.poison:
                h = h + 0.0 * torch.sqrt(0.0 * h)
            return self.head(self.norm(h))

    return LM()


def _wrap(model, a: argparse.Namespace):
    import torch

    if a.wrap == "ddp":
        return torch.nn.parallel.DistributedDataParallel(model)
    from torch.distributed.fsdp import fully_shard

    kinds = (torch.nn.TransformerEncoderLayer,) if a.model == "transformer" else (torch.nn.Linear, torch.nn.Conv1d)
    for m in list(model.modules())[1:]:
        if isinstance(m, kinds):
            fully_shard(m)
    return fully_shard(model)


def _logger(a: argparse.Namespace, rank: int):
    """A ``say(level, text)`` function: print lines or python logging with timestamps."""
    if a.log_style == "print":
        def say(level: int, text: str) -> None:
            out = sys.stdout if level < logging.WARNING else sys.stderr
            out.write(f"[rank{rank}]: {text}\n")
            out.flush()
        return say
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format=f"%(asctime)s %(levelname)s [rank{rank}] %(name)s: %(message)s")
    log = logging.getLogger("train")
    return lambda level, text: log.log(level, text)


def main(argv: list[str] | None = None) -> int:
    """Run the loop on this rank (``RANK``/``WORLD_SIZE`` from torchrun); 0 after the last step."""
    a = _parse(argv)
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=a.pg_timeout_s))
    rank, world = dist.get_rank(), dist.get_world_size()
    say = _logger(a, rank)
    torch.manual_seed(a.seed)
    base = _model(a)
    model = _wrap(base, a)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    mine = a.fault != "none" and a.fault_rank in (-1, rank)
    per_step = a.batch * a.accum
    n_items = per_step * world * (a.steps + 1)
    bad = frozenset()
    if mine and a.fault == "worker_exception":
        first = a.fault_step * per_step  # this rank's sampler index of the fault step's first row
        bad = frozenset(range(first * world, (first + per_step) * world))  # every row that step may map to
    ds = _Shard(n_items, a.vocab, a.seq, a.seed, bad)
    stop_at = a.fault_step if mine and a.fault == "exit0" else None
    if a.workers:
        from torch.utils.data import DataLoader, DistributedSampler

        sampler = DistributedSampler(ds, num_replicas=world, rank=rank, shuffle=False)
        it = iter(DataLoader(ds, batch_size=a.batch, sampler=sampler, num_workers=a.workers,
                             persistent_workers=False, prefetch_factor=2))
        next_batch = lambda: next(it)  # noqa: E731
    else:
        counter = iter(range(rank, n_items, world))
        next_batch = lambda: torch.stack([ds[next(counter)] for _ in range(a.batch)])  # noqa: E731
    if rank == 0 or not a.rank0_log:
        say(logging.INFO, f"model {a.model} ({sum(p.numel() for p in base.parameters())} params), {a.wrap}, "
                          f"world {world}, accum {a.accum}, workers {a.workers}, ckpt {a.ckpt}")
    leak = []
    if mine and a.fault == "oom":
        limit = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 + int((a.fault_arg or 192) * (1 << 20))
    for step in range(a.steps):
        t0 = time.perf_counter()
        hit = mine and step >= a.fault_step
        if hit and step == a.fault_step and a.fault == "sigkill":
            os.kill(os.getpid(), signal.SIGKILL)
        if hit and step == a.fault_step and a.fault == "sigstop":
            os.kill(os.getpid(), signal.SIGSTOP)
        if step == stop_at:
            say(logging.INFO, f"epoch done after {step} steps (data exhausted), leaving the loop")
            dist.destroy_process_group()
            return 0
        if hit and step == a.fault_step and a.fault == "oom":
            resource.setrlimit(resource.RLIMIT_AS, (limit, resource.getrlimit(resource.RLIMIT_AS)[1]))
        base.poison = hit and a.fault == "nangrad" and step < a.fault_step + int(a.fault_arg or 2)
        t_data = t_comp = 0.0
        loss_sum = 0.0
        opt.zero_grad(set_to_none=True)
        for micro in range(a.accum):
            td = time.perf_counter()
            tokens = next_batch()
            t_data += time.perf_counter() - td
            tc = time.perf_counter()
            last = micro == a.accum - 1
            if a.wrap == "ddp":
                ctx = model.no_sync() if not last else _null()
            else:
                model.set_requires_gradient_sync(last)
                ctx = _null()
            with ctx:
                logits = model(tokens[:, :-1])
                loss = torch.nn.functional.cross_entropy(logits.reshape(-1, a.vocab), tokens[:, 1:].reshape(-1))
                if hit and a.fault == "nan":
                    loss = loss * float("nan")
                (loss / a.accum).backward()
            if hit and a.fault == "oom":
                leak.append(torch.ones((64 << 20) // 4))  # an activation cache that is never freed
            loss_sum += float(loss.detach()) / a.accum
            t_comp += time.perf_counter() - tc
        if hit and a.fault == "sleep":
            time.sleep(a.fault_arg or 0.3)
            t_comp += a.fault_arg or 0.3
        if hit and step == a.fault_step and a.fault == "desync":
            if a.desync_op == "all_reduce":
                dist.all_reduce(torch.ones(7))
            elif a.desync_op == "broadcast":
                dist.broadcast(torch.ones(7), src=rank)
            else:
                dist.barrier()
        tm = time.perf_counter()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        gn = float(grad_norm.full_tensor() if hasattr(grad_norm, "full_tensor") else grad_norm)
        if gn != gn or gn in (float("inf"), float("-inf")):
            say(logging.WARNING, f"step {step}: non-finite grad norm ({gn}), skipping optimizer step")
            opt.zero_grad(set_to_none=True)
        else:
            opt.step()
        loss_t = torch.tensor([loss_sum])
        dist.all_reduce(loss_t)
        t_comm = time.perf_counter() - tm
        dt = time.perf_counter() - t0
        if rank == 0 or not a.rank0_log:
            timing = f" | data {t_data * 1e3:.1f} ms | compute {t_comp * 1e3:.1f} ms | comm {t_comm * 1e3:.1f} ms" \
                if a.timing else ""
            say(logging.INFO, f"step {step} | loss {loss_t.item() / world:.4f} | grad_norm {gn:.4f} | "
                              f"{dt:.3f} s/step{timing}")
        if a.ckpt != "none" and ((a.ckpt_every and (step + 1) % a.ckpt_every == 0)
                                 or (a.fault == "ckpt_stall" and step == a.fault_step)):
            _save(a, model, opt, step, rank, say, stall=hit and a.fault == "ckpt_stall")
    if rank == 0 or not a.rank0_log:
        say(logging.INFO, f"training finished: {a.steps} steps")
    dist.barrier()
    dist.destroy_process_group()
    return 0


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _save(a, model, opt, step: int, rank: int, say, stall: bool) -> None:
    import torch
    import torch.distributed as dist

    root = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"ckpt-{os.getppid()}", f"step-{step + 1}")
    say(logging.INFO, f"saving checkpoint step {step + 1} to {root} ({a.ckpt})")
    t0 = time.perf_counter()
    if stall:
        time.sleep(a.fault_arg or 30.0)
    if a.ckpt == "dcp":
        import torch.distributed.checkpoint as dcp

        dcp.save({"model": model.state_dict()}, checkpoint_id=root)
    else:
        os.makedirs(root, exist_ok=True)
        torch.save({"step": step + 1, "model": model.state_dict()}, os.path.join(root, f"rank{rank}.pt"))
        dist.barrier()
    say(logging.INFO, f"checkpoint step {step + 1} saved in {time.perf_counter() - t0:.2f} s")


if __name__ == "__main__":
    sys.exit(main())
