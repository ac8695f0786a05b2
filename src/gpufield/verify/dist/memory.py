"""Per-rank peak memory of the verifier's tensors, with one meaning on CPU and GPU.

*Peak bytes* = bytes of the tensors resident when the measured region starts (the ones the caller
names: graph constants, boxes) + the maximum over time of the bytes of tensor storages allocated
inside the region and still alive (held from Python or from C++, e.g. by autograd).

* GPU: ``torch.cuda.max_memory_allocated`` after ``reset_peak_memory_stats`` (the caching
  allocator's own count of live blocks; it includes everything resident on the device).
* CPU: torch's CPU allocator keeps no public statistics, so :class:`StorageTracker` (a
  ``TorchDispatchMode``) sees every aten op run in the region and counts each *fresh* output
  storage (views, in-place/``out=`` results and any output sharing an input's storage, e.g. a
  collective's output buffer, are not new) from its creation until its ``StorageImpl`` dies — a
  ``weakref.finalize`` on the storage's Python object, which torch keeps alive exactly as long as
  the C++ storage (so tensors held only by autograd are still counted).

What the CPU tracker does not count: scratch memory inside one kernel (BLAS packing buffers,
gloo's transport buffers), Python objects, and tensors created outside the region (counted only
through the resident term). What the GPU number adds: caching-allocator rounding (512 B blocks)
and anything else allocated on the device by the process.
"""

from __future__ import annotations

import threading
import time
import weakref
from dataclasses import asdict, dataclass

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten


def storage_bytes(tensors) -> int:
    """Bytes of the distinct storages behind ``tensors`` (an iterable; non-tensors ignored)."""
    seen: dict[int, int] = {}
    for t in tensors:
        if isinstance(t, torch.Tensor):
            st = t.untyped_storage()
            seen[st.data_ptr()] = st.nbytes()
    return sum(seen.values())


def graph_tensors(graph):
    """Every tensor constant held by ``graph``'s ops (weights, shards, biases, scales)."""
    for n in graph.nodes:
        todo = [n.op]
        while todo:
            op = todo.pop()
            for f in getattr(op, "__dataclass_fields__", {}):
                v = getattr(op, f)
                if isinstance(v, torch.Tensor):
                    yield v
                elif hasattr(v, "__dataclass_fields__") and not isinstance(v, type):
                    todo.append(v)


class StorageTracker(TorchDispatchMode):
    """Live and peak bytes of storages allocated by aten ops while the mode is active (CPU or any device).

    Args:
        inventory: also keep, at every new peak, the list of live tracked storages as
            ``(shape, dtype, bytes)`` of the tensor that created each (what sets the peak).

    Attributes:
        live_bytes: bytes of tracked storages alive now.
        peak_bytes: maximum of ``live_bytes`` since the mode was entered.
        peak_inventory: with ``inventory``, the live storages at the peak (else ``[]``).
    """

    def __init__(self, inventory: bool = False):
        super().__init__()
        self.live_bytes = 0
        self.peak_bytes = 0
        self.peak_inventory: list[tuple[tuple[int, ...], str, int]] = []
        self._inventory = inventory
        self._meta: dict[int, tuple[tuple[int, ...], str]] = {}
        self._sizes: dict[int, int] = {}
        self._lock = threading.Lock()

    def _free(self, key: int) -> None:
        with self._lock:
            self.live_bytes -= self._sizes.pop(key, 0)
            self._meta.pop(key, None)

    def _track(self, t: torch.Tensor) -> None:
        st = t.untyped_storage()
        key, n = st._cdata, st.nbytes()
        with self._lock:
            old = self._sizes.get(key)
            if old is None:
                weakref.finalize(st, self._free, key)
                old = 0
            self._sizes[key] = n
            self.live_bytes += n - old
            if self._inventory:
                self._meta[key] = (tuple(t.shape), str(t.dtype).removeprefix("torch."))
                if self.live_bytes > self.peak_bytes:
                    self.peak_inventory = [(*self._meta[k], b) for k, b in self._sizes.items()]
            self.peak_bytes = max(self.peak_bytes, self.live_bytes)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        rets = func._schema.returns
        outs = out if isinstance(out, (tuple, list)) else (out,)
        inputs = None
        for i, o in enumerate(outs):
            if i < len(rets) and rets[i].alias_info is not None:
                continue  # a view or an in-place / out= result
            for t in tree_flatten(o)[0]:
                if not isinstance(t, torch.Tensor) or t.is_meta:
                    continue
                if inputs is None:  # ops whose schema does not say so (c10d collectives) alias too
                    inputs = {a.untyped_storage().data_ptr() for a in tree_flatten((args, kwargs))[0]
                              if isinstance(a, torch.Tensor) and not a.is_meta}
                if t.untyped_storage().data_ptr() not in inputs:
                    self._track(t)
        return out


@dataclass(frozen=True)
class MemoryReport:
    """Memory of one measured region on one rank.

    Attributes:
        rank: the rank it was measured on.
        resident_bytes: bytes of the caller's tensors alive at the start (weights or shards, box).
        peak_bytes: resident + the maximum of tensors allocated in the region and alive.
        method: ``storage-tracker`` (CPU) or ``cuda-allocator``.
        seconds: wall time of the region.
    """

    rank: int
    resident_bytes: int
    peak_bytes: int
    method: str
    seconds: float

    @property
    def transient_bytes(self) -> int:
        """``peak − resident`` (the paper's revision's invariant metric, verify.md §1.8)."""
        return self.peak_bytes - self.resident_bytes

    def as_dict(self) -> dict:
        """Plain dict (JSON-ready) including ``transient_bytes``."""
        return {**asdict(self), "transient_bytes": self.transient_bytes}


class measure:
    """Context manager measuring one region: ``with measure(resident, device, rank) as m: ...; m.report``.

    Args:
        resident: tensors already alive that belong to the verifier (counted once, by storage).
        device: ``cpu`` or a CUDA device; CUDA uses the caching allocator's statistics.
        rank: rank recorded in the report.
        inventory: CPU only: keep the tracker's :attr:`StorageTracker.peak_inventory` (in
            :attr:`inventory` after the region).
    """

    def __init__(self, resident=(), device: str | torch.device = "cpu", rank: int = 0, inventory: bool = False):
        self.device, self.rank = torch.device(device), rank
        self.resident = storage_bytes(resident)
        self.report: MemoryReport | None = None
        self._want_inventory = inventory
        self.inventory: list[tuple[tuple[int, ...], str, int]] = []

    def __enter__(self):
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
        else:
            self._mode = StorageTracker(inventory=self._want_inventory)
            self._mode.__enter__()
        self._t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            peak, method = torch.cuda.max_memory_allocated(self.device), "cuda-allocator"
            self._mode = None
        else:
            self._mode.__exit__(*exc)
            peak, method = self.resident + self._mode.peak_bytes, "storage-tracker"
            self.inventory = self._mode.peak_inventory
        self.report = MemoryReport(self.rank, self.resident, int(peak), method,
                                   time.perf_counter() - self._t0)
        return False
