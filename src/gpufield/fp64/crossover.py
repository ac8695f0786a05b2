"""Measured crossover tables of FP64 products per GPU, a-priori error bounds per path, and the path policy.

A table (``data/crossover_<gpu>.json``, built from ``benchmarks/fp64_crossover_gpu.py`` output by
:func:`build_table`) holds, per measured shape, the median time and the measured error of every path:

* ``matmul`` float64 [M, K] @ [K, N]: ``native`` (cuBLAS DGEMM), ``ozaki_int8_<L>`` / ``ozaki_fp8_<L>``
  (:func:`gpufield.fp64.ozaki_matmul`, fast mode, L moduli), ``cublas_emu`` (cuBLAS's own FP64 emulation,
  :mod:`gpufield.fp64.cublas_emu`). Error ``err_norm`` = max |C_ij - R_ij| / (||a_i||_2 ||b_j||_2) on sampled
  entries against a longdouble reference;
* ``fftn`` complex128 3-D: ``native`` (cuFFT) and ``emulated_fft`` (:func:`gpufield.fp64.fftn_fp64_emulated`
  with the plan stored in the entry). Error ``err_rel_l2`` against the exact DFT of a rank-1 input.

Bounds, in the same measures (``u`` = 2^-53, finite inputs, outputs in the normal range):

* native DGEMM: |C^ - C|_ij <= gamma_K (|A||B|)_ij <= gamma_K ||a_i|| ||b_j||, gamma_K = K u / (1 - K u), for
  any summation order (Higham, *Accuracy and Stability of Numerical Algorithms*, 2nd ed., section 3.5);
* Ozaki-II fast mode (:func:`ozaki_fast_bound`): the fast shifts give |da_ik| < 2^-s_i <= c 2^-H ||a_i||_2
  (H = T/2 of :mod:`gpufield.fp64.ozaki.scaling`, c = 2^1.006 (1 + sqrt(K) 2^-20)), the same for B; the
  product of the truncated operands is exact and rounded once, so, with ||x||_1 <= sqrt(K) ||x||_2,
  |C^ - C|_ij / (||a_i|| ||b_j||) <= (1 + u)(2 sqrt(K) c 2^-H + K c^2 2^-2H) + u;
* emulated FFT (:func:`emulated_fft_bound`): per stage of length n (input rows truncated to b_x bits below
  the row maximum: |dx_k| <= sqrt(2) 2^(1 - b_x) max|x|; twiddles rounded to b_w bits: |dW_kj| <= 2^(-b_w - 1/2);
  exact CRT; one rounding, u per component) the computed output is within (1 + e)(1 + u) - 1 of the exact
  stage output in relative L2, e = e1 + e2 + e1 e2 with e1 = sqrt(2 n) 2^(1 - b_x), e2 = sqrt(n) 2^(-b_w - 1/2)
  (the stage matrices, twiddled or not, have 2-norm sqrt(n) and multiply the norm of every row by exactly
  sqrt(n)); S stages give the product of the S factors minus 1;
* cuFFT (:func:`native_fft_bound`): a model bound only (cuFFT's algorithm is not public): Higham's radix-2
  bound log2(N) eta / (1 - log2(N) eta), eta = u + gamma_4 (sqrt(2) + u) (ibid., Theorem 24.2);
* cuBLAS emulation: no a-priori bound is known here (None); only its measured error.

Policies (:func:`choose`): ``"speed"``: the fastest path whose error is acceptable: with ``tol`` None, measured
error <= native's measured error at that entry; with ``tol``, a-priori bound <= tol (paths without a bound are
then not eligible; if none is, the path with the smallest bound is taken and the reason says so).
``"accuracy"``: native unless an emulated path's measured error is <= native's; then the most accurate path,
and among paths within 2x of the smallest error the fastest.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path

from gpufield.errors import InputError

U = 2.0**-53
POLICIES = ("speed", "accuracy")
TIE_FACTOR = 2.0
"""Under 'accuracy', errors within this factor of the smallest count as equal (sampled errors are noisy)."""


def device_key(device_name: str) -> str:
    """Table key of a GPU name: ``"NVIDIA H200"`` -> ``"h200"``, ``"NVIDIA H100 80GB HBM3"`` -> ``"h100-80gb-hbm3"``."""
    name = device_name.strip().lower()
    name = name.removeprefix("nvidia ").strip()
    return re.sub(r"[^a-z0-9]+", "-", name).strip("-") or "unknown"


def native_gemm_bound(K: int) -> float:
    """gamma_K = K u / (1 - K u): native DGEMM bound in the err_norm measure (inf when K u >= 1)."""
    return K * U / (1 - K * U) if K * U < 1 else math.inf


def ozaki_fast_bound(kind: str, num_moduli: int, K: int) -> float:
    """A-priori bound of Ozaki-II fast mode in the err_norm measure (see the module docstring).

    Args:
        kind: ``"int8"`` or ``"fp8"`` moduli.
        num_moduli: L.
        K: inner dimension.

    Returns:
        The bound (float).

    Raises:
        InputError: unknown kind or moduli count.
    """
    from gpufield.fp64.ozaki.moduli import moduli_table
    from gpufield.fp64.ozaki.scaling import MARGIN_LOG2

    t = moduli_table(kind, num_moduli)
    H = (t.log2_half_M_floor - MARGIN_LOG2) / 2.0
    c = 2.0**1.006 * (1 + math.sqrt(K) * 2.0**-20)
    e = 2 * math.sqrt(K) * c * 2.0**-H + K * c * c * 2.0**(-2 * H)
    return (1 + U) * e + U


def _stages(shape: tuple[int, ...]) -> list[int]:
    out = []
    for n in shape:
        if n <= 1:
            continue
        if n <= 32:
            out.append(n)
        else:
            m = n.bit_length() - 1
            out += [1 << ((m + 1) // 2), 1 << (m // 2)]
    return out


def emulated_fft_bound(shape: tuple[int, ...], input_bits: int = 58, twiddle_bits: int = 56) -> float:
    """A-priori relative L2 bound of :func:`gpufield.fp64.fftn_fp64_emulated` (module docstring).

    Args:
        shape: the transform's sides (powers of two <= 1024).
        input_bits, twiddle_bits: b_x, b_w of the plan.

    Returns:
        The bound (float).
    """
    log_total = 0.0  # log of the product of the stage factors (summed in logs: 1 + 2^-53 rounds to 1)
    for n in _stages(tuple(shape)):
        e1 = math.sqrt(2 * n) * 2.0**(1 - input_bits)  # input truncation
        e2 = math.sqrt(n) * 2.0**(-twiddle_bits - 0.5)  # twiddle rounding
        e = e1 + e2 + e1 * e2
        log_total += math.log1p(e + U + e * U)  # (1 + e)(1 + u): the rounded output vs the exact stage output
    return math.expm1(log_total)


def native_fft_bound(shape: tuple[int, ...]) -> float:
    """Radix-2 model bound for an FFT of ``prod(shape)`` points (a model: cuFFT's algorithm is not public)."""
    lg = sum(math.log2(n) for n in shape if n > 1)
    g4 = 4 * U / (1 - 4 * U)
    eta = U + g4 * (math.sqrt(2) + U)
    return lg * eta / (1 - lg * eta)


def path_bound(op: str, path: str, dims: dict) -> float | None:
    """A-priori bound of one path for one call (None when none is known).

    Args:
        op: ``"matmul"`` or ``"fftn"``.
        path: a path name of the table.
        dims: matmul: ``{"K": K}``; fftn: ``{"shape": [...], "plan": {...}}`` (plan of ``emulated_fft``).
    """
    if op == "matmul":
        if path == "native":
            return native_gemm_bound(dims["K"])
        m = re.fullmatch(r"ozaki_(int8|fp8)_(\d+)", path)
        if m:
            return ozaki_fast_bound(m.group(1), int(m.group(2)), dims["K"])
        return None
    if path == "native":
        return native_fft_bound(tuple(dims["shape"]))
    if path == "emulated_fft":
        p = dims.get("plan") or {}
        return emulated_fft_bound(tuple(dims["shape"]), p.get("input_bits", 58), p.get("twiddle_bits", 56))
    return None


@dataclass(frozen=True, kw_only=True, slots=True)
class Choice:
    """The path chosen for one call.

    Attributes:
        path: path name (``"native"``, ``"ozaki_int8_15"``, ``"cublas_emu"``, ``"emulated_fft"``, ...).
        reason: why, in words (the policy, the entry, the numbers compared).
        entry: the table entry used (None when no table or no entry applied).
        distance_log2: sum over dims of |log2(call) - log2(entry)| (0 = a measured shape).
    """

    path: str
    reason: str
    entry: dict | None = None
    distance_log2: float = 0.0


def _err(rec: dict) -> float | None:
    v = rec.get("err_norm", rec.get("err_rel_l2"))
    return None if v is None else float(v)


def _dims_of(entry: dict) -> list[float]:
    if entry["op"] == "matmul":
        return [entry["M"], entry["K"], entry["N"]]
    return list(entry["shape"])


def nearest(table: dict, op: str, dims: list[int]) -> tuple[dict | None, float]:
    """The table entry of ``op`` nearest to ``dims`` (matmul [M, K, N]; fftn the shape) in summed |log2| distance.

    Returns:
        (entry or None, distance). Only entries of the same number of dims count.
    """
    best, bd = None, math.inf
    for e in table.get("entries", []):
        if e.get("op") != op:
            continue
        ed = _dims_of(e)
        if len(ed) != len(dims):
            continue
        d = sum(abs(math.log2(max(a, 1)) - math.log2(max(b, 1))) for a, b in zip(dims, ed, strict=True))
        if d < bd:
            best, bd = e, d
    return best, bd


def choose(table: dict, op: str, dims: list[int], *, policy: str = "speed", tol: float | None = None,
           max_distance_log2: float = 3.0, available: frozenset | None = None, plan_dims: dict | None = None) -> Choice:
    """Choose the path of one call from the table and the policy (module docstring).

    Args:
        table: a crossover table (see :func:`load_table`).
        op: ``"matmul"`` or ``"fftn"``.
        dims: matmul [M, K, N]; fftn the shape.
        policy: ``"speed"`` or ``"accuracy"``.
        tol: ``"speed"`` only: largest acceptable a-priori bound; None = no worse than native as measured.
        max_distance_log2: entries farther than this (summed |log2| over dims) are not used: native.
        available: path names that can run here (None = all); others are not eligible.
        plan_dims: for bounds: matmul ``{"K": K}``, fftn ``{"shape": ..}`` (default from ``dims``).

    Returns:
        A :class:`Choice`.

    Raises:
        InputError: unknown policy, or tol <= 0.
    """
    if policy not in POLICIES:
        raise InputError(f"policy must be one of {POLICIES}, got {policy!r}")
    if tol is not None and not tol > 0:
        raise InputError(f"tol must be None or > 0, got {tol!r}")
    entry, dist = nearest(table, op, dims)
    if entry is None:
        return Choice(path="native", reason=f"no {op} entry with {len(dims)} dims in the table")
    if dist > max_distance_log2:
        return Choice(path="native", reason=f"nearest {op} entry {_dims_of(entry)} is {dist:.1f} binades away "
                      f"(> {max_distance_log2})", entry=entry, distance_log2=dist)
    paths = {p: r for p, r in entry["paths"].items() if r.get("time_s") is not None and _err(r) is not None
             and (available is None or p in available)}
    where = f"entry {_dims_of(entry)}" + (f" ({dist:.1f} binades away)" if dist else "")
    if "native" not in paths:
        return Choice(path="native", reason=f"{where} has no native measurement", entry=entry, distance_log2=dist)
    nat_err = _err(paths["native"])
    if policy == "speed":
        if tol is None:
            ok = {p: r for p, r in paths.items() if _err(r) <= nat_err}
            p = min(ok, key=lambda q: ok[q]["time_s"])
            why = (f"speed: fastest path with measured error <= native's ({nat_err:.2e}) at {where}: "
                   f"{ok[p]['time_s'] * 1e3:.3g} ms, error {_err(ok[p]):.2e}")
            return Choice(path=p, reason=why, entry=entry, distance_log2=dist)
        bd = plan_dims or ({"K": dims[1]} if op == "matmul" else {"shape": dims})
        bounds = {}
        for q in paths:
            extra = {"plan": paths[q].get("plan")} if op == "fftn" else {}
            bounds[q] = path_bound(op, q, bd | extra)
        ok = {q: paths[q] for q, b in bounds.items() if b is not None and b <= tol}
        if not ok:
            known = {q: b for q, b in bounds.items() if b is not None}
            p = min(known, key=known.get)
            return Choice(path=p, reason=f"speed: no path's bound <= tol {tol:.2e} at {where}; smallest bound "
                          f"{known[p]:.2e} taken", entry=entry, distance_log2=dist)
        p = min(ok, key=lambda q: ok[q]["time_s"])
        return Choice(path=p, reason=f"speed: fastest path with a-priori bound <= tol {tol:.2e} at {where}: "
                      f"{ok[p]['time_s'] * 1e3:.3g} ms, bound {bounds[p]:.2e}", entry=entry, distance_log2=dist)
    emu = {p: r for p, r in paths.items() if p != "native" and _err(r) <= nat_err}
    if not emu:
        return Choice(path="native", reason=f"accuracy: no emulated path's measured error <= native's "
                      f"({nat_err:.2e}) at {where}", entry=entry, distance_log2=dist)
    best = min(_err(r) for r in emu.values())
    near = {p: r for p, r in emu.items() if _err(r) <= TIE_FACTOR * best}
    p = min(near, key=lambda q: near[q]["time_s"])
    return Choice(path=p, reason=f"accuracy: measured error {_err(near[p]):.2e} <= native's {nat_err:.2e} at {where}; "
                  f"fastest within {TIE_FACTOR:g}x of the smallest ({best:.2e}): {near[p]['time_s'] * 1e3:.3g} ms",
                  entry=entry, distance_log2=dist)


def validate_table(table: dict, source: str = "<table>") -> dict:
    """Check the structure of a crossover table; returns it.

    Raises:
        InputError: a missing key or a malformed entry (names the source and the entry index).
    """
    if not isinstance(table, dict):
        raise InputError(f"expected a JSON object (a crossover table), got {type(table).__name__}", path=source)
    for k in ("schema", "device", "key", "provenance", "entries"):
        if k not in table:
            raise InputError(f"crossover table lacks {k!r}", path=source)
    if not isinstance(table["entries"], list):
        raise InputError(f"'entries' must be a list, got {type(table['entries']).__name__}", path=source)
    for i, e in enumerate(table["entries"]):
        if not isinstance(e, dict):
            raise InputError(f"entry {i}: expected an object, got {type(e).__name__}", path=source)
        if e.get("op") not in ("matmul", "fftn") or not isinstance(e.get("paths"), dict):
            raise InputError(f"entry {i}: needs op 'matmul' or 'fftn' and a 'paths' object", path=source)
        need = ("M", "K", "N") if e["op"] == "matmul" else ("shape",)
        if any(x not in e for x in need):
            raise InputError(f"entry {i}: {e['op']} needs {need}", path=source)
        dims = [e[x] for x in need] if e["op"] == "matmul" else e["shape"]
        if not (isinstance(dims, list) and 1 <= len(dims) <= 3 and all(_positive_int(d) for d in dims)):
            what = "M, K, N" if e["op"] == "matmul" else "'shape'"
            raise InputError(f"entry {i}: {what} must be positive integers (1 to 3 sides), got {dims!r}", path=source)
        for name, rec in e["paths"].items():
            if not isinstance(rec, dict):
                raise InputError(f"entry {i}, path {name!r}: expected an object, got {type(rec).__name__}", path=source)
            for k in _NUMBER_FIELDS:
                v = rec.get(k, 0.0)
                if not (isinstance(v, int | float) and not isinstance(v, bool) and v >= 0
                        and (k != "time_s" or math.isfinite(v))):
                    rule = "a finite number of seconds >= 0" if k == "time_s" else "a number >= 0"
                    raise InputError(f"entry {i}, path {name!r}: {k!r} must be {rule}, got {v!r}", path=source)
            if "time_s" not in rec:
                raise InputError(f"entry {i}, path {name!r}: lacks 'time_s'", path=source)
    return table


#: numeric fields of a path's record in a crossover table (``time_s`` required, the others optional)
_NUMBER_FIELDS = ("time_s", "err_norm", "err_rel", "err_comp", "err_rel_l2", "first_call_s")


def _positive_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v > 0


@cache
def _packaged(key: str) -> dict | None:
    ref = resources.files("gpufield.fp64") / "data" / f"crossover_{key}.json"
    if not ref.is_file():
        return None
    return validate_table(json.loads(ref.read_text()), str(ref))


def committed_keys() -> list[str]:
    """Keys of the committed tables (``data/crossover_<key>.json``), sorted."""
    d = resources.files("gpufield.fp64") / "data"
    return sorted(f.name[len("crossover_"):-len(".json")] for f in d.iterdir()
                  if f.name.startswith("crossover_") and f.name.endswith(".json"))


def load_table(device_name: str | None = None, path: str | Path | None = None) -> dict | None:
    """The crossover table of a GPU: from ``path``, or the committed ``data/crossover_<key>.json``.

    Args:
        device_name: e.g. ``torch.cuda.get_device_name()``; ignored when ``path`` is given.
        path: a table file.

    Returns:
        The table (dict), or None when no table is committed for that GPU.

    Raises:
        InputError: the file is unreadable or malformed.
    """
    if path is not None:
        from gpufield._files import read_text

        p = Path(path)
        try:  # read_text: a FIFO is refused (never a hang); invalid UTF-8 names file, line and byte
            text = read_text(p, what="a crossover table JSON")
        except OSError as e:
            raise InputError(f"cannot read crossover table: {e.strerror or e}", path=str(p)) from None
        try:
            d = json.loads(text)
        except json.JSONDecodeError as e:
            raise InputError(f"invalid JSON: {e.msg}; expected a crossover table", path=str(p), line=e.lineno,
                             column=e.colno) from None
        return validate_table(d, str(p))
    if device_name is None:
        return None
    return _packaged(device_key(device_name))


def build_table(raw: dict, provenance: dict) -> dict:
    """A crossover table from the JSON of ``benchmarks/fp64_crossover_gpu.py`` (measured cases only).

    Args:
        raw: that JSON (``env``, ``cases``).
        provenance: ``run``, ``commit``, ``date``, ``command``, ``raw`` (where the raw output is committed).

    Returns:
        The table dict (write it with ``json.dumps``).
    """
    entries: dict = {}
    keep = ("time_s", "err_norm", "err_rel", "err_comp", "err_rel_l2", "first_call_s", "plan", "num_moduli",
            "backend")
    for c in raw.get("cases", []):
        if c.get("time_s") is None or not c.get("all_finite", False):
            continue
        k = (c["op"], c["M"], c["K"], c["N"]) if c["op"] == "matmul" else (c["op"], *c["shape"])
        e = entries.setdefault(k, ({"op": "matmul", "M": c["M"], "K": c["K"], "N": c["N"], "dtype": "float64"}
                                   if c["op"] == "matmul" else {"op": "fftn", "shape": c["shape"],
                                                                "dtype": "complex128"}) | {"paths": {}})
        e["paths"][c["path"]] = {x: c[x] for x in keep if c.get(x) is not None}
    env = raw.get("env", {})
    return {"schema": 1, "device": env.get("device"), "key": device_key(env.get("device") or "unknown"),
            "provenance": provenance, "env": {k: env.get(k) for k in ("torch", "cuda", "triton", "driver", "capability",
                                                                      "nvidia_smi", "commit")},
            "cublas_emu": {k: v for k, v in raw.get("cublas_emu", {}).items() if k != "stderr_tail"},
            "entries": list(entries.values())}
