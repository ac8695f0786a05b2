"""Deadlines of a verification run; the implementation lives in :mod:`gpufield.deadline` (torch-free,
so ``gpufield verify run`` arms the result seal before importing torch).
"""

from gpufield.deadline import Deadline, PhaseClock, ResultSeal, process_start_s, write_text_atomic

__all__ = ["Deadline", "PhaseClock", "ResultSeal", "process_start_s", "write_text_atomic"]
