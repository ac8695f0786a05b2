"""IBP vs CROWN vs α-CROWN (tangent points) on small Sigmoid/Tanh MLPs (CPU, float64).

Builds Gemm 5->8, activation, Gemm 8->3 with onnx.helper (seeded weights), loads it with the
verifier's loader, and prints the mean lower bound of the 3 outputs over seeded random boxes.

Usage: PYTHONPATH=src python benchmarks/verify_ops_alpha.py [--boxes 4] [--iterations 50]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np
import onnx
import torch
from onnx import TensorProto, helper, numpy_helper

from gpufield.verify.alpha import AlphaConfig, alpha_crown, bound_pass, init_params
from gpufield.verify.io.onnx_load import load_onnx
from gpufield.verify.propagate import crown_intermediate, ibp
from gpufield.verify.spec import Spec


def mlp(act: str, rng) -> onnx.ModelProto:
    w = {"W0": rng.standard_normal((8, 5)) * 0.6, "b0": rng.standard_normal(8) * 0.3,
         "W1": rng.standard_normal((3, 8)) * 0.6, "b1": rng.standard_normal(3) * 0.3}
    nodes = [helper.make_node("Gemm", ["x", "W0", "b0"], ["z"], transB=1),
             helper.make_node(act, ["z"], ["a"]),
             helper.make_node("Gemm", ["a", "W1", "b1"], ["y"], transB=1)]
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 5])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])],
                          [numpy_helper.from_array(v.astype(np.float32), k) for k, v in w.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--boxes", type=int, default=4)
    ap.add_argument("--iterations", type=int, default=50)
    ap.add_argument("--radius", type=float, default=1.0)
    a = ap.parse_args()
    rng = np.random.default_rng(26)
    with tempfile.TemporaryDirectory() as d:
        for act in ("Sigmoid", "Tanh"):
            p = Path(d) / f"{act}.onnx"
            onnx.save(mlp(act, rng), p)
            g = load_onnx(p).cast(torch.float64)
            c = torch.as_tensor(rng.standard_normal((a.boxes, 5)))
            r = torch.as_tensor(rng.uniform(0, a.radius, (a.boxes, 5)))
            lo, hi = c - r, c + r
            spec = Spec(np.eye(3), np.zeros(3), np.arange(3), 3)
            ib = ibp(g, lo, hi)
            inter = crown_intermediate(g, lo, hi, ref=ib)
            ref = {**ib, **inter}
            with torch.no_grad():
                crown = bound_pass(g, spec, lo, hi, ref, init_params(g, spec, inter, a.boxes, True))
            res = alpha_crown(g, spec, lo, hi, ref, inter, AlphaConfig(iterations=a.iterations))
            print(f"{act}: mean lower bound IBP {ib[g.output_name][0].mean():.4f}  CROWN {crown.mean():.4f}  "
                  f"alpha-CROWN {res.best_KB.mean():.4f} ({res.iterations} iterations)")


if __name__ == "__main__":
    main()
