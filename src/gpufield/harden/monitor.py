"""The optional one-line hook a training loop calls so ``gpufield run`` sees its progress first-hand.

Usage in a training loop (every call is a no-op outside ``gpufield run``)::

    from gpufield.harden import monitor

    for step in range(steps):
        loss = compute(batch)
        with monitor.collective():          # around the step's gradient/loss all-reduce
            dist.all_reduce(loss)
        monitor.step(step)                  # after the optimizer step
        if step % 500 == 0:
            with monitor.phase("checkpoint"):   # a long phase: the phase timeout applies
                save(...)

**Channel.** ``gpufield run`` sets ``GPUFIELD_MONITOR_DIR`` in the job's environment. On its first
call the hook opens ``$GPUFIELD_MONITOR_DIR/rank<RANK>.log`` (``O_APPEND``) and writes one short
text record per event with a single ``os.write`` (no buffering, so a rank that is killed or stopped
has already written everything it did)::

    I <pid> <host> <local_rank> <gpu> <faulthandler 0|1>   # once, at the first call
    S <step> <t_ns>                                         # monitor.step
    A <seq> <t_ns>                                          # entering monitor.collective()
    D <seq> <t_ns>                                          # leaving it
    P <phase> <t_ns> / E <phase> <t_ns>                     # monitor.phase begin / end

``t_ns`` is ``time.time_ns()`` (wall clock, so arrivals of ranks on one host compare exactly; across
hosts they compare within the hosts' clock skew). The supervisor tails these files like log files.

**Stack dumps.** The first call also registers :func:`faulthandler.register` for ``SIGUSR1``,
writing all threads' Python stacks to ``stack-rank<RANK>.txt`` in the same folder; the supervisor
sends ``SIGUSR1`` on a hang only to processes whose ``I`` record says the handler is registered (a
process without a handler would be killed by the signal). Pass ``stacks=False`` to :func:`configure`
to leave ``SIGUSR1`` alone (a loop that uses it itself).

**Cost.** One ``time.time_ns()`` and one ``os.write`` of ~30 bytes per call: a few microseconds
(``benchmarks/harden_faults.py`` measures it against the step time).
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import signal
import socket
import time
from collections.abc import Iterator

#: environment variable ``gpufield run`` sets to the folder of the per-rank records
ENV_DIR = "GPUFIELD_MONITOR_DIR"

_fd: int | None = None
_off = False  # True once we know there is no supervisor (one env lookup, then every call returns at once)
_seq = 0
_stacks = True
_stack_file = None


def configure(*, stacks: bool = True) -> None:
    """Choose before the first hook call whether ``SIGUSR1`` dumps Python stacks (default True).

    Args:
        stacks: register :func:`faulthandler.register` on ``SIGUSR1``.
    """
    global _stacks
    _stacks = stacks


def _open() -> int | None:
    global _fd, _off, _stack_file
    folder = os.environ.get(ENV_DIR)
    if not folder:
        _off = True
        return None
    rank = os.environ.get("RANK", "0")
    _fd = os.open(os.path.join(folder, f"rank{rank}.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    fh = 0
    if _stacks and hasattr(signal, "SIGUSR1"):
        _stack_file = open(os.path.join(folder, f"stack-rank{rank}.txt"), "a")  # noqa: SIM115 (lives with the process)
        faulthandler.register(signal.SIGUSR1, file=_stack_file, all_threads=True, chain=False)
        fh = 1
    gpu = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")
    local = int(os.environ.get("LOCAL_RANK", "0"))
    gpu_name = gpu[local] if local < len(gpu) and gpu[local] else str(local)
    os.write(_fd, f"I {os.getpid()} {socket.gethostname()} {local} {gpu_name} {fh}\n".encode())
    return _fd


def _write(rec: str) -> None:
    fd = _fd if _fd is not None else (None if _off else _open())
    if fd is not None:
        os.write(fd, rec.encode())


def step(step: int) -> None:
    """Record that this rank finished optimizer step ``step``.

    Args:
        step: the step number (any increasing integer; the supervisor compares ranks by it).
    """
    if _off:
        return
    _write(f"S {int(step)} {time.time_ns()}\n")


@contextlib.contextmanager
def collective() -> Iterator[None]:
    """Context manager around a step's collective: records arrival (enter) and departure (exit).

    The supervisor compares the ranks' arrival times at the same collective (arrival skew,
    triage.md 5.7) to name a straggler, and on a hang names the ranks that never arrived.
    """
    global _seq
    if _off:
        yield
        return
    _seq += 1
    seq = _seq
    _write(f"A {seq} {time.time_ns()}\n")
    yield
    _write(f"D {seq} {time.time_ns()}\n")


@contextlib.contextmanager
def phase(name: str) -> Iterator[None]:
    """Context manager around a long phase (``"checkpoint"``, ``"eval"``): the supervisor applies its
    phase timeout instead of the hang timeout while this rank is inside it.

    Args:
        name: phase name, one word.
    """
    if _off:
        yield
        return
    word = "".join(name.split()) or "phase"
    _write(f"P {word} {time.time_ns()}\n")
    try:
        yield
    finally:
        _write(f"E {word} {time.time_ns()}\n")
