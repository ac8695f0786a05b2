"""Floor model of the emulated-FP64 3-D FFT (reconstruction of "FP8 is All You Need", Part 3).

The model (fp64.md sections 1.4, 5.4, reconstructed from the Part 3 abstract) for an n^dims complex
FFT done as Bailey six-step with DFT-GEMM stages and a per-output integer epilogue:

    N       = n**dims complex points
    Q       = dims * passes_per_dim * bytes_per_point_per_pass * N  (one pass per axis: 96 GiB for 1024^3;
                                                                     hbm_passes_per_dim = 2: the implemented
                                                                     plan, every stage one HBM round trip)
    T_roof  = Q / B_HBM                                             (memory roof)
    F       = 5 N log2 N                                            (FP64 flops, 161.06 GFLOP)
    T_native= max(T_roof, F / P_FP64)                               (native FP64 path)
    stages  = ceil(log2 n / log2 32)                                (DFT-GEMM stages of k <= 32 per axis)
    N_out   = dims * stages * 2 * N                                 (12 N real outputs for 1024^3)
    T_epi   = c_epi * N_out / P_INT32                               (epilogue time)
    T_conv  = c_conv * N_out / P_INT32                              (input conversion: scaling + residues;
                                                                     not in the paper: 0 by default)
    floor   : P_INT32 >= (c_epi / (Q/N_out)) * B_HBM = (c_epi/8) * B_HBM   (Q/N_out = 16/stages B: 8 at 2 stages)
    T_emu   = max(T_roof, T_epi + T_conv)                           (the paper's model: overlapped)
         or = T_roof + T_epi + T_conv                               (combine="serialized", fp64.md 1.4's
                                                                     pessimistic variant)
    T_tc    = dims*N * sum(k) * 3 * moduli * gemms_per_modulus * 2 / P_TC   (k: each stage's length;
                                                tensor-core work, reported apart: not in T_emu, as in Part 3)

Hardware numbers come from the telemetry catalogue (:func:`gpufield.telemetry.gpu_spec`); only
model parameters (c_epi range, passes per axis, stage length, bytes per point, remedy cases) come from
``gpufield/fp64/data/model_params.json``, each with its source. Measured per-GPU instruction counts (c_conv
and the measured c_epi, from the kernels' SASS) are in ``gpufield/fp64/data/conversion_counts.json``, read by
:mod:`gpufield.fp64.model_counts`.

Units: seconds, bytes, bytes/s, flop/s, instructions/s. No tensors in this module.
"""

from __future__ import annotations

import json
import math
import numbers
from dataclasses import asdict, dataclass, field
from functools import cache
from importlib import resources
from typing import Any

from gpufield.errors import InputError

__all__ = ["COMBINE", "FftFloorModel", "fft_floor_model", "model_params", "model_table", "stage_lengths"]


@cache
def model_params() -> dict[str, Any]:
    """The model-specific parameters (``gpufield/fp64/data/model_params.json``), with sources.

    Returns:
        The parsed JSON as a dict (do not mutate; it is cached).
    """
    text = resources.files("gpufield.fp64").joinpath("data", "model_params.json").read_text("utf-8")
    return json.loads(text)


@dataclass(frozen=True, kw_only=True, slots=True)
class FftFloorModel:
    """Model result for one GPU and one set of c_epi values.

    Attributes:
        gpu: catalogue key (e.g. ``"B300"``).
        projected: True when the GPU's catalogue numbers are projections.
        n, dims: transform size per axis and number of axes.
        points: N = n**dims complex points.
        traffic_bytes: Q, HBM bytes of the passes.
        flops: FP64 flops by the 5 N log2 N convention.
        real_outputs: N_out, real outputs that need an epilogue.
        bytes_per_output: Q / N_out (8 for the paper's configuration).
        hbm_bandwidth_bytes_per_s: B_HBM used.
        fp64_flops_per_s: P_FP64 used for the native path.
        int32_instr_per_s: P_INT32 (instructions/s, IMAD counted once).
        roof_s: T_roof.
        native_s: T_native.
        native_floor_flops_per_s: FP64 rate needed for the native path to reach the roof (F/Q * B).
        c_epi: the c_epi values evaluated (instructions per real output).
        c_conv: input-conversion instructions per real output (0: the paper's model, no term).
        combine: ``"overlapped"`` (max of roof and instruction time, the paper's) or ``"serialized"`` (sum).
        epilogue_s: T_epi per c_epi.
        conversion_s: T_conv = c_conv x N_out / P_INT32.
        int32_floor_instr_per_s: (c_epi / bytes_per_output) * B_HBM per c_epi.
        tensor_s: {"int8": s, "fp8": s} tensor-core time at catalogue peak (None where unpublished).
        emulated_s: max(T_roof, T_epi + T_conv) per c_epi (``combine="serialized"``: T_roof + T_epi + T_conv;
            tensor term reported apart).
        ratio_to_roof: emulated_s / roof_s per c_epi.
        ratio_to_native: emulated_s / native_s per c_epi (> 1: emulation loses).
        remedies: name -> {"c_epi": [...], "emulated_s": [...]} for the Part 3 remedy cases.
    """

    gpu: str
    projected: bool
    n: int
    dims: int
    points: int
    traffic_bytes: float
    flops: float
    real_outputs: int
    bytes_per_output: float
    hbm_bandwidth_bytes_per_s: float
    fp64_flops_per_s: float
    int32_instr_per_s: float
    roof_s: float
    native_s: float
    native_floor_flops_per_s: float
    c_epi: tuple[float, ...]
    c_conv: float
    combine: str
    epilogue_s: tuple[float, ...]
    conversion_s: float
    int32_floor_instr_per_s: tuple[float, ...]
    tensor_s: dict[str, float | None] = field(default_factory=dict)
    emulated_s: tuple[float, ...] = ()
    ratio_to_roof: tuple[float, ...] = ()
    ratio_to_native: tuple[float, ...] = ()
    remedies: dict[str, dict[str, list[float]]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict of every field (seconds, bytes, per-second rates)."""
        return asdict(self)


COMBINE = ("overlapped", "serialized")
"""How the memory roof and the instruction time combine: ``max`` (overlapped) or sum (serialized)."""


def _combine(how: str, roof: float, instr: float) -> float:
    return max(roof, instr) if how == "overlapped" else roof + instr


def _need(value: float | None, gpu: str, what: str) -> float:
    if value is None:
        raise InputError(f"GPU {gpu!r}: the telemetry catalogue has no {what}; the model needs it")
    return float(value)


def _positive(value: Any, what: str) -> float:
    """``value`` as a finite float > 0, else :class:`InputError` naming ``what``."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise InputError(f"{what} must be a finite number > 0, got {value!r}") from None
    if not (math.isfinite(v) and v > 0):
        raise InputError(f"{what} must be a finite number > 0, got {value!r}")
    return v


def _whole(value: Any, what: str) -> int:
    """``value`` as an int when it is a whole number (``16``, ``numpy.int64(16)``, ``16.0``), else
    :class:`InputError`."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return int(value)
    if isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value) \
            and value == int(value):
        return int(value)
    raise InputError(f"{what} must be a whole number, got {value!r}")


def stage_lengths(n: int) -> tuple[int, ...]:
    """DFT-GEMM stage lengths k of one axis of length n: ceil(log2 n / log2 kmax) balanced powers of two.

    Args:
        n: points per axis, a power of two >= 2 (kmax = the params file's ``max_stage_length``, 32).

    Returns:
        The lengths, longest first: (32, 32) at 1024, (32, 16) at 512, (16, 16) at 256, (16, 8) at 128.
    """
    kmax = int(model_params()["transform"]["max_stage_length"])
    stages = -(-(n.bit_length() - 1) // (kmax.bit_length() - 1))  # ceil(log2 n / log2 kmax)
    q, extra = divmod(n.bit_length() - 1, stages)
    return tuple([2 ** (q + 1)] * extra + [2**q] * (stages - extra))


def fft_floor_model(
    gpu: str,
    *,
    c_epi: tuple[float, ...] | list[float] | None = None,
    n: int | None = None,
    dims: int | None = None,
    hbm_bandwidth_bytes_per_s: float | None = None,
    int32_instr_per_s: float | None = None,
    c_conv: float = 0.0,
    combine: str = "overlapped",
    hbm_passes_per_dim: int | None = None,
) -> FftFloorModel:
    """Evaluate the Part 3 floor model of the emulated 3-D FFT on one GPU.

    Args:
        gpu: a name :func:`gpufield.telemetry.gpu_spec` knows (``"B300"``, ``"NVIDIA H200"``, ...).
        c_epi: epilogue instructions per real output to evaluate; default the paper's (203, 281).
        n: points per axis (default 1024); a power of two >= 2.
        dims: number of axes (default 3).
        hbm_bandwidth_bytes_per_s: override B_HBM (e.g. a measured copy bandwidth).
        int32_instr_per_s: override P_INT32 (e.g. a measured INT32 rate).
        c_conv: input-conversion instructions per real output (scaling + residues); 0 (default) is the
            paper's model. Measured values: :func:`gpufield.fp64.model_counts.conversion_counts`.
        combine: ``"overlapped"`` (default, the paper's: T = max(T_roof, T_epi + T_conv)) or ``"serialized"``
            (T = T_roof + T_epi + T_conv).
        hbm_passes_per_dim: HBM round trips of the whole array per axis; None (default): the params file's 1
            (the paper's: both stages of an axis fused in one pass). The six-step plan of
            :mod:`gpufield.fp64.fft` writes every stage to memory: ``len(stage_lengths(n))`` (2 for
            n = 64..1024: 192 B per point at 1024^3 instead of 96).

    Returns:
        :class:`FftFloorModel`.

    Raises:
        InputError: unknown GPU, a catalogue field the model needs is null, bad sizes (n not a whole power of
            two >= 2, dims not 1-3), a c_epi or override that is not a finite number > 0, a c_conv that is not
            a finite number >= 0, an unknown ``combine``, or ``hbm_passes_per_dim`` not a whole number >= 1.
    """
    from gpufield.telemetry import gpu_spec

    p = model_params()
    tr = p["transform"]
    n = _whole(tr["n_per_axis"] if n is None else n, "n")
    dims = _whole(tr["dims"] if dims is None else dims, "dims")
    if n < 2 or n & (n - 1) or not 1 <= dims <= 3:
        raise InputError(f"model needs a power-of-two n >= 2 and 1 <= dims <= 3, got n={n}, dims={dims}")
    cs = tuple(_positive(c, "c_epi") for c in (p["c_epi"]["range"] if c_epi is None else c_epi))
    if not cs:
        raise InputError("c_epi: at least one value is needed")
    if combine not in COMBINE:
        raise InputError(f"combine must be one of {COMBINE}, got {combine!r}")
    try:
        conv_c = float(c_conv)
    except (TypeError, ValueError):
        conv_c = math.nan
    if not (math.isfinite(conv_c) and conv_c >= 0):
        raise InputError(f"c_conv must be a finite number >= 0, got {c_conv!r}")
    spec = gpu_spec(gpu)
    bw = _positive(hbm_bandwidth_bytes_per_s, "hbm_bandwidth_bytes_per_s") \
        if hbm_bandwidth_bytes_per_s is not None else _need(spec.hbm_bandwidth_bytes_per_s, spec.key,
                                                             "hbm_bandwidth_bytes_per_s")
    p_fp64 = _need(getattr(spec, p["native_fp64_rate_field"]["value"]), spec.key, "FP64 rate")
    p_int = _positive(int32_instr_per_s, "int32_instr_per_s") if int32_instr_per_s is not None else _need(
        spec.int32_ops_per_s, spec.key, "int32_ops_per_s")

    ppd = _whole(tr["passes_per_dim"] if hbm_passes_per_dim is None else hbm_passes_per_dim, "hbm_passes_per_dim")
    if ppd < 1:
        raise InputError(f"hbm_passes_per_dim must be >= 1, got {ppd}")
    points = n**dims
    passes = dims * ppd
    traffic = float(passes * tr["bytes_per_point_per_pass"] * points)
    lengths = stage_lengths(n)
    stages = len(lengths)
    flops = 5.0 * points * math.log2(points)
    n_out = dims * stages * int(tr["real_outputs_per_complex_output"]) * points
    roof = traffic / bw
    native = max(roof, flops / p_fp64)
    bpo = traffic / n_out
    epi = tuple(c * n_out / p_int for c in cs)
    conv = conv_c * n_out / p_int
    emu = tuple(_combine(combine, roof, t + conv) for t in epi)

    tt = p["tensor_term"]
    tensor: dict[str, float | None] = {}
    for kind in ("int8", "fp8"):
        rate = getattr(spec, tt[kind]["rate_field"])
        work = (sum(lengths) * dims * points * tt["complex_products_per_gemm"]
                * tt[kind]["moduli"] * tt[kind]["gemms_per_modulus"] * 2)
        tensor[kind] = None if not rate else work / float(rate)

    remedies = {}
    for r in p["remedies"]:
        rc = [float(c) for c in r["c_epi_range"]]
        remedies[r["name"]] = {"c_epi": rc,
                               "emulated_s": [_combine(combine, roof, (c + conv_c) * n_out / p_int) for c in rc]}

    return FftFloorModel(
        gpu=spec.key, projected=spec.projected, n=n, dims=dims, points=points, traffic_bytes=traffic,
        flops=flops, real_outputs=n_out, bytes_per_output=bpo, hbm_bandwidth_bytes_per_s=bw,
        fp64_flops_per_s=p_fp64, int32_instr_per_s=p_int, roof_s=roof, native_s=native,
        native_floor_flops_per_s=flops / traffic * bw, c_epi=cs, c_conv=conv_c, combine=combine,
        epilogue_s=epi, conversion_s=conv,
        int32_floor_instr_per_s=tuple(c / bpo * bw for c in cs), tensor_s=tensor, emulated_s=emu,
        ratio_to_roof=tuple(t / roof for t in emu), ratio_to_native=tuple(t / native for t in emu),
        remedies=remedies,
    )


def model_table(gpus: list[str] | None = None, **kwargs: Any) -> list[FftFloorModel]:
    """The model for several GPUs (default: B300, B200, Rubin, H100, H200 from the params file).

    Args:
        gpus: GPU names; None for the params file's ``default_gpus``.
        **kwargs: passed to :func:`fft_floor_model`.

    Returns:
        One :class:`FftFloorModel` per GPU, in order.

    Raises:
        InputError: as :func:`fft_floor_model`.
    """
    names = list(model_params()["default_gpus"]) if not gpus else list(gpus)
    return [fft_floor_model(g, **kwargs) for g in names]
