"""Exact CRT reconstruction with the symmetric lift and one rounding (internal API, reused by the FFT wing).

Two implementations that must agree bit for bit (and the Triton kernel ``gpufield.fp64.kernels.crt`` a third):

* :func:`crt_exact_python`: Python integers and :class:`fractions.Fraction` (the oracle; small sizes only).
* :func:`crt_limbs_torch`: the integer "Kulisch" algorithm of fp64.md 1.6 / 4.1 on int64 tensors:
  1. reduce every input mod p_l to the symmetric range (inputs only need to be congruent, |x| < 2**62);
  2. quotient q = rint(sum_l r_l * q_l/p_l) in float64 (exact result because |X| < M/2 * 2**-2**-10,
     guaranteed by the scalings, keeps S/M at least 3e-4 away from a half-integer);
  3. limb sums s_j = sum_l r_l * C_lj - q * M_j with 31-bit limbs (|s_j| < 2**46);
  4. carry propagation, sign, magnitude;
  5. correct rounding (half to even, subnormals included) of |X| * 2**-shift to float64 from the top
     55 bits plus a sticky bit: the only rounding of the whole product.

Shape legend: L moduli, M rows, N columns, J limbs ("..." = any output shape).
"""

from __future__ import annotations

import math
from fractions import Fraction

import torch

from gpufield.fp64.ozaki.moduli import LIMB_BITS, ModuliTable, crt_lift
from gpufield.fp64.ozaki.residues import pow2

_MASK = (1 << LIMB_BITS) - 1


def round_scaled_exact(X: int, shift: int) -> float:
    """Correctly rounded float64 of X * 2**-shift (Python ints; round half to even; overflow -> +-inf).

    Args:
        X: integer.
        shift: integer power-of-two shift.

    Returns:
        float64.
    """
    if X == 0:
        return 0.0
    fr = Fraction(X, 1 << shift) if shift >= 0 else Fraction(X << (-shift))
    try:
        return float(fr)
    except OverflowError:
        return math.copysign(math.inf, X)


def crt_exact_python(res_LMN: torch.Tensor, shift_MN: torch.Tensor, table: ModuliTable) -> torch.Tensor:
    """Oracle CRT: exact lift with Python integers, then one correct rounding of X * 2**-shift.

    Args:
        res_LMN: integer tensor [L, M, N] congruent to the residues of the exact integer product.
        shift_MN: int64 [M, N] total shift s_i + t_j.
        table: moduli table.

    Returns:
        float64 [M, N] on the CPU.
    """
    L = res_LMN.shape[0]
    flat = res_LMN.reshape(L, -1).to(torch.int64).cpu().tolist()
    sh = shift_MN.reshape(-1).cpu().tolist()
    out = [round_scaled_exact(crt_lift([flat[mi][i] for mi in range(L)], table), sh[i]) for i in range(len(sh))]
    return torch.tensor(out, dtype=torch.float64).reshape(shift_MN.shape)


def crt_integers_python(res_LMN: torch.Tensor, table: ModuliTable) -> list[int]:
    """Exact lifted integers X (flattened, Python ints) of residues [L, ...]; for tests and the error bound."""
    L = res_LMN.shape[0]
    flat = res_LMN.reshape(L, -1).to(torch.int64).cpu().tolist()
    return [crt_lift([flat[mi][i] for mi in range(L)], table) for i in range(len(flat[0]))]


def _normalize(s_J: list[torch.Tensor]) -> list[torch.Tensor]:
    """Carry-propagate signed limb sums: limbs 0..J-2 in [0, 2**31), the top limb signed."""
    out, carry = [], torch.zeros_like(s_J[0])
    for j, s in enumerate(s_J):
        v = s + carry
        if j == len(s_J) - 1:
            out.append(v)
        else:
            out.append(v & _MASK)
            carry = v >> LIMB_BITS
    return out


def limbs_to_float(u_J: list[torch.Tensor], shift: torch.Tensor) -> torch.Tensor:
    """Correctly rounded float64 of a non-negative limb integer U = sum_j u_j 2**(31 j) times 2**-shift.

    Args:
        u_J: J int64 tensors, every limb in [0, 2**31) (top limb too).
        shift: int64 tensor of the same shape.

    Returns:
        float64 tensor, round to nearest even, subnormal results exact, overflow gives +inf.
    """
    J = len(u_J)
    zero = torch.zeros_like(u_J[0])
    nb = zero.clone()  # bit length of U
    for j in range(J):
        bl = torch.where(u_J[j] > 0, 64 - _clz64(u_J[j]) + LIMB_BITS * j, zero)
        nb = torch.maximum(nb, bl)
    pos = torch.maximum(nb - 53, shift - 1074).clamp_min(0)  # lowest kept bit index
    kept_g = zero.clone()
    sticky = torch.zeros_like(u_J[0], dtype=torch.bool)
    for j in range(J):
        sft = LIMB_BITS * j - pos + 1  # bring bit (pos-1) to bit 0
        u = u_J[j]
        left = (sft >= 0) & (sft < 62)
        kept_g = kept_g + torch.where(left, u << sft.clamp(0, 61), zero)
        right = (sft < 0) & (sft > -63)
        rs = (-sft).clamp(0, 62)
        kept_g = kept_g + torch.where(right, u >> rs, zero)
        sticky = sticky | (right & ((u & ((1 << rs) - 1)) != 0)) | ((sft <= -63) & (u != 0))
    guard = (kept_g & 1) == 1
    kept = kept_g >> 1
    up = guard & (sticky | ((kept & 1) == 1))
    kept = kept + up.to(torch.int64)
    e = pos - shift
    e1 = torch.where(e < -1022, e + 600, e.clamp(max=1023))
    e2 = (e - e1).clamp(max=1023)
    return kept.to(torch.float64) * pow2(e1) * pow2(e2)


def _clz64(x: torch.Tensor) -> torch.Tensor:
    """Leading-zero count of positive int64 values (< 2**62) via float64 exponent (exact for x < 2**53)."""
    # x < 2**31 here (one limb): float64 conversion is exact.
    ex = ((x.to(torch.float64).view(torch.int64) >> 52) & 0x7FF) - 1023
    return 63 - ex


def crt_limbs_torch(res_LMN: torch.Tensor, shift_MN: torch.Tensor, table: ModuliTable) -> torch.Tensor:
    """Vectorised exact CRT with 31-bit limbs in int64 (the algorithm of the module docstring).

    Args:
        res_LMN: integer tensor [L, ...] congruent to the residues (|x| < 2**62).
        shift_MN: int64 tensor [...] total shift s_i + t_j.
        table: moduli table.

    Returns:
        float64 tensor [...] bit-identical to :func:`crt_exact_python` whenever |X| < M/2 * (1 - 2**-11).
    """
    L, J = table.num_moduli, table.num_limbs
    r = [None] * L
    qf = torch.zeros(res_LMN.shape[1:], dtype=torch.float64, device=res_LMN.device)
    for mi, p in enumerate(table.moduli):
        x = torch.remainder(res_LMN[mi].to(torch.int64), p)
        r[mi] = torch.where(x >= (p + 1) // 2, x - p, x)
        qf = qf + r[mi].to(torch.float64) * table.q_over_p[mi]
    q = torch.round(qf).to(torch.int64)
    s_J = []
    for j in range(J):
        s = -q * table.M_limbs_J[j]
        for mi in range(L):
            c = table.C_limbs_LJ[mi][j]
            if c:
                s = s + r[mi] * c
        s_J.append(s)
    t_J = _normalize(s_J)
    neg = t_J[-1] < 0
    sgn = torch.where(neg, -1, 1).to(torch.int64)
    u_J = _normalize([s * sgn for s in s_J])
    mag = limbs_to_float(u_J, shift_MN.to(torch.int64))
    return torch.where(neg, -mag, mag)
