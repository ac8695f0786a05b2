"""The emulated FFT of one shape captured as one CUDA graph, for repeated transforms (the cuFFT-plan pattern).

An eager call of :func:`gpufield.fp64.fft.fftn_fp64_emulated` spends host time before its first kernel
(plan, chunk size, operands, launch arguments) and one synchronisation at the end (the finiteness check);
its stages then run back to back (eager against replay times: docs/perf-notes.md). A
:class:`GraphedFftn` captures the whole transform once (after a warm-up that compiles the kernels and
builds the twiddle operands) and replays it per call: the same kernels on the same buffers, so the same
bits as the eager call.
"""

from __future__ import annotations

import torch

from gpufield.errors import InputError
from gpufield.fp64.fft.operands import cached_on
from gpufield.fp64.fft.sixstep import _check, _fftn, _plan_of
from gpufield.fp64.fft.stage import EmulatedFftPlan, check_finite_flags


class GraphedFftn:
    """Forward (or inverse) emulated full-FP64 FFT of one shape on one CUDA device, captured as a CUDA graph.

    Usage: ``f = GraphedFftn((256, 256, 256), plan)``; then ``y = f(x)`` copies x into ``f.input`` and
    replays, or write ``f.input`` in place and call ``f()`` (no copy). The result is ``f.output``, a static
    buffer that the next call overwrites (clone it to keep it). Bits equal
    :func:`gpufield.fp64.fft.fftn_fp64_emulated` (``inverse``: :func:`gpufield.fp64.fft.ifftn_fp64_emulated`)
    with the same plan.

    Args:
        shape: 1 to 3 power-of-two sides <= 1024.
        plan: :class:`EmulatedFftPlan` (default: INT8, CRT, the fused stage kernels).
        inverse: capture the inverse transform (``numpy.fft.ifftn`` convention).
        device: a CUDA device (default the current one).

    Attributes:
        input, output: complex128 tensors of ``shape`` on the device (static addresses).

    Raises:
        InputError: bad shape or plan, or a device that is not CUDA (CUDA graphs; use
            :func:`gpufield.fp64.fft.fftn_fp64_emulated` there).
    """

    def __init__(self, shape, plan: EmulatedFftPlan | None = None, *, inverse: bool = False, device=None):
        dev = torch.device(device if device is not None else "cuda")
        if dev.type != "cuda" or not torch.cuda.is_available():
            why = f"got {dev}" if dev.type != "cuda" else "but CUDA is not available on this machine"
            raise InputError(f"GraphedFftn needs a CUDA device (CUDA graphs), {why}; "
                             "use fftn_fp64_emulated elsewhere")
        self.plan = EmulatedFftPlan(backend="int8", epilogue="triton") if plan is None else _plan_of(plan, {})
        self.inverse = inverse
        self.input = torch.zeros(tuple(shape), dtype=torch.complex128, device=dev)
        _check(self.input)
        side = torch.cuda.Stream(dev)  # warm-up off the capture: compiles, builds the cached operands
        side.wait_stream(torch.cuda.current_stream(dev))
        with torch.cuda.stream(side):
            self._run([])
        torch.cuda.current_stream(dev).wait_stream(side)
        self._flags: list = []
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):  # the stages' row maxima land in self._flags at every replay
            self.output = self._run(self._flags)
        # the captured stages read the cached twiddle operands at fixed addresses: hold them (the cache may
        # drop them once other shapes or plans fill it)
        self._operands = cached_on(self.input.device)

    def _run(self, flags: list) -> torch.Tensor:
        return _fftn([self.input], self.plan, flags, inverse=self.inverse)

    def __call__(self, x: torch.Tensor | None = None) -> torch.Tensor:
        """Replay the transform (of ``x``, copied into :attr:`input` first, or of :attr:`input` as it is).

        Args:
            x: optional complex (or real) tensor of the captured shape, any device.

        Returns:
            :attr:`output` (complex128, the captured shape; overwritten by the next call).

        Raises:
            InputError: ``x`` has another shape.
            NumericsError: Inf/NaN in the input (or an overflowing stage); one host sync per call.
        """
        if x is not None:
            if tuple(x.shape) != tuple(self.input.shape):
                raise InputError(f"this GraphedFftn transforms shape {tuple(self.input.shape)}, got {tuple(x.shape)}")
            self.input.copy_(x)
        self.graph.replay()
        check_finite_flags(self._flags)
        return self.output
