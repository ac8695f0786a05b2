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

Also: :func:`static_count`, the sm_90 SASS count of the old and new kernels (no GPU; see
tools/fp64_sass_count.py), and ``python -m gpufield.fp64.kernels.residue_consts`` to print them.
"""

from __future__ import annotations

import functools
import re
import sys
from collections import Counter

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


def _sass(cubin: bytes) -> str:
    import os
    import subprocess
    import tempfile

    import triton

    tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        return subprocess.run([tool, "-sass", "-res-usage", f.name], capture_output=True, text=True,
                              check=True).stdout


def _histogram(sass: str) -> Counter:
    """Opcode histogram (as ``sass_count.sass_histogram``, whose 4-hex-digit address pattern stops at
    instruction 4096: these kernels are longer)."""
    ops = Counter()
    for ln in sass.splitlines():
        m = re.match(r"\s*/\*[0-9a-f]{4,}\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", ln)
        if m and not m.group(2).startswith(("NOP", "BRA")):
            ops[m.group(2)] += 1
    reg = re.search(r"REG:(\d+)", sass)
    if reg:
        ops["REG"] = int(reg.group(1))
    return ops


def _loop_free_count(sass: str, L: int) -> int:
    """Dynamic SASS count of one thread in a tile without big values, from a kernel with one runtime loop
    over moduli (the int64 kernel): straight-line code + L x (loop body minus the regions skipped by its
    conditional forward branches, which are the ``any_big`` mantissa/exponent paths: one per component)."""
    lines = []
    for ln in sass.splitlines():
        m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)(.*)", ln)
        if m and not m.group(3).startswith("NOP"):
            lines.append((int(m.group(1), 16), m.group(2), m.group(3), m.group(4)))
    addr = [a for a, *_ in lines]
    loop = [(a, int(t, 16)) for a, _, op, rest in lines if op.startswith("BRA")
            for t in re.findall(r"0x([0-9a-f]+)", rest) if int(t, 16) < a]
    (end, start), = loop  # exactly one backward branch: the while loop over moduli
    skip = [(a, int(t, 16)) for a, pred, op, rest in lines if op.startswith("BRA") and pred and start <= a < end
            for t in re.findall(r"0x([0-9a-f]+)", rest) if a < int(t, 16) <= end]
    body = [a for a in addr if start <= a <= end]
    skipped = {a for a in body for b, t in skip if b < a < t}
    count = lambda xs: sum(1 for a, _, op, _r in lines if a in xs and not op.startswith("BRA"))  # noqa: E731
    outside = set(addr) - set(body)
    return count(outside) + L * count(set(body) - skipped)


def static_count(kind: str = "int8", L: int = 16, impl: str = "int32", complex_: bool = True, group: int = 8,
                 block: tuple[int, int] = (64, 16), num_warps: int = 4, big: bool = False, K: int = 16) -> dict:
    """Compile a residue kernel for sm_90 (no GPU) and count SASS per element on a tile without |y| >= 2^62.

    Args:
        kind, L: moduli set; impl: ``"int32"`` (:mod:`.residue`) or ``"int64"`` (:mod:`.residue_int64`).
        complex_, group: FFT shape (complex input, grouped layout of ``group`` moduli).
        block: (BLOCK_R, BLOCK_K); num_warps: warps per program.
        big: int32 kernel only: count the second launch (MODE 1, the big-value pass of flagged tiles).
        K: row length (the FFT's 16): a block wider than K runs masked lanes, counted as overhead.

    Returns:
        dict: ``sass_per_thread`` (dynamic, tiles without big values), ``per_element``, ``regs``, ``ops``.
    """
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from gpufield.fp64.kernels import residue, residue_int64
    from gpufield.fp64.ozaki.moduli import moduli_table

    t = moduli_table(kind, L)
    out_t = "*i8" if kind == "int8" else "*i16"
    const = dict(COMPLEX=complex_, OUT_INT8=kind == "int8", GROUP=group, DIGITS=False, BLOCK_R=block[0],
                 BLOCK_K=block[1])
    if impl == "int32":
        fn = residue._scale_residue_i32_kernel
        const.update(kernel_constants(t.moduli), L=L, MODE=int(big), SQ=tuple([0] * L))
        ptrs = {"x_ptr": "*fp64", "x2_ptr": "*fp64", "shift_ptr": "*i64", "tab_ptr": "*i32", "out_ptr": out_t,
                "flag_ptr": "*i32"}
    else:
        fn = residue_int64._scale_residue_kernel
        ptrs = {"x_ptr": "*fp64", "x2_ptr": "*fp64", "shift_ptr": "*i64", "mod_ptr": "*i64", "invp_ptr": "*fp64",
                "tab_ptr": "*i64", "out_ptr": out_t, "sq_ptr": "*i64", "lut_ptr": "*i32"}
    sig = {n: "constexpr" if n in const else ptrs.get(n, "i32") for n in fn.arg_names}
    div16 = [n for n in fn.arg_names if n in ptrs or n in ("stride_r", "K", "so_comp", "so_grp", "so_row")]
    attrs = {(fn.arg_names.index(k),): [["tt.divisibility", 16]] for k in div16}
    src = ASTSource(fn=fn, signature=sig, constexprs={k: v for k, v in const.items() if k in fn.arg_names},
                    attrs=attrs)
    k = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": num_warps})
    sass = _sass(k.asm["cubin"])
    ops = _histogram(sass)
    regs = ops.pop("REG", None)
    n = sum(ops.values()) if impl == "int32" else _loop_free_count(sass, L)
    per_thread_elems = block[0] * min(block[1], K) / (32 * num_warps)
    return {"sass_per_thread": n, "per_element": n / per_thread_elems, "regs": regs, "ops": dict(ops.most_common())}


def main(argv: list[str]) -> None:
    """Print old vs new SASS per complex element and the predicted H200 time per 256^3 transform."""
    P_INT_H200 = 16.7e12  # H200 INT32 instruction rate (instructions/s), fp64.md 1.4

    kind, L = (argv[0], int(argv[1])) if len(argv) >= 2 else ("int8", 16)
    n_elem = 6 * 256**3  # complex elements scaled per 256^3 transform (6 stages)
    for impl, block, warps in (("int64", (32, 32), 4), ("int32", (128, 16), 4), ("int32", (64, 16), 4)):
        c = static_count(kind, L, impl, block=block, num_warps=warps)
        top = ", ".join(f"{k} {v}" for k, v in list(c["ops"].items())[:8])
        print(f"FFT (complex, g8, K 16) {impl} block {block} warps {warps}: {c['sass_per_thread']} SASS/thread, "
              f"{c['regs']} regs, {c['per_element']:.0f}/complex element -> "
              f"{c['per_element'] * n_elem / P_INT_H200 * 1e3:.2f} ms per 256^3 transform; {top}")
    for impl, block in (("int64", (32, 32)), ("int32", (128, 16))):  # the DGEMM path: real rows, K >= 32
        c = static_count(kind, L, impl, complex_=False, group=1, block=block, K=4096)
        print(f"DGEMM (real, K >= 32) {impl} block {block}: {c['per_element']:.0f}/element, {c['regs']} regs")


if __name__ == "__main__":
    main(sys.argv[1:])
