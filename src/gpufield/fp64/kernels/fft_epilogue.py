"""Triton kernel: the per-output epilogue of an emulated DFT-GEMM stage in 32-bit integer lanes.

Per complex output (fp64.md 1.6, 2.4; Part 3's "per-output integer epilogue", c_epi 203-281) the kernel
reads the r x 3 raw 3M products (int32) and, entirely in 32-bit registers, one modulus at a time:

1. mod p + Karatsuba combine without division or conversion: u = x + B_i (x = T1 - T2 or T3 - T1 - T2,
   B_i = p_i * ceil(2^27 / p_i) + floor(p_i / 2)), q = umulhi(u, m_i) >> 7 with m_i = ceil(2^39 / p_i)
   (exact floor(u / p_i) for u < 2^28, p_i < 2^11: Barrett with a 39-bit reciprocal), c' = u - q p_i in
   [0, p_i); the symmetric residue is c = c' - floor(p_i / 2), whose offset is folded into the
   accumulators' start values (so 4 integer instructions per residue);
2. exact CRT (Ozaki-II / GEMMul8 form, fp64.md 2.5) in W-bit limbs held in int32: L limb sums
   s_l = sum_i c_i C_{i,l} (one IMAD each, W chosen per moduli set so that no sum leaves int32) and
   NF chunk sums of the fixed-point quotient Q = sum_i c_i round(2^F q_i / p_i) (F = 40 for ``"crt"``,
   36 for ``"kulisch"``: the same integers as the torch reference, so the same q = round(Q / 2^F),
   also at the CRT range limits); two-sided lift Y' = S - q M in the limbs, one carry pass;
3. the final rounding: the limbs repacked into 32-bit words of Y' (two's complement), the top 96-bit
   window selected branch-free, normalized with 32-bit funnel shifts (no 64-bit variable shift),
   rounded to odd into a 64-bit integer (negative values via ~Y' + 1 and the sticky bit) and converted
   once to float64, then scaled by 2^-shift in two exact power-of-two factors (subnormal results round
   once, like ``math.ldexp``). The bits equal :func:`gpufield.fp64.fft.epilogue.epilogue_torch`.

Static count at sm_90 (tools/fp64_sass_count.py, int8 16 moduli): 355-380 SASS instructions per real output
(per modulus ~4.5 for the residue, 9 IMAD for the limb and quotient sums, ~1.5 for loads; ~100 for lift,
carries and rounding). Measured times: docs/perf-notes.md.

``"garner"`` runs the previous int64-lane kernel (:mod:`.fft_epilogue_int64`). ``"kulisch"`` here does
its bulk sum on the integer pipe like ``"crt"`` (same limbs; only the quotient fraction differs).

Shape legend: R moduli (r), O complex outputs (n_out), L limbs of W bits, NF quotient chunks of FW
bits, NW 32-bit words of Y'. Tested bit for bit in tests/fp64/test_fft_kernels.py and
tests/fp64/test_fft_epilogue_edge.py (on CPU through ``TRITON_INTERPRET=1``).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from gpufield.errors import InputError
from gpufield.fp64.crt_tables import VARIANTS, EpilogueTables
from gpufield.fp64.kernels import fft_epilogue_int64, interpreter_on
from gpufield.fp64.kernels.fft_epilogue_consts import kernel_constants

COMPILED: dict = {}
"""(moduli kind, r, variant) -> the last launched compiled kernel (its ``asm`` holds the PTX), for
reading the generated code (``COMPILED[key].asm["ptx"]``) after a launch."""

DEFAULT_LAUNCH = (256, 8)
"""(BLOCK outputs per program, warps) on CUDA: one complex output per thread, 40 registers; the fastest
launch measured (docs/perf-notes.md). BLOCK < 32 * warps would duplicate work: every value is a per-output
1-D vector."""



@triton.jit
def _f64(bits):
    """The float64 whose bit pattern is the int ``bits`` (exact): a compile-time int (an immediate in the
    SASS) or an integer kernel argument (a constant-bank operand), no load."""
    return tl.cast(tl.cast(bits, tl.int64), tl.float64, bitcast=True)


@triton.jit
def _mod(x, B: tl.constexpr, M: tl.constexpr, P: tl.constexpr, BSH: tl.constexpr):
    """c' = (x + B) mod P in [0, P) for int32 0 <= x + B < 2^28 (Barrett, no division; a mask for P = 2^k)."""
    u = x + B
    if P & (P - 1) == 0:
        return u & (P - 1)
    q = (tl.umulhi(u.to(tl.uint32), M) >> BSH).to(tl.int32)
    return u - q * P


@triton.jit
def _init(TAB: tl.constexpr, N: tl.constexpr, BLOCK: tl.constexpr):
    out = ()
    for j in tl.static_range(N):
        out = out + (tl.full([BLOCK, 2], TAB[j], tl.int32),)
    return out


@triton.jit
def _mac(acc, c, TAB: tl.constexpr, i: tl.constexpr, N: tl.constexpr, ASM: tl.constexpr):
    """acc[l] + c * TAB[i * N + l] for l < N (a tuple of int32 vectors; TAB row-major [R][N]). With ASM (compiled for CUDA) each
    is one PTX ``mad.lo.s32`` (the same bits): LLVM otherwise reassociates the 16-term sums into trees
    of mul + add (~1.5 instructions per term instead of 1)."""
    out = ()
    for j in tl.static_range(N):
        if ASM:
            out = out + (tl.inline_asm_elementwise("mad.lo.s32 $0, $1, $2, $3;", "=r,r,r,r",
                                                   [c, c * 0 + TAB[i * N + j], acc[j]],
                                                   dtype=tl.int32, is_pure=True, pack=1),)
        else:
            out = out + (acc[j] + c * TAB[i * N + j],)
    return out


@triton.jit
def _lift_words(s, f, ML: tl.constexpr, W: tl.constexpr, L: tl.constexpr, FW: tl.constexpr,
                NF: tl.constexpr, QSH: tl.constexpr, NW: tl.constexpr):
    """Quotient q from the chunk sums f, Y' = S - q M in the W-bit limbs s, one carry pass, then the
    NW 32-bit two's complement words of Y' (tuple, least significant first)."""
    g = f[0]
    for j in tl.static_range(1, NF):
        g = f[j] + (g >> FW)
    q = g >> QSH
    e = ()
    carry = q * 0  # (x * 0 + v: constants shaped like a tensor, also in Gluon kernels, which need layouts)
    for j in tl.static_range(L):
        a = s[j] - q * ML[j] + carry
        if j < L - 1:
            carry = a >> W
            a = a & ((1 << W) - 1)
        e = e + (a,)
    words = ()
    for k in tl.static_range(NW):
        wk = q * 0
        for j in tl.static_range(L):
            lo = W * j - 32 * k  # bit of word k where digit j starts (compile time)
            if lo >= 0:
                if lo < 32:
                    wk = wk | (e[j] << lo)
            else:
                if j == L - 1:  # the signed top digit: arithmetic shift, sign extension above it
                    wk = wk | (e[j] >> min(-lo, 31))
                elif lo + W > 0:
                    wk = wk | (e[j] >> (-lo))
        words = words + (wk,)
    return words


@triton.jit
def _round(words, shift, NW: tl.constexpr):
    """float64 of Y' * 2^-shift, one rounding (see module docstring, step 3)."""
    sgn = words[NW - 1] >> 31  # 0 or -1
    neg = sgn != 0
    # window (W2, W1, W0) = v words h, h-1, h-2 of V = Y' ^ sgn (Y' * 2^64: two zero words below)
    W2 = sgn
    W1 = sgn
    W0 = sgn
    low = sgn * 0  # OR of the raw words below the window
    H = sgn * 0 + 1
    below = sgn * 0
    for k in tl.static_range(NW):
        v = words[k] ^ sgn
        nz = v != 0
        W2 = tl.where(nz, v, W2)
        if k >= 1:
            W1 = tl.where(nz, words[k - 1] ^ sgn, W1)
        else:
            W1 = tl.where(nz, sgn, W1)
        if k >= 2:
            W0 = tl.where(nz, words[k - 2] ^ sgn, W0)
        else:
            W0 = tl.where(nz, sgn, W0)
        if k >= 3:
            below = below | words[k - 3]
        low = tl.where(nz, below, low)
        H = tl.where(nz, k + 2, H)
    u2 = W2.to(tl.uint32, bitcast=True)
    u1 = W1.to(tl.uint32, bitcast=True)
    u0 = W0.to(tl.uint32, bitcast=True)
    # n = number of leading zeros of W2 (exact through float64; 31 for W2 = 0, then K = 0)
    ex = (u2.to(tl.float64).to(tl.int64, bitcast=True) >> 52).to(tl.int32)
    n = tl.minimum(1054 - ex, 31).to(tl.uint32)
    m = 31 - n
    hi = (u2 << n) | ((u1 >> 1) >> m)
    lo = (u1 << n) | ((u0 >> 1) >> m)
    sticky = (((W0 ^ sgn).to(tl.uint32, bitcast=True) << n) | low.to(tl.uint32, bitcast=True)) != 0
    K = (hi.to(tl.uint64) << 32) | lo.to(tl.uint64)
    K = tl.where(neg & ~sticky, K + 1, K) | sticky.to(tl.uint64)
    f = K.to(tl.float64)
    f = tl.where(neg & (K == 0), 18446744073709551616.0, f)  # K_v + 1 = 2^64
    e = 32 * H - 96 - n.to(tl.int32) - shift
    e1 = tl.minimum(tl.maximum(e, -1000), 1000)
    e2 = tl.minimum(tl.maximum(e - e1, -1000), 1000)
    f = f * ((e1 + 1023).to(tl.int64) << 52).to(tl.float64, bitcast=True)
    f = f * ((e2 + 1023).to(tl.int64) << 52).to(tl.float64, bitcast=True)
    return tl.where(neg, f * -1.0, f)  # not -f: Triton negates as 0 - f, which loses the sign of a zero


@triton.jit
def _init_like(TAB: tl.constexpr, N: tl.constexpr, x):
    """Tuple of N int32 tensors shaped (and laid out) like the int32 tensor ``x``, filled with TAB[j] (the
    accumulators' start values)."""
    out = ()
    for j in tl.static_range(N):
        out = out + (x * 0 + TAB[j],)
    return out


@triton.jit
def _fold(s, f, t1, t2, t3, i: tl.constexpr, PM: tl.constexpr, BM: tl.constexpr, BB: tl.constexpr,
          CL: tl.constexpr, FL: tl.constexpr, L: tl.constexpr, NF: tl.constexpr, BSH: tl.constexpr,
          ASM: tl.constexpr):
    """Modulus i folded into the CRT sums: the 3M combine of its raw products T1, T2, T3 (int32, any
    shape), Barrett mod p_i of (re, im) joined on a new last axis, then the limb sums s and quotient
    chunk sums f (tuples of int32 [..., 2]) advanced by one multiply-add each (steps 1-2 of the module
    docstring). Used by the standalone kernel and by the fused stage kernel
    (:mod:`gpufield.fp64.fft.gemm_fused_epi`), which calls it on dot accumulators still in registers."""
    return _fold_c(s, f, t1 - t2, t3 - t1 - t2, i, PM, BM, BB, CL, FL, L, NF, BSH, ASM)  # 3M combine


@triton.jit
def _fold_c(s, f, xre, xim, i: tl.constexpr, PM: tl.constexpr, BM: tl.constexpr, BB: tl.constexpr,
            CL: tl.constexpr, FL: tl.constexpr, L: tl.constexpr, NF: tl.constexpr, BSH: tl.constexpr,
            ASM: tl.constexpr):
    """As :func:`_fold` from the combined products: xre = Re, xim = Im of modulus i's product (any integers
    congruent to T1 - T2 and T3 - T1 - T2 mod p_i with |x| < 3 * 2^25; the symmetric residue and so every
    later bit depend only on x mod p_i)."""
    return _fold_j(s, f, tl.join(xre, xim), i, PM, BM, BB, CL, FL, L, NF, BSH, ASM)


@triton.jit
def _fold_j(s, f, x, i: tl.constexpr, PM: tl.constexpr, BM: tl.constexpr, BB: tl.constexpr,
            CL: tl.constexpr, FL: tl.constexpr, L: tl.constexpr, NF: tl.constexpr, BSH: tl.constexpr,
            ASM: tl.constexpr):
    """As :func:`_fold_c` with (Re, Im) already joined on the last axis (x: int32 [..., 2]; the fused
    stage's single dot per modulus gives them as neighbouring columns)."""
    c = _mod(x, BB[i], BM[i], PM[i], BSH)  # mod p_i of (re, im)
    return _mac(s, c, CL, i, L, ASM), _mac(f, c, FL, i, NF, ASM)


@triton.jit
def _finish(s, f, shift, ML: tl.constexpr, W: tl.constexpr, L: tl.constexpr, FW: tl.constexpr,
            NF: tl.constexpr, QSH: tl.constexpr, NW: tl.constexpr):
    """float64 outputs from the finished sums: quotient, lift, carries, words, one rounding (step 3);
    ``shift`` (int32) broadcasts against the sums' shape."""
    return _round(_lift_words(s, f, ML, W, L, FW, NF, QSH, NW), shift, NW)


@triton.jit
def _fft_epilogue_i32_kernel(
    T_ptr, n_out, K, S_c, S_q, S_s, S_m, shift_ptr, out_ptr,
    R: tl.constexpr, GROUP: tl.constexpr, PM: tl.constexpr, BM: tl.constexpr, BB: tl.constexpr,
    CL: tl.constexpr, SI: tl.constexpr, FL: tl.constexpr, FI: tl.constexpr, ML: tl.constexpr,
    W: tl.constexpr, L: tl.constexpr, FW: tl.constexpr, NF: tl.constexpr, QSH: tl.constexpr,
    NW: tl.constexpr, BSH: tl.constexpr, BLOCK: tl.constexpr, VEC: tl.constexpr, EVEN: tl.constexpr,
    ASM: tl.constexpr = False, SRL: tl.constexpr = 1,
):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)  # a chunk holds < 2^31 outputs
    omask = offs < n_out
    # element (modulus l, component c, row m, column k) at c*S_c + (l//GROUP)*S_q + (l%GROUP)*S_s + m*S_m + k:
    # a per-modulus scalar base pointer plus one int32 vector offset (VEC consecutive outputs contiguous)
    m = offs // K
    voff = m * S_m + (offs - m * K)
    if VEC > 1:
        voff = tl.max_contiguous(tl.multiple_of(voff, VEC), VEC)
    # every value below is [BLOCK, 2]: (re, im) of an output side by side in one thread
    s = _init(SI, L, BLOCK)
    f = _init(FI, NF, BLOCK)
    for i in tl.static_range(R):
        p1 = T_ptr + ((i // GROUP) * S_q.to(tl.int64) + (i % GROUP) * S_s.to(tl.int64))
        p2 = p1 + S_c
        p3 = p2 + S_c
        if EVEN:
            t1 = tl.load(p1 + voff)
            t2 = tl.load(p2 + voff)
            t3 = tl.load(p3 + voff)
        else:
            t1 = tl.load(p1 + voff, mask=omask, other=0)
            t2 = tl.load(p2 + voff, mask=omask, other=0)
            t3 = tl.load(p3 + voff, mask=omask, other=0)
        s, f = _fold(s, f, t1, t2, t3, i, PM, BM, BB, CL, FL, L, NF, BSH, ASM)
    if EVEN:
        shift = tl.load(shift_ptr + offs // SRL).to(tl.int32)
    else:
        shift = tl.load(shift_ptr + offs // SRL, mask=omask, other=0).to(tl.int32)
    y = _finish(s, f, shift[:, None], ML, W, L, FW, NF, QSH, NW)
    optr = out_ptr + 2 * offs[:, None] + tl.arange(0, 2)[None, :]  # complex128 interleaved
    if EVEN:
        tl.store(optr, y)
    else:
        tl.store(optr, y, mask=omask[:, None])


def epilogue_triton(T_R3O: torch.Tensor, shift_O: torch.Tensor, tab: EpilogueTables, variant: str,
                    block: int | None = None, grouped: tuple[int, int, int] | None = None,
                    num_warps: int | None = None, impl: str = "int32", asm: bool | None = None,
                    shift_row_len: int = 1) -> torch.Tensor:
    """Fused stage epilogue (same contract and bits as :func:`gpufield.fp64.fft.epilogue.epilogue_torch`).

    Args:
        T_R3O: int32 [r, 3, O] raw 3M products per modulus (contiguous), |T| <= 2^25; or, with
            ``grouped``, the grouped layout [3, Q, R_rows, g*K] of ``Int8Backend.modular_matmul_grouped``
            outputs (moduli q*g..q*g+g-1 side by side in a row; O = R_rows * K).
        shift_O: int64 [O] exponent shifts, or [O / shift_row_len]: one per row of ``shift_row_len``
            consecutive outputs (a stage's row shift; saves the expanded copy and 8 B per output).
        tab: epilogue tables of the moduli used.
        variant: ``"garner"`` (always the int64-lane kernel), ``"crt"`` or ``"kulisch"``.
        block: outputs per program (power of two >= 16); default :data:`DEFAULT_LAUNCH` on CUDA
            (the int64 kernel: 32), and on CPU (the Triton interpreter) up to 2^14.
        grouped: ``(g, R_rows, K)`` for the grouped layout; None for [r, 3, O].
        num_warps: warps per program (None: :data:`DEFAULT_LAUNCH`); a tuning knob, same bits.
        impl: ``"int32"`` (this kernel) or ``"int64"`` (the previous kernel, for A/B timing; the FFT's
            ``KernelConfig.epilogue``; not in the fused stage kernel, ``int8_gemm="fused_epi"``, the FFT's
            default on CUDA, whose epilogue is its own).
        asm: limb sums as PTX ``mad.lo.s32`` chains (same bits; ~25% fewer instructions than LLVM's
            reassociated mul/add trees). None: on when compiled for CUDA (False: the FFT's
            ``KernelConfig(epilogue_asm=False)``); never in the interpreter.
        shift_row_len: outputs per entry of ``shift_O`` (1: per output).

    Returns:
        complex128 [O].

    Raises:
        InputError: unknown variant or impl, a chunk of 2^31 outputs or more, moduli out of range.
    """
    if variant not in VARIANTS:
        raise InputError(f"reconstruction variant must be one of {VARIANTS}, got {variant!r}")
    if impl not in ("int32", "int64"):
        raise InputError(f"epilogue impl must be 'int32' or 'int64', got {impl!r}")
    if shift_row_len < 1:
        raise InputError(f"shift_row_len must be >= 1, got {shift_row_len}")
    if variant == "garner" or impl == "int64":
        if shift_row_len > 1:
            shift_O = shift_O.repeat_interleave(shift_row_len)
        y = fft_epilogue_int64.epilogue_triton(T_R3O, shift_O, tab, variant, block=block, grouped=grouped,
                                               num_warps=num_warps)
        COMPILED[(tab.kind, tab.num_moduli, variant)] = fft_epilogue_int64.COMPILED.get(
            (tab.kind, tab.num_moduli, variant))
        return y
    T = T_R3O.to(torch.int32).contiguous()
    n_out, K, g, (S_c, S_q, S_s, S_m) = fft_epilogue_int64.plane_layout(T, grouped)
    if shift_O.numel() * shift_row_len != n_out:
        raise InputError(f"{shift_O.numel()} shifts x rows of {shift_row_len} != {n_out} outputs")
    kc = kernel_constants(tab, variant)
    out = torch.empty(2 * n_out, dtype=torch.float64, device=T.device)
    cuda = T.device.type == "cuda"
    if block is None:
        block = DEFAULT_LAUNCH[0] if cuda else min(1 << 14, max(16, 1 << (n_out - 1).bit_length()))
    if num_warps is None and cuda:
        num_warps = DEFAULT_LAUNCH[1]
    launch = {} if num_warps is None else {"num_warps": num_warps}
    grid = (triton.cdiv(n_out, block),)
    if asm is None:
        asm = cuda
    asm = asm and not interpreter_on()
    vec = next(v for v in (4, 2, 1) if all(x % v == 0 for x in (K, S_c, S_q, S_s, S_m)))
    COMPILED[(tab.kind, tab.num_moduli, variant)] = _fft_epilogue_i32_kernel[grid](
        T, n_out, K, S_c, S_q, S_s, S_m, shift_O.to(torch.int64).contiguous(), out, GROUP=g, BLOCK=block,
        VEC=vec if grouped is not None else 1, EVEN=n_out % block == 0, ASM=asm, SRL=shift_row_len, **kc,
        **launch)
    return torch.view_as_complex(out.view(n_out, 2))
