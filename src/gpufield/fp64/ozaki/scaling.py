"""Per-row / per-column power-of-two shifts that keep the CRT unique: |A'B'| < M/2 for every input.

Fast mode (norm bound, fp64.md 2.3, made scale-invariant and rigorous): with e = exponent of the row max,
nu >= ||a * 2**-e||_2 computed exactly in integers (see fast_shifts), the shift is s = floor(H - e - log2 nu),
H = T/2, T = log2((M-1)/2) - 2**-10. Then ||a'||_2 <= 2**H for every row of A and column of B, so by
Cauchy-Schwarz |a'.b'| <= 2**T < M/2, whatever the magnitude of the inputs. (GEMMul8's original formula
``floor(log2P - 2 - max(1, log2||a||)) - ilogb(amax)`` is not scale-invariant; tests/fp64/test_ozaki_scaling.py
shows inputs for which it breaks uniqueness.)

Accurate mode (GEMMul8 ``scaling/accu``): sigma puts each row max in [2**(u-1), 2**u); hi = ceil(|a| 2**sigma)
(at least 1 for any non-zero a) bounds |a| from above; one exact low-precision product G = hi_A hi_B^T bounds
sum_k |a_ik||b_kj| <= 2**-(sigma_i + tau_j) G_ij. With alpha_i = floor((T - log2 max_j G_ij)/2) and beta_j the
same over columns, s_i = sigma_i + alpha_i, t_j = tau_j + beta_j give |A'B'|_ij <= 2**(alpha_i+beta_j) G_ij <=
2**T, because G_ij <= sqrt(max_j G_ij * max_i G_ij).

The 2**-10 margin in T keeps S/M far (>= 3e-4) from a half-integer, so the float64 quotient estimate of
the CRT (crt.py) is exact.

Shape legend: R rows of the operand being scaled (rows of A, columns of B), K inner dimension.
"""

from __future__ import annotations

import math

import torch

from gpufield.fp64.ozaki.moduli import ModuliTable
from gpufield.fp64.ozaki.residues import pow2

MARGIN_LOG2 = 2.0**-10
"""log2 margin below (M-1)/2 kept by every scaling (see module docstring)."""


def _target_log2(table: ModuliTable) -> float:
    return table.log2_half_M_floor - MARGIN_LOG2


def mul_pow2(X: torch.Tensor, e_R: torch.Tensor) -> torch.Tensor:
    """X * 2**e per row in two exact power-of-two steps (e in [-2044, 2046]).

    Args:
        X: float64 [R, K].
        e_R: int64 [R].

    Returns:
        float64 [R, K].
    """
    e = e_R.to(torch.int64).clamp(-2044, 2046)
    e1 = e.clamp(-1022, 1023)
    return X * pow2(e1)[:, None] * pow2(e - e1)[:, None]


def row_exponent(amax_R: torch.Tensor) -> torch.Tensor:
    """floor(log2 amax) per row (ilogb), exact for normal and subnormal values; 0 for zero rows.

    Args:
        amax_R: float64 [R], non-negative finite.

    Returns:
        int64 [R].
    """
    _, ex = torch.frexp(amax_R)  # amax = m * 2**ex, m in [0.5, 1)
    return torch.where(amax_R > 0, ex.to(torch.int64) - 1, torch.zeros_like(ex, dtype=torch.int64))


def _abs_parts(X_RK: torch.Tensor) -> list[torch.Tensor]:
    if X_RK.is_complex():
        return [X_RK.real.abs(), X_RK.imag.abs()]
    return [X_RK.abs()]


_LOG2_UP = [math.nextafter(math.log2(m), math.inf) if m else 0.0 for m in range(257)]


def bit_length(x: torch.Tensor) -> torch.Tensor:
    """Exact bit length of non-negative int64 values (0 for 0), via float64 plus an integer correction."""
    _, ex = torch.frexp(x.to(torch.float64))  # rounding may overshoot by one near 2**k
    b = ex.to(torch.int64)
    over = (b >= 1) & ((x >> (b - 1).clamp(0, 63)) == 0)
    return torch.where(x > 0, b - over.to(torch.int64), torch.zeros_like(b))


def log2_upper_int(x: torch.Tensor) -> torch.Tensor:
    """A float64 upper bound of log2(x) for int64 x >= 1, within 0.012 bits, identical on every device.

    Uses the 8 leading bits: x < (m + 1) 2**(b - 8) with m = x >> (b - 8), then a table of log2(m + 1)
    rounded up. Only exact integer operations and one IEEE addition are involved, so CPU and GPU agree
    bit for bit (a float log2 can differ by an ulp between libraries and flip a floor()).

    Args:
        x: int64 tensor, entries >= 1.

    Returns:
        float64 tensor.
    """
    tab = torch.tensor(_LOG2_UP, dtype=torch.float64, device=x.device)
    b = bit_length(x)
    sh = (b - 8).clamp_min(0)
    m = x >> sh
    m1 = torch.where(b > 8, m + 1, m)  # exact value when x < 2**8
    return tab[m1.clamp(1, 256)] + sh.to(torch.float64)


def fast_shifts(X_RK: torch.Tensor, table: ModuliTable, use_triton: bool = False) -> torch.Tensor:
    """Fast-mode shifts of the rows of X (rows of A, or columns of B passed as B.T).

    The 2-norm bound is computed exactly in integers: with e = floor(log2 amax) and
    q_k = ceil(|x_k| 2**(Q - e)) (at least 1 for x_k != 0), ||x 2**-e||_2 <= sqrt(sum q_k^2) 2**-Q, and
    sum q_k^2 is an exact int64 (Q = 20 bits for K < 2**20). The shift is then
    s = floor(H + Q - log2_upper_int(sum q^2)/2) - e. No float rounding can make the bound too small and
    every device computes the same shifts.

    Args:
        X_RK: float64 or complex128 [R, K], finite.
        table: moduli table (fixes T).
        use_triton: run the fused Triton kernel ``gpufield.fp64.kernels.shifts`` (bit-identical).

    Returns:
        int64 [R] shifts s with ||trunc(x * 2**s)||_2 <= 2**(T/2) for each row x (complex: over re and im).
    """
    parts = _abs_parts(X_RK)
    K = X_RK.shape[-1] * len(parts)
    R = X_RK.shape[0]
    if K == 0:
        return torch.zeros(R, dtype=torch.int64, device=X_RK.device)
    Q = 20 if K < 2**20 else 10
    H = _target_log2(table) / 2.0
    if use_triton:
        from gpufield.fp64.kernels.shifts import fast_shifts_triton

        return fast_shifts_triton(X_RK, table, H, Q)
    amax = parts[0].amax(dim=-1)
    for P in parts[1:]:
        amax = torch.maximum(amax, P.amax(dim=-1))
    e = row_exponent(amax)
    ss = torch.zeros(R, dtype=torch.int64, device=X_RK.device)
    for P in parts:
        q = torch.ceil(mul_pow2(P, Q - e)).to(torch.int64)  # in [0, 2**(Q+1)]
        q = torch.maximum(q, (P != 0).to(torch.int64))
        ss = ss + (q * q).sum(dim=-1)
    lg = log2_upper_int(ss.clamp_min(1)) * 0.5
    s = torch.floor(float(H + Q) - lg).to(torch.int64) - e
    return torch.where(amax > 0, s, torch.zeros_like(s))


def bound_operand(X_RK: torch.Tensor, ufp: int, use_triton: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Accurate mode, step 1: sigma and the integer upper bound hi >= |x| * 2**sigma, hi in [0, 2**ufp].

    Args:
        X_RK: float64 or complex128 [R, K], finite.
        ufp: bits of the bound entries (6 for INT8, 4 for FP8).
        use_triton: one fused Triton kernel (``gpufield.fp64.kernels.shifts``); hi then comes back as int8.

    Returns:
        (hi_RK int64 (int8 on the Triton path), sigma_R int64). Complex: hi = ceil(|re| 2**sigma) +
        ceil(|im| 2**sigma).
    """
    if use_triton:
        from gpufield.fp64.kernels.shifts import bound_operand_triton

        return bound_operand_triton(X_RK, ufp)
    parts = _abs_parts(X_RK)
    amax = parts[0].amax(dim=-1)
    for P in parts[1:]:
        amax = torch.maximum(amax, P.amax(dim=-1))
    e = row_exponent(amax)
    sigma = (ufp - len(parts)) - e  # each part's ceil <= 2**(ufp - len(parts) + 1)
    hi = torch.zeros(X_RK.shape, dtype=torch.int64, device=X_RK.device)
    for P in parts:
        Y = torch.ceil(mul_pow2(P, sigma)).to(torch.int64)
        hi = hi + torch.maximum(Y, (P != 0).to(torch.int64))
    return hi, sigma


def accurate_shifts_from_bound(
    sigma_M: torch.Tensor, tau_N: torch.Tensor, G_rowmax_M: torch.Tensor, G_colmax_N: torch.Tensor,
    table: ModuliTable,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Accurate mode, step 3: final shifts from the row/column maxima of the bound product G.

    Args:
        sigma_M, tau_N: int64 preliminary shifts from :func:`bound_operand`.
        G_rowmax_M: int64 [M] max_j G_ij.
        G_colmax_N: int64 [N] max_i G_ij.
        table: moduli table.

    Returns:
        (s_M, t_N) int64 shifts with |A'B'|_ij <= 2**T for every (i, j).
    """
    T = _target_log2(table)

    def half(G: torch.Tensor) -> torch.Tensor:
        lg = log2_upper_int(G.clamp_min(1))  # device-independent upper bound of log2 G
        return torch.floor((T - lg) / 2.0).to(torch.int64)

    return sigma_M + half(G_rowmax_M), tau_N + half(G_colmax_N)


def fast_log2_headroom(table: ModuliTable) -> float:
    """H = T/2: log2 of the 2-norm budget of one scaled row in fast mode (for reports)."""
    return _target_log2(table) / 2.0


def gemmul8_original_fast_shift(x_K: torch.Tensor, log2P: float) -> int:
    """GEMMul8's original fast-mode row shift, for the regression test only (fp64.md 2.3).

    ``calc_sft``: sft = floor(log2P - 2 - max(1, log2||x||_2)) - ilogb(amax), applied as trunc(x * 2**sft),
    with log2P = floor(log2(M-1)/2 - 0.5).

    Args:
        x_K: float64 [K].
        log2P: GEMMul8's per-table constant.

    Returns:
        The shift (int).
    """
    amax = float(x_K.abs().max())
    if amax == 0.0:
        return 0
    nrm = float(torch.linalg.vector_norm(x_K))
    return math.floor(log2P - 2 - max(1.0, math.log2(nrm))) - (math.frexp(amax)[1] - 1)
