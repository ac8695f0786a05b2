"""``emulate()``: float64 ``torch.matmul`` / ``@`` / ``torch.mm`` / ``torch.bmm`` and ``torch.fft.fftn`` in user
code run on the path a measured crossover table and a policy choose (native FP64, Ozaki-II, cuBLAS emulation,
emulated FFT), with a log of every call's path and, on request, its a-priori error bound.

It is a :class:`torch.overrides.TorchFunctionMode`: inside ``with emulate(): ...`` every call of those functions
on tensors reaches :meth:`EmulateMode.__torch_function__` first. Calls it does not handle (other dtypes, other
functions, autograd-tracked operands, ``out=``, non-default FFT arguments) run unchanged; for handled ones the
choice is :func:`gpufield.fp64.crossover.choose` on the GPU's table (``data/crossover_<gpu>.json``). CPU
tensors and GPUs without a table run native with the reason logged. While a chosen path runs, nested
``emulate()`` modes pass its inner torch calls through (the innermost mode decides, once).

Shape legend: M rows of A, K inner, N columns of B, "..." batch dims.
"""

from __future__ import annotations

import contextvars
import time
from dataclasses import dataclass

import torch
from torch.overrides import TorchFunctionMode

from gpufield.errors import GpufieldError, InputError
from gpufield.fp64.crossover import POLICIES, choose, load_table, path_bound

_IN_PATH = contextvars.ContextVar("gpufield_fp64_in_emulated_path", default=False)

MATMUL_FUNCS = {torch.matmul, torch.Tensor.matmul, torch.Tensor.__matmul__, torch.Tensor.__rmatmul__, torch.mm,
                torch.Tensor.mm, torch.bmm, torch.Tensor.bmm}
FFT_FUNCS = {torch.fft.fftn}
_HANDLED = frozenset(MATMUL_FUNCS | FFT_FUNCS)


@dataclass(frozen=True, kw_only=True, slots=True)
class EmulateConfig:
    """Settings of :func:`emulate`.

    Attributes:
        policy: ``"speed"`` or ``"accuracy"`` (:func:`gpufield.fp64.crossover.choose`).
        tol: ``"speed"``: largest acceptable a-priori bound (err_norm measure for matmul, relative L2 for
            fftn); None = no worse than native as measured in the table.
        error_bound: put each call's a-priori bound of the chosen path in its record.
        measure_time: time each handled call (synchronizes the device around it; CUDA events on GPU).
        allow_cpu: run the chosen emulated paths on CPU tensors too (needs ``table``; for tests and CPU
            checks: the Ozaki-II and FFT torch paths run there, slowly).
        max_distance_log2: table entries farther than this from a call's shape (summed |log2| over dims)
            are not used (native).
        cublas_emulation: let the policy choose cuBLAS's own FP64 emulation (``cublas_emu``, reached by ctypes
            on a cuBLAS handle of gpufield's own, not through torch); False = Ozaki-II and native only.
    """

    policy: str = "speed"
    tol: float | None = None
    error_bound: bool = False
    measure_time: bool = False
    allow_cpu: bool = False
    max_distance_log2: float = 3.0
    cublas_emulation: bool = True

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise InputError(f"policy must be one of {POLICIES}, got {self.policy!r}")
        if self.tol is not None and not (isinstance(self.tol, int | float) and self.tol > 0):
            raise InputError(f"tol must be None or a positive number, got {self.tol!r}")
        if not self.max_distance_log2 >= 0:
            raise InputError(f"max_distance_log2 must be >= 0, got {self.max_distance_log2!r}")


@dataclass(kw_only=True, slots=True)
class PathRecord:
    """One handled call.

    Attributes:
        op: ``"matmul"`` or ``"fftn"``.
        func: the torch function called (e.g. ``"Tensor.__matmul__"``).
        shapes: the operands' shapes.
        dtype: the operands' dtype.
        device: the device.
        path: the path that ran.
        reason: why (policy, table entry, numbers compared; or why native).
        entry_dims: the table entry used ([M, K, N] or the FFT shape), None if none.
        bound: the chosen path's a-priori bound (when asked for; None if unknown).
        time_s: the call's time (when asked for).
    """

    op: str
    func: str
    shapes: list
    dtype: str
    device: str
    path: str
    reason: str
    entry_dims: list | None = None
    bound: float | None = None
    time_s: float | None = None


@dataclass(kw_only=True, slots=True)
class _Call:
    op: str
    A: torch.Tensor
    B: torch.Tensor | None = None


_NAMES = {torch.matmul: "torch.matmul", torch.Tensor.matmul: "Tensor.matmul", torch.Tensor.__matmul__: "@",
          torch.Tensor.__rmatmul__: "@ (reflected)", torch.mm: "torch.mm", torch.Tensor.mm: "Tensor.mm",
          torch.bmm: "torch.bmm", torch.Tensor.bmm: "Tensor.bmm", torch.fft.fftn: "torch.fft.fftn"}


def _fname(func) -> str:
    return _NAMES.get(func) or getattr(func, "__qualname__", None) or repr(func)


def _as_call(func, args, kwargs):
    """(call, why-not): the operands of a handled call, or None and the reason it runs unchanged."""
    if func in MATMUL_FUNCS:
        if len(args) != 2 or kwargs:
            return None, "extra arguments (out=...)"
        A, B = (args[1], args[0]) if func is torch.Tensor.__rmatmul__ else args
        if not (isinstance(A, torch.Tensor) and isinstance(B, torch.Tensor)):
            return None, "not two tensors"
        if A.dtype != torch.float64 or B.dtype != torch.float64 or type(A) is not torch.Tensor \
                or type(B) is not torch.Tensor:
            return None, None
        if A.dim() == 0 or B.dim() == 0:
            return None, "0-d operand"
        return _Call(op="matmul", A=A, B=B), ""
    if func in FFT_FUNCS:
        if not args or not isinstance(args[0], torch.Tensor) or type(args[0]) is not torch.Tensor:
            return None, None
        x = args[0]
        if x.dtype not in (torch.complex128, torch.float64):
            return None, None
        extra = list(args[1:]) + [v for k, v in kwargs.items() if k != "norm"]
        if any(v is not None for v in extra) or kwargs.get("norm") not in (None, "backward"):
            return None, "s=, dim=, out= or a norm other than 'backward' given"
        return _Call(op="fftn", A=x), ""
    return None, None


class EmulateMode(TorchFunctionMode):
    """The function mode behind :func:`emulate` (use that). ``log``: the list of :class:`PathRecord`.

    Args:
        config: :class:`EmulateConfig`.
        table: a crossover table (dict), a path to one, or None (each device's committed table).
    """

    def __init__(self, config: EmulateConfig, table=None) -> None:
        super().__init__()
        self.config = config
        self._given = table if isinstance(table, dict) or table is None else load_table(path=table)
        self.log: list[PathRecord] = []
        self._tables: dict = {}
        self._choices: dict = {}

    def _table_for(self, dev: torch.device):
        if self._given is not None:
            return self._given, ""
        if dev.type != "cuda":
            return None, f"{dev.type} tensor: no crossover table for {dev.type}"
        idx = dev.index if dev.index is not None else torch.cuda.current_device()
        if idx not in self._tables:
            self._tables[idx] = load_table(torch.cuda.get_device_name(idx))
        t = self._tables[idx]
        return t, "" if t is not None else f"no crossover table for {torch.cuda.get_device_name(idx)!r}"

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func not in _HANDLED or _IN_PATH.get():  # every other torch call in the block: straight through
            return func(*args, **kwargs)
        call, why_not = _as_call(func, args, kwargs)
        if call is None:
            if why_not:
                self._note(func, args, "native", f"not handled: {why_not}")
            return func(*args, **kwargs)
        return self._run(func, args, kwargs, call)

    def _note(self, func, args, path, reason, call: _Call | None = None, **kw) -> None:
        ts = [t for t in (call.A, call.B) if t is not None] if call is not None else \
            [a for a in args if isinstance(a, torch.Tensor)]  # A, B in product order (also for __rmatmul__)
        self.log.append(PathRecord(op="fftn" if func in FFT_FUNCS else "matmul", func=_fname(func),
                                   shapes=[list(t.shape) for t in ts], dtype=str(ts[0].dtype) if ts else "?",
                                   device=str(ts[0].device) if ts else "?", path=path, reason=reason, **kw))

    def _dims(self, call: _Call):
        if call.op == "fftn":
            return list(call.A.shape)
        A, B = call.A, call.B
        M = A.shape[-2] if A.dim() >= 2 else 1
        N = B.shape[-1] if B.dim() >= 2 else 1
        return [M, A.shape[-1], N]

    def _run(self, func, args, kwargs, call: _Call):
        cfg = self.config
        A, B = call.A, call.B
        dev = A.device
        if B is not None and B.device != dev:
            return self._native(func, args, kwargs, "operands on different devices", call)
        if torch.is_grad_enabled() and (A.requires_grad or (B is not None and B.requires_grad)):
            return self._native(func, args, kwargs, "autograd: operands require grad (emulated paths have no backward)",
                                call)
        if dev.type != "cuda" and not cfg.allow_cpu:
            return self._native(func, args, kwargs, f"{dev.type} tensor (allow_cpu=False)", call)
        table, why = self._table_for(dev)
        if table is None:
            return self._native(func, args, kwargs, why, call)
        dims = self._dims(call)
        avail = _available(call.op, dev, call.A, cfg.cublas_emulation)
        key = (call.op, tuple(dims), avail, id(table))
        ch = self._choices.get(key)
        if ch is None:  # one choice per shape: the table lookup and the reason text are not redone per call
            ch = choose(table, call.op, dims, policy=cfg.policy, tol=cfg.tol,
                        max_distance_log2=cfg.max_distance_log2, available=avail)
            self._choices[key] = ch
        entry_plan = (ch.entry or {}).get("paths", {}).get(ch.path, {}).get("plan") if ch.entry else None
        bound = None
        if cfg.error_bound:
            bd = {"K": dims[1]} if call.op == "matmul" else {"shape": dims, "plan": entry_plan}
            bound = path_bound(call.op, ch.path, bd)
        t0 = self._tick(dev) if cfg.measure_time else None
        path, reason = ch.path, ch.reason
        token = _IN_PATH.set(True)
        try:
            try:
                out = _execute(func, args, kwargs, call, path, entry_plan)
            except (GpufieldError, RuntimeError) as e:  # e.g. Inf/NaN into the emulated FFT: as torch would
                if path == "native":
                    raise
                reason = f"fallback: {path} raised {type(e).__name__}: {str(e)[:160]} (chosen by: {reason})"
                path = "native"
                bound = path_bound(call.op, "native", {"K": dims[1]} if call.op == "matmul" else {"shape": dims}) \
                    if cfg.error_bound else None
                out = func(*args, **kwargs)
        finally:
            _IN_PATH.reset(token)
        dt = self._tock(dev, t0) if cfg.measure_time else None
        self._note(func, args, path, reason, call, entry_dims=_entry_dims(ch.entry), bound=bound, time_s=dt)
        return out

    def _native(self, func, args, kwargs, reason, call: _Call | None = None):
        t0 = self._tick(args[0].device) if self.config.measure_time else None
        token = _IN_PATH.set(True)
        try:
            out = func(*args, **kwargs)
        finally:
            _IN_PATH.reset(token)
        dt = self._tock(args[0].device, t0) if self.config.measure_time else None
        self._note(func, args, "native", reason, call, time_s=dt)
        return out

    @staticmethod
    def _tick(dev):
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        return time.perf_counter()

    @staticmethod
    def _tock(dev, t0):
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        return time.perf_counter() - t0


def _entry_dims(entry):
    if entry is None:
        return None
    return [entry["M"], entry["K"], entry["N"]] if entry["op"] == "matmul" else list(entry["shape"])


_GEMM_PATHS = frozenset({"native"} | {f"ozaki_int8_{L}" for L in range(2, 21)} | {f"ozaki_fp8_{L}" for L in range(2, 21)})
_GEMM_PATHS_CUDA = _GEMM_PATHS | {"cublas_emu"}
_FFT_PATHS = frozenset({"native", "emulated_fft"})
_NATIVE = frozenset({"native"})


def _available(op: str, dev: torch.device, x: torch.Tensor, cublas: bool = True) -> frozenset:
    if op == "fftn":
        ok = 1 <= x.dim() <= 3 and all(n >= 1 and n & (n - 1) == 0 and n <= 1024 for n in x.shape)
        return _FFT_PATHS if ok else _NATIVE
    return _GEMM_PATHS_CUDA if dev.type == "cuda" and cublas else _GEMM_PATHS


def _plan(plan_fields: dict | None, dev: torch.device):
    from gpufield.fp64.fft import EmulatedFftPlan

    f = dict(plan_fields or {"backend": "int8", "epilogue": "triton", "variant": "kulisch"})
    f.pop("num_moduli", None)  # the plan resolves it from the bit widths
    if dev.type != "cuda":  # the Triton kernels need a GPU (or the interpreter): the torch path, same bits
        f["epilogue"] = "torch"
        f.pop("int8_gemm", None)
    return EmulatedFftPlan(**f)


def _execute(func, args, kwargs, call: _Call, path: str, plan_fields):
    if path == "native":
        return func(*args, **kwargs)
    if call.op == "fftn":
        from gpufield.fp64 import fftn_fp64_emulated

        return fftn_fp64_emulated(call.A, _plan(plan_fields, call.A.device))
    A, B = call.A, call.B
    a1, b1 = A.dim() == 1, B.dim() == 1
    A2 = A.unsqueeze(0) if a1 else A
    B2 = B.unsqueeze(-1) if b1 else B
    if path == "cublas_emu":
        from gpufield.fp64.cublas_emu import cublas_emulated_gemm

        gemm = cublas_emulated_gemm(A.device.index if A.device.index is not None else torch.cuda.current_device())
        if A2.dim() == 2 and B2.dim() == 2:
            C = gemm(A2, B2)
        else:
            bs = torch.broadcast_shapes(A2.shape[:-2], B2.shape[:-2])
            Ab = A2.expand(bs + A2.shape[-2:]).reshape((-1,) + A2.shape[-2:])
            Bb = B2.expand(bs + B2.shape[-2:]).reshape((-1,) + B2.shape[-2:])
            C = torch.stack([gemm(Ab[i], Bb[i]) for i in range(Ab.shape[0])]).reshape(bs + (A2.shape[-2], B2.shape[-1]))
    else:
        from gpufield.fp64 import ozaki_matmul

        _, kind, L = path.split("_")
        C = ozaki_matmul(A2, B2, num_moduli=int(L), backend=kind)
    if a1:
        C = C.squeeze(-2)
    if b1:
        C = C.squeeze(-1)
    return C


def emulate(policy: str = "speed", *, tol: float | None = None, error_bound: bool = False,
            measure_time: bool = False, table=None, allow_cpu: bool = False,
            max_distance_log2: float = 3.0, cublas_emulation: bool = True) -> EmulateMode:
    """Run float64 matrix products and FFTs in the enclosed code on the path the GPU's crossover table chooses.

    Handled: ``torch.matmul``, ``Tensor.matmul`` / ``@`` (both sides), ``torch.mm``, ``torch.bmm`` on two float64
    tensors, and ``torch.fft.fftn`` on a float64 / complex128 tensor with default ``s``, ``dim``, ``norm``.
    Anything else runs unchanged. Paths: ``native``; ``ozaki_int8_<L>`` / ``ozaki_fp8_<L>``
    (:func:`gpufield.fp64.ozaki_matmul`, fast mode); ``cublas_emu`` (:mod:`gpufield.fp64.cublas_emu`);
    ``emulated_fft`` (:func:`gpufield.fp64.fftn_fp64_emulated`, the table's plan). Autograd-tracked operands,
    CPU tensors (unless ``allow_cpu``) and GPUs without a table run native, with the reason in the log.

    Example::

        with gpufield.fp64.emulate("accuracy", error_bound=True) as em:
            x = solver(A, b)            # plain torch code
        for r in em.log: print(r.func, r.shapes, r.path, r.bound)

    Args:
        policy: ``"speed"`` or ``"accuracy"`` (see :mod:`gpufield.fp64.crossover`).
        tol: with ``"speed"``: the largest acceptable a-priori bound; None = no worse than native as measured.
        error_bound: record each call's a-priori bound (matmul: max |dC_ij| / (||a_i|| ||b_j||); fftn:
            relative L2).
        measure_time: record each call's time (synchronizes the device around each handled call).
        table: a crossover table (dict, or a path to a JSON file) for every device; None = the committed
            table of each GPU.
        allow_cpu: run chosen emulated paths on CPU tensors as well (needs ``table``).
        max_distance_log2: farthest table entry used, in summed |log2| over the dims.
        cublas_emulation: whether cuBLAS's own FP64 emulation may be chosen (see :class:`EmulateConfig`).

    Returns:
        The :class:`EmulateMode` (a context manager; ``.log`` holds the :class:`PathRecord` list).

    Raises:
        InputError: a bad policy, tol or table.
    """
    cfg = EmulateConfig(policy=policy, tol=tol, error_bound=error_bound, measure_time=measure_time,
                        allow_cpu=allow_cpu, max_distance_log2=max_distance_log2, cublas_emulation=cublas_emulation)
    if allow_cpu and table is None:
        raise InputError("allow_cpu=True needs a table (there is no crossover table of a CPU)")
    return EmulateMode(cfg, table)
