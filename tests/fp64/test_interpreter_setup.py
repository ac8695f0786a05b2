"""Triton kernels on a machine without CUDA: a clear error instead of an interpreter failure deep inside a
kernel when Triton's interpreter is off or only partly on (each case in its own process: the import order
is what matters)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="the interpreter is the CPU-only path")

_RUN = """
import numpy as np
from gpufield.errors import InputError
from gpufield.fp64.fft import EmulatedFftPlan, fftn_fp64_emulated
x = np.random.default_rng(0).standard_normal((4, 8)) + 0j
try:
    y = fftn_fp64_emulated(x, EmulatedFftPlan(backend="int8", epilogue="triton"))
    print("OK", float(abs(y - np.fft.fftn(x)).max()))
except InputError as e:
    print("InputError:", e)
"""


def _run(prelude: str, interpret: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    if interpret is not None:
        env["TRITON_INTERPRET"] = interpret
    out = subprocess.run([sys.executable, "-c", prelude + _RUN], env=env, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.strip().splitlines()[-1]


def test_import_leaves_the_environment_alone_and_the_call_site_turns_the_interpreter_on():
    """``import gpufield.fp64`` changes no environment variable (it once set TRITON_INTERPRET); the first CPU
    call of a Triton kernel turns the interpreter on itself."""
    line = _run("import os\nbefore = dict(os.environ)\nimport gpufield.fp64\nassert dict(os.environ) == before\n"
                "assert 'triton' not in __import__('sys').modules\n", None)
    assert line.startswith("OK") and float(line.split()[1]) < 1e-13


def test_explicit_enable_before_triton_runs_the_interpreter():
    line = _run("import gpufield.fp64\nassert gpufield.fp64.enable_cpu_interpreter()\nimport triton\n", None)
    assert line.startswith("OK") and float(line.split()[1]) < 1e-13


def test_triton_imported_first_is_named_in_the_error():
    line = _run("import triton\n", None)
    assert line.startswith("InputError: triton was imported before gpufield"), line
    assert "call gpufield.fp64.enable_cpu_interpreter() before importing triton" in line


def test_triton_first_with_the_interpreter_set_by_the_user_runs():
    line = _run("import triton\n", "1")
    assert line.startswith("OK"), line


def test_interpreter_switched_off_is_named_in_the_error():
    line = _run("", "0")
    assert line.startswith("InputError: the Triton kernels run on CUDA tensors") and "TRITON_INTERPRET='0'" in line


def test_interpreter_spelled_as_triton_reads_it():
    """Triton reads TRITON_INTERPRET as a boolean (true, on, yes, any case): so do we."""
    line = _run("import triton\n", "True")
    assert line.startswith("OK"), line


def test_ozaki_triton_kernels_on_cpu_checked_too(monkeypatch):
    """``kernels="triton"`` on a CPU tensor goes through the same check (here: the interpreter off)."""
    from gpufield.errors import InputError
    from gpufield.fp64.ozaki.backends import Fp8Backend, Int8Backend, use_triton

    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(InputError, match="TRITON_INTERPRET='0'"):
        use_triton("triton", torch.device("cpu"))
    assert use_triton("auto", torch.device("cpu")) is False
    # building a backend checks the mode only: the device is known when a product runs (on a CUDA machine the
    # interpreter is off and kernels="triton" is the GPU path)
    assert Int8Backend(kernels="triton").kernels == "triton" and Fp8Backend(kernels="triton").kernels == "triton"
    with pytest.raises(InputError, match="kernels must be one of"):
        Int8Backend(kernels="gpu")
