"""Per-output integer epilogue of a DFT-GEMM stage (torch reference; the Triton kernel must match it).

For each complex output the modular GEMMs deliver, per modulus p_i, the three residue-domain Karatsuba
(3M) products T1 = xr.wr, T2 = xi.wi, T3 = (xr+xi).(wr+wi). The epilogue (fp64.md 1.6, 2.4, 4.1):

1. modular reduction + Karatsuba combine: c_re = (T1 - T2) mod p, c_im = (T3 - T1 - T2) mod p
   (symmetric residues, so every real output has r residues c_i, |c_i| <= p_i/2);
2. exact reconstruction of the integer Y' in (-M/2, M/2) from its residues, one of three variants:

   * ``"garner"``: Garner's mixed-radix algorithm with balanced digits (O(r^2) modular ops per
     output), then Horner evaluation into 32-bit limbs. Balanced digits give the symmetric
     representative directly.
   * ``"crt"``: CRT with FP64-free fixed point: S = sum_i c_i C_i accumulated exactly in 32-bit
     limbs (int64 lanes, Kulisch style), quotient q = round(S/M) = round(sum_i c_i q_i/p_i) from a
     40-bit fixed-point fraction, then the two-sided lift Y' = S - q M.
   * ``"kulisch"``: Part 3's split: the bulk s_l = sum_i c_i C_{i,l} over 9-bit limbs of C_i (and
     of the 36-bit fraction q_i/p_i) is ONE small GEMM [outputs x r] @ [r x limbs] on the FP32
     tensor path (exact: |c| <= 544, limbs <= 511, r <= 20 keeps every sum < 2^24; also exact
     in TF32/FP16 inputs), the remainder (placing the 9-bit columns into 32-bit limbs with carries,
     the lift, the rounding) is exact fixed-point integer work.

3. the final conversion: one rounding of Y' * 2^-shift to float64. The limbs are shifted to a
   62-bit integer with a sticky bit (round-to-odd), whose int64 -> float64 conversion is then the
   correctly rounded result (a 62-bit round-to-odd intermediate is innocuous for 53-bit rounding);
   the power-of-two scaling is exact except in the subnormal range, where it rounds like
   ``math.ldexp(float(Y'), -shift)`` does.

Shape legend: R = number of moduli r, O = number of outputs (n_out), L = number of 32-bit limbs,
C = number of 9-bit bulk columns. Dtypes: residues/limbs int64, output float64.
"""

from __future__ import annotations

import torch

from gpufield.errors import InputError
from gpufield.fp64.crt_tables import (  # noqa: F401  (re-exported: the tables live beside the kernels)
    _MASK,
    BULK_FRAC_BITS,
    BULK_LIMB,
    FRAC_BITS,
    LIMB,
    VARIANTS,
    EpilogueTables,
    _device_tables,
    epilogue_tables,
)


def sym_mod(x: torch.Tensor, p: torch.Tensor | int) -> torch.Tensor:
    """Symmetric residue r = x mod p in [-floor(p/2), ceil(p/2) - 1] (int64; p broadcasts)."""
    r = torch.remainder(x, p)
    return torch.where(r >= (p + 1) // 2, r - p, r)


def karatsuba_residues(T_R3O: torch.Tensor, p_R: torch.Tensor) -> torch.Tensor:
    """Modular reduction + 3M combine: residues of the real and imaginary outputs.

    Args:
        T_R3O: integer tensor [r, 3, O] of T1, T2, T3 per modulus (any integer dtype; congruent
            mod p_i to the true products is enough).
        p_R: int64 moduli [r].

    Returns:
        int64 [r, 2*O]: symmetric residues of the real parts (first n_out) then the imaginary parts.
    """
    T = T_R3O.to(torch.int64)
    p = p_R[:, None]
    re = sym_mod(T[:, 0] - T[:, 1], p)
    im = sym_mod(T[:, 2] - T[:, 0] - T[:, 1], p)
    return torch.cat([re, im], dim=1)


def _normalize(X_LO: torch.Tensor) -> torch.Tensor:
    """Carry-propagate signed limbs in place: limbs 0..L-2 in [0, 2^32), the top limb signed."""
    for j in range(X_LO.shape[0] - 1):
        carry = X_LO[j] >> LIMB
        X_LO[j] &= _MASK
        X_LO[j + 1] += carry
    return X_LO


def reconstruct_crt(c_RO: torch.Tensor, tab: EpilogueTables) -> torch.Tensor:
    """CRT with FP64-free fixed point and the two-sided lift (see module docstring).

    Args:
        c_RO: int64 symmetric residues [r, O].
        tab: :class:`EpilogueTables`.

    Returns:
        int64 limbs [L, O] of Y' (normalized, top limb signed).
    """
    T = tab.tensors(str(c_RO.device))
    X = torch.zeros((tab.n_limbs, c_RO.shape[1]), dtype=torch.int64, device=c_RO.device)
    Q = torch.zeros(c_RO.shape[1], dtype=torch.int64, device=c_RO.device)
    for i in range(c_RO.shape[0]):
        X += c_RO[i][None, :] * T["C"][i][:, None]
        Q += c_RO[i] * T["frac"][i]
    q = (Q + (1 << (FRAC_BITS - 1))) >> FRAC_BITS
    X -= q[None, :] * T["M"][:, None]
    return _normalize(X)


def reconstruct_garner(c_RO: torch.Tensor, tab: EpilogueTables) -> torch.Tensor:
    """Garner mixed-radix reconstruction with balanced digits (see module docstring).

    Args:
        c_RO: int64 symmetric residues [r, O].
        tab: :class:`EpilogueTables`.

    Returns:
        int64 limbs [L, O] of Y' (normalized, top limb signed).
    """
    T = tab.tensors(str(c_RO.device))
    r = c_RO.shape[0]
    t = c_RO.clone()
    p = T["p"][:, None]
    for j in range(r - 1):  # v_j = t[j]; update the later digits
        t[j + 1:] = sym_mod((t[j + 1:] - t[j][None, :]) * T["inv"][j, j + 1:, None], p[j + 1:])
    X = torch.zeros((tab.n_limbs, c_RO.shape[1]), dtype=torch.int64, device=c_RO.device)
    X[0] = t[r - 1]
    for j in range(r - 2, -1, -1):  # Horner: X = X * p_j + v_j
        X *= tab.moduli[j]
        X[0] += t[j]
        _normalize(X)
    return X


def reconstruct_kulisch(c_RO: torch.Tensor, tab: EpilogueTables) -> torch.Tensor:
    """Tensor-core bulk (one FP32 GEMM) + exact fixed-point remainder and lift (see module docstring).

    Args:
        c_RO: int64 symmetric residues [r, O].
        tab: :class:`EpilogueTables`.

    Returns:
        int64 limbs [L, O] of Y' (normalized, top limb signed).
    """
    T = tab.tensors(str(c_RO.device))
    s_OC = (c_RO.t().to(torch.float32) @ T["bulk"]).to(torch.int64)  # exact: all sums < 2^24
    nb = tab.n_bulk_limbs
    X = torch.zeros((tab.n_limbs, c_RO.shape[1]), dtype=torch.int64, device=c_RO.device)
    for col in range(nb):
        bit = BULK_LIMB * col
        X[bit // LIMB] += s_OC[:, col] << (bit % LIMB)
    Q = torch.zeros(c_RO.shape[1], dtype=torch.int64, device=c_RO.device)
    for col in range(BULK_FRAC_BITS // BULK_LIMB):
        Q += s_OC[:, nb + col] << (BULK_LIMB * col)
    q = (Q + (1 << (BULK_FRAC_BITS - 1))) >> BULK_FRAC_BITS
    X -= q[None, :] * T["M"][:, None]
    return _normalize(X)


def ldexp_exact(f: torch.Tensor, e: torch.Tensor) -> torch.Tensor:
    """f * 2^e for float64 f and int64 e, exact unless the result is subnormal/overflows (then rounded once).

    Two power-of-two factors, each in the normal range, the first bringing |f| >= 1 to >= 2^-1000.
    """
    e1 = e.clamp(-1000, 1000)
    e2 = (e - e1).clamp(-1000, 1000)
    p1 = ((e1 + 1023) << 52).view(torch.float64)
    p2 = ((e2 + 1023) << 52).view(torch.float64)
    return f * p1 * p2


def limbs_to_float(X_LO: torch.Tensor, shift_O: torch.Tensor) -> torch.Tensor:
    """One rounding: Y' (limbs) * 2^-shift to float64, round to nearest even.

    Args:
        X_LO: int64 normalized limbs [L, O] (top limb signed); modified in place.
        shift_O: int64 [O] exponent shifts.

    Returns:
        float64 [O].
    """
    neg = X_LO[-1] < 0
    X = torch.where(neg[None, :], -X_LO, X_LO)
    _normalize(X)
    L = X.shape[0]
    _, ex = torch.frexp(X.to(torch.float64))  # bit length of each limb (exact: limbs < 2^53)
    base = torch.arange(L, device=X.device, dtype=torch.int64)[:, None] * LIMB
    bl = torch.where(X > 0, base + ex.to(torch.int64), torch.zeros_like(X)).amax(dim=0)
    sh = (bl - 62).clamp(min=0)
    K = torch.zeros_like(sh)
    sticky = torch.zeros_like(sh, dtype=torch.bool)
    for j in range(L):
        pos = LIMB * j - sh
        left = X[j] << pos.clamp(0, 62)
        rs = (-pos).clamp(0, 63)
        right = X[j] >> rs
        K += torch.where(pos >= 0, left, right)
        sticky |= (pos < 0) & ((right << rs) != X[j])
    K |= sticky.to(torch.int64)
    f = ldexp_exact(K.to(torch.float64), sh - shift_O)
    return torch.where(neg, -f, f)


_RECON = {"garner": reconstruct_garner, "crt": reconstruct_crt, "kulisch": reconstruct_kulisch}


def epilogue_torch(T_R3O: torch.Tensor, shift_O: torch.Tensor, tab: EpilogueTables, variant: str) -> torch.Tensor:
    """The whole stage epilogue in torch ops (the reference for the Triton kernel).

    Args:
        T_R3O: [r, 3, O] integer 3M products per modulus.
        shift_O: int64 [O] per-output exponent (row scale + twiddle bits).
        tab: :class:`EpilogueTables` of the moduli used.
        variant: one of :data:`VARIANTS`.

    Returns:
        complex128 [O].

    Raises:
        InputError: unknown variant.
    """
    if variant not in _RECON:
        raise InputError(f"reconstruction variant must be one of {VARIANTS}, got {variant!r}")
    T = tab.tensors(str(T_R3O.device))
    c = karatsuba_residues(T_R3O, T["p"])
    X = _RECON[variant](c, tab)
    y = limbs_to_float(X, torch.cat([shift_O, shift_O]))
    n_out = T_R3O.shape[2]
    return torch.complex(y[:n_out], y[n_out:])
