"""VNN-COMP files: result files, ``instances.csv`` and published ``results.csv``.

Formats follow the VNN-COMP 2022 rules (https://github.com/ChristopherBrix/vnncomp2022_benchmarks,
``run_instance.sh`` contract): a result file starts with ``sat``, ``unsat``, ``unknown``,
``timeout`` or ``error``; ``sat`` is followed by the counterexample
``((X_0 v) (X_1 v) ... (Y_0 v) ...)``. Results CSVs have the columns
``benchmark,onnx,vnnlib,prepare_time,result,run_time``.
"""

from __future__ import annotations

import csv
import io
import math
import os
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import numpy as np

from gpufield._files import atomic_write, read_text
from gpufield.errors import InputError

VERDICTS = ("sat", "unsat", "unknown", "timeout", "error")
RESULT_COLUMNS = ("benchmark", "onnx", "vnnlib", "prepare_time", "result", "run_time")


def format_counterexample(x_N: np.ndarray, y_M: np.ndarray) -> str:
    """The VNN-COMP assignment ``((X_0 v)\\n (X_1 v) ... (Y_j v))`` with round-trip exact numbers."""
    parts = [f"(X_{i} {float(v)!r})" for i, v in enumerate(x_N)]
    parts += [f"(Y_{j} {float(v)!r})" for j, v in enumerate(y_M)]
    return "(" + "\n ".join(parts) + ")"


def write_result_file(path: str | Path, verdict: str, counterexample=None, *, force: bool = False) -> None:
    """Write a VNN-COMP result file.

    Args:
        path: where to write.
        verdict: one of :data:`VERDICTS`.
        counterexample: object with ``x_N``/``y_M`` (required for ``sat``).
        force: overwrite an existing file.

    Raises:
        InputError: the file exists and ``force`` is False.
        ValueError: unknown verdict or ``sat`` without a counterexample.
    """
    if verdict not in VERDICTS:
        raise ValueError(f"verdict {verdict!r} not in {VERDICTS}")
    if verdict == "sat" and counterexample is None:
        raise ValueError("a sat result needs its counterexample")
    p = Path(path)
    if p.exists() and not force:
        raise InputError("result file exists; pass --force to overwrite it", path=str(p))
    text = verdict + "\n"
    if verdict == "sat":
        text += format_counterexample(counterexample.x_N, counterexample.y_M) + "\n"
    atomic_write(p, text, force=True, option="--out")  # a unique temp file, renamed; never over a device/FIFO/link


@dataclass(frozen=True)
class Instance:
    """One row of ``instances.csv``.

    Attributes:
        onnx: model path as written in the CSV (relative to the benchmark dir).
        vnnlib: property path as written.
        timeout_s: the instance's timeout in seconds.
        line: 1-based CSV line (for messages).
    """

    onnx: str
    vnnlib: str
    timeout_s: float
    line: int


def read_instances(path: str | Path) -> list[Instance]:
    """Read ``onnx,vnnlib,timeout`` rows.

    Raises:
        InputError: a row has the wrong number of fields, or a timeout that is not a finite
            number of seconds ``>= 0`` (``nan``/``inf`` would defeat every cap taken with
            ``min``); the error names the line.
    """
    out = []
    with io.StringIO(read_text(path, what="an instances.csv of onnx,vnnlib,timeout rows"), newline="") as f:
        for n, row in enumerate(csv.reader(f), start=1):
            if not row or not "".join(row).strip():
                continue
            if len(row) != 3:
                raise InputError(f"expected 3 fields onnx,vnnlib,timeout, got {len(row)}", path=str(path), line=n)
            try:
                t = float(row[2])
            except ValueError:
                raise InputError(f"timeout {row[2]!r} is not a number", path=str(path), line=n) from None
            if not math.isfinite(t) or t < 0:
                raise InputError(f"timeout {row[2].strip()!r} is not a finite number of seconds >= 0",
                                 path=str(path), line=n)
            out.append(Instance(row[0].strip(), row[1].strip(), t, n))
    return out


def instance_key(benchmark: str, onnx: str, vnnlib: str) -> tuple[str, str, str]:
    """Match key across tools: ``(benchmark, onnx, vnnlib)`` with the paths relative to the
    benchmark directory, without a leading ``./`` or ``benchmarks/<benchmark>/`` and without
    ``.gz``. (File names alone are not enough: two benchmarks, or two directories of one, can
    hold files of the same name.)

    Args:
        benchmark: the benchmark name (the ``benchmark`` column; a bench run uses its
            directory's name).
        onnx, vnnlib: the paths as written in ``instances.csv`` or a results CSV.
    """
    b = benchmark.strip()

    def rel(p: str) -> str:
        parts = [x for x in PurePosixPath(p.strip().replace("\\", "/")).parts if x != "."]
        if len(parts) > 2 and parts[0] == "benchmarks" and parts[1] == b:
            parts = parts[2:]
        r = "/".join(parts)
        return r[:-3] if r.endswith(".gz") else r

    return b, rel(onnx), rel(vnnlib)


def read_results(path: str | Path) -> dict[tuple[str, str, str], str]:
    """Read a VNN-COMP ``results.csv`` (with or without header), skipping ``benchmarks/test`` rows.

    Returns:
        :func:`instance_key` -> result string (e.g. ``unsat``, ``sat``, ``timeout``).

    Raises:
        InputError: a short row, or one instance listed twice with different results.
    """
    out: dict[tuple[str, str, str], str] = {}
    first: dict[tuple[str, str, str], int] = {}
    with io.StringIO(read_text(path, what="a VNN-COMP results CSV"), newline="") as f:
        for n, row in enumerate(csv.reader(f), start=1):
            if not row or row[0] == "benchmark":
                continue
            if len(row) < 5:
                raise InputError(f"expected >= 5 fields, got {len(row)}", path=str(path), line=n)
            if "benchmarks/test/" in row[1] or "test_nano" in row[1]:
                continue
            key, res = instance_key(row[0], row[1], row[2]), row[4].strip()
            if key in out and out[key] != res:
                raise InputError(f"{row[1]},{row[2]} is listed twice with different results "
                                 f"({out[key]} at line {first[key]}, {res} here)", path=str(path), line=n)
            out[key] = res
            first.setdefault(key, n)
    return out


class ResultsWriter:
    """Append-and-flush writer of a results CSV (an interrupted run keeps finished rows).

    Args:
        path: CSV to write.
        append: keep existing rows (resume) instead of requiring a new file.
    """

    def __init__(self, path: str | Path, *, append: bool = False):
        p = Path(path)
        new = not p.exists() or p.stat().st_size == 0
        self.f = open(p, "a" if append else "x", newline="")
        self.w = csv.writer(self.f)
        if new:
            self.w.writerow(RESULT_COLUMNS)
            self.f.flush()

    def write(self, benchmark: str, onnx: str, vnnlib: str, prepare_s: float, result: str, run_s: float):
        """Write one row and flush it to disk."""
        self.w.writerow([benchmark, onnx, vnnlib, f"{prepare_s:.6f}", result, f"{run_s:.6f}"])
        self.f.flush()
        os.fsync(self.f.fileno())

    def close(self):
        """Close the file."""
        self.f.close()
