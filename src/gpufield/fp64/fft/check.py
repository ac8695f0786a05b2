"""`gpufield fp64 fft`: run the emulated FFT on random data and report its error next to numpy's.

References, at every size:

* up to 32^3 points a dense long-double DFT of the whole array
  (:func:`gpufield.fp64.fft.reference.dft_longdouble`);
* at every size, sampled outputs computed in long double from the DFT definition
  (:func:`sampled_dft_longdouble`: O(N) per sampled line, exact angle indices), reported as the largest
  relative error on the samples for the emulated transform and for numpy.fft;
* numpy.fft itself (relative L2 of the emulated result against it).

Before anything is allocated, :func:`check_plan` estimates the bytes the check needs (the plan's chunk
workspace and full-size arrays, :mod:`gpufield.fp64.fft.memory`) against the memory available, and the
time of the CPU path from the rate measured on a 2-core VM (``gpufield/fp64/data/cpu_rates.json``).

Shape legend: none beyond ``shape`` (arrays are complex128 of that shape).
"""

from __future__ import annotations

import json
import math
import os
import time
from functools import cache
from importlib import resources

import numpy as np

HOST_ARRAYS = 5
"""Full-size complex128 host arrays the check holds at its peak: input, result, round trip, numpy's result
and numpy's work array."""

SAMPLES_PER_LINE = 4


@cache
def cpu_rates() -> dict:
    """Measured CPU seconds per complex point and stage (``gpufield/fp64/data/cpu_rates.json``)."""
    return json.loads(resources.files("gpufield.fp64").joinpath("data", "cpu_rates.json").read_text("utf-8"))


def available_host_bytes() -> int | None:
    """Bytes of host memory available now: psutil if installed, else /proc/meminfo, else os.sysconf."""
    try:
        import psutil

        return int(psutil.virtual_memory().available)
    except ImportError:
        pass
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def _lines(points: int) -> int:
    return 2 if points <= 1 << 24 else 1


def check_plan(shape: tuple[int, ...], plan, device: str) -> dict:
    """Bytes and time the check of ``shape`` needs, and whether it fits; allocates nothing.

    Args:
        shape: 1-3 power-of-two sides.
        plan: :class:`gpufield.fp64.fft.stage.EmulatedFftPlan`.
        device: ``"cpu"`` or a CUDA device string.

    Returns:
        dict: ``host_bytes_needed``, ``host_bytes_available``, ``device_bytes_needed`` and
        ``device_bytes_available`` (None on CPU), ``fits`` (bool), ``estimated_s`` (CPU path: forward +
        inverse + sampled reference at the measured rates; None on CUDA) and ``rate_source``.
    """
    import torch

    from gpufield.fp64.fft.memory import (
        array_bytes,
        available_device_bytes,
        chunk_outputs_for,
        transform_peak_bytes,
    )
    from gpufield.fp64.model import stage_lengths

    dev = torch.device(device)
    a = array_bytes(shape)
    peak = transform_peak_bytes(shape, plan, chunk_outputs_for(plan, shape, dev))
    points = a // 16
    rates = cpu_rates()
    if dev.type == "cuda":
        dev_need, dev_avail = a + peak, available_device_bytes(dev)  # the input stays resident beside the transform
        host_need = HOST_ARRAYS * a
        est = None
    else:
        dev_need = dev_avail = None
        host_need = (HOST_ARRAYS - 2) * a + peak  # the transform's input and output are host arrays too
        stages = sum(len(stage_lengths(n)) for n in shape if n > 1)
        r = rates["seconds_per_point_stage"].get(plan.backend_name)
        est = None if r is None else (2 * r * points * stages
                                      + _lines(points) * points * rates["seconds_per_reference_point"])
    host_avail = available_host_bytes()
    fits = (host_avail is None or host_need <= host_avail) and (dev_avail is None or dev_need <= dev_avail)
    return {"host_bytes_needed": host_need, "host_bytes_available": host_avail, "device_bytes_needed": dev_need,
            "device_bytes_available": dev_avail, "fits": fits, "estimated_s": est,
            "rate_source": rates["_meta"]["machine"]}


def _twiddle_ld(n: int, j: np.ndarray, k: int) -> np.ndarray:
    """exp(-2 pi i (j k mod n) / n) in long double, from the exact integer angle index."""
    pi = np.longdouble("3.14159265358979323846264338327950288")
    ang = -2 * pi * ((j.astype(np.int64) * k) % n).astype(np.longdouble) / n
    return np.cos(ang) + 1j * np.sin(ang)


def sample_indices(shape: tuple[int, ...], seed: int) -> list[tuple[int, ...]]:
    """The sampled output indices: lines along axis 0 at random other indices, SAMPLES_PER_LINE points each
    (the first line also holds index 0 of axis 0)."""
    rng = np.random.default_rng(seed + 1)
    out: list[tuple[int, ...]] = []
    for li in range(_lines(math.prod(shape))):
        rest = tuple(int(rng.integers(n)) for n in shape[1:])
        k0s = ([0] if li == 0 else []) + [int(v) for v in rng.integers(shape[0], size=SAMPLES_PER_LINE)]
        out += [(k0, *rest) for k0 in dict.fromkeys(k0s) if (k0, *rest) not in out][:SAMPLES_PER_LINE]
    return out


def sampled_dft_longdouble(x: np.ndarray, idx: list[tuple[int, ...]]) -> np.ndarray:
    """Outputs X[k] = sum_j x[j] exp(-2 pi i sum_a j_a k_a / n_a) at the indices ``idx``, in long double.

    Indices sharing all but their axis-0 index share one contraction of axes 1.. (O(N), done slab by slab
    along axis 0, so memory stays O(N / n_0)); each axis-0 index then costs O(n_0). Sums are at most one axis
    long, so the long-double rounding (2^-64) stays far below float64's.

    Args:
        x: complex array, 1-3 axes.
        idx: output indices (tuples of len x.ndim).

    Returns:
        ``np.clongdouble`` [len(idx)].
    """
    out = np.empty(len(idx), dtype=np.clongdouble)
    groups: dict[tuple[int, ...], list[int]] = {}
    for i, k in enumerate(idx):
        groups.setdefault(tuple(k[1:]), []).append(i)
    n0 = x.shape[0]
    for rest, members in groups.items():
        ws = [_twiddle_ld(n, np.arange(n), k) for n, k in zip(x.shape[1:], rest, strict=True)]
        v = np.empty(n0, dtype=np.clongdouble)
        for j0 in range(n0):
            s = x[j0].astype(np.clongdouble)
            for w in reversed(ws):  # contract the innermost remaining axis
                s = s @ w
            v[j0] = s
        for i in members:
            out[i] = np.sum(v * _twiddle_ld(n0, np.arange(n0), idx[i][0]))
    return out


def _max_rel(y: np.ndarray, idx, ref: np.ndarray, scale=None) -> float:
    """max_k |y[k] - ref_k| / |ref_k| (``scale`` None) or / ``scale``."""
    vals = np.array([y[k] for k in idx]).astype(np.clongdouble)
    return float(np.max(np.abs(vals - ref) / (np.abs(ref) if scale is None else scale)))


def check_fft(*, shape: tuple[int, ...], backend: str = "cpu-exact", variant: str = "crt", seed: int = 0,
              device: str | None = None, epilogue: str | None = None, input_bits: int = 58,
              twiddle_bits: int = 56, on_plan=None) -> dict:
    """Emulated FFT of complex Gaussian data of ``shape``; errors and time.

    Args:
        shape: 1-3 power-of-two sides <= 1024.
        backend: ``"cpu-exact"``, ``"int8"`` or ``"fp8"`` (``"cpu"``, the former name, is refused).
        variant: ``"garner"``, ``"crt"`` or ``"kulisch"``.
        seed: RNG seed (>= 0).
        device: torch device for the transform (default CUDA for int8/fp8 when available, else CPU).
        epilogue: ``"torch"`` or ``"triton"`` (:class:`gpufield.fp64.fft.stage.EmulatedFftPlan`); None: the
            fastest measured, ``"triton"`` (the fused stage kernel) for INT8 on CUDA, else ``"torch"``.
        input_bits, twiddle_bits: the plan's b_x and b_w (bits of the scaled input and twiddle integers).
        on_plan: called with :func:`check_plan`'s dict before anything is allocated (the CLI prints the
            time estimate there).

    Returns:
        dict with shape, backend, variant, epilogue, input_bits, twiddle_bits, num_moduli, time_s,
        rel_l2_emulated and rel_l2_numpy (against the dense long-double DFT up to 32^3 points; above,
        rel_l2_emulated is against numpy.fft and rel_l2_numpy is None), reference name, the round-trip
        error, ``samples`` (number of sampled outputs), ``max_rel_err_sampled_emulated`` /
        ``max_rel_err_sampled_numpy`` (largest relative error |y_k - X_k| / |X_k| on the samples against
        :func:`sampled_dft_longdouble`; a sample of small |X_k| dominates it),
        ``max_err_sampled_over_rms_emulated`` / ``_numpy`` (the same errors over the RMS output magnitude,
        ||x||_2 by Parseval: comparable with the relative L2 errors) and ``plan`` (:func:`check_plan`).

    Raises:
        InputError: bad shape/backend/variant/epilogue/bits (the plan's checks), a negative seed, or a size
            whose check needs more memory than is available (raised before anything is allocated).
    """
    import torch

    from gpufield.errors import InputError
    from gpufield.fp64.fft.reference import dft_longdouble, rel_l2
    from gpufield.fp64.fft.sixstep import _check, fftn_fp64_emulated, ifftn_fp64_emulated
    from gpufield.fp64.fft.stage import EmulatedFftPlan

    if seed < 0:
        raise InputError(f"seed must be >= 0 (numpy.random.default_rng), got {seed}")
    if device is None:
        device = "cuda" if backend != "cpu-exact" and torch.cuda.is_available() else "cpu"
    if epilogue is None:
        epilogue = "triton" if backend == "int8" and torch.device(device).type == "cuda" else "torch"
    plan = EmulatedFftPlan(backend=backend, variant=variant, epilogue=epilogue, input_bits=input_bits,
                           twiddle_bits=twiddle_bits)
    _check(torch.empty(shape, dtype=torch.complex128, device="meta"))
    need = check_plan(tuple(shape), plan, device)
    if not need["fits"]:
        gib = 2.0**30
        parts = [f"host {need['host_bytes_needed'] / gib:.1f} GiB of {need['host_bytes_available'] / gib:.1f} GiB "
                 "available"]
        if need["device_bytes_needed"] is not None:
            parts.append(f"{device} {need['device_bytes_needed'] / gib:.1f} GiB of "
                         f"{need['device_bytes_available'] / gib:.1f} GiB available")
        raise InputError(f"shape {tuple(shape)} does not fit: the check needs {'; '.join(parts)} (complex128 "
                         f"arrays of {16 * math.prod(shape) / gib:.2f} GiB each plus the stage workspace); "
                         "nothing was allocated. Try a smaller --shape")
    if on_plan is not None:
        on_plan(need)
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape) + 1j * rng.standard_normal(shape)
    xt = torch.from_numpy(x).to(device)
    t0 = time.perf_counter()
    y = fftn_fp64_emulated(xt, plan).cpu().numpy()
    dt = time.perf_counter() - t0
    del xt
    small = x.size <= 32**3
    ref_np = np.fft.fftn(x)
    ref = dft_longdouble(x) if small else ref_np
    back = ifftn_fp64_emulated(torch.from_numpy(y).to(device), plan).cpu().numpy()
    idx = sample_indices(tuple(shape), seed)
    samp = sampled_dft_longdouble(x, idx)
    rms = np.sqrt(np.sum(x.real.astype(np.longdouble) ** 2 + x.imag.astype(np.longdouble) ** 2))  # Parseval
    return {
        "shape": list(shape), "backend": backend, "variant": variant, "epilogue": epilogue,
        "input_bits": input_bits, "twiddle_bits": twiddle_bits,
        "num_moduli": plan.resolved_num_moduli, "moduli": plan.moduli_kind, "device": device,
        "time_s": dt, "reference": "long-double DFT" if small else "numpy.fft (float64)",
        "rel_l2_emulated": rel_l2(y, ref), "rel_l2_numpy": rel_l2(ref_np, ref) if small else None,
        "round_trip_rel_l2": rel_l2(back, x), "samples": len(idx),
        "max_rel_err_sampled_emulated": _max_rel(y, idx, samp),
        "max_rel_err_sampled_numpy": _max_rel(ref_np, idx, samp),
        "max_err_sampled_over_rms_emulated": _max_rel(y, idx, samp, rms),
        "max_err_sampled_over_rms_numpy": _max_rel(ref_np, idx, samp, rms),
        "plan": need,
    }
