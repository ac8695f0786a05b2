"""On a CUDA device the bounds equal the CPU ones (float64) and a full instance runs (marker: gpu)."""

from __future__ import annotations

import pytest
import torch

from gpufield.verify import (
    VerifyConfig,
    backward,
    crown_intermediate,
    load_onnx,
    parse_vnnlib,
    verify_instance,
)
from gpufield.verify.spec import Spec


@pytest.mark.gpu
def test_crown_on_cuda_matches_cpu(shared_dir):
    d = shared_dir / "data/vnncomp2022/mnist_fc"
    g = load_onnx(d / "onnx/mnist-net_256x4.onnx")
    case = parse_vnnlib(d / "vnnlib/prop_4_0.03.vnnlib").cases[0]
    spec = Spec.from_case(case, 10)
    out = []
    for dev in ("cpu", "cuda"):
        gg = g.cast(torch.float64, dev)
        lo = torch.tensor(case.lo_N, device=dev).reshape(1, *g.input_shape)
        hi = torch.tensor(case.hi_N, device=dev).reshape(1, *g.input_shape)
        inter = crown_intermediate(gg, lo, hi)
        lb, _ = backward(gg, g.output_name, spec.C_SB(g.output_shape, 1, lo), lo, hi, inter, upper=False)
        out.append(lb.cpu())
    torch.testing.assert_close(out[0], out[1], rtol=1e-9, atol=1e-9)
    res = verify_instance(d / "onnx/mnist-net_256x4.onnx", d / "vnnlib/prop_4_0.03.vnnlib",
                          timeout_s=60, config=VerifyConfig(device="cuda"))
    assert res.verdict == "unsat"
