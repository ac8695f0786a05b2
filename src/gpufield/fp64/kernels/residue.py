"""Triton kernel: fused scaling -> truncation -> symmetric residues (Ozaki-II steps 1-2, fp64.md 2.1, 4.1).

One read of the float64 operand, L narrow writes; no float64 or int64 intermediate ever reaches memory.
Per element: y = x * 2**s1 * 2**s2 (two exact power-of-two multiplications, s = s1 + s2 the row shift),
then, with every modulus a compile-time constant (:mod:`.residue_consts`, which also proves the bounds):

* |y| < 2**62: yi = trunc(y) as int64, cut once into NCH chunks of CW bits (3 x 21 for both tables;
  4 x 16 is the fallback for a moduli set that fails the bounds) read off its two 32-bit words; per modulus T = a_0 + sum_j a_j c_j in int32
  (NCH - 1 IMADs with c_j = sym(2^(CW j) mod p)), then the symmetric residue r = T - p floor((T + h) / p)
  by unsigned Barrett (IADD, umulhi, shift, IMAD). No ``%``, no division, no int64 arithmetic in the
  moduli loop; p = 2^k (256, 1024) is the sign-extended low k bits.
* re+im (complex input, the 3M operand): the same reduction of r_re + r_im.
* |y| >= 2**62: the first launch flags the tile, a second launch rewrites only flagged tiles with
  y = +-mant * 2**e, r = sym(+-sym(mant) (2**e mod p)) (same int32 reduction, [L, 2048] table of 2**e
  mod p); unflagged programs of the second launch read one int32 and exit (a few microseconds).

Bit-identical to ``residues_from_scaled(scale_trunc(X, shift), moduli)`` (tests/fp64/test_kernels.py,
tests/fp64/test_residue_kernel.py, on CPU in the Triton interpreter). The previous int64-lane kernel, kept for
A/B timing, is benchmarks/fp64_residue_int64.py; its static counts and timings against this one are in
docs/perf-notes.md ("Measurement history moved out of the kernel docstrings").

Shape legend: R rows (of A, or of B^T), K inner dimension, L moduli, C components (1 real, 3 complex).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from gpufield.fp64.kernels.residue_consts import kernel_constants
from gpufield.fp64.ozaki.moduli import ModuliTable

POW2_TABLE_LEN = 2048
"""Entries per modulus of the table of 2^e mod p (the big-value path, e = 0 .. 2047)."""

DEFAULT_BLOCK = (128, 16, 4)
"""(BLOCK_R, BLOCK_K cap, warps) on CUDA; BLOCK_K = min(cap, next power of two >= K). Not yet timed on a GPU;
chosen from the static sm_90 count: 16 elements per thread (one 16-byte store per plane and row), 348
SASS per complex element at K = 16 (168 registers) vs 416 at (64, 16, 4) (95 registers), where Triton
moves every stored plane through shared memory (8 elements per thread: store and load layouts differ).
The lower occupancy of (128, 16, 4) is untested: sweep ``block`` on the GPU."""


@triton.jit
def _pow2(e):
    """2^e as float64 from its bit pattern (e in the normal range)."""
    return ((e + 1023) << 52).to(tl.float64, bitcast=True)


@triton.jit
def _imax(a, b):
    # own combine function: tl.max is a @jit of triton.language.standard, which is not interpretable when
    # triton was imported before TRITON_INTERPRET was set (CPU runs); builtins and our own @jit are.
    return tl.maximum(a, b)


_TABLE_CACHE: dict = {}


def _tables(table: ModuliTable, device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(moduli int64 [L], 1/p float64 [L], 2^e mod p int64 [L, POW2_TABLE_LEN]) on ``device``, cached."""
    key = (table.kind, table.num_moduli, str(device))
    if key not in _TABLE_CACHE:
        mods = torch.tensor(table.moduli, dtype=torch.int64, device=device)
        invp = torch.tensor([1.0 / p for p in table.moduli], dtype=torch.float64, device=device)
        tab = torch.tensor([[pow(2, e, p) for e in range(POW2_TABLE_LEN)] for p in table.moduli],
                           dtype=torch.int64, device=device)
        _TABLE_CACHE[key] = (mods, invp, tab)
    return _TABLE_CACHE[key]


@triton.jit
def _sym(T, P: tl.constexpr, PK: tl.constexpr, M: tl.constexpr, S: tl.constexpr, J: tl.constexpr,
         EXACT: tl.constexpr):
    """Symmetric residue r of int32 T (in the proven domain) mod the constant P; without EXACT r - J P,
    which has the low 16 bits of r (J a multiple of 2^16), all an int8 / int16 store keeps."""
    if PK > 0:  # P = 2^PK: the low PK bits, sign-extended
        return (T << (32 - PK)) >> (32 - PK)
    else:
        U = T.to(tl.uint32, bitcast=True) + (P // 2 + J * P)  # T + h + J P in [0, 2^32): no wrap-around
        q = (tl.umulhi(U, M) >> S).to(tl.int32)  # floor((T + h) / P) + J
        if EXACT:
            q = q - J
        return T - q * P


@triton.jit
def _chunks(v, CW: tl.constexpr, NCH: tl.constexpr):
    """int64 v -> NCH int32 chunks of CW bits (two's complement; the top one signed)."""
    out = ()
    for j in tl.static_range(NCH - 1):
        out = out + (((v >> (CW * j)) & ((1 << CW) - 1)).to(tl.int32),)
    return out + ((v >> (CW * (NCH - 1))).to(tl.int32),)


@triton.jit
def _res(a, i: tl.constexpr, PM: tl.constexpr, PK: tl.constexpr, BM: tl.constexpr, BS: tl.constexpr,
         BJ: tl.constexpr, CC: tl.constexpr, NCH: tl.constexpr, EXACT: tl.constexpr):
    """Symmetric residue mod PM[i] of the integer held in chunks a (int32 [BLOCK_R, BLOCK_K])."""
    t = a[0]
    if PK[i] == 0:
        for j in tl.static_range(1, NCH):
            t = t + a[j] * CC[i * (NCH - 1) + j - 1]
    return _sym(t, PM[i], PK[i], BM[i], BS[i], BJ[i], EXACT)


@triton.jit
def _res_big(r, a, mc, e, neg, small, i: tl.constexpr, tab_ptr, PM: tl.constexpr, PK: tl.constexpr,
             BM: tl.constexpr, BS: tl.constexpr, BJ: tl.constexpr, CC: tl.constexpr, NCH: tl.constexpr):
    """r where |y| < 2^62, else sym(+-sym(mant) * (2^e mod p)) (all int32, exact)."""
    rm = _res(mc, i, PM, PK, BM, BS, BJ, CC, NCH, True)
    v = rm * tl.load(tab_ptr + i * 2048 + e)
    rb = _sym(tl.where(neg, -v, v), PM[i], PK[i], BM[i], BS[i], BJ[i], True)
    return tl.where(small, r, rb)


@triton.jit
def _e4m3(v):
    """E4M3 bit pattern of an int32 |v| <= 16 (exact): the float32 exponent and top 3 mantissa bits; larger
    |v| (only in the unused third plane of square moduli) clamp to 16 like the previous kernel's table."""
    av = tl.minimum(tl.abs(v), 16)
    b = av.to(tl.float32).to(tl.int32, bitcast=True)
    code = tl.where(av == 0, 0, (b >> 20) - 960)
    return (code | tl.where(v < 0, 128, 0)).to(tl.uint8)


@triton.jit
def _put(ptr, r, mask, SQ: tl.constexpr, so_dig, OUT_INT8: tl.constexpr, DIGITS: tl.constexpr):
    """Store residues r, or (DIGITS) their FP8 digit planes as in ``residues.fp8_digit_planes``:
    SQ > 0 (p = SQ^2): hi = round_half_even(r / SQ), lo = r - SQ hi; SQ == 0 (Karatsuba, base 16):
    hi = sign(r) ceil(|r| / 16), lo = r - 16 hi; planes [hi, lo, hi + lo]."""
    if DIGITS:
        if SQ > 0:  # |r / SQ| < 17: the float32 quotient is never on the wrong side of a half-integer
            hf = r.to(tl.float32) * (1.0 / SQ) + 12582912.0  # 1.5 * 2^23: round half to even
            hi = hf.to(tl.int32, bitcast=True) - 0x4B400000
            lo = r - SQ * hi
        else:
            hi = (r + tl.where(r > 0, 15, 0)) >> 4
            lo = r - 16 * hi
        d = tl.cast(so_dig, tl.int64)
        tl.store(ptr, _e4m3(hi), mask=mask)
        tl.store(ptr + d, _e4m3(lo), mask=mask)
        tl.store(ptr + 2 * d, _e4m3(hi + lo), mask=mask)
    elif OUT_INT8:
        tl.store(ptr, r.to(tl.int8), mask=mask)
    else:
        tl.store(ptr, r.to(tl.int16), mask=mask)


@triton.jit
def _emit(i: tl.constexpr, r, r2, out_ptr, off, so_comp, so_grp, K, so_dig, mask, PM: tl.constexpr,
          PK: tl.constexpr, BM: tl.constexpr, BS: tl.constexpr, BJ3: tl.constexpr, SQ: tl.constexpr,
          COMPLEX: tl.constexpr, OUT_INT8: tl.constexpr, GROUP: tl.constexpr, DIGITS: tl.constexpr):
    """Write modulus i's residues: element (comp, i, r, k) at comp*so_comp + (i // GROUP)*so_grp +
    (i % GROUP)*K + off (off = r*so_row + k)."""
    base = out_ptr + ((i // GROUP) * tl.cast(so_grp, tl.int64) + (i % GROUP) * tl.cast(K, tl.int64)) + off
    _put(base, r, mask, SQ[i], so_dig, OUT_INT8, DIGITS)
    if COMPLEX:  # components: re, im, re+im wrapped (the 3M operands)
        c1 = tl.cast(so_comp, tl.int64)
        _put(base + c1, r2, mask, SQ[i], so_dig, OUT_INT8, DIGITS)
        r3 = _sym(r + r2, PM[i], PK[i], BM[i], BS[i], BJ3[i], DIGITS)
        _put(base + 2 * c1, r3, mask, SQ[i], so_dig, OUT_INT8, DIGITS)


@triton.jit
def _scale_residue_i32_kernel(
    x_ptr, x2_ptr, stride_r, stride_k, shift_ptr, tab_ptr, out_ptr, flag_ptr, R, K, so_comp, so_grp, so_row,
    so_dig, L: tl.constexpr, PM: tl.constexpr, PK: tl.constexpr, BM: tl.constexpr, BS: tl.constexpr,
    BJ: tl.constexpr, BJ3: tl.constexpr, CC: tl.constexpr, NCH: tl.constexpr, CW: tl.constexpr, SQ: tl.constexpr,
    COMPLEX: tl.constexpr, OUT_INT8: tl.constexpr, GROUP: tl.constexpr, DIGITS: tl.constexpr,
    BLOCK_R: tl.constexpr, BLOCK_K: tl.constexpr, MODE: tl.constexpr = 0,
):
    """Fully unrolled over the L constant moduli (one compile per moduli set and layout; the previous
    kernel: one runtime loop with ``%`` and int64 multiplies per modulus). Per complex element and
    non-power-of-two modulus: 2 x (2 IMAD chain + IADD + IMAD.HI + SHF + IMAD) for re and im, 5 for
    re+im (int8 / int16 stores take r - J p, see ``_sym``), then 3 byte stores, 16 packed (PRMT) to a
    128-bit STG. Two launches: MODE 0 writes every tile by the fast path and flags (int32 per tile) the
    tiles holding |y| >= 2^62; MODE 1 rewrites only the flagged tiles by the mantissa/exponent path (its
    registers and spills stay out of the fast kernel: one kernel with both paths needs 255 registers)."""
    tile = tl.program_id(0) * tl.num_programs(1) + tl.program_id(1)
    if MODE == 1:
        if tl.load(flag_ptr + tile) != 0:
            _tile(x_ptr, x2_ptr, stride_r, stride_k, shift_ptr, tab_ptr, out_ptr, flag_ptr + tile, R, K, so_comp,
                  so_grp, so_row, so_dig, L, PM, PK, BM, BS, BJ, BJ3, CC, NCH, CW, SQ, COMPLEX, OUT_INT8, GROUP,
                  DIGITS, BLOCK_R, BLOCK_K, True)
    else:
        _tile(x_ptr, x2_ptr, stride_r, stride_k, shift_ptr, tab_ptr, out_ptr, flag_ptr + tile, R, K, so_comp,
              so_grp, so_row, so_dig, L, PM, PK, BM, BS, BJ, BJ3, CC, NCH, CW, SQ, COMPLEX, OUT_INT8, GROUP,
              DIGITS, BLOCK_R, BLOCK_K, False)


@triton.jit
def _tile(
    x_ptr, x2_ptr, stride_r, stride_k, shift_ptr, tab_ptr, out_ptr, flag_ptr, R, K, so_comp, so_grp, so_row,
    so_dig, L: tl.constexpr, PM: tl.constexpr, PK: tl.constexpr, BM: tl.constexpr, BS: tl.constexpr,
    BJ: tl.constexpr, BJ3: tl.constexpr, CC: tl.constexpr, NCH: tl.constexpr, CW: tl.constexpr, SQ: tl.constexpr,
    COMPLEX: tl.constexpr, OUT_INT8: tl.constexpr, GROUP: tl.constexpr, DIGITS: tl.constexpr,
    BLOCK_R: tl.constexpr, BLOCK_K: tl.constexpr, BIGPASS: tl.constexpr,
):
    """One [BLOCK_R, BLOCK_K] tile: the fast pass (and its flag) or, BIGPASS, the exact big-value pass."""
    rows = (tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)).to(tl.int64)
    cols = (tl.program_id(1) * BLOCK_K + tl.arange(0, BLOCK_K)).to(tl.int64)
    rmask = rows < R
    mask = rmask[:, None] & (cols[None, :] < K)
    in_off = rows[:, None] * stride_r + cols[None, :] * stride_k
    s = tl.load(shift_ptr + rows, mask=rmask, other=0).to(tl.int64)
    s = tl.minimum(tl.maximum(s, -1022), 2046)
    s1 = tl.minimum(tl.maximum(s, -1022), 1023)
    f1 = _pow2(s1)[:, None]
    f2 = _pow2(s - s1)[:, None]
    y = tl.load(x_ptr + in_off, mask=mask, other=0.0) * f1 * f2
    small = tl.abs(y) < 4611686018427387904.0  # 2**62
    a = _chunks(tl.where(small, y, 0.0).to(tl.int64), CW, NCH)  # fptosi truncates toward zero
    y2 = y
    small2 = small
    a2 = a
    if COMPLEX:
        y2 = tl.load(x2_ptr + in_off, mask=mask, other=0.0) * f1 * f2
        small2 = tl.abs(y2) < 4611686018427387904.0
        a2 = _chunks(tl.where(small2, y2, 0.0).to(tl.int64), CW, NCH)
    off = rows[:, None] * tl.cast(so_row, tl.int64) + cols[None, :]
    if BIGPASS:  # mantissa/exponent path, only in flagged tiles
        bits = y.to(tl.int64, bitcast=True)
        e = tl.where(small, 0, (((bits >> 52) & 0x7FF) - 1075).to(tl.int32))
        mc = _chunks((bits & 0xFFFFFFFFFFFFF) | 0x10000000000000, CW, NCH)
        bits2 = y2.to(tl.int64, bitcast=True)
        e2 = tl.where(small2, 0, (((bits2 >> 52) & 0x7FF) - 1075).to(tl.int32))
        mc2 = _chunks((bits2 & 0xFFFFFFFFFFFFF) | 0x10000000000000, CW, NCH)
        for i in tl.static_range(L):
            r = _res(a, i, PM, PK, BM, BS, BJ, CC, NCH, True)
            r = _res_big(r, a, mc, e, bits < 0, small, i, tab_ptr, PM, PK, BM, BS, BJ, CC, NCH)
            r2 = r
            if COMPLEX:
                r2 = _res(a2, i, PM, PK, BM, BS, BJ, CC, NCH, True)
                r2 = _res_big(r2, a2, mc2, e2, bits2 < 0, small2, i, tab_ptr, PM, PK, BM, BS, BJ, CC, NCH)
            _emit(i, r, r2, out_ptr, off, so_comp, so_grp, K, so_dig, mask, PM, PK, BM, BS, BJ3, SQ, COMPLEX,
                  OUT_INT8, GROUP, DIGITS)
    else:
        tl.store(flag_ptr, tl.reduce(tl.reduce(tl.where(small & small2, 0, 1), 1, _imax), 0, _imax))
        for i in tl.static_range(L):
            r = _res(a, i, PM, PK, BM, BS, BJ, CC, NCH, DIGITS)  # r - J p unless digits need the exact r
            r2 = r
            if COMPLEX:
                r2 = _res(a2, i, PM, PK, BM, BS, BJ, CC, NCH, DIGITS)
            _emit(i, r, r2, out_ptr, off, so_comp, so_grp, K, so_dig, mask, PM, PK, BM, BS, BJ3, SQ, COMPLEX,
                  OUT_INT8, GROUP, DIGITS)


_I32_CACHE: dict = {}


def _pow2_table_i32(table: ModuliTable, device) -> torch.Tensor:
    key = (table.kind, table.num_moduli, str(device))
    if key not in _I32_CACHE:
        _I32_CACHE[key] = _tables(table, device)[2].to(torch.int32).contiguous()
    return _I32_CACHE[key]


def scale_residues_triton(
    X_RK: torch.Tensor, shift_R: torch.Tensor, table: ModuliTable, dtype=torch.int8, group: int = 1,
    digits: bool = False, block: tuple[int, int, int] | None = None,
    bounded: bool = False,
) -> torch.Tensor:
    """Launch the fused scaling/residue kernel.

    Args:
        X_RK: float64 [R, K] (any strides), or complex128 [R, K]: then the real and imaginary parts are
            read in place and the residues of re, im and re+im (wrapped, the 3M operand) come out together.
        shift_R: int64 [R] row shifts.
        table: moduli table.
        dtype: torch.int8 (INT8 table) or torch.int16 (FP8 table).
        group: 1 (default) gives the plane-per-modulus layout below. g > 1 gives the grouped layout
            [C, G, R, g*K] (C = 1 real / 3 complex, G = ceil(L/g)): row r of group q holds the residues of
            moduli q*g .. q*g+g-1 side by side, the A operand of one block-diagonal GEMM per group
            (``Int8Backend.modular_matmul_grouped``); slots past L are left unwritten.
        digits: FP8 table only: emit the FP8 digit planes (|d| <= 16) instead of residues, layout
            [C, L, 3, R, K] as float8_e4m3fn (square moduli use planes 0-1, Karatsuba moduli 0-2; see
            ``fp8_digit_planes``), written as E4M3 bit patterns so no conversion pass is needed.
        block: (BLOCK_R, BLOCK_K cap, warps), a tuning knob (same bits); None: :data:`DEFAULT_BLOCK` on CUDA.
        bounded: the caller guarantees |X * 2**shift| < 2**62 for every finite element (e.g. the FFT
            stage: shifts b_x - e_row from the row maxima, b_x <= 60), so no tile can be flagged and the
            second launch (the big-value pass, MODE 1) is skipped, and never compiled: the same bits, one
            launch and one large Triton compile fewer (its mantissa/exponent path per modulus). Elements
            that are Inf/NaN get the fast path's residue of 0 instead of MODE 1's; callers with this flag
            reject non-finite inputs. int32 kernel only (the int64 kernel has one launch).

    Returns:
        group == 1: [L, R, K] symmetric residues of trunc(X * 2**shift); complex: [3L, R, K] (re, im, re+im).
        group > 1: [C, G, R, g*K]. digits: [C, L, 3, R, K] float8_e4m3fn.

    Raises:
        ValueError: digits without the fp8 table or with group > 1.
    """
    R, K = X_RK.shape
    L = table.num_moduli
    cplx = X_RK.is_complex()
    C = 3 if cplx else 1
    dev = X_RK.device
    if digits:
        if table.kind != "fp8" or group != 1:
            raise ValueError("digits=True needs the fp8 table and group=1")
        out = torch.empty((C, L, 3, R, K), dtype=torch.uint8, device=dev)  # every plane is written
        so_comp, so_grp, so_row, so_dig = L * 3 * R * K, 3 * R * K, K, R * K
    elif group == 1:
        out = torch.empty((C * L, R, K), dtype=dtype, device=dev)
        so_comp, so_grp, so_row, so_dig = L * R * K, R * K, K, 0
    else:
        G = -(-L // group)
        out = torch.empty((C, G, R, group * K), dtype=dtype, device=dev)
        so_comp, so_grp, so_row, so_dig = G * R * group * K, R * group * K, group * K, 0
    if R == 0 or K == 0:
        return out.view(torch.float8_e4m3fn) if digits else out
    x1, x2 = (X_RK.real, X_RK.imag) if cplx else (X_RK, X_RK)
    cuda = dev.type == "cuda"
    br, bk, warps = block or (DEFAULT_BLOCK if cuda else (64, 64, 4))
    bk = min(bk, triton.next_power_of_2(K))
    sq = tuple(table.square_root(mi) or 0 for mi in range(L)) if digits else (0,) * L
    grid = (triton.cdiv(R, br), triton.cdiv(K, bk))
    flags = torch.empty(grid[0] * grid[1], dtype=torch.int32, device=dev)
    args = (x1, x2, x1.stride(0), x1.stride(1), shift_R.to(torch.int64).contiguous(), _pow2_table_i32(table, dev),
            out, flags, R, K, so_comp, so_grp, so_row, so_dig)
    kw = dict(L=L, SQ=sq, COMPLEX=cplx, OUT_INT8=(dtype == torch.int8), GROUP=group, DIGITS=digits, BLOCK_R=br,
              BLOCK_K=bk, num_warps=warps, **kernel_constants(table.moduli))
    _scale_residue_i32_kernel[grid](*args, MODE=0, **kw)  # every tile, fast path; flags tiles with |y| >= 2^62
    if not bounded:  # rewrites the flagged tiles only (others exit)
        _scale_residue_i32_kernel[grid](*args, MODE=1, **kw)
    return out.view(torch.float8_e4m3fn) if digits else out

