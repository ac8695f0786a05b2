"""Moduli tables and CRT constants of Ozaki scheme II (internal API, reused by the FFT wing).

The INT8 and FP8 tables are those of GEMMul8 ``src/oz2/common/table.hpp`` (fp64.md sections 2.2 and 2.4),
stored in ``gpufield/fp64/data/moduli.json``. Pairwise coprimality is checked when this module is imported,
and a broken table raises :class:`gpufield.errors.NumericsError` at import time.

Internal API (stable for other fp64 modules, e.g. the emulated FFT):

* :func:`moduli_table` ``(kind, num_moduli) -> ModuliTable``: cached, frozen, holds the moduli, M, the CRT
  basis constants C_l (Python ints), their 31-bit limbs, and q_l/p_l in float64 for the quotient estimate.
* :func:`sym_mod` ``(x: int, p: int) -> int``: symmetric residue in [-p/2, p/2) (Python ints).
* :func:`crt_lift` ``(residues, table) -> int``: exact symmetric CRT lift with Python integers.

Symmetric range: r = x mod p with r in [-floor(p/2), ceil(p/2) - 1], i.e. [-128, 127] for p = 256 and
[-(p-1)/2, (p-1)/2] for odd p. CRT of residues r_l gives X = S - M*round(S/M), S = sum_l r_l*C_l, the
"two-sided lift" into [-M/2, M/2) (fp64.md section 1.6).

Shape legend: L = number of moduli, J = number of 31-bit limbs.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from functools import cache
from importlib import resources

from gpufield.errors import InputError, NumericsError

LIMB_BITS = 31
"""Width of one limb of the CRT constants: 31 bits keep every limb product sum inside int64."""

KINDS = ("int8", "fp8")


def _load_raw() -> dict:
    text = resources.files("gpufield.fp64").joinpath("data/moduli.json").read_text()
    return json.loads(text)


def _check_table(kind: str, moduli: list[int]) -> None:
    for i, p in enumerate(moduli):
        if p < 2:
            raise NumericsError(f"moduli.json[{kind}]: modulus {p} at index {i} is < 2")
        for q in moduli[:i]:
            if math.gcd(p, q) != 1:
                raise NumericsError(
                    f"moduli.json[{kind}]: moduli {q} and {p} are not coprime (gcd {math.gcd(p, q)}); "
                    "the CRT needs pairwise-coprime moduli"
                )


_RAW = _load_raw()
RAW_MODULI: dict[str, tuple[int, ...]] = {k: tuple(_RAW[k]["moduli"]) for k in KINDS}
for _k in KINDS:
    _check_table(_k, list(RAW_MODULI[_k]))
FP8_SQUARE_ROOTS: tuple[int, ...] = tuple(_RAW["fp8"]["square_roots"])
for _i, _s in enumerate(FP8_SQUARE_ROOTS):
    if _s * _s != RAW_MODULI["fp8"][_i]:
        raise NumericsError(f"moduli.json[fp8]: square_roots[{_i}]={_s} but modulus is {RAW_MODULI['fp8'][_i]}")
FP8_KARATSUBA_BASE: int = int(_RAW["fp8"]["karatsuba_base"])
FP8_MAX_DIGIT: int = int(_RAW["fp8"]["max_abs_digit"])


def sym_mod(x: int, p: int) -> int:
    """Symmetric residue of a Python integer.

    Args:
        x: any integer.
        p: modulus >= 2.

    Returns:
        r with r = x (mod p) and -floor(p/2) <= r <= ceil(p/2) - 1.
    """
    r = x % p
    return r - p if r >= (p + 1) // 2 else r


def max_abs_residue(p: int) -> int:
    """Largest |r| of a symmetric residue mod p (128 for 256, (p-1)/2 for odd p)."""
    return p // 2


@dataclass(frozen=True, kw_only=True, slots=True)
class ModuliTable:
    """The first ``num_moduli`` moduli of one table with every CRT constant (fp64.md 1.6, 2.5).

    Attributes:
        kind: ``"int8"`` or ``"fp8"``.
        moduli: the moduli p_l, length L.
        M: product of the moduli (Python int).
        crt_C: C_l = (M/p_l) * ((M/p_l)^-1 mod p_l), so C_l = delta_lj (mod p_j).
        crt_q: q_l = (M/p_l)^-1 mod p_l; S/M = sum_l r_l q_l / p_l.
        q_over_p: q_l / p_l rounded to float64 (quotient estimate only; errors are absorbed by the margin).
        C_limbs_LJ: C_l split into J unsigned 31-bit limbs, least significant first.
        M_limbs_J: M split the same way.
        log2_M: log2(M) in float64.
        log2_half_M_floor: a float64 t with 2**t <= (M-1)/2 (1e-9 below log2), used by the scalings.
        num_square: FP8 only: how many leading moduli are squares s^2 (digit split a = s*hi + lo).
    """

    kind: str
    moduli: tuple[int, ...]
    M: int
    crt_C: tuple[int, ...]
    crt_q: tuple[int, ...]
    q_over_p: tuple[float, ...]
    C_limbs_LJ: tuple[tuple[int, ...], ...]
    M_limbs_J: tuple[int, ...]
    log2_M: float
    log2_half_M_floor: float
    num_square: int = field(default=0)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise InputError(f"moduli kind must be one of {KINDS}, got {self.kind!r}")

    @property
    def num_moduli(self) -> int:
        """Number of moduli L."""
        return len(self.moduli)

    @property
    def num_limbs(self) -> int:
        """Number of 31-bit limbs J holding any |X| < M."""
        return len(self.M_limbs_J)

    @property
    def max_abs_residue(self) -> int:
        """Largest |r| over the table's symmetric residues."""
        return max(p // 2 for p in self.moduli)

    def square_root(self, mi: int) -> int | None:
        """FP8: s with p_l = s^2 for the square moduli, else None (Karatsuba modulus)."""
        return FP8_SQUARE_ROOTS[mi] if self.kind == "fp8" and mi < self.num_square else None


def _limbs(x: int, J: int) -> tuple[int, ...]:
    mask = (1 << LIMB_BITS) - 1
    return tuple((x >> (LIMB_BITS * j)) & mask for j in range(J))


@cache
def moduli_table(kind: str, num_moduli: int) -> ModuliTable:
    """Build (once) the CRT table for the first ``num_moduli`` moduli of ``kind``.

    Args:
        kind: ``"int8"`` (GEMMul8 INT8 moduli, 1 INT8 GEMM each) or ``"fp8"`` (FP8 moduli, 3 FP8 GEMMs each).
        num_moduli: 2..20.

    Returns:
        A frozen :class:`ModuliTable`.

    Raises:
        InputError: unknown kind or num_moduli out of range.
        NumericsError: a CRT constant fails its self-check C_l = delta_lj (mod p_j).
    """
    if kind not in KINDS:
        raise InputError(f"moduli kind must be one of {KINDS}, got {kind!r}")
    avail = RAW_MODULI[kind]
    if not (isinstance(num_moduli, int) and 2 <= num_moduli <= len(avail)):
        raise InputError(f"num_moduli must be an int in [2, {len(avail)}] for {kind}, got {num_moduli!r}")
    ps = avail[:num_moduli]
    M = math.prod(ps)
    Cs, qs = [], []
    for p in ps:
        Mi = M // p
        q = pow(Mi, -1, p)
        Cs.append(Mi * q)
        qs.append(q)
    for mi, C in enumerate(Cs):  # self-check (fp64.md 4.4)
        for j, p in enumerate(ps):
            if C % p != (1 if mi == j else 0):
                raise NumericsError(f"CRT constant C_{mi} is not delta mod p_{j}={p}")
    J = -(-M.bit_length() // LIMB_BITS)
    # math.log2 of a Python int is accurate to a few ulps (~1e-13 here); 1e-9 below keeps 2**t <= (M-1)/2.
    t = math.log2((M - 1) // 2) - 1e-9
    nsq = min(num_moduli, len(FP8_SQUARE_ROOTS)) if kind == "fp8" else 0
    return ModuliTable(
        kind=kind,
        moduli=ps,
        M=M,
        crt_C=tuple(Cs),
        crt_q=tuple(qs),
        q_over_p=tuple(q / p for q, p in zip(qs, ps, strict=False)),
        C_limbs_LJ=tuple(_limbs(C, J) for C in Cs),
        M_limbs_J=_limbs(M, J),
        log2_M=math.log2(M),
        log2_half_M_floor=t,
        num_square=nsq,
    )


def crt_lift(residues: list[int] | tuple[int, ...], table: ModuliTable) -> int:
    """Exact symmetric CRT lift with Python integers (the reference every backend is tested against).

    Args:
        residues: r_l, any integers congruent to X mod p_l (length L).
        table: the moduli table.

    Returns:
        The unique X in [-M/2, M/2) with X = r_l (mod p_l) for every l.
    """
    M = table.M
    S = sum(int(r) * C for r, C in zip(residues, table.crt_C, strict=False))
    return (S + M // 2) % M - M // 2
