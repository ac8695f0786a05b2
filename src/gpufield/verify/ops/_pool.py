"""Pooling windows as index tables, shared by MaxPool and AveragePool (internal).

A window table maps every output position ``o`` (flattened ``C·H_out·W_out``) and window slot
``k`` to the flat input index (``C·H·W``) it reads, or to the dummy index ``N = C·H·W`` where it
reads padding. Gathering from an input with one extra column (``-inf`` for max, 0 for average)
gives the window values; scatter-adding into ``N + 1`` columns and dropping the last one is the
adjoint (the CROWN step). 1-D pooling ``[C, L]`` is treated as 2-D with ``H = 1``.

Shape legend: S spec rows, B batch, O output positions (flat), K window slots, N input size.
"""

from __future__ import annotations

import math

import numpy as np
import torch


def pool_geometry(b, node, attrs, shape):
    """Kernel, strides, pads ``(top, left, bottom, right)`` and dilations of an ONNX pooling
    node over an input of node shape ``[C, H, W]`` or ``[C, L]``, as 2-D tuples.

    Raises:
        ModelFormatError: not 1-D/2-D, ``ceil_mode=1``, or a padding at least the kernel size.
    """
    if len(shape) not in (2, 3):
        raise b.err(f"only 1-D and 2-D pooling is supported (input shape {shape})", node)
    nd = len(shape) - 1
    k = list(attrs["kernel_shape"]) if "kernel_shape" in attrs else None
    if k is None or len(k) != nd:
        raise b.err(f"kernel_shape {k} does not match a {nd}-D input", node)
    s = list(attrs.get("strides", [1] * nd))
    d = list(attrs.get("dilations", [1] * nd))
    if int(attrs.get("ceil_mode", 0)):
        raise b.err("ceil_mode=1 is not supported", node)
    auto = attrs.get("auto_pad", b"NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else auto
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        pads_b, pads_e = [], []
        for i in range(nd):
            n_in = shape[1 + i]
            out = math.ceil(n_in / s[i])
            total = max((out - 1) * s[i] + (k[i] - 1) * d[i] + 1 - n_in, 0)
            small, big = total // 2, total - total // 2
            pads_b.append(small if auto == "SAME_UPPER" else big)
            pads_e.append(big if auto == "SAME_UPPER" else small)
        p = pads_b + pads_e
    elif auto in ("NOTSET", "VALID"):
        p = list(attrs.get("pads", [0] * (2 * nd))) if auto == "NOTSET" else [0] * (2 * nd)
    else:
        raise b.err(f"auto_pad={auto} is not supported", node)
    if any(v < 0 for v in p) or any(p[i] >= k[i] * d[i] or p[nd + i] >= k[i] * d[i] for i in range(nd)):
        raise b.err(f"pads {p} must be non-negative and smaller than the kernel {k}", node)
    if nd == 1:
        return (1, k[0]), (1, s[0]), (0, p[0], 0, p[1]), (1, d[0])
    return tuple(k), tuple(s), (p[0], p[1], p[2], p[3]), tuple(d)


def window_table(shape, kernel, strides, pads, dilations):
    """Index table ``[O, K]`` (int64) into ``N + 1`` flat input columns, and the output shape.

    Args:
        shape: node shape ``[C, H, W]`` (or ``[C, L]``, read as ``H = 1``).
        kernel, strides, dilations: 2-D tuples.
        pads: ``(top, left, bottom, right)``.

    Returns:
        ``(idx_OK, out_shape)`` with ``out_shape`` ``[C, H_out, W_out]`` (``[C, W_out]`` for 1-D).
    """
    C, H, W = (shape[0], 1, shape[1]) if len(shape) == 2 else shape
    N = C * H * W
    def positions(n_in, k, s, p0, p1, d):  # [n_out, k] input coordinate of each window slot
        n_out = (n_in + p0 + p1 - d * (k - 1) - 1) // s + 1
        return np.arange(n_out)[:, None] * s + np.arange(k)[None, :] * d - p0

    hpos = positions(H, kernel[0], strides[0], pads[0], pads[2], dilations[0])
    wpos = positions(W, kernel[1], strides[1], pads[1], pads[3], dilations[1])
    Ho, kh = hpos.shape
    Wo, kw = wpos.shape
    hh = hpos[:, None, :, None]  # [Ho, 1, kh, 1]
    ww = wpos[None, :, None, :]  # [1, Wo, 1, kw]
    valid = (hh >= 0) & (hh < H) & (ww >= 0) & (ww < W)  # [Ho, Wo, kh, kw]
    flat = np.clip(hh, 0, H - 1) * W + np.clip(ww, 0, W - 1)
    c = np.arange(C)[:, None, None, None, None] * (H * W)
    idx = np.where(valid[None], c + flat[None], N)  # [C, Ho, Wo, kh, kw]
    out_shape = (C, Ho, Wo) if len(shape) == 3 else (C, Wo)
    return torch.as_tensor(idx.reshape(C * Ho * Wo, kh * kw), dtype=torch.int64), out_shape


def gather(x, idx, fill: float):
    """Window values ``[B, O, K]`` of ``x`` ``[B, *in]`` (padding reads ``fill``)."""
    xf = x.flatten(1)
    xf = torch.cat([xf, xf.new_full((xf.shape[0], 1), fill)], 1)
    return xf[:, idx.to(xf.device)]


def scatter(A_SBO, where_BO, n_in: int):
    """Adjoint of picking input ``where[b, o]`` for output ``o``: ``[S, B, N]`` (dummy dropped)."""
    S, B, n_out = A_SBO.shape
    out = A_SBO.new_zeros(S, B, n_in + 1)
    out.scatter_add_(2, where_BO.unsqueeze(0).expand(S, B, n_out), A_SBO)
    return out[..., :n_in]
