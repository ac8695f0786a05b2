"""gpufield.verify: verification of ReLU networks given as ONNX + VNN-LIB (complete by β-CROWN BaB).

User guide
==========

``gpufield.verify`` decides VNN-COMP instances: a network (ONNX) and a property (VNN-LIB 1.0)
whose assertions describe an input box and an *unsafe* output set. The answer is

* ``unsat``: proven that no input in the box reaches the unsafe set (the property holds);
* ``sat``: a counterexample, validated with onnxruntime, is written with the answer;
* ``unknown`` / ``timeout``: neither could be established in time.

Command line::

    gpufield verify run  MODEL.onnx PROP.vnnlib --timeout 120 --out result.txt [--force] \\
        [--branching fsb|babsr] [--no-bab]
    gpufield verify bench BENCH_DIR --out results.csv --reference abcrown_results.csv \\
        [--max-instance-s 10] [--device cuda] [--resume]

Python::

    from gpufield.verify import verify_instance, VerifyConfig
    res = verify_instance("mnist-net_256x2.onnx", "prop_0_0.03.vnnlib", timeout_s=60)
    res.verdict, res.margins

How it works
------------

1. **Front end.** :func:`load_onnx` builds our own IR (``Gemm, MatMul, Add, Sub, Mul, Div,
   Relu, Flatten, Reshape, Transpose, Squeeze, Unsqueeze, Conv, BatchNormalization, Identity,
   Constant``; BatchNormalization folds into a preceding Conv/Gemm; and, one file each under
   ``verify/ops`` built from the node: ``Dropout`` (inference), ``Sigmoid``, ``Tanh``,
   ``MaxPool``, ``AveragePool``, ``Concat``, ``Slice``, ``Split``, ``Pad``, ``ConvTranspose``,
   ``Gather`` (constant indices), ``Sign``, ``LeakyRelu``, ``Clip``, ``ReduceSum``,
   ``ReduceMean``; neuron branch and bound and the MIP
   split ReLUs only, so a graph with the non-linear ones among them gets IBP, CROWN, α-CROWN,
   input-split branch and bound where enabled, and attacks). The batch is an explicit
   leading dimension. Unsupported models fail with one :class:`~gpufield.errors.ModelFormatError`
   listing every unsupported op type and node. Before verifying, our forward is compared with
   onnxruntime on random points of each box; a difference above tolerance refuses the instance.
   :func:`parse_vnnlib` reads VNN-LIB 1.0 (no whitespace assumptions; several input boxes;
   disjunctions of output polytopes); errors name ``file:line:column``
   (:class:`~gpufield.errors.SpecFormatError`).
2. **Falsification.** PGD with restarts, one target clause per restart (:func:`pgd_attack`).
3. **Bounds.** IBP (Gowal et al. 2018); CROWN (Zhang et al. 2018) with CROWN bounds for every
   ReLU input, A-matrices shaped ``[spec, batch, *node_shape]`` and spec chunking under a memory
   budget; α-CROWN (Xu et al. 2021) optimising the lower slopes of every ReLU for every start
   node (intermediate layers included) with Adam and learning-rate decay, best bound kept.
4. **Branch and bound (β-CROWN).** Clauses still open after α-CROWN go to a complete
   branch and bound over ReLU splits (:mod:`gpufield.verify.bab`, driven by :func:`refine`).
   Each domain keeps its split history, float64 intermediate bounds (re-bounded by CROWN after
   every split and intersected with the parent's), warm-started α and β, and its float64 lower
   bound; open domains wait in a priority queue (worst bound first) and are bounded in batches
   whose size comes from a memory budget. Split constraints ``s_j z_j ≥ 0`` enter the backward
   pass with Lagrange multipliers β ≥ 0 optimised jointly with α (Wang et al. 2021); β = 0 is
   iteration 0 and the best iterate is kept, so β never loosens a bound. Branching: filtered
   smart branching (``fsb``, k candidates tried by a cheap bound, default) or BaBSR
   (``babsr``). Every domain still open is attacked at the box vertices minimising its linear
   bounds (onnxruntime validates: ``sat``); a leaf without unstable neurons is decided by an LP
   whose duals become its β (float64 re-checked) or whose deepest point is validated as a
   counterexample. Limits: deadline, ``max_domains``, memory budget; on timeout the smallest
   float64 domain bound is reported (``margins['bab_lb']``); Ctrl-C gives ``unknown``.
   ``VerifyConfig(progress=True)`` (``gpufield verify run``) shows a live line with domains
   left, global bound and rounds per second. Networks with few inputs can be split on the
   input box instead (``RefineConfig(input_split_max_dims=…)``, :mod:`gpufield.verify.bab.input_split`).
5. **Decision.** A clause ``A y ≤ b`` is infeasible when a non-negative combination of its rows
   has a positive lower bound (each row, plus one optimised softmax combination per multi-row
   clause). ``unsat`` needs every clause of every box infeasible.

Soundness of floating point: bounds are computed in float32 by default, but a proof is only
accepted after the slopes that produced it are re-evaluated in float64 (float32 weights are
exact in float64, the box is rounded outwards) with a margin above ``margin_tol`` (1e-7).
Outward rounding inside the float64 arithmetic itself is not done; its error (≈1e-13 relative)
is far below the margin. The network semantics verified is the real-valued network with the
model's float32 weights, as in VNN-COMP (float64 weights for a model with a DOUBLE input).

Input hygiene: an empty input range, a non-finite number, a disjunctive normal form beyond
``max_disjuncts`` (10000) are :class:`~gpufield.errors.SpecFormatError` s naming file and line,
never a proof. Strict ``<``/``>`` are bounded on their closure and enforced on counterexamples,
which are accepted only if they satisfy the property exactly as written (no tolerance; the
VNN-COMP checker's 1e-4 is slack we never use, see :func:`gpufield.verify.attack.validate`).

Deadline: phases stop or are not started by the :class:`Deadline`; :func:`run_instance` and
:func:`bench` also seal the result as ``timeout`` ``VerifyConfig.grace_s`` (0.5 s) after it, so
the result is final by the timeout + 1 s (:mod:`gpufield.verify.deadline`).
"""

from gpufield.verify.alpha import AlphaConfig, AlphaResult, alpha_crown
from gpufield.verify.attack import AttackConfig, Counterexample, pgd_attack
from gpufield.verify.bench import BenchSummary, bench
from gpufield.verify.deadline import Deadline
from gpufield.verify.graph import Graph, Node
from gpufield.verify.io.onnx_load import load_onnx
from gpufield.verify.io.ort import OrtModel, differential_check
from gpufield.verify.io.results import read_instances, read_results, write_result_file
from gpufield.verify.io.vnnlib import Case, Clause, Property, parse_vnnlib
from gpufield.verify.propagate import backward, crown_intermediate, ibp
from gpufield.verify.protocols import BoundOp
from gpufield.verify.refine import RefineConfig, RefineResult, refine
from gpufield.verify.runner import VerifyConfig, VerifyResult, run_instance, verify_instance
from gpufield.verify.spec import Spec

__all__ = [
    "AlphaConfig",
    "AlphaResult",
    "AttackConfig",
    "BenchSummary",
    "BoundOp",
    "Case",
    "Clause",
    "Counterexample",
    "Deadline",
    "Graph",
    "Node",
    "OrtModel",
    "Property",
    "RefineConfig",
    "RefineResult",
    "Spec",
    "VerifyConfig",
    "VerifyResult",
    "alpha_crown",
    "backward",
    "bench",
    "crown_intermediate",
    "differential_check",
    "ibp",
    "load_onnx",
    "parse_vnnlib",
    "pgd_attack",
    "read_instances",
    "read_results",
    "refine",
    "run_instance",
    "verify_instance",
    "write_result_file",
]
