"""Two processes on one large plain log file, with the same events as one (internal).

Parsing candidate lines is Python work (~20 us per event); on an event-dense log it is most of the
time. With ``IngestOptions(workers=2)`` a plain (uncompressed) regular file of at least
:data:`MIN_BYTES` is read in alternating stretches of the scanner's read grid (block ``i`` is read
``i * block_bytes`` bytes into the file, cut at its last newline): this process scans
:data:`OWN_READS` reads (with the ``on_block`` hooks, as always), while one helper process scans the
next :data:`HELPER_READS` reads; then this process cuts those blocks again (cheap: no parsing),
calls the hooks on them and yields the helper's events in their place, and goes on with the next
stretch. Events, their order, the hooks' calls and the counters are those of the one-process scan:

* the helper starts from the state this process had when the stretch before began, and derives
  the state at its own start (line count, loss-thinning chunk count, carried bytes) by cutting
  that stretch's blocks the same way; this process compares that assumed state with the real one
  before using the helper's events;
* each helper event is tagged with the block during which it was emitted, so it is yielded right
  after that block's ``on_block`` call, as the one-process scan yields it;
* invalid-timestamp warnings are recounted here event by event; a stretch in which the helper
  raised any other warning (a record cut, an over-long line), or any mismatch of state (a record
  still open across the stretch boundary, a block without a newline), makes this process scan the
  rest of the file itself, from its exact state.

Memory stays bounded: the helper returns one stretch of events at a time (64 MiB of log).
Compressed files, standard input, pipes and files under :data:`MIN_BYTES` are scanned by one
process (on a 100 MB file the helper's start-up and its one stretch cost more wall time than they
saved: benchmarks/triage_RESULTS.md).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from gpufield.triage.parsers._scan import CHUNK_LINES, ScanCounters, ScanState, _ThinState, scan

__all__ = ["MIN_BYTES", "OWN_READS", "HELPER_READS", "eligible", "scan_split"]

#: smallest file (bytes on disk) read by two processes
MIN_BYTES = 192 << 20
#: reads (blocks) this process parses per stretch. This process also runs the ``on_block`` hooks
#: (phase banners, step times, miner: ~40 % of one process's CPU on a dense log) and the reducer on
#: every block, so it parses the smaller share: 2 of 10 balanced the two processes' CPU best on the
#: dense 300 MB log of ``benchmarks/triage_scale.py`` (3/6: 6.9 / 5.0 CPU-s, 2/8: 6.4 / 5.7, 1/8: 5.7 /
#: 6.5; benchmarks/triage_RESULTS.md)
OWN_READS = 2
#: reads the helper parses per stretch
HELPER_READS = 8


def eligible(path: str, block_bytes: int) -> bool:
    """True for a regular file (not a pipe, not standard input) of at least :data:`MIN_BYTES`."""
    if path.startswith(("/dev/fd/", "/proc/self/fd/")):
        return False
    try:
        st = os.stat(path)
    except OSError:
        return False
    import stat

    return stat.S_ISREG(st.st_mode) and st.st_size >= max(MIN_BYTES, (OWN_READS + 1) * block_bytes)


@dataclass(frozen=True, slots=True)
class _Start:
    """The exact scan state at the start of this process's stretch (what the helper starts from)."""

    reads: int
    carry: bytes
    base: int
    chunks: int
    first_done: bool


def _tail(path: str, start: _Start, skip: int, count: int, block_bytes: int, with_loss: bool, loss_every: int,
          year: int, utc_offset_s: int, not_after_ns: int | None, setup_once: bool = False) -> dict[str, Any]:
    """Helper process: cut ``skip`` reads after ``start`` without parsing, then scan ``count`` reads.

    Returns:
        ``ok`` (False: the stretch could not be derived, nothing else), ``assumed`` (carry, base,
        thin chunks, first_done at the helper's start), ``events`` ``[(block number, event)]``,
        ``candidates``, ``setup_repeats``, ``clean`` (no warning but invalid timestamps), and the
        state at its end. Set-up repeats are found among the stretch's own lines only (a set-up
        line first seen in an earlier stretch is parsed again here, and dropped by the reducer).
    """
    from gpufield.triage.ingest import make_table

    table = make_table(with_loss, loss_every, setup_once)
    thin_find = table.thin_scan.find if table.thin_scan is not None else None
    with open(path, "rb") as f:
        f.seek(start.reads * block_bytes)
        carry, base, chunks, first_done = start.carry, start.base, start.chunks, start.first_done
        for _ in range(skip):
            chunk = f.read(block_bytes)
            if len(chunk) < block_bytes:
                return {"ok": False}
            data = carry + chunk if carry else chunk
            cut = data.rfind(b"\n")
            if cut < 0:
                return {"ok": False}
            n = data.count(b"\n", 0, cut + 1)
            base += n
            if thin_find is not None:
                chunks += -(-n // CHUNK_LINES)
                if not first_done:
                    first_done = thin_find(data, 0, cut + 1) >= 0
            carry = data[cut + 1:]
        state = ScanState(carry=carry, base=base, reads=start.reads + skip,
                          thin=_ThinState(chunks=chunks, first_done=first_done))
        counters = ScanCounters()
        blocks = [0]

        def tick(block, starts, n, b) -> None:
            blocks[0] += 1

        # the tag is read as each event comes out: the number of blocks the scan had begun by then
        events = [(blocks[0], e) for e in
                  scan(f, path, table, year, utc_offset_s, counters, block_bytes, None, not_after_ns, tick,
                       state=state, stop_after_reads=start.reads + skip + count)]
    bad = counters.bad_timestamps
    expected = min(bad, 5) + (1 if bad > 5 and not state.stopped else 0)
    return {"ok": True, "assumed": (carry, base, chunks, first_done), "events": events,
            "candidates": counters.candidates, "setup_repeats": counters.setup_repeats,
            "clean": len(counters.warnings) == expected,
            "end": (state.carry, state.base, state.reads, state.thin.chunks, state.thin.first_done,
                    state.pending, state.stopped)}


class _Helper:
    """One helper process (``python -c`` running :func:`_serve`), fed pickled tasks on its standard
    input and answering on its standard output; never imports the caller's ``__main__`` (as
    multiprocessing's spawn would)."""

    def __init__(self) -> None:
        import subprocess
        import sys

        import gpufield

        root = os.path.dirname(os.path.dirname(os.path.abspath(gpufield.__file__)))
        code = f"import sys; sys.path.insert(0, {root!r}); from gpufield.triage._split import _serve; _serve()"
        self._p = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self.busy = False

    def submit(self, *task: Any) -> None:
        import pickle

        pickle.dump(task, self._p.stdin, protocol=pickle.HIGHEST_PROTOCOL)  # type: ignore[arg-type]
        self._p.stdin.flush()  # type: ignore[union-attr]
        self.busy = True

    def result(self) -> dict[str, Any]:
        import pickle

        try:
            return pickle.load(self._p.stdout)  # type: ignore[arg-type]
        finally:
            self.busy = False

    def close(self) -> None:
        if self.busy:  # a task still running that nobody will read: stop it
            self._p.kill()
        else:
            try:
                self._p.stdin.close()  # type: ignore[union-attr]  (EOF: the helper exits)
            except OSError:
                self._p.kill()
        try:
            self._p.wait(timeout=10)
        except Exception:  # noqa: BLE001
            self._p.kill()
            self._p.wait()
        self._p.stdout.close()  # type: ignore[union-attr]


def _serve() -> None:
    """The helper's loop: one :func:`_tail` per pickled task on standard input, until EOF.

    Ctrl-C is left to the parent (which kills the helper); a parent gone (closed pipe) ends it quietly.
    """
    import copyreg
    import pickle
    import signal
    import sys

    signal.signal(signal.SIGINT, signal.SIG_IGN)

    from gpufield.triage.events import Event

    names = Event.__slots__  # an event travels as its field values: half the time of the dataclass default
    copyreg.pickle(Event, lambda e: (Event, tuple([getattr(e, k) for k in names])))
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # anything the library prints goes to stderr, not into the answers
    src = sys.stdin.buffer
    while True:
        try:
            task = pickle.load(src)
        except EOFError:
            return
        try:
            res = _tail(*task)
        except Exception as e:  # noqa: BLE001 - reported to the caller, which goes on alone
            res = {"ok": False, "error": repr(e)}
        try:
            pickle.dump(res, out, protocol=pickle.HIGHEST_PROTOCOL)
            out.flush()
        except BrokenPipeError:  # the parent stopped reading (done, interrupted or killed)
            return


def scan_split(stream, path: str, table, year: int, opts, counters: ScanCounters, not_after_ns: int | None,
               on_block) -> Any:
    """The events of ``path`` (opened as ``stream``, at its start), scanned by two processes; same
    events, order, hook calls and counters as ``scan`` by one (see the module docstring)."""
    bb = opts.block_bytes
    state = ScanState()
    args = (OWN_READS, HELPER_READS, bb, opts.with_loss, opts.loss_every, year, opts.utc_offset_s, not_after_ns,
            opts.setup_once)
    helper: _Helper | None = None

    def own(**kw):
        return scan(stream, path, table, year, opts.utc_offset_s, counters, bb, None, not_after_ns, on_block,
                    state=state, **kw)

    size = os.path.getsize(path)

    def submit(start: _Start) -> bool:
        if (start.reads + OWN_READS) * bb >= size:  # the file ends within this process's stretch: no helper work
            return False
        try:
            helper.submit(path, start, *args)  # type: ignore[union-attr]
            return True
        except OSError as e:  # the helper died (killed, out of memory): this process goes on alone
            counters.helper_stop = f"helper gone: {e}"
            return False

    try:
        try:
            helper = _Helper()
        except OSError as e:
            counters.helper_stop = f"helper not started: {e}"
            yield from own()
            return
        while True:
            if not helper.busy and not submit(_Start(state.reads, state.carry, state.base, state.thin.chunks,
                                                     state.thin.first_done)):
                yield from own()  # the last stretch (or no helper): this process alone
                return
            own_end = state.reads + OWN_READS
            yield from own(stop_after_reads=own_end)
            if not state.stopped:  # the file ended within this stretch
                return
            try:
                res = helper.result()
            except Exception:  # noqa: BLE001 - a helper that died: this process goes on alone
                res = {"ok": False}
            if "error" in res:  # the helper failed (a bug; it says why): this process goes on alone
                counters.helper_stop = res["error"]
                yield from own()
                return
            if not (res["ok"] and res["clean"] and state.pending is None and res["assumed"] ==
                    (state.carry, state.base, state.thin.chunks, state.thin.first_done)):
                # this stretch cannot be taken (a record open across its start, a warning in it, ...):
                # this process parses it too, then hands the helper the next one from the exact state
                counters.helper_stop = ("helper could not derive its start" if not res["ok"] else
                                        "a warning in the helper's stretch" if not res["clean"] else
                                        "a record open at the stretch boundary" if state.pending is not None else
                                        "state mismatch")
                counters.helper_redone += 1
                yield from own(stop_after_reads=own_end + HELPER_READS)
                if not state.stopped:
                    return
                continue
            carry, base, reads, chunks, first_done, pending, stopped = res["end"]
            if stopped:  # the helper's next stretch starts now, while this one is used
                submit(_Start(reads, carry, base, chunks, first_done))
            events, i, block = res["events"], 0, 0
            for _ in own(stop_after_reads=own_end + HELPER_READS, parse=False):
                block += 1
                while i < len(events) and events[i][0] <= block:
                    ev = events[i][1]
                    counters.count(ev)
                    yield ev
                    i += 1
            for _, ev in events[i:]:
                counters.count(ev)
                yield ev
            counters.candidates += res["candidates"]
            counters.setup_repeats += res["setup_repeats"]
            counters.helper_blocks += block
            if (carry, base, reads, stopped) != (state.carry, state.base, state.reads, state.stopped):
                raise AssertionError(f"{path}: helper and reader cut the blocks differently")  # a bug, not input
            state.thin = _ThinState(chunks=chunks, first_done=first_done)
            state.pending = pending
            if not stopped:
                return
    finally:
        if helper is not None:
            helper.close()
