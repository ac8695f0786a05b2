"""Digests of the emulated FFT's outputs for the default kernel path and every former env-var variant.

Run before the kernel-config change (``--mode env``: variants chosen by the GPUFIELD_* variables of main
at 5d571fc) and after (``--mode config``: the same variants as :class:`KernelConfig` fields); the test
tests/fp64/test_kernel_config.py asserts the config path gives the stored digests.

    PYTHONPATH=src python tools/fp64_house_digests.py --mode env --write tests/fp64/data/house_digests.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys

SHAPE = (16, 32)
SEED = 30
# name -> (GPUFIELD_* variables of the old path, KernelConfig fields of the new, EmulatedFftPlan fields)
CASES: dict[str, tuple[dict, dict, dict]] = {
    "default": ({}, {}, {}),
    "cpu_exact_torch": ({}, {}, {"backend": "cpu", "epilogue": "torch"}),
    "fused_epi_impl_triton": ({"GPUFIELD_FUSED_EPI_IMPL": "triton"}, {"implementation": "triton"}, {}),
    "fused_epi_fold_f64": ({"GPUFIELD_FUSED_EPI_FOLD": "f64"}, {"fold": "f64"}, {}),
    "fused_epi_fold_int": ({"GPUFIELD_FUSED_EPI_FOLD": "int"}, {"fold": "int"}, {}),
    "fused_epi_pairs_0": ({"GPUFIELD_FUSED_EPI_PAIRS": "0"}, {"residue_pairs": 0}, {}),
    "fused_epi_pairs_2": ({"GPUFIELD_FUSED_EPI_PAIRS": "2"}, {"residue_pairs": 2}, {}),
    "fused_epi_launch_64_4": ({"GPUFIELD_FUSED_EPI_LAUNCH": "64,4"}, {"launch": (64, 4)}, {}),
    "fused_epi_maxnreg_0": ({"GPUFIELD_FUSED_EPI_MAXNREG": "0"}, {"max_nreg": 0}, {}),
    "epilogue_asm_0": ({"GPUFIELD_EPILOGUE_ASM": "0"}, {"epilogue_asm": False}, {}),
    "kulisch": ({}, {}, {"variant": "kulisch"}),
    "triton_gemm": ({}, {}, {"int8_gemm": "triton"}),
    "triton_gemm_epilogue_int64": ({"GPUFIELD_EPILOGUE_IMPL": "int64"}, {"epilogue": "int64"},
                                   {"int8_gemm": "triton"}),
    "triton_gemm_epilogue_asm_0": ({"GPUFIELD_EPILOGUE_ASM": "0"}, {"epilogue_asm": False}, {"int8_gemm": "triton"}),
}


def digest(y) -> str:
    """sha256 of the complex128 output's bytes (C order)."""
    import numpy as np

    return hashlib.sha256(np.ascontiguousarray(y.numpy()).tobytes()).hexdigest()


def run(mode: str, names: list[str], shape=SHAPE, device: str = "cpu") -> dict:
    """{name: digest} of fftn_fp64_emulated on the seeded input, each case its old (env) or new (config) way."""
    import numpy as np
    import torch

    from gpufield.fp64.fft import EmulatedFftPlan, fftn_fp64_emulated

    rng = np.random.default_rng(SEED)
    x = rng.standard_normal(shape) + 1j * rng.standard_normal(shape)
    x *= np.exp2(rng.integers(-8, 8, size=shape))  # wide exponent range
    xt = torch.from_numpy(x).to(device)
    out = {}
    for name in names:
        env, cfg, plan_kw = CASES[name]
        if mode == "env":
            saved = {k: os.environ.get(k) for k in env}
            os.environ.update(env)
            try:
                plan = EmulatedFftPlan(**({"backend": "int8", "epilogue": "triton"} | plan_kw))
                y = fftn_fp64_emulated(xt, plan)
            finally:
                for k, v in saved.items():
                    if v is None:
                        os.environ.pop(k, None)
                    else:
                        os.environ[k] = v
        else:
            from gpufield.fp64.fft.kernel_config import KernelConfig

            kw = {"backend": "int8", "epilogue": "triton"} | plan_kw
            if kw["backend"] == "cpu":
                kw["backend"] = "cpu-exact"  # one set of backend names (ozaki_matmul's)
            plan = EmulatedFftPlan(**kw, kernels=KernelConfig(**cfg))
            y = fftn_fp64_emulated(xt, plan)
        out[name] = digest(y.cpu())
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mode", choices=("env", "config"), required=True)
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--write", default=None, help="JSON file for the digests")
    a = ap.parse_args(argv)
    os.environ.setdefault("TRITON_INTERPRET", "1")  # CPU: the Triton kernels in the interpreter (before triton)
    d = run(a.mode, a.cases.split(","))
    doc = {"shape": list(SHAPE), "seed": SEED, "mode": a.mode, "digests": d,
           "command": "PYTHONPATH=src python " + " ".join(sys.argv)}
    text = json.dumps(doc, indent=1)
    if a.write:
        with open(a.write, "w") as f:
            f.write(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
