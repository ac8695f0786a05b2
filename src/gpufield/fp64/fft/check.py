"""`gpufield fp64 fft`: run the emulated FFT on random data and report its error next to numpy's.

The reference is a dense long-double DFT (:func:`gpufield.fp64.fft.reference.dft_longdouble`) for
up to 32^3 points, else numpy.fft in float64 (then the emulated error is reported against numpy only).

Shape legend: none beyond ``shape`` (arrays are complex128 of that shape).
"""

from __future__ import annotations

import time

import numpy as np


def check_fft(*, shape: tuple[int, ...], backend: str = "cpu", variant: str = "crt", seed: int = 0,
              device: str | None = None, epilogue: str | None = None, input_bits: int = 58,
              twiddle_bits: int = 56) -> dict:
    """Emulated FFT of complex Gaussian data of ``shape``; errors and time.

    Args:
        shape: 1-3 power-of-two sides <= 1024.
        backend: ``"cpu"``, ``"int8"`` or ``"fp8"``.
        variant: ``"garner"``, ``"crt"`` or ``"kulisch"``.
        seed: RNG seed (>= 0).
        device: torch device for the transform (default CUDA for int8/fp8 when available, else CPU).
        epilogue: ``"torch"`` or ``"triton"`` (:class:`gpufield.fp64.fft.stage.EmulatedFftPlan`); None: the
            fastest measured, ``"triton"`` (the fused stage kernel) for INT8 on CUDA, else ``"torch"``.
        input_bits, twiddle_bits: the plan's b_x and b_w (bits of the scaled input and twiddle integers).

    Returns:
        dict with shape, backend, variant, epilogue, input_bits, twiddle_bits, num_moduli, time_s,
        rel_l2_emulated, rel_l2_numpy (both against the reference; rel_l2_numpy is None above 32^3 points,
        where numpy.fft is the reference), reference name and the round-trip error.

    Raises:
        InputError: bad shape/backend/variant/epilogue/bits (the plan's checks), or a negative seed.
    """
    import torch

    from gpufield.errors import InputError
    from gpufield.fp64.fft.reference import dft_longdouble, rel_l2
    from gpufield.fp64.fft.sixstep import _check, fftn_fp64_emulated, ifftn_fp64_emulated
    from gpufield.fp64.fft.stage import EmulatedFftPlan

    if seed < 0:
        raise InputError(f"seed must be >= 0 (numpy.random.default_rng), got {seed}")
    if device is None:
        device = "cuda" if backend != "cpu" and torch.cuda.is_available() else "cpu"
    if epilogue is None:
        epilogue = "triton" if backend == "int8" and torch.device(device).type == "cuda" else "torch"
    plan = EmulatedFftPlan(backend=backend, variant=variant, epilogue=epilogue, input_bits=input_bits,
                           twiddle_bits=twiddle_bits)
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape) + 1j * rng.standard_normal(shape)
    _check(torch.from_numpy(x))
    xt = torch.from_numpy(x).to(device)
    t0 = time.perf_counter()
    y = fftn_fp64_emulated(xt, plan).cpu().numpy()
    dt = time.perf_counter() - t0
    small = x.size <= 32**3
    ref = dft_longdouble(x) if small else np.fft.fftn(x)
    back = ifftn_fp64_emulated(torch.from_numpy(y).to(device), plan).cpu().numpy()
    return {
        "shape": list(shape), "backend": backend, "variant": variant, "epilogue": epilogue,
        "input_bits": input_bits, "twiddle_bits": twiddle_bits,
        "num_moduli": plan.resolved_num_moduli, "moduli": plan.moduli_kind, "device": device,
        "time_s": dt, "reference": "long-double DFT" if small else "numpy.fft (float64)",
        "rel_l2_emulated": rel_l2(y, ref), "rel_l2_numpy": rel_l2(np.fft.fftn(x), ref) if small else None,
        "round_trip_rel_l2": rel_l2(back, x),
    }
