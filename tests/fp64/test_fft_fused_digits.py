"""The digit identity behind :mod:`gpufield.fp64.fft.gemm_fused_digits` (the input residues on the tensor
cores), checked with Python integers: the bytes of (v + 0x80..80) XOR 0x80..80 are v's balanced base-256
digits, and the digit-expanded twiddle operand times those digits is congruent mod every INT8 modulus to
the twiddle residues times v. The kernel itself runs on a Hopper GPU only (tests/fp64/test_fft_fused_gluon.py
compares it bit for bit with the Triton kernel and the exact oracle)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("triton")

from gpufield.fp64.fft.gemm_fused_digits import DIGIT_DOT_BOUND, DIGITS, OFFSET, operand_digits  # noqa: E402
from gpufield.fp64.ozaki.moduli import moduli_table  # noqa: E402


def _digits(v: np.ndarray) -> np.ndarray:
    """int64 [n] -> int8 [n, 8]: the kernel's D = (v + OFFSET) ^ OFFSET, read as little-endian bytes."""
    off = np.int64(OFFSET.value)
    with np.errstate(over="ignore"):
        d = (v + off) ^ off
    return d.astype("<i8").view(np.int8).reshape(-1, DIGITS)


def test_offset_xor_bytes_are_the_balanced_digits():
    rng = np.random.default_rng(0)
    edge = [0, 1, -1, 127, 128, -128, -129, 255, 256, 2**60 - 1, -(2**60) + 1, 2**59, -(2**59)]
    v = np.concatenate([np.array(edge, dtype=np.int64), rng.integers(-(2**60) + 1, 2**60, 20000, dtype=np.int64)])
    d = _digits(v)
    assert d.min() >= -128 and d.max() <= 127
    back = [sum(int(x) << (8 * k) for k, x in enumerate(row)) for row in d]
    assert back == [int(x) for x in v]


def test_digit_operand_is_congruent_to_the_twiddles_times_v():
    moduli = moduli_table("int8", 16).moduli
    rng = np.random.default_rng(1)
    G, L, C, M = 2, len(moduli), 6, 32  # 2 groups, 6 output columns, 2 N = 32 input values
    p = np.array(moduli).reshape(1, L, 1, 1)
    b = (rng.integers(0, 1 << 20, (G, L, C, M)) % p) - p // 2  # symmetric residues, as operand_4m's
    bt = torch.from_numpy(b.astype(np.int8))
    bd = operand_digits(bt, moduli).numpy().astype(np.int64)
    assert bd.shape == (G, L, C, M * DIGITS)
    v = rng.integers(-(2**60) + 1, 2**60, (5, M), dtype=np.int64)
    x = _digits(v.reshape(-1)).reshape(5, M * DIGITS).astype(np.int64)
    for g in range(G):
        for i, q in enumerate(moduli):
            assert np.all(bd[g, i] >= -(q // 2)) and np.all(bd[g, i] < q - q // 2)
            dot = x @ bd[g, i].T  # [5, C], what one wgmma sums exactly in int32
            assert np.abs(dot).max() <= DIGIT_DOT_BOUND
            want = [[sum(int(b[g, i, c, m]) * int(v[r, m]) for m in range(M)) % q for c in range(C)]
                    for r in range(5)]
            assert (dot % q).tolist() == want
