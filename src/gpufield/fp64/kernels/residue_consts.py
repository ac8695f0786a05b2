"""Compile-time constants of the 32-bit residue kernel (:mod:`.residue`), per moduli set, with their proofs.

The kernel reduces an int64 ``yi`` (|yi| < 2^62, the truncated scaled input) modulo every p_i in int32
lanes only:

1. ``yi`` is cut once per element into NCH chunks of CW bits (two's complement: the top chunk signed,
   the others in [0, 2^CW)), read off its two 32-bit words;
2. per modulus, T = a_0 + sum_j a_j c_j with the centred constants c_j = sym(2^(CW j) mod p) (NCH - 1
   IMADs), so T = yi (mod p) and T fits int32 (checked here);
3. the symmetric residue r = T - p floor((T + h) / p), h = floor(p / 2), by unsigned Barrett on
   U = T + h + j p (j p >= -(T_min + h) makes U >= 0): floor(U / p) = floor((T + h) / p) + j and
   floor(U / p) = umulhi(U, m) >> S with m = ceil(2^(32+S) / p) < 2^32, exact when
   U_max (m p - 2^(32+S)) < 2^(32+S) and U_max < 2^32 for U_max = T_max + h + j p (checked here). With
   j a multiple of 2^16 (:data:`ALIGN`), T - p floor(U / p) = r - j p has the low 16 bits of r, which is
   all an int8 / int16 store keeps: one IADD, IMAD.HI, shift and IMAD per residue (the exact r, for FP8
   digits and the big path, costs one IADD more). (Subtracting j inside the IMAD.HI costs two MOVs per
   use, its 64-bit addend; a 64-bit addend in ``mad.wide.s32`` is split by ptxas into IMAD.WIDE + IADD3 +
   IADD3.X.) Powers of two p = 2^k skip it: r = the low k bits, sign-extended.

The same reduction serves re+im (T = r_re + r_im, offset by up to -2 j p: its own j3) and the big path
(T = +-sym(mant) (2^e mod p), exact), so the domain checked is the union of the three. Sources: Barrett (1986), as in :mod:`.fft_epilogue_consts`;
GEMMul8's symmetric residues (fp64.md 2.1, 4.1).

The sm_90 SASS count of this kernel and of the previous one: tools/fp64_residue_sass_count.py.
"""

from __future__ import annotations

import functools

from gpufield.errors import InputError

YI_BITS = 62
"""|yi| < 2^62 on the fast path (larger values take the mantissa/exponent path)."""
ALIGN = 1 << 16
"""The offsets j are multiples of 2^16, so T - p floor(U / p) = r - j p has the low 16 bits of r: stores of
int8 / int16 residues skip the - j (only digits and the big path need the exact r)."""
CHUNKINGS = ((3, 21), (4, 16))
"""(NCH, CW) tried in order: 3 x 21 bits fits both tables (the centred constants keep FP8's p <= 1089 in
int32); 4 x 16 (one IMAD more per residue) is the fallback."""


def _interval_mul(lo: int, hi: int, c: int) -> tuple[int, int]:
    return (min(lo * c, hi * c), max(lo * c, hi * c))


def _barrett_j(dom_lo: int, dom_hi: int, p: int, m: int, E: int) -> int | None:
    """Smallest multiple J of :data:`ALIGN` with U = T + h + J p in [0, 2^32) and exact Barrett on the domain."""
    h = p // 2
    j = ALIGN * -(-max(0, -(dom_lo + h)) // (p * ALIGN))
    umax = dom_hi + h + j * p
    return j if umax < 1 << 32 and umax * (m * p - (1 << E)) < 1 << E else None


def _modulus_constants(p: int, nch: int, cw: int) -> tuple | None:
    """(m, S, J, J3, c_1..c_{NCH-1}) for one modulus, or None if an int32 bound fails."""
    h = p // 2
    cs = []
    for j in range(1, nch):
        c = pow(2, cw * j, p)
        cs.append(c - p if c >= (p + 1) // 2 else c)
    top = YI_BITS - cw * (nch - 1)
    ranges = [(0, (1 << cw) - 1)] * (nch - 1) + [(-(1 << top), (1 << top) - 1)]
    lo, hi = ranges[0]
    for (alo, ahi), c in zip(ranges[1:], cs, strict=True):  # partial sums of the chain a_0 + a_j c_j
        plo, phi = _interval_mul(alo, ahi, c)
        lo, hi = lo + plo, hi + phi
        if lo < -(1 << 31) or hi >= 1 << 31:
            return None
    g = p - 1 - h
    dom_lo = min(lo, -2 * h, -(p - 1) * max(h, g))  # chains, exact r_re + r_im, big-path products
    dom_hi = max(hi, 2 * g, (p - 1) * max(h, g))
    if dom_lo < -(1 << 31) or dom_hi >= 1 << 31:
        return None
    if p & (p - 1) == 0:
        return (0, 0, 0, 0, *cs)
    S = max(s for s in range(0, 32) if -(-(1 << (32 + s)) // p) < 1 << 32)
    E = 32 + S
    m = -(-(1 << E) // p)
    J = _barrett_j(dom_lo, dom_hi, p, m, E)
    if J is None or -2 * h - 2 * J * p < -(1 << 31):
        return None
    J3 = _barrett_j(-2 * h - 2 * J * p, 2 * g, p, m, E)  # re+im of two residues offset by -J p
    return None if J3 is None else (m, S, J, J3, *cs)


@functools.cache
def kernel_constants(moduli: tuple[int, ...]) -> dict:
    """Constexpr arguments of ``_scale_residue_i32_kernel`` for one moduli set.

    Args:
        moduli: the moduli p_i (2 < p_i < 2^11), e.g. ``ModuliTable.moduli``.

    Returns:
        dict: ``PM`` moduli, ``PK`` log2 p for powers of two (else 0), ``BM`` Barrett multipliers m_i,
        ``BS`` shifts S_i, ``BJ`` / ``BJ3`` the offsets j_i (residues, re+im), multiples of :data:`ALIGN`,
        ``CC`` chunk constants (flat [L][NCH-1]), ``NCH``, ``CW``.

    Raises:
        InputError: a modulus out of range, or no chunking keeps every int32 value exact.
    """
    if not all(2 < p < 2048 for p in moduli):
        raise InputError(f"32-bit residue kernel needs moduli in (2, 2048), got {moduli}")
    for nch, cw in CHUNKINGS:
        per = [_modulus_constants(p, nch, cw) for p in moduli]
        if all(c is not None for c in per):
            pk = tuple(p.bit_length() - 1 if p & (p - 1) == 0 else 0 for p in moduli)
            return dict(PM=tuple(moduli), PK=pk, BM=tuple(c[0] for c in per), BS=tuple(c[1] for c in per),
                        BJ=tuple(c[2] for c in per), BJ3=tuple(c[3] for c in per),
                        CC=tuple(x for c in per for x in c[4:]), NCH=nch, CW=cw)
    raise InputError(f"no chunking keeps the 32-bit residue kernel exact for moduli {moduli}")
