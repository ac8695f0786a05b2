"""Measured instruction counts for the floor model: the input-conversion term, its check, its projections.

The paper's model (:mod:`gpufield.fp64.model`) counts only the per-output epilogue, c_epi = 203-281. The
stage kernel that runs on the H200 also converts its input (row split, scaling, the residues of every
value for every modulus) before the first tensor-core product: 127-152 more SASS instructions per real
output, a third of the total. This module reads those counts per GPU from committed data
(``gpufield/fp64/data/conversion_counts.json``: per stage length, the listing and the commit they come
from), evaluates the model with them, and compares it with the measured H200 times in the same file.

Nothing here is fitted: the counts are static SASS counts, the rates are the telemetry catalogue's (H200:
B_HBM 4.8 TB/s, P_INT32 = 132 SM x 64 lanes x 1.98 GHz = 16.73 T instr/s). Two combine forms are
evaluated, both written down in ../shared/reference/fp64.md section 1.4 before any measurement: the
paper's overlapped max(T_roof, T_instr) and the serialized T_roof + T_instr; and the serialized form with the
bytes the implemented plan moves (:data:`FORMS`).

Units: seconds, instructions per real output.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from functools import cache
from importlib import resources
from typing import Any

from gpufield.errors import InputError

__all__ = ["FORMS", "StageCounts", "conversion_counts", "conversion_data", "measured_check", "projection_rows"]

FORMS = ("overlapped", "serialized", "serialized_plan")
"""The model forms :func:`measured_check` evaluates: the paper's overlapped max(T_roof, T_instr), the serialized
T_roof + T_instr (both with the paper's one HBM pass per axis), and ``serialized_plan``: serialized with the
bytes the implemented plan moves (every DFT-GEMM stage one HBM round trip, ``hbm_passes_per_dim`` = stages per
axis). Per stage none of them is right (H200 run 76, benchmarks/fp64_RESULTS.md): the kernels' issue efficiency
differs by stage length, which static counts and catalogue rates cannot see."""


@cache
def conversion_data() -> dict[str, Any]:
    """The committed per-GPU counts (``gpufield/fp64/data/conversion_counts.json``), with sources.

    Returns:
        The parsed JSON (cached; do not mutate).
    """
    text = resources.files("gpufield.fp64").joinpath("data", "conversion_counts.json").read_text("utf-8")
    return json.loads(text)


@dataclass(frozen=True, kw_only=True, slots=True)
class StageCounts:
    """Instruction counts per real output of one transform size, as the model takes them.

    Attributes:
        gpu: catalogue key asked for.
        source_gpu: the GPU whose listings the counts come from (``gpu`` itself when measured).
        measured: True when the counts are ``gpu``'s own (False: another GPU's stand-in, see ``why``).
        n: points per axis.
        stage_lengths: the transform's DFT-GEMM stage lengths per axis.
        c_conv: input-conversion instructions per real output, mean over the stages (every stage has the
            same number of outputs, so the mean is exact).
        c_epi: fold + finish instructions per real output, mean over the stages.
        sources: the listings (path in the repository) and the commit they were committed in.
        why: for a stand-in, why the GPU has no counts of its own; else "".
    """

    gpu: str
    source_gpu: str
    measured: bool
    n: int
    stage_lengths: tuple[int, ...]
    c_conv: float
    c_epi: float
    sources: tuple[str, ...]
    why: str

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict of every field."""
        return asdict(self)


def _per_output(entry: dict[str, Any], k: int) -> dict[str, float]:
    st = entry["stages"][str(k)]
    f = entry["threads_per_program"] / (2 * entry["rows_per_program"] * k)
    return {phase: v * f for phase, v in st["per_thread"].items()}


def conversion_counts(gpu: str, n: int = 1024) -> StageCounts:
    """The conversion and epilogue counts per real output of an n^dims transform on ``gpu``.

    Args:
        gpu: a name :func:`gpufield.telemetry.gpu_spec` knows.
        n: points per axis (power of two); every stage length of n needs a listing (16 and 32 today, so
            n = 16, 32, 256, 512, 1024).

    Returns:
        :class:`StageCounts`.

    Raises:
        InputError: unknown GPU, a GPU without an entry in the data file, or a stage length without a
            listing.
    """
    from gpufield.fp64.model import stage_lengths
    from gpufield.telemetry import gpu_spec

    key = gpu_spec(gpu).key
    gpus = conversion_data()["gpus"]
    if key not in gpus:
        raise InputError(f"GPU {key!r}: no conversion counts in gpufield/fp64/data/conversion_counts.json "
                         f"(entries: {', '.join(gpus)})")
    entry, src, why = gpus[key], key, ""
    if entry["status"] != "measured":
        src, why = entry["assumed_from"], entry["why"]
        entry = gpus[src]
    if not isinstance(n, int) or n < 2 or n & (n - 1):
        raise InputError(f"n must be a power of two >= 2, got {n!r}")
    ks = stage_lengths(n)
    missing = sorted({k for k in ks if str(k) not in entry["stages"]})
    if missing:
        raise InputError(f"n = {n}: stage length(s) {missing} have no SASS listing for {src} (listings: stage "
                         f"lengths {', '.join(entry['stages'])}); the conversion term is not known there")
    per = [_per_output(entry, k) for k in ks]
    conv = sum(p["conversion"] for p in per) / len(per)
    epi = sum(p["fold"] + p["finish"] for p in per) / len(per)
    sources = tuple(f"{entry['stages'][str(k)]['listing']} @ {entry['listing_commit'][:7]}" for k in sorted(set(ks)))
    return StageCounts(gpu=key, source_gpu=src, measured=src == key, n=n, stage_lengths=ks, c_conv=conv,
                       c_epi=epi, sources=sources, why=why)


def measured_check(gpu: str = "H200", holdout: int = 1024) -> dict[str, Any]:
    """The model at the measured counts against the measured transform times of ``gpu``.

    For each measured size: the prediction with c_epi = the listing's fold + finish and c_conv = its
    conversion, in the three forms of :data:`FORMS`, and the relative error (model / measured - 1). Also
    which form a choice made on the sizes other than ``holdout`` would pick (the smallest mean absolute error
    there), and that form's error on the held-out size: a form picked after seeing all three sizes is a fit
    of one discrete choice, so the held-out number is the one to quote as a prediction.

    Args:
        gpu: a GPU whose data-file entry has ``measured_transform_s`` (H200 today).
        holdout: the size left out of the form choice.

    Returns:
        dict with ``gpu``, ``source`` (where the times come from), ``rows`` (one per size: n, measured_s,
        cufft_s, c_conv, c_epi, paper_s (c_epi 203-281, no term), and ``<form>_s`` / ``<form>_err`` for
        each form of :data:`FORMS`), ``choice`` (form picked without ``holdout``) and ``holdout_err``.

    Raises:
        InputError: ``gpu`` has no measured times, or ``holdout`` is not one of the measured sizes.
    """
    from gpufield.fp64.model import fft_floor_model, stage_lengths
    from gpufield.telemetry import gpu_spec

    key = gpu_spec(gpu).key
    entry = conversion_data()["gpus"].get(key, {})
    meas = entry.get("measured_transform_s")
    if not meas:
        raise InputError(f"GPU {key!r}: no measured transform times in gpufield/fp64/data/conversion_counts.json")
    sizes = sorted(int(s) for s in meas["emulated"])
    if holdout not in sizes:
        raise InputError(f"holdout must be one of the measured sizes {sizes}, got {holdout!r}")
    rows = []
    for n in sizes:
        c = conversion_counts(key, n)
        t = meas["emulated"][str(n)]
        pred = {how: fft_floor_model(key, n=n, c_epi=[c.c_epi], c_conv=c.c_conv, combine=how).emulated_s[0]
                for how in ("overlapped", "serialized")}
        pred["serialized_plan"] = fft_floor_model(key, n=n, c_epi=[c.c_epi], c_conv=c.c_conv, combine="serialized",
                                                  hbm_passes_per_dim=len(stage_lengths(n))).emulated_s[0]
        paper = fft_floor_model(key, n=n).emulated_s
        rows.append({"n": n, "measured_s": t, "cufft_s": meas["cufft"][str(n)], "c_conv": c.c_conv,
                     "c_epi": c.c_epi, "paper_s": list(paper)}
                    | {f"{h}_s": v for h, v in pred.items()} | {f"{h}_err": v / t - 1 for h, v in pred.items()})
    dev = [r for r in rows if r["n"] != holdout]
    choice = min(FORMS, key=lambda h: sum(abs(r[f"{h}_err"]) for r in dev))
    held = next(r for r in rows if r["n"] == holdout)
    return {"gpu": key, "source": meas["source"], "rows": rows, "choice": choice, "holdout": holdout,
            "holdout_err": held[f"{choice}_err"]}


def projection_rows(gpus: list[str] | None = None, n: int = 1024, dims: int = 3,
                    c_epi: list[float] | None = None, combine: str = "overlapped") -> list[dict[str, Any]]:
    """The paper's projections with and without the conversion term, per GPU.

    Args:
        gpus: GPU names (default the params file's ``default_gpus``: B300, B200, Rubin, H100, H200).
        n, dims: transform size.
        c_epi: epilogue counts (default the paper's 203, 281).
        combine: as :func:`gpufield.fp64.model.fft_floor_model`.

    Returns:
        One dict per GPU: ``without`` and ``with`` (:class:`~gpufield.fp64.model.FftFloorModel` dicts; ``with``
        is None when the stage lengths of n have no listing), ``counts`` (:class:`StageCounts` dict or None)
        and ``loses`` (per c_epi, with the term where known: True where emulation is slower than native).

    Raises:
        InputError: as :func:`gpufield.fp64.model.fft_floor_model` and :func:`conversion_counts` (but a
            missing stage listing gives ``with`` None, not an error).
    """
    from gpufield.fp64.model import fft_floor_model, model_params

    out = []
    for g in (list(gpus) if gpus else list(model_params()["default_gpus"])):
        base = fft_floor_model(g, n=n, dims=dims, c_epi=c_epi, combine=combine)
        try:
            cnt = conversion_counts(g, n)
        except InputError as e:
            if "no SASS listing" not in str(e) and "no conversion counts" not in str(e):
                raise
            cnt = None
        withc = None if cnt is None else fft_floor_model(g, n=n, dims=dims, c_epi=c_epi, c_conv=cnt.c_conv,
                                                         combine=combine)
        ref = withc or base
        out.append({"gpu": base.gpu, "without": base.to_dict(), "with": None if withc is None else withc.to_dict(),
                    "counts": None if cnt is None else cnt.to_dict(),
                    "loses": [r > 1 for r in ref.ratio_to_native]})
    return out
