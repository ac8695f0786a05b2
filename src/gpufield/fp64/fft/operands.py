"""Twiddle operands of a DFT-GEMM stage, built once per (twiddle set, plan, device) and cached on the device.

Building them per call cost a blocking host-to-device copy per stage (a pageable ``.to(device)`` waits for
the stream) and, on the grouped INT8 path, one ``zeros`` + g slice copies per group, component and chunk
(most of a transform's copy launches; docs/perf-notes.md). Now they are made once, on the host, in one
vectorized pass, and moved to the device once.

* ``wres``: the symmetric residues of the 3M twiddle operands wr, wi, wr+wi, 3 x [L, G, K, N] in the
  backend's residue dtype (int8 for INT8 moduli, int16 for FP8 moduli);
* ``bd`` (INT8 moduli only): the block-diagonal B operands of ``Int8Backend.modular_matmul_grouped`` and
  of :func:`gpufield.fp64.fft.gemm_triton.stage_gemm_triton`, int8 [3, G, Q, g K, g N]
  (Q = ceil(L / g); g = 1 gives the per-modulus matrices [3, G, L, K, N]); block li of
  ``bd[c, gi, q]`` is ``wres[c][q g + li, gi]``, zero for padded moduli (li past L), so products of the
  residue kernel's unwritten pad slots are exact zeros.

Shape legend: G twiddle groups (k1 of Bailey's stage 2, or 1), K outputs per row, N inner length,
L moduli, Q moduli groups, g moduli per group.
"""

from __future__ import annotations

import hashlib

import numpy as np
import torch

from gpufield.fp64.fft.twiddles import twiddle_table

_CACHE: dict = {}
_CACHE_MAX = 32


def cached_on(device: torch.device) -> tuple[dict[str, object], ...]:
    """The operand sets now cached for ``device``, to keep alive where addresses are captured.

    The cache drops its oldest entry past ``_CACHE_MAX`` (32) sets; a CUDA graph that captured a stage replays
    the operand addresses it saw, so :class:`gpufield.fp64.fft.GraphedFftn` holds these references for its
    lifetime (else a dropped set's memory could be reused under the graph).

    Args:
        device: the device the operands were built for (with its index, e.g. ``cuda:0``).

    Returns:
        tuple of the cached dicts whose key names that device (``wres``, ``bd``, and the packed kernel
        operands ``b4m`` / ``b4m_t`` that :func:`gpufield.fp64.fft.gemm_fused_epi.fused_epi_stage_triton` adds).
    """
    return tuple(v for k, v in _CACHE.items() if k[6] == str(device))


def _sym_mod_np(x: np.ndarray, p: np.ndarray) -> np.ndarray:
    r = np.mod(x, p)
    return np.where(r >= (p + 1) // 2, r - p, r)


def stage_operands(idx_GKN: np.ndarray, twiddle_bits: int, moduli: tuple[int, ...], dtype: torch.dtype,
                   group: int, device: torch.device) -> dict[str, object]:
    """Cached device operands of one stage (see module docstring).

    Args:
        idx_GKN: int [G, K, N] twiddle-table indices.
        twiddle_bits: b_w.
        moduli: the r moduli p_i.
        dtype: residue dtype (torch.int8 or torch.int16).
        group: INT8 group g of the block-diagonal operand.
        device: target device.

    Returns:
        dict with ``wres`` (list of 3 tensors [L, G, K, N]) and ``bd`` (tensor or None).
    """
    idx = np.ascontiguousarray(idx_GKN, dtype=np.int64)
    key = (hashlib.sha1(idx.tobytes()).hexdigest(), idx.shape, twiddle_bits, moduli, dtype, group, str(device))
    hit = _CACHE.get(key)
    if hit is not None:
        return hit
    c, s = twiddle_table(twiddle_bits)
    wr = c[idx]  # int64, |.| <= 2^62
    wi = -s[idx]  # the table's roots are cos - i sin (an inverse stage passes the negated exponents' indices)
    p = np.array(moduli, dtype=np.int64).reshape((-1, 1, 1, 1))
    rr = _sym_mod_np(wr[None], p)
    ri = _sym_mod_np(wi[None], p)
    rs = _sym_mod_np(rr + ri, p)
    np_res = [rr, ri, rs]  # 3 x int64 [L, G, K, N], |.| <= 544
    wres = [torch.from_numpy(a).to(dtype).to(device) for a in np_res]
    bd = None
    if dtype == torch.int8:  # INT8 moduli: block-diagonal operands (g = 1: the plain matrices)
        L, G, K, N = np_res[0].shape
        Q = -(-L // group)
        w = np.zeros((3, Q * group, G, K, N), dtype=np.int64)
        w[:, :L] = np.stack(np_res)
        w = w.reshape(3, Q, group, G, K, N).transpose(0, 3, 1, 2, 4, 5)  # [3, G, Q, g, K, N]
        blk = np.zeros((3, G, Q, group, K, group, N), dtype=np.int8)
        for li in range(group):
            blk[:, :, :, li, :, li, :] = w[:, :, :, li]
        bd = torch.from_numpy(blk.reshape(3, G, Q, group * K, group * N)).to(device)
    out = {"wres": wres, "bd": bd}
    if len(_CACHE) >= _CACHE_MAX:
        _CACHE.pop(next(iter(_CACHE)))
    _CACHE[key] = out
    return out
