"""Compile-time constants of the 32-bit FFT epilogue kernel (:mod:`.fft_epilogue`), per moduli set.

Everything the kernel multiplies by is baked in as an immediate: Barrett multipliers and biases per
modulus, the W-bit limbs of the CRT constants C_i and of M, the FW-bit chunks of the quotient fractions
round(2^F q_i / p_i) (F = 40 for ``"crt"``, 36 for ``"kulisch"``: the integers of
:mod:`gpufield.fp64.fft.epilogue`), and the accumulators' start values that absorb the residue offset
floor(p_i / 2) and the rounding constant 2^(F-1). W is the widest limb for which every int32 value of
the kernel provably stays in range (:func:`_fits`); the CRT is GEMMul8's (fp64.md 2.5).
"""

from __future__ import annotations

import functools
import struct

from gpufield.errors import InputError
from gpufield.fp64.crt_tables import BULK_FRAC_BITS, FRAC_BITS, EpilogueTables

T_BOUND_BITS = 25
"""|T| <= 2^25 for every backend's raw products, so |x| < 3 * 2^25 and 0 <= u = x + B_i < 2^28."""
BARRETT_SHIFT = 7
"""m_i = ceil(2^(32 + 7) / p_i): umulhi(u, m_i) >> 7 = floor(u / p_i) exactly for u < 2^28, 128 < p_i < 2^11."""


def _fits(tab: EpilogueTables, w: int, frac_bits: int, fw: int) -> bool:
    """Every int32 value of the kernel stays below 2^31 in magnitude (limb sums, lift, carries, chunks)."""
    ks = [p // 2 for p in tab.moduli]
    L = -(-tab.M.bit_length() // w)
    qmax = sum(ks) + 2
    carry = 0
    for j in range(L):
        cl = [(C >> (w * j)) & ((1 << w) - 1) for C in _crt(tab).crt_C]
        b = sum(k * c for k, c in zip(ks, cl, strict=True)) + qmax * ((tab.M >> (w * j)) & ((1 << w) - 1)) + carry
        if j == L - 1:
            b += qmax * (tab.M >> (w * L))
        if b >= 1 << 31:
            return False
        carry = (b >> w) + 1
    return sum(ks) * ((1 << fw) - 1) + (1 << fw) * 2 < 1 << 31


def _crt(tab: EpilogueTables):
    from gpufield.fp64.ozaki.moduli import moduli_table

    return moduli_table(tab.kind, tab.num_moduli)


@functools.cache
def kernel_constants(tab: EpilogueTables, variant: str) -> dict:
    """Compile-time constants of :func:`_fft_epilogue_i32_kernel` for one moduli set and variant.

    Returns:
        dict of Python ints / tuples (kernel ``tl.constexpr`` arguments; immediates in the SASS).

    Raises:
        InputError: a modulus outside the Barrett range (128, 2^11), or no limb width keeps int32 exact.
    """
    ps = tab.moduli
    if not all(128 < p < 2048 for p in ps):
        raise InputError(f"32-bit epilogue needs moduli in (128, 2048), got {ps}")
    F = FRAC_BITS if variant == "crt" else BULK_FRAC_BITS
    fw = max(x for x in range(8, 31) if sum(p // 2 for p in ps) * ((1 << x) - 1) + (1 << x) * 2 < 1 << 31)
    w = max((x for x in range(8, 31) if _fits(tab, x, F, fw)), default=None)
    if w is None:
        raise InputError(f"{tab.num_moduli} {tab.kind} moduli do not fit the 32-bit epilogue")
    L = -(-tab.M.bit_length() // w)
    nf = -(-F // fw)
    Cs = _crt(tab).crt_C
    ks = [p // 2 for p in ps]
    CL = tuple(tuple((C >> (w * j)) & ((1 << w) - 1) for j in range(L)) for C in Cs)
    fracs = [(q * (1 << F) + p // 2) // p for q, p in zip(_crt(tab).crt_q, ps, strict=True)]
    FL = tuple(tuple((fr >> (fw * j)) & ((1 << fw) - 1) for j in range(nf)) for fr in fracs)
    SI = tuple(-sum(k * c[j] for k, c in zip(ks, CL, strict=True)) for j in range(L))
    FI = [-sum(k * c[j] for k, c in zip(ks, FL, strict=True)) for j in range(nf)]
    FI[(F - 1) // fw] += 1 << (F - 1 - fw * ((F - 1) // fw))  # round(Q / 2^F) = floor((Q + 2^(F-1)) / 2^F)
    ML = tuple((tab.M >> (w * j)) & ((1 << w) - 1) for j in range(L - 1)) + (tab.M >> (w * (L - 1)),)
    BM = tuple(-(-(1 << (32 + BARRETT_SHIFT)) // p) for p in ps)
    # exact floor(u / p) for all u < 2^28 needs u * (m p - 2^E) < 2^E (E = 32 + BARRETT_SHIFT), and m < 2^32
    if any(m >= 1 << 32 or (m * p - (1 << (32 + BARRETT_SHIFT))) << 28 >= 1 << (32 + BARRETT_SHIFT) for m, p in zip(BM, ps, strict=True)):
        raise InputError(f"Barrett constants out of range for moduli {ps}")
    BB = tuple(p * -(-(1 << 27) // p) + p // 2 for p in ps)
    flat = lambda t: tuple(x for row in t for x in row)  # noqa: E731 - [R][N] row-major (cheap constexpr indexing)
    return dict(R=tab.num_moduli, PM=ps, BM=BM, BB=BB, CL=flat(CL), SI=SI, FL=flat(FL), FI=tuple(FI), ML=ML, W=w, L=L,
                FW=fw, NF=nf, QSH=F - fw * (nf - 1), NW=-(-(tab.M.bit_length() + 1) // 32), BSH=BARRETT_SHIFT)


@functools.cache
def barrett_constants(moduli: tuple[int, ...], x_bound: int) -> dict:
    """Barrett constants of :func:`gpufield.fp64.kernels.fft_epilogue._mod` for int32 inputs |x| <= x_bound.

    With the bias B_i = p_i ceil(x_bound / p_i) + floor(p_i / 2), u = x + B_i lies in [0, 2 x_bound + 2 p_i);
    the smallest shift s >= 0 with m_i = ceil(2^(32 + s) / p_i) < 2^32 and u_max (m_i p_i - 2^(32 + s)) <
    2^(32 + s) for every modulus makes umulhi(u, m_i) >> s = floor(u / p_i) exact. The fused stage's dot
    accumulators, |x| <= 2^20, get s = 0 (one instruction fewer per residue); the standalone epilogue keeps
    its own constants (:data:`BARRETT_SHIFT` = 7 for u < 2^28; this rule gives 4 for |x| < 3 2^25).

    Returns:
        dict ``BM``, ``BB``, ``BSH`` (kernel constexprs).

    Raises:
        InputError: no shift below 16 works, or u would not fit int32.
    """
    bb = tuple(p * -(-x_bound // p) + p // 2 for p in moduli)
    umax = max(x_bound + b for b in bb)
    if umax >= 1 << 31:
        raise InputError(f"Barrett input bound {x_bound} too large for int32")
    for sh in range(16):
        e = 1 << (32 + sh)
        bm = tuple(-(-e // p) for p in moduli)
        if all(m < 1 << 32 and umax * (m * p - e) < e for m, p in zip(bm, moduli, strict=True)):
            return dict(BM=bm, BB=bb, BSH=sh)
    raise InputError(f"no Barrett shift below 16 is exact for moduli {moduli} and |x| <= {x_bound}")


@functools.cache
def residue_constants(moduli: tuple[int, ...]) -> tuple[int, ...]:
    """Bit patterns (int64) of the float64 constants of the fused stage's residue step
    (:func:`gpufield.fp64.fft.stage_residues._sym_res_rn`): fl(1 / p_i) and 2^29 mod p_i, two per modulus
    in modulus order, so the kernels take them as compile-time operands instead of loads.

    Returns:
        tuple of 2 L Python ints (all >= 0: the constants are positive or zero).
    """
    def bits(v: float) -> int:
        return struct.unpack("<q", struct.pack("<d", v))[0]

    return tuple(bits(float(v)) for p in moduli for v in (1.0 / p, (1 << 29) % p))


RESIDUE_PAIRS = {16: 4, 32: 0}
"""Padded stage length NP -> number of modulus pairs whose residues come from one float64 reduction mod
p_a p_b (:func:`residue_schedule`): a pair halves the prologue's float64 work (6 -> 3 pipe cycles per modulus)
for one more issue slot. The values are the fastest measured per stage length (docs/perf-notes.md: at NP = 32
pairs made the stage faster but whole transforms slower, so none)."""

SINGLE, PAIR_FIRST, PAIR_SECOND, LOW_BYTE = 0, 1, 2, 3
"""How :func:`residue_schedule` computes a modulus's residue (the fused stage kernels' ``RK`` entries)."""


@functools.cache
def residue_schedule(moduli: tuple[int, ...], pairs: int = 4,
                     strict: bool = True) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """How the fused stage kernels compute each modulus's symmetric residue of the row integers v, and the
    float64 constants that takes (:mod:`gpufield.fp64.fft.stage_residues`).

    * ``LOW_BYTE`` (p = 256): the low byte of v, free (2^29 = 0 mod 256, so it is the low byte of lo);
    * ``PAIR_FIRST`` / ``PAIR_SECOND`` (the next ``pairs`` adjacent pairs of odd moduli, P = p_a p_b < 2^16):
      r = the symmetric residue of v mod P (one float64 reduction, exact as for one modulus because
      |w| < 2^47 and w / P lies at least 1 / (2 P) >= 2^-17 from a half-integer), then each residue from
      r by one float32 FMA (round to nearest through 1.5 2^23) and one integer multiply-add;
    * ``SINGLE``: the float64 reduction mod p (:func:`residue_constants`).

    Args:
        moduli: the moduli in kernel order (int8 table: 256 first).
        pairs: number of pairs; 0 keeps every odd modulus ``SINGLE``.
        strict: refuse more pairs than the moduli allow; False: as many as fit, up to ``pairs`` (the
            launcher's default, so that small moduli sets, e.g. 5 moduli for 12-bit inputs, still run).

    Returns:
        (kinds, bits): one kind per modulus, and 2 L int64 bit patterns: slot i holds (fl(1 / P), 2^29 mod P)
        with P = p_i for ``SINGLE``, p_i p_(i+1) for ``PAIR_FIRST`` (zeros for the other kinds).

    Raises:
        InputError: ``pairs`` negative, or (``strict``) more pairs than adjacent odd moduli allow.
    """
    if pairs < 0:
        raise InputError(f"residue pairs must be >= 0, got {pairs}")
    kinds, out, i, left = [], [], 0, pairs
    while i < len(moduli):
        p = moduli[i]
        if p == 256:
            kinds.append(LOW_BYTE)
            out += [0, 0]
        elif left and i + 1 < len(moduli) and p % 2 and moduli[i + 1] % 2 and p * moduli[i + 1] < 1 << 16:
            big = p * moduli[i + 1]
            kinds += [PAIR_FIRST, PAIR_SECOND]
            out += [*residue_constants((big,)), 0, 0]  # the single-modulus constants of P
            left -= 1
            i += 1
        else:
            kinds.append(SINGLE)
            out += residue_constants((p,))
        i += 1
    if left and strict:
        raise InputError(f"{pairs} residue pairs asked, only {pairs - left} fit moduli {moduli}")
    return tuple(kinds), tuple(out)
