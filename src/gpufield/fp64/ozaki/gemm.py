"""Ozaki scheme II driver: real, complex (residue-domain Karatsuba 3M) and batched FP64 products.

Algorithm (Ozaki, Uchino, Imamura, arXiv 2504.08009; FP8 variant arXiv 2603.10634; complex arXiv 2512.08321;
fp64.md sections 2.1-2.5): shifts (fast or accurate, scaling.py) -> exact truncation to integers and
symmetric residues per modulus -> one low-precision product per modulus (3 for FP8, 3x for complex) ->
exact CRT with symmetric lift -> one rounding.

Special values follow float64 matmul: rows of A or columns of B holding Inf/NaN are computed by the native
float64 product (every output in them is non-finite, so nothing is lost), the finite part is emulated.
Zero rows/columns give +0; subnormal inputs and outputs are exact up to the final rounding.

Shape legend: M rows of A, K inner, N columns of B, L moduli, "..." batch dims.
"""

from __future__ import annotations

import math

import torch

from gpufield.errors import InputError, NumericsError
from gpufield.fp64.ozaki.backends import get_backend, reconstruct_complex, use_triton
from gpufield.fp64.ozaki.moduli import ModuliTable, moduli_table
from gpufield.fp64.ozaki.residues import pow2, residues_from_scaled, scale_trunc, sym_mod_tensor
from gpufield.fp64.ozaki.scaling import accurate_shifts_from_bound, bound_operand, fast_shifts

DEFAULT_NUM_MODULI = {"int8": 15, "fp8": 13}
"""Defaults giving normwise error at or below native DGEMM for 53-bit inputs of a moderate exponent range per
row and column (fp64.md 2.6, 4.2; parity at ~14 INT8 moduli). A wide exponent range needs one more (fp64.md 6:
16 INT8 moduli): with entries (u - 1/2) exp(4 n) (u uniform, n normal), 8 x 256 x 8, fast mode, 15 INT8 moduli
gave a normwise error of 2.4e-16 against numpy's 1.6e-16; pass ``num_moduli=16`` for such inputs."""
MODES = ("fast", "accurate")
OUT_BLOCK_BYTES = 2**31
"""Row-block budget for the [L, M_block, N] intermediate products (keeps the FFT-shaped case in memory)."""


def scale_residues(
    X_RK: torch.Tensor, shift_R: torch.Tensor, table: ModuliTable, dtype, kernels: str = "auto"
) -> torch.Tensor:
    """Fused scaling + truncation + symmetric residues of the rows of a real operand.

    Args:
        X_RK: float64 [R, K] (rows of A, or B.T).
        shift_R: int64 [R].
        table: moduli table.
        dtype: residue dtype (int8 / int16).
        kernels: ``"auto"`` (Triton on CUDA), ``"triton"`` or ``"torch"``.

    Returns:
        [L, R, K] residues. Triton kernel or torch reference (bit-identical).
    """
    if use_triton(kernels, X_RK.device):
        from gpufield.fp64.kernels.residue import scale_residues_triton

        return scale_residues_triton(X_RK, shift_R, table, dtype)
    return residues_from_scaled(scale_trunc(X_RK, shift_R), table.moduli, dtype)


def scale_residues_complex(X_RK, shift_R, table, dtype, kernels="auto"):
    """Residues of re, im and re+im (wrapped) of a complex128 operand: the 3 operands of the 3M product.

    Returns:
        three [L, R, K] tensors. One fused Triton pass on the Triton path (no copies of re / im).
    """
    L = table.num_moduli
    if use_triton(kernels, X_RK.device):
        from gpufield.fp64.kernels.residue import scale_residues_triton

        out = scale_residues_triton(X_RK, shift_R, table, dtype)
        return out[:L], out[L:2 * L], out[2 * L:]
    r_re = scale_residues(X_RK.real.contiguous(), shift_R, table, dtype, kernels)
    r_im = scale_residues(X_RK.imag.contiguous(), shift_R, table, dtype, kernels)
    return r_re, r_im, _sym_sum(r_re, r_im, table, dtype)


def _shifts(A_MK, BT_NK, table, be, mode):
    tri = use_triton(getattr(be, "kernels", "torch"), A_MK.device)
    if mode == "fast":
        return fast_shifts(A_MK, table, tri), fast_shifts(BT_NK, table, tri)
    hiA, sigma = bound_operand(A_MK, be.bound_ufp, tri)
    hiB, tau = bound_operand(BT_NK, be.bound_ufp, tri)
    G_MN = be.bound_matmul(hiA, hiB)
    if G_MN.numel():
        return accurate_shifts_from_bound(sigma, tau, G_MN.amax(dim=1), G_MN.amax(dim=0), table)
    return sigma, tau


def _row_blocks(M: int, per_row_bytes: int):
    step = OUT_BLOCK_BYTES // max(per_row_bytes, 1)
    step = max(256, step - step % 256)  # multiples of 256 rows keep _int_mm / _scaled_mm unpadded
    return [(m0, min(M, m0 + step)) for m0 in range(0, M, step)] or [(0, 0)]


def _finite_2d(A_MK, B_KN, table, be, mode):
    """Emulated product of finite 2-D operands (real or complex)."""
    M, K = A_MK.shape
    N = B_KN.shape[1]
    BT_NK = B_KN.T
    s_M, t_N = _shifts(A_MK, BT_NK, table, be, mode)
    cplx = A_MK.is_complex()
    L = table.num_moduli
    out = torch.empty((M, N), dtype=A_MK.dtype, device=A_MK.device)
    dt = be.residue_dtype
    kn = getattr(be, "kernels", "torch")
    if getattr(be, "name", "") == "fp8" and use_triton(kn, A_MK.device) and K * 256 < 2**24:
        return _finite_2d_fp8_fused(A_MK, BT_NK, s_M, t_N, table, be, out)
    if not cplx:
        rB = scale_residues(BT_NK.contiguous(), t_N, table, dt, kn)
    else:
        rBr, rBi, rBs = scale_residues_complex(BT_NK.contiguous(), t_N, table, dt, kn)
    g = getattr(be, "group", 1)
    if g > 1 and K <= getattr(be, "group_max_k", 0) and use_triton(kn, A_MK.device):
        return _finite_2d_grouped(A_MK, s_M, t_N, rB if not cplx else (rBr, rBi, rBs), table, be, g, out)
    for m0, m1 in _row_blocks(M, L * N * 8 * (3 if cplx else 1)):
        if m1 <= m0:
            break
        sb = s_M[m0:m1]
        if not cplx:
            rA = scale_residues(A_MK[m0:m1].contiguous(), s_M[m0:m1], table, dt, kn)
            out[m0:m1] = be.reconstruct(be.modular_matmul(rA, rB, table), sb, t_N, table)
            continue
        rAr, rAi, rAs = scale_residues_complex(A_MK[m0:m1], s_M[m0:m1], table, dt, kn)
        T1 = be.modular_matmul(rAr, rBr, table)
        T2 = be.modular_matmul(rAi, rBi, table)
        T3 = be.modular_matmul(rAs, rBs, table)
        if T1.dtype != T2.dtype or T1.dtype != T3.dtype:
            T1, T2, T3 = (T.to(torch.int64) for T in (T1, T2, T3))
        out[m0:m1] = reconstruct_complex(be, T1, T2, T3, sb, t_N, table)
    return out


def _finite_2d_fp8_fused(A_MK, BT_NK, s_M, t_N, table, be, out):
    """FP8 on the Triton path: digit planes from the residue kernel, FP32 digit products, combine in the CRT."""
    from gpufield.fp64.kernels.crt import crt_triton_rows_cols
    from gpufield.fp64.kernels.residue import scale_residues_triton

    M, N = out.shape
    cplx = A_MK.is_complex()
    L = table.num_moduli
    dB = scale_residues_triton(BT_NK.contiguous(), t_N, table, torch.int16, digits=True)  # [C, L, 3, N, K]
    for m0, m1 in _row_blocks(M, L * 3 * N * 4 * (3 if cplx else 1)):
        if m1 <= m0:
            break
        sb = s_M[m0:m1]
        dA = scale_residues_triton(A_MK[m0:m1], sb, table, torch.int16, digits=True)
        T = [be.modular_matmul_digits(dA[c], dB[c], table) for c in range(dA.shape[0])]
        del dA
        if not cplx:
            out[m0:m1] = crt_triton_rows_cols(T[0], sb, t_N, table, digits=True)
        else:
            re, im = crt_triton_rows_cols(T[0], sb, t_N, table, T[1], T[2], digits=True)
            out[m0:m1] = torch.complex(re, im)
    return out


def _finite_2d_grouped(A_MK, s_M, t_N, rB, table, be, g, out):
    """Small-K path: grouped residues -> block-diagonal INT8 GEMMs -> grouped CRT (all fused on Triton)."""
    from gpufield.fp64.kernels.crt import crt_triton_rows_cols
    from gpufield.fp64.kernels.residue import scale_residues_triton

    M, N = out.shape
    cplx = A_MK.is_complex()
    G = -(-table.num_moduli // g)
    for m0, m1 in _row_blocks(M, G * g * N * 4 * (3 if cplx else 1)):
        if m1 <= m0:
            break
        sb = s_M[m0:m1]
        bufA = scale_residues_triton(A_MK[m0:m1], sb, table, be.residue_dtype, group=g)
        if not cplx:
            P = be.modular_matmul_grouped(bufA[0], rB, table, g)
            out[m0:m1] = crt_triton_rows_cols(P, sb, t_N, table, group=g)
            continue
        T = [be.modular_matmul_grouped(bufA[c], rB[c], table, g) for c in range(3)]
        del bufA
        re, im = crt_triton_rows_cols(T[0], sb, t_N, table, T[1], T[2], group=g)
        out[m0:m1] = torch.complex(re, im)
    return out


def _sym_sum(r1, r2, table, dtype):
    """Residues of (x1 + x2) re-wrapped to the symmetric range (3M operand, fp64.md 2.4)."""
    out = torch.empty_like(r1)
    for mi, p in enumerate(table.moduli):
        out[mi] = sym_mod_tensor(r1[mi].to(torch.int64) + r2[mi].to(torch.int64), p).to(dtype)
    return out


def _product_2d(A_MK, B_KN, table, be, mode):
    fa = torch.isfinite(A_MK)
    fb = torch.isfinite(B_KN)
    if bool(fa.all()) and bool(fb.all()):
        return _finite_2d(A_MK, B_KN, table, be, mode)
    bad_rows = ~fa.all(dim=1)
    bad_cols = ~fb.all(dim=0)
    A0 = torch.where(fa, A_MK, torch.zeros_like(A_MK))
    B0 = torch.where(fb, B_KN, torch.zeros_like(B_KN))
    C = _finite_2d(A0, B0, table, be, mode)
    if bool(bad_rows.any()):
        C[bad_rows] = A_MK[bad_rows] @ B_KN
    if bool(bad_cols.any()):
        C[:, bad_cols] = A_MK @ B_KN[:, bad_cols]
    return C


def _ldexp(X: torch.Tensor, e: torch.Tensor) -> torch.Tensor:
    """X * 2**e elementwise for |e| up to ~3000 in three power-of-two steps (each step exact unless subnormal)."""
    e = e.to(torch.int64).clamp(-3000, 3000)
    e1 = e.clamp(-1022, 1023)
    r = e - e1
    e2 = r.clamp(-1022, 1023)
    e3 = (r - e2).clamp(-1022, 1023)
    return X * pow2(e1) * pow2(e2) * pow2(e3)


def _check(A, B, num_moduli, backend, mode):
    for name, X in (("A", A), ("B", B)):
        if not isinstance(X, torch.Tensor):
            raise InputError(f"{name} must be a torch.Tensor, got {type(X).__name__}")
        if X.dtype not in (torch.float64, torch.complex128):
            raise InputError(f"{name} must be float64 or complex128, got {X.dtype}")
        if X.dim() < 2:
            raise InputError(f"{name} must have at least 2 dims [..., rows, cols], got shape {tuple(X.shape)}")
    if A.shape[-1] != B.shape[-2]:
        raise InputError(f"inner dimensions differ: A {tuple(A.shape)} @ B {tuple(B.shape)}")
    if A.device != B.device:
        raise InputError(f"A on {A.device} and B on {B.device}")
    if mode not in MODES:
        raise InputError(f"mode must be one of {MODES}, got {mode!r}")
    be = get_backend(backend)
    n = DEFAULT_NUM_MODULI[be.moduli_kind] if num_moduli is None else num_moduli
    table = moduli_table(be.moduli_kind, n)
    if A.shape[-1] >= 2**31:
        raise NumericsError(f"K={A.shape[-1]} too large for exact INT32 accumulation")
    return be, table


def _batch(A: torch.Tensor, B: torch.Tensor) -> torch.Size:
    """The broadcast batch shape of A [..., M, K] and B [..., K, N] (torch.matmul's rule)."""
    try:
        return torch.broadcast_shapes(A.shape[:-2], B.shape[:-2])
    except RuntimeError:
        raise InputError(f"batch shapes do not broadcast: A is {tuple(A.shape)}, B is {tuple(B.shape)} "
                         "(as torch.matmul: the dimensions before the last two must be equal or 1)") from None


def ozaki_matmul(
    A: torch.Tensor,
    B: torch.Tensor,
    *,
    num_moduli: int | None = None,
    backend="int8",
    mode: str = "fast",
) -> torch.Tensor:
    """FP64 (or complex128) matrix product emulated with Ozaki scheme II on INT8 or FP8 tensor cores.

    The result is the exact product of the truncated scaled operands, rounded once; its error comes only from
    the truncation of A and B to integers (a-priori bound: :func:`ozaki_error_bound`).

    Args:
        A: float64 or complex128 [..., M, K].
        B: same dtype [..., K, N]; batch dims broadcast.
        num_moduli: number of moduli (2..20); default 15 (INT8) / 13 (FP8).
        backend: ``"int8"`` (torch._int_mm), ``"fp8"`` (torch._scaled_mm, 3 products per modulus),
            ``"cpu-exact"`` (int64 + Python-integer CRT, reference) or a ModularBackend instance.
        mode: ``"fast"`` (norm bound) or ``"accurate"`` (one extra low-precision bound product).

    Returns:
        [..., M, N] tensor of A's dtype.

    Raises:
        InputError: wrong dtype, shapes, devices, mode, backend or num_moduli.
        NumericsError: K too large for exact accumulation.
    """
    be, table = _check(A, B, num_moduli, backend, mode)
    if A.dtype != B.dtype:
        raise InputError(f"A is {A.dtype} but B is {B.dtype}")
    batch = _batch(A, B)
    if not batch:
        return _product_2d(A, B, table, be, mode)
    if 0 in (A.shape[-2], A.shape[-1], B.shape[-1], math.prod(batch)):  # empty, or K = 0: exact zeros
        return torch.zeros(batch + (A.shape[-2], B.shape[-1]), dtype=A.dtype, device=A.device)
    Ab = A.expand(batch + A.shape[-2:]).reshape((-1,) + A.shape[-2:])
    Bb = B.expand(batch + B.shape[-2:]).reshape((-1,) + B.shape[-2:])
    outs = [_product_2d(Ab[i], Bb[i], table, be, mode) for i in range(Ab.shape[0])]
    return torch.stack(outs).reshape(batch + (A.shape[-2], B.shape[-1]))


def ozaki_error_bound(
    A: torch.Tensor,
    B: torch.Tensor,
    *,
    num_moduli: int | None = None,
    backend="int8",
    mode: str = "fast",
) -> torch.Tensor:
    """A-priori entrywise bound on |ozaki_matmul(A, B) - A B| (exact product), finite inputs.

    With A = 2**-s (A' + dA), B = 2**-t (B' + dB), |dA|, |dB| < 1 (truncation) and one final rounding:
    |C - C^|_ij <= c * (2**-t_j ||a_i||_1 + 2**-s_i ||b_j||_1 + c_K K 2**-(s_i+t_j) + u (|A||B|)_ij) + 2**-1074,
    with c_K = 1 (real) or 2 (complex, per component; |z| read as |re| + |im|) and c = 1 + 4(K+4)u covering
    the float64 evaluation of the bound itself.

    Args:
        A, B: as for :func:`ozaki_matmul` (finite).
        num_moduli, backend, mode: as for :func:`ozaki_matmul` (the shifts are the same).

    Returns:
        float64 [..., M, N] bound (for complex inputs it bounds the real and the imaginary part each).

    Raises:
        InputError: as :func:`ozaki_matmul`, or non-finite inputs.
    """
    be, table = _check(A, B, num_moduli, backend, mode)
    if not (bool(torch.isfinite(A).all()) and bool(torch.isfinite(B).all())):
        raise InputError("ozaki_error_bound needs finite inputs (Inf/NaN outputs are native)")
    batch = _batch(A, B)
    if 0 in (A.shape[-2], A.shape[-1], B.shape[-1], math.prod(batch)):  # the product is exactly 0 (or empty)
        return torch.zeros(batch + (A.shape[-2], B.shape[-1]), dtype=torch.float64, device=A.device)
    Ab = A.expand(batch + A.shape[-2:]).reshape((-1,) + A.shape[-2:])
    Bb = B.expand(batch + B.shape[-2:]).reshape((-1,) + B.shape[-2:])
    outs = []
    u = 2.0**-53
    for i in range(Ab.shape[0]):
        A_MK, B_KN = Ab[i], Bb[i]
        K = A_MK.shape[1]
        s, t = _shifts(A_MK, B_KN.T, table, be, mode)
        cplx = A_MK.is_complex()
        aA = (A_MK.real.abs() + A_MK.imag.abs()) if cplx else A_MK.abs()
        aB = (B_KN.real.abs() + B_KN.imag.abs()) if cplx else B_KN.abs()
        M, N = aA.shape[0], aB.shape[1]
        rowA = aA.sum(dim=1)[:, None].expand(M, N)
        colB = aB.sum(dim=0)[None, :].expand(M, N)
        E = _ldexp(rowA, -t[None, :].expand(M, N)) + _ldexp(colB, -s[:, None].expand(M, N))
        kk = torch.full((M, N), float((2 if cplx else 1) * K), dtype=torch.float64, device=A.device)
        E = E + _ldexp(kk, -(s[:, None] + t[None, :])) + u * (aA @ aB)
        outs.append(E * (1 + 4 * (K + 4) * 2.0**-53) + 8 * 2.0**-1074)
    return torch.stack(outs).reshape(batch + (A.shape[-2], B.shape[-1]))
