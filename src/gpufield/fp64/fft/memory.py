"""Memory model of the emulated FFT: workspace bytes per chunk output, chunk size from a budget, peak bytes.

A stage (:func:`gpufield.fp64.fft.stage.dft_stage`) runs in chunks of whole rows; everything it allocates
lives for one chunk only. Per complex output of a chunk (N = K, the square DFT matrices of the stages; r
moduli, L = r padded to a multiple of the INT8 group g):

=============================  ==================================================  ===================
buffer                         size                                                INT8, r = 16, g = 8
=============================  ==================================================  ===================
residues of re, im, re+im      3 L x 1 B (int8; FP8 int16: 2 B)                    48 B
int32 3M product planes        3 L x 4 B                                           192 B
per-output shift (int64)       8 B                                                 8 B
epilogue output (complex128)   16 B                                                16 B
**workspace per output**       **15 L + 24 B (INT8 + Triton epilogue)**            **264 B**
=============================  ==================================================  ===================

(The row-shift reduction's temporary, 16 B per input element, is freed before the residues exist.) The fully
fused stage (``int8_gemm="fused_epi"``) has no residue or product planes: per row an int64 shift and a float64
maximum (at most 1 B per output, K >= 16) and, for an in-place stage, the [Rc, K] complex128 result buffer:
budgeted at **32 B** per output, so a 1024^3 stage runs in one chunk on an H200. The FP8
backend adds its stacked int64 products (16 r B more); the torch reference epilogue and the CPU-exact
backend work in int64 and are budgeted at 128 r + 1024 B per output.

Whole transform (:func:`gpufield.fp64.fft.sixstep.fftn_fp64_emulated`), with A = 16 B x points the size
of the complex128 array: the caller's input A, plus per axis pass its input (read in place; the previous
pass's output) and the stage-1 output (the stage-2 input), then the stage-1 and stage-2 outputs; a pass's
input is dropped once stage 1 has read it, before the stage-2 output is allocated. So

    peak = 3 A + W,   W = workspace per output x chunk outputs

(a 1-D input of length <= 32 is one stage on a view: 2 A + W; ``ifftn`` is the same: it runs the stages on
the conjugate roots and makes no conjugated copy).
At 1024^3 complex128 (A = 16 GiB) on INT8 g = 8: peak = 48 GiB + 264 B x chunk. With the default budget
on an empty H200 (about 139 GiB usable, 123 GiB free with the input resident) the budget is
0.5 x (123 - 2 x 16) = 45 GiB, the chunk 2^27 outputs (W = 33 GiB, 8 chunks per stage) and the peak
**81 GiB** (the fused stage: 2^30-output chunks, one per stage, peak 48 + 32 = 80 GiB).
tests/fp64/test_fft_launch.py counts the live full-size arrays.

Also here: the chunk row bookkeeping of a stage (:func:`chunk_segments`: the twiddle-group segments of a
chunk; :func:`place_rows`: writing a chunk's rows into a strided destination).

Units: bytes, complex outputs.
"""

from __future__ import annotations

import torch

AUTO_MEMORY_FRACTION = 0.5
"""Share of the device memory available at the start of a transform (after the transform's own full-size
arrays) that the chunk workspace may use when the plan gives no ``memory_budget_bytes``."""

CPU_DEFAULT_CHUNK = 1 << 20
"""Chunk outputs on CPU when neither ``chunk_outputs`` nor ``memory_budget_bytes`` is given."""

MIN_CHUNK = 1024


def workspace_bytes_per_output(plan) -> int:
    """Bytes of stage workspace per complex output of a chunk (see the module table).

    Args:
        plan: :class:`gpufield.fp64.fft.stage.EmulatedFftPlan`.

    Returns:
        int, bytes per complex output (N = K stages).
    """
    r = plan.resolved_num_moduli
    if plan.int8_gemm == "fused_epi" and plan.backend_name == "int8" and plan.epilogue == "triton":
        return 32
    if plan.backend_name == "cpu-exact" or plan.epilogue == "torch":
        return 128 * r + 1024
    g = plan.int8_group
    L = -(-r // g) * g
    if plan.backend_name == "fp8":
        return 3 * L * 2 + 12 * L + 16 * r + 24
    return 3 * L + 12 * L + 24


def array_bytes(shape) -> int:
    """Bytes of a complex128 array of ``shape``."""
    n = 16
    for s in shape:
        n *= int(s)
    return n


def available_device_bytes(device: torch.device) -> int | None:
    """Bytes a new allocation can get on ``device``: free memory plus the caching allocator's unused
    reserve (CUDA; None elsewhere). ``cudaMemGetInfo`` and the allocator counters do not synchronize
    the stream."""
    if device.type != "cuda":
        return None
    free, _ = torch.cuda.mem_get_info(device)
    st = torch.cuda.memory_stats_as_nested_dict(device)  # unflattened: ~10x cheaper than memory_reserved()
    return int(free + st.get("reserved_bytes", {}).get("all", {}).get("current", 0)
               - st.get("allocated_bytes", {}).get("all", {}).get("current", 0))


def chunk_outputs_for(plan, shape, device: torch.device) -> int:
    """Complex outputs per stage chunk for a transform of ``shape`` on ``device``.

    The workspace budget is ``plan.memory_budget_bytes`` if given, else on CUDA
    :data:`AUTO_MEMORY_FRACTION` x (available bytes - 2 A) (A = :func:`array_bytes`; the 2 A are the
    transform's own pass buffers, the input being already resident), else (CPU) :data:`CPU_DEFAULT_CHUNK`
    outputs. The chunk is the budget over :func:`workspace_bytes_per_output`, rounded down to a power of
    two, at least :data:`MIN_CHUNK`, and at most ``plan.chunk_outputs`` when that is set.

    Args:
        plan: :class:`gpufield.fp64.fft.stage.EmulatedFftPlan`.
        shape: the transform's shape.
        device: where it runs.

    Returns:
        int >= 1024.
    """
    bpo = workspace_bytes_per_output(plan)
    budget = plan.memory_budget_bytes
    if budget is None:
        avail = available_device_bytes(device)
        if avail is not None:
            budget = int(AUTO_MEMORY_FRACTION * max(avail - 2 * array_bytes(shape), 0))
    if budget is None:
        chunk = CPU_DEFAULT_CHUNK
    else:
        chunk = max(MIN_CHUNK, 1 << max(int(budget // bpo).bit_length() - 1, 0))
    if plan.chunk_outputs is not None:
        chunk = min(chunk, plan.chunk_outputs)
    return max(MIN_CHUNK, chunk)


def transform_peak_bytes(shape, plan, chunk_outputs: int) -> int:
    """Peak device bytes of one forward transform of ``shape``, input included (module docstring).

    Args:
        shape: the transform's shape (1-3 power-of-two sides).
        plan: :class:`gpufield.fp64.fft.stage.EmulatedFftPlan`.
        chunk_outputs: the chunk (:func:`chunk_outputs_for`).

    Returns:
        int bytes: 3 A + W (2 A + W for 1-D of length <= 32), W = workspace per output x min(chunk, outputs).
    """
    A = array_bytes(shape)
    outputs = A // 16
    W = workspace_bytes_per_output(plan) * min(chunk_outputs, outputs)
    return (2 if len(shape) == 1 and shape[0] <= 32 else 3) * A + W


def chunk_segments(c0: int, c1: int, R: int):
    """(group, first row, end row) of flattened rows [c0, c1) of a [G, R] row grid, rows relative to c0."""
    pos = c0
    while pos < c1:
        gi, r0 = divmod(pos, R)
        end = min(c1, (gi + 1) * R)
        yield gi, pos - c0, end - c0
        pos = end


def take_rows(x_GRN: torch.Tensor, c0: int, c1: int) -> torch.Tensor:
    """Chunk rows [c0, c1) (flattened over [G, R]) of x (any strides) as [c1 - c0, N]: a view when the
    rows form one strided block, else a copy of the chunk's rows only (never of the whole grid)."""
    G, R, N = x_GRN.shape
    g0, g1 = c0 // R, -(-c1 // R)
    try:
        return x_GRN[g0:g1].view(-1, N)[c0 - g0 * R:c1 - g0 * R]
    except RuntimeError:  # the groups' rows are not one strided block
        return torch.cat([x_GRN[gi, r0:r1] for gi, r0, r1 in
                          ((gi, s0 + c0 - gi * R, s1 + c0 - gi * R) for gi, s0, s1 in chunk_segments(c0, c1, R))])


def place_rows(y_GRK: torch.Tensor, res_MK: torch.Tensor, c0: int, c1: int) -> None:
    """Write chunk rows [c0, c1) (flattened over [G, R]) into y (any strides): at most 3 copies."""
    R = y_GRK.shape[1]
    pos = c0
    while pos < c1:
        gi, r0 = divmod(pos, R)
        if r0 == 0 and c1 - pos >= R:
            ng = (c1 - pos) // R
            y_GRK[gi:gi + ng] = res_MK[pos - c0:pos - c0 + ng * R].view(ng, R, -1)
            pos += ng * R
        else:
            r1 = min(R, r0 + c1 - pos)
            y_GRK[gi, r0:r1] = res_MK[pos - c0:pos - c0 + r1 - r0]
            pos += r1 - r0
