"""Microbenchmark of the FFT stage epilogue alone (CUDA): time per variant, kernel and launch shape.

For 2^24 complex outputs (one 256^3 stage) of random raw products it reports the time, ns per real
output, the time-equivalent instruction count c_epi = t * P_INT / (2 * n_out) (fp64.md 1.4; H200
P_INT = 16.7 T/s) and the HBM floor of the bytes moved (r x 3 int32 products + int64 shift in,
complex128 out; 216 B per complex output for 16 moduli). The 32-bit kernel is expected to sit near that
floor (c_epi ~420 at 4.3 TB/s for int8 16), the int64 kernel far above it (run 3: c_epi ~6000).

Usage on a GPU machine::

    PYTHONPATH=src python benchmarks/fp64_epilogue_bench.py [n_out_log2]

(Moved out of ``src/`` from ``gpufield.fp64.kernels.epilogue_bench``, issue 30.)
"""

from __future__ import annotations

import sys
import time

import torch

P_INT_H200 = 16.7e12

SHAPES = ((256, 8), (256, 4), (128, 4), (512, 8), (512, 16), (1024, 8))
"""Launch shapes of the 32-bit kernel swept by :func:`bench` (BLOCK, warps); >= 1 output per thread."""


def _time(fn, reps: int = 5) -> float:
    fn()
    if not torch.cuda.is_available():  # CPU smoke run (interpreter): wall time of one call
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        best = min(best, a.elapsed_time(b) / 1e3)
    return best


def bench(kind: str = "int8", r: int | None = None, n_out: int = 1 << 24, copy_bw: float | None = None) -> list[dict]:
    """Time every variant of both kernels (and the 32-bit kernel's launch shapes) on ``n_out`` outputs.

    Args:
        kind: moduli kind (``"int8"`` / ``"fp8"``); r: moduli count (None: the FFT's automatic count).
        n_out: complex outputs (2^24 = one 256^3 stage).
        copy_bw: device copy bandwidth in B/s for the HBM floor (None: measured with a 2 GiB copy).

    Returns:
        list of records (variant, impl, block, warps, time_s, ns_per_real_output, c_epi, floor_s).
    """
    from gpufield.fp64.fft import auto_num_moduli
    from gpufield.fp64.fft.epilogue import VARIANTS, epilogue_tables
    from gpufield.fp64.kernels.fft_epilogue import DEFAULT_LAUNCH, epilogue_triton

    r = r or auto_num_moduli(kind)
    tab = epilogue_tables(kind, r)
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    g = torch.Generator(device=dev).manual_seed(0)
    T = torch.randint(-(2**20), 2**20, (r, 3, n_out), dtype=torch.int32, device=dev, generator=g)
    shift = torch.full((n_out,), 100, dtype=torch.int64, device=dev)
    if copy_bw is None:
        buf = torch.empty(1 << (29 if dev == "cuda" else 20), dtype=torch.float32, device=dev)
        copy_bw = 2 * buf.numel() * 4 / _time(lambda: buf.clone())
        del buf
    nbytes = n_out * (r * 3 * 4 + 8 + 16)
    out = []
    for v in VARIANTS:
        runs = [("int64", None, None)] + ([("int32", b, w) for b, w in SHAPES] if v != "garner" else [])
        for impl, blk, nw in runs:
            t = _time(lambda v=v, impl=impl, blk=blk, nw=nw: epilogue_triton(T, shift, tab, v, block=blk, num_warps=nw,
                                                                             impl=impl))
            rec = {"variant": v, "impl": impl, "block": blk or (32 if impl == "int64" else DEFAULT_LAUNCH[0]),
                   "warps": nw or (2 if impl == "int64" else DEFAULT_LAUNCH[1]), "time_s": t,
                   "ns_per_real_output": t / (2 * n_out) * 1e9, "c_epi": t * P_INT_H200 / (2 * n_out),
                   "floor_s": nbytes / copy_bw}
            out.append(rec)
            print(f"{kind}{r} {v:8s} {impl} block {rec['block']:4d} warps {rec['warps']}: {t * 1e3:7.3f} ms, "
                  f"c_epi {rec['c_epi']:6.0f}, HBM floor {rec['floor_s'] * 1e3:.3f} ms", flush=True)
    return out


if __name__ == "__main__":
    bench(n_out=1 << int(sys.argv[1]) if len(sys.argv) > 1 else 1 << 24)
