"""Entry point run by ``torchrun``: bound a list of cases in one shard mode, write results per rank.

    torchrun --standalone --nproc-per-node P -m gpufield.verify.dist.worker JOB.json OUT_DIR

``JOB.json``::

    {"shard": "none" | "fsdp" | "alpha" | "tp", "dtype": "float32", "device": "cpu",
     "bounds": {"methods": ["ibp", "crown", "alpha"], "alpha_iterations": 5,
                "optimize_intermediate": true, "alpha_row_split": true},
     "save_bounds": true,
     "cases": [{"name": "m4", "onnx": "net.onnx", "vnnlib": "prop.vnnlib",
                "bounds": {"alpha_iterations": 1}},
               {"name": "r0", "mlp": [8, 16, 16, 3], "seed": 0, "eps": 0.1, "shard": "alpha",
                "bounds": {"methods": ["alpha"], "optimize_intermediate": false}}]}

(an entry's ``shard`` and ``bounds`` override the job's). An entry with ``"bab": {...}`` runs a
branch and bound instead (:func:`bab_case`; ``shard`` ``none`` or ``alpha``). Under ``alpha`` the weights are
FSDP-sharded too unless ``"alpha_weights": "replicated"`` (job or entry); ``"inventory": true``
adds, per case, the live tensors at the CPU peak grouped by shape (``peak_inventory``).

Writes ``OUT_DIR/rank<r>.pt`` (case -> :func:`~gpufield.verify.dist.bounds.case_bounds` dict, when
``save_bounds``) and ``OUT_DIR/rank<r>.json`` (per case: the :class:`MemoryReport`, the gather
count/bytes/seconds, the weight bytes this rank holds and its gather buffer's bytes). Files are written to a temporary name and
renamed. Every case is loaded, sharded and bounded identically on every rank.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import torch

from gpufield.verify.dist.bounds import BoundsConfig, case_bounds
from gpufield.verify.dist.comm import GATHER_STATS, init_from_env, shutdown
from gpufield.verify.dist.fsdp import ShardedOp, shard_graph, spec_side
from gpufield.verify.dist.memory import graph_tensors, measure, storage_bytes
from gpufield.verify.dist.tp import tp_crown, tp_graph
from gpufield.verify.graph import Graph, Node
from gpufield.verify.io.vnnlib import Case, Clause
from gpufield.verify.ops.activation import Relu
from gpufield.verify.ops.linear import Linear
from gpufield.verify.spec import Spec

SHARDS = ("none", "fsdp", "alpha", "tp")
ALPHA_WEIGHTS = ("fsdp", "replicated")


def inventory_summary(inv: list[tuple[tuple[int, ...], str, int]]) -> list[dict]:
    """The tracker's peak inventory grouped by (shape, dtype), largest total first:
    ``[{"shape", "dtype", "count", "bytes"}]``."""
    groups: dict[tuple, list[int]] = {}
    for shape, dt, b in inv:
        g = groups.setdefault((tuple(shape), dt), [0, 0])
        g[0] += 1
        g[1] += b
    return [{"shape": list(k[0]), "dtype": k[1], "count": c, "bytes": b}
            for k, (c, b) in sorted(groups.items(), key=lambda kv: -kv[1][1])]


def random_mlp(sizes: list[int], seed: int) -> Graph:
    """Linear/ReLU chain with weights ``N(0, 1/in)`` and biases ``N(0, 0.1²)`` (float32, CPU).

    Args:
        sizes: ``[in, hidden..., out]``.
        seed: ``torch.Generator`` seed (the same graph in every process).
    """
    g = torch.Generator().manual_seed(seed)
    nodes, cur = [], "x"
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:], strict=True)):
        W = torch.randn(b, a, generator=g) / a**0.5
        bias = 0.1 * torch.randn(b, generator=g)
        nodes.append(Node(f"z{i}", Linear(W, bias), (cur,), (b,)))
        cur = f"z{i}"
        if i < len(sizes) - 2:
            nodes.append(Node(f"a{i}", Relu(), (cur,), (b,)))
            cur = f"a{i}"
    return Graph("x", (sizes[0],), tuple(nodes), cur, source=f"random_mlp{sizes}@{seed}")


def robustness_case(n_in: int, n_out: int, seed: int, eps: float) -> Case:
    """Box ``x0 ± eps`` (``x0`` uniform in [0,1]) and unsafe clauses ``y_j ≥ y_0`` for j ≥ 1, plus one
    two-row clause (``y_1 ≥ y_0`` and ``y_2 ≥ y_0``) when there are ≥ 3 outputs (exercises λ)."""
    g = torch.Generator().manual_seed(seed + 1)
    x0 = torch.rand(n_in, generator=g, dtype=torch.float64).numpy()
    clauses = []
    for j in range(1, n_out):
        row = np.zeros((1, n_out))
        row[0, 0], row[0, j] = 1.0, -1.0  # unsafe: y_0 − y_j ≤ 0
        clauses.append(Clause(row, np.zeros(1)))
    if n_out >= 3:
        clauses.append(Clause(np.concatenate([clauses[0].A_KM, clauses[1].A_KM]), np.zeros(2)))
    return Case(x0 - eps, x0 + eps, tuple(clauses))


def load_case(entry: dict, dtype: torch.dtype, device: str) -> tuple[Graph, Spec, torch.Tensor, torch.Tensor]:
    """Graph, spec and box ``[1, *input_shape]`` of one job entry (``onnx`` with ``vnnlib`` or with
    ``seed``/``eps`` for a generated box, or ``mlp``).

    Raises:
        KeyError: the entry has neither ``onnx`` nor ``mlp``.
    """
    from gpufield.verify.runner import outward_box

    if "mlp" in entry:
        graph = random_mlp(list(entry["mlp"]), int(entry.get("seed", 0)))
        case = robustness_case(entry["mlp"][0], entry["mlp"][-1], int(entry.get("seed", 0)),
                               float(entry.get("eps", 0.1)))
    else:
        from gpufield.verify.io.onnx_load import load_onnx
        from gpufield.verify.io.vnnlib import parse_vnnlib

        graph = load_onnx(entry["onnx"])
        if "vnnlib" in entry:
            case = parse_vnnlib(entry["vnnlib"]).cases[int(entry.get("case", 0))]
        else:  # a generated robustness box around a random point
            case = robustness_case(int(np.prod(graph.input_shape)), int(np.prod(graph.output_shape)),
                                   int(entry.get("seed", 0)), float(entry.get("eps", 0.1)))
    graph = graph.cast(dtype, device)
    n_out = int(np.prod(graph.output_shape))
    lo, hi = outward_box(case, graph.input_shape, dtype, device)
    return graph, Spec.from_case(case, n_out), lo, hi


def bab_problem(entry: dict, device: str):
    """An ONNX net and a VNN-LIB case for :func:`bab_case`: ``onnx`` + ``vnnlib`` (+ ``case``), or
    ``onnx`` + ``lo``/``hi`` (input box) + ``clauses`` (``[{"c": [M floats], "t": float}]``: the
    unsafe clauses ``c·y ≤ t``, any of which is a violation).

    Returns:
        ``(graph float32, graph float64, case, spec, OrtModel)`` on ``device`` (the model is None
        when onnxruntime cannot load and the entry says ``"require_ort": false``).
    """
    from gpufield.verify.io.onnx_load import load_onnx
    from gpufield.verify.io.ort import OrtModel
    from gpufield.verify.io.vnnlib import parse_vnnlib

    g = load_onnx(entry["onnx"])
    if "vnnlib" in entry:
        case = parse_vnnlib(entry["vnnlib"]).cases[int(entry.get("case", 0))]
    else:
        case = Case(np.asarray(entry["lo"], dtype=np.float64), np.asarray(entry["hi"], dtype=np.float64),
                    tuple(Clause(np.asarray(k["c"], dtype=np.float64).reshape(1, -1), np.array([float(k["t"])]))
                          for k in entry["clauses"]))
    n_out = int(np.prod(g.output_shape))
    try:
        ort = OrtModel(entry["onnx"])
    except Exception:  # no onnxruntime (e.g. a GPU host without it): no counterexample search
        if entry.get("require_ort", True):
            raise
        ort = None
    return (g.cast(torch.float32, device), g.cast(torch.float64, device), case, Spec.from_case(case, n_out), ort)


def bab_case(entry: dict, job: dict, comm, device: str, shard: str) -> dict:
    """β-CROWN branch and bound of one entry (its root round is α-CROWN on the output slopes), measured.

    Every rank runs the same search; under ``shard == "alpha"`` each holds only its clauses' α, β
    (:class:`~gpufield.verify.dist.bab_shard.SpecSplit`). ``entry["bab"]``: ``batch``,
    ``max_domains``, ``iterations``, ``root_iterations``, ``branching``, ``timeout_s``.

    Returns:
        ``{"verdict": unsat|sat|unknown, "reason", "domains", "rounds", "global_lb", "split_calls",
        **MemoryReport}`` (peak over the search, this rank).
    """
    import time

    from gpufield.verify.alpha import AlphaConfig
    from gpufield.verify.bab import bab
    from gpufield.verify.dist.bab_shard import SpecSplit
    from gpufield.verify.propagate import crown_intermediate, ibp
    from gpufield.verify.refine import RefineConfig
    from gpufield.verify.runner import outward_box

    b = {**job.get("bab", {}), **entry["bab"]}
    g, g64, case, spec, ort = bab_problem(entry, device)
    lo, hi = outward_box(case, g.input_shape, torch.float32, device)
    lo64, hi64 = outward_box(case, g.input_shape, torch.float64, device)
    with torch.no_grad():
        ib = ibp(g64, lo64, hi64)
        ref64 = {**ib, **crown_intermediate(g64, lo64, hi64, ref=ib)}
    split = SpecSplit(comm) if shard == "alpha" else None
    cfg = RefineConfig(batch=int(b.get("batch", 64)), max_domains=int(b.get("max_domains", 10_000)),
                       alpha=AlphaConfig(iterations=int(b.get("iterations", 5))),
                       root_iterations=int(b.get("root_iterations", 20)), branching=b.get("branching", "fsb"),
                       mip_refine_layers=0, mip_after_s=0.0, spec_split=split)
    inventory = bool(entry.get("inventory", job.get("inventory", False)))
    resident = [*graph_tensors(g), *graph_tensors(g64), lo, hi, lo64, hi64, *(t for p in ref64.values() for t in p)]
    with measure(resident, device, comm.rank, inventory=inventory) as m:
        r = bab(g, g64, spec, lo, hi, lo64, hi64, ref64, cfg, margin_tol=1e-7,
                deadline_s=time.monotonic() + float(b.get("timeout_s", 600.0)), case=case, ort_model=ort)
    verdict = "unsat" if r.proven else ("sat" if r.counterexample is not None else "unknown")
    out = {"verdict": verdict, "reason": r.reason, "domains": r.domains, "rounds": r.rounds,
           "global_lb": r.global_lb, "split_calls": None if split is None else split.calls, "ort": ort is not None,
           "cex": None if r.counterexample is None else r.counterexample.x_N.tolist(), **m.report.as_dict()}
    if inventory:
        out["peak_inventory"] = inventory_summary(m.inventory)
    return out


def bounds_config(job: dict, entry: dict) -> BoundsConfig:
    """The case's :class:`BoundsConfig`: the job's ``bounds`` updated by the entry's own ``bounds``."""
    b = {**job.get("bounds", {}), **entry.get("bounds", {})}
    return BoundsConfig(methods=tuple(b.get("methods", ("ibp", "crown", "alpha"))),
                        alpha_iterations=int(b.get("alpha_iterations", 5)),
                        optimize_intermediate=bool(b.get("optimize_intermediate", True)),
                        alpha_row_split=bool(b.get("alpha_row_split", True)))


def _atomic_write(path: Path, write) -> None:
    from gpufield._files import atomic_path

    with atomic_path(path, force=True) as tmp:
        write(tmp)


def run_job(job: dict, out_dir: Path) -> None:
    """Run ``job`` (see the module doc) on this rank and write its files into ``out_dir``."""
    comm = init_from_env()
    dtype = {"float32": torch.float32, "float64": torch.float64}[job.get("dtype", "float32")]
    device = job.get("device", "cpu")
    results, reports = {}, {}
    for entry in job["cases"]:
        cfg = bounds_config(job, entry)
        shard = entry.get("shard", job.get("shard", "fsdp"))
        if shard not in SHARDS:
            raise ValueError(f"shard {shard!r} not in {SHARDS}")
        if "bab" in entry:
            if shard not in ("none", "alpha"):
                raise ValueError(f"a branch-and-bound entry needs shard none or alpha, not {shard!r}")
            reports[entry["name"]] = {**bab_case(entry, job, comm, device, shard), "world": comm.world,
                                      "shard": shard}
            continue
        graph, spec, lo, hi = load_case(entry, dtype, device)
        alpha_weights = entry.get("alpha_weights", job.get("alpha_weights", "fsdp"))
        if alpha_weights not in ALPHA_WEIGHTS:
            raise ValueError(f"alpha_weights {alpha_weights!r} not in {ALPHA_WEIGHTS}")
        if shard == "fsdp":
            graph = shard_graph(graph, comm)
        elif shard == "alpha" and alpha_weights == "fsdp":
            graph = shard_graph(graph, comm, keep=spec_side(graph))
        elif shard == "tp":
            graph, starts = tp_graph(graph, comm)
        buffers = {id(n.op.buffer): n.op.buffer.flat for n in graph.nodes if isinstance(n.op, ShardedOp)}
        buffer_bytes = storage_bytes(buffers.values())
        weights = storage_bytes(graph_tensors(graph)) - buffer_bytes
        before = dict(GATHER_STATS)
        inventory = bool(entry.get("inventory", job.get("inventory", False)))
        with measure([*graph_tensors(graph), lo, hi], device, comm.rank, inventory=inventory) as m:
            if shard == "tp":  # a different computation (IBP inside sharded zones): CROWN output bounds only
                tl, tu = tp_crown(graph, starts, lo, hi, spec.C_SB(graph.output_shape, lo.shape[0], lo),
                                  cfg.memory_budget_bytes)
                res = {"tp/lb": tl, "tp/ub": tu}
            else:
                res = case_bounds(graph, spec, lo, hi, cfg, comm if shard == "alpha" else None)
        del graph
        reports[entry["name"]] = {**m.report.as_dict(), "weight_bytes": weights,
                                  "gather_buffer_bytes": buffer_bytes, "world": comm.world,
                                  "shard": shard, **{f"gather_{k}": GATHER_STATS[k] - before[k] for k in before}}
        if shard == "alpha":
            reports[entry["name"]]["alpha_weights"] = alpha_weights
        if inventory:
            reports[entry["name"]]["peak_inventory"] = inventory_summary(m.inventory)
        if job.get("save_bounds", True):  # on the host: kept bounds must not count in the next case's peak
            results[entry["name"]] = {k: v.detach().cpu() for k, v in res.items()}
        del res
    out_dir.mkdir(parents=True, exist_ok=True)
    _atomic_write(out_dir / f"rank{comm.rank}.json", lambda p: p.write_text(json.dumps(reports, indent=1)))
    if job.get("save_bounds", True):
        _atomic_write(out_dir / f"rank{comm.rank}.pt", lambda p: torch.save(results, p))
    shutdown(comm)


def main(argv: list[str] | None = None) -> int:
    """``python -m gpufield.verify.dist.worker JOB.json OUT_DIR``; returns the exit status."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        print("usage: python -m gpufield.verify.dist.worker JOB.json OUT_DIR", file=sys.stderr)
        return 2
    run_job(json.loads(Path(argv[0]).read_text()), Path(argv[1]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
