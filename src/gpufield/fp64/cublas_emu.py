"""cuBLAS's own FP64 emulation (cuBLAS 13.x, Ozaki scheme on integer tensor cores) reached from Python by ctypes.

torch (2.11 / 2.13) has no Python switch for it: its float64 ``matmul`` calls ``cublasDgemm`` on a handle whose
math mode torch sets to ``CUBLAS_DEFAULT_MATH`` (or TF32) each time it fetches the handle, so
``cublasSetMathMode(torch.cuda.current_blas_handle(), CUBLAS_FP64_EMULATED_FIXEDPOINT_MATH)`` does not survive
to the next product, and the process-wide ``CUBLAS_EMULATE_DOUBLE_PRECISION`` / ``CUBLAS_EMULATION_STRATEGY``
variables are read when cuBLAS starts, not per call. :class:`CublasEmulatedGemm` instead holds a cuBLAS handle
of its own in the libcublas that torch loaded, sets ``CUBLAS_FP64_EMULATED_FIXEDPOINT_MATH`` and the ``EAGER``
strategy on it (on Hopper the default strategy keeps native DGEMM), and calls ``cublasDgemm_v2`` on torch's
current stream with torch-allocated memory. One handle and workspace per device: a call on another stream than
the previous call's first waits for that stream (the workspace is never used by two streams at once). Enum values from cuBLAS 13 ``cublas_api.h``.

Shape legend: M rows of A, K inner, N columns of B.
"""

from __future__ import annotations

import ctypes
import threading

from gpufield.errors import InputError

CUBLAS_DEFAULT_MATH = 0
CUBLAS_FP64_EMULATED_FIXEDPOINT_MATH = 8
CUBLAS_EMULATION_STRATEGY_DEFAULT = 0
CUBLAS_EMULATION_STRATEGY_EAGER = 2
CUBLAS_OP_N = 0
WORKSPACE_BYTES = 1 << 30
"""Workspace given to the emulating handle (the emulation stores integer slices of A and B)."""

_LOCK = threading.Lock()
_INSTANCES: dict = {}


class CublasUnavailable(RuntimeError):
    """cuBLAS FP64 emulation cannot be reached here (no CUDA, no libcublas, or a cuBLAS without the API)."""


def _libcublas_path() -> str:
    """Path of the libcublas.so torch loaded in this process (from /proc/self/maps)."""
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.split()[-1] if line.strip() else ""
                name = path.rsplit("/", 1)[-1]
                if name.startswith("libcublas.so"):
                    return path
    except OSError:
        pass
    return "libcublas.so.13"


def _check(status: int, what: str) -> None:
    if status != 0:
        raise CublasUnavailable(f"{what} returned cuBLAS status {status}")


class CublasEmulatedGemm:
    """Float64 GEMM through cuBLAS's fixed-point FP64 emulation on a handle of its own (one per CUDA device).

    Use :func:`cublas_emulated_gemm` to get the instance of a device; call it like ``A @ B``.

    Args:
        device_index: CUDA device index.

    Raises:
        CublasUnavailable: no CUDA, libcublas not found, or it lacks the cuBLAS 13 emulation API.
    """

    def __init__(self, device_index: int) -> None:
        import torch

        if not torch.cuda.is_available():
            raise CublasUnavailable("no CUDA device")
        self.device = torch.device("cuda", device_index)
        with torch.cuda.device(self.device):
            torch.ones(1, 1, dtype=torch.float64, device=self.device) @ torch.ones(
                1, 1, dtype=torch.float64, device=self.device)  # makes torch load libcublas
            path = _libcublas_path()
            try:
                lib = ctypes.CDLL(path)
            except OSError as e:
                raise CublasUnavailable(f"cannot load {path}: {e}") from None
            for sym in ("cublasSetEmulationStrategy", "cublasSetMathMode", "cublasDgemm_v2"):
                if not hasattr(lib, sym):
                    raise CublasUnavailable(f"{path} has no {sym} (cuBLAS older than 13.0 Update 2?)")
            self.lib = lib
            self.path = path
            h = ctypes.c_void_p()
            _check(lib.cublasCreate_v2(ctypes.byref(h)), "cublasCreate_v2")
            self.handle = h
            ver = ctypes.c_int()
            _check(lib.cublasGetVersion_v2(h, ctypes.byref(ver)), "cublasGetVersion_v2")
            self.version = ver.value
            _check(lib.cublasSetMathMode(h, ctypes.c_int(CUBLAS_FP64_EMULATED_FIXEDPOINT_MATH)), "cublasSetMathMode")
            _check(lib.cublasSetEmulationStrategy(h, ctypes.c_int(CUBLAS_EMULATION_STRATEGY_EAGER)),
                   "cublasSetEmulationStrategy")
            self._ws = torch.empty(WORKSPACE_BYTES, dtype=torch.uint8, device=self.device)
            _check(lib.cublasSetWorkspace_v2(h, ctypes.c_void_p(self._ws.data_ptr()), ctypes.c_size_t(WORKSPACE_BYTES)),
                   "cublasSetWorkspace_v2")
            mode = ctypes.c_int(-1)
            _check(lib.cublasGetMathMode(h, ctypes.byref(mode)), "cublasGetMathMode")
            self.math_mode = mode.value
        self._last_stream = None
        self._alpha = ctypes.c_double(1.0)
        self._beta = ctypes.c_double(0.0)
        lib.cublasDgemm_v2.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                                       ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p,
                                       ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int]

    def __call__(self, A_MK, B_KN):
        """C = A @ B for float64 CUDA matrices on this device (any strides; copies made contiguous).

        Args:
            A_MK: float64 [M, K]; B_KN: float64 [K, N], same device.

        Returns:
            float64 [M, N], contiguous.

        Raises:
            InputError: wrong dtype, rank, device or shapes; dimensions beyond int32.
            CublasUnavailable: a cuBLAS call failed.
        """
        import torch

        for nm, X in (("A", A_MK), ("B", B_KN)):
            if X.dtype != torch.float64 or X.dim() != 2 or X.device != self.device:
                raise InputError(f"{nm} must be a 2-D float64 tensor on {self.device}, got {X.dtype} "
                                 f"{tuple(X.shape)} on {X.device}")
        M, K = A_MK.shape
        K2, N = B_KN.shape
        if K != K2:
            raise InputError(f"inner dimensions differ: {tuple(A_MK.shape)} @ {tuple(B_KN.shape)}")
        if max(M, N, K) >= 2**31:
            raise InputError(f"dimensions beyond int32: {M} x {K} x {N}")
        C = torch.empty((M, N), dtype=torch.float64, device=self.device)
        if 0 in (M, N):
            return C
        if K == 0:
            return C.zero_()
        a = A_MK.contiguous()
        b = B_KN.contiguous()
        with _LOCK, torch.cuda.device(self.device):
            cur = torch.cuda.current_stream(self.device)
            if self._last_stream is not None and self._last_stream != cur:
                cur.wait_stream(self._last_stream)  # one handle, one workspace: uses on two streams never overlap
            self._last_stream = cur
            stream = cur.cuda_stream
            _check(self.lib.cublasSetStream_v2(self.handle, ctypes.c_void_p(stream)), "cublasSetStream_v2")
            # row-major C = A B is column-major C^T = B^T A^T: (N x K)(K x M)
            _check(self.lib.cublasDgemm_v2(self.handle, CUBLAS_OP_N, CUBLAS_OP_N, N, M, K, ctypes.byref(self._alpha),
                                           b.data_ptr(), N, a.data_ptr(), K, ctypes.byref(self._beta),
                                           C.data_ptr(), N), "cublasDgemm_v2")
        return C


def cublas_emulated_gemm(device_index: int = 0) -> CublasEmulatedGemm:
    """The process's :class:`CublasEmulatedGemm` for a CUDA device (created at the first call).

    Raises:
        CublasUnavailable: as :class:`CublasEmulatedGemm`.
    """
    with _LOCK:
        inst = _INSTANCES.get(device_index)
    if inst is None:
        inst = CublasEmulatedGemm(device_index)
        with _LOCK:
            inst = _INSTANCES.setdefault(device_index, inst)
    return inst
