"""gpufield.verify.dist: bound propagation sharded over processes with ``torch.distributed``.

Started by ``torchrun`` (gloo on CPU, NCCL on GPUs); one code path for any P (P = 1 issues no
collective). Modes (issue 27):

* ``fsdp`` (:mod:`.fsdp`): Linear/Conv weights sharded by output rows, each layer all-gathered
  just in time and freed after use (re-gathered for α-CROWN's autograd backward); every rank runs
  the single-process propagation code, so IBP/CROWN/α-CROWN bounds are bitwise those of P = 1.
* ``alpha`` (:mod:`.alpha_shard`): α-CROWN with the clauses split over ranks, each rank holding
  only its clauses' slopes and Adam state, stopping in lockstep, and bounding only its share of
  every intermediate layer's rows (the A-matrices that set the peak), weights FSDP-sharded;
  equal to P = 1 within float32 rounding when intermediate slopes are not optimised. In branch
  and bound (:mod:`.bab_shard`, ``RefineConfig.spec_split``) every rank runs the same search
  holding only its clauses' α and β.
* ``tp`` (:mod:`.tp`): the paper's Megatron tensor parallelism (Col/Row pairs, A sharded inside
  zones, IBP for a zone's pre-activations): sound, looser than CROWN after the first zone.
* ``domains`` (:mod:`.domains`): branch and bound with the open domains spread over the ranks,
  one status exchange per round, a common stop, rebalancing of uneven heaps.
* memory accounting (:mod:`.memory`): per-rank peak bytes of the verifier's tensors, from the CUDA
  allocator on GPU and from a dispatch-mode storage tracker on CPU.
* ``gpufield verify run --shard MODE`` (:mod:`.session`): rank 0 writes the result file and the
  ``--report`` JSON (every rank's peak memory and errors), the other ranks serve.

Run a job, or one instance::

    torchrun --standalone --nproc-per-node 2 -m gpufield.verify.dist.worker job.json out/
    torchrun --standalone --nproc-per-node 2 -m gpufield verify run NET.onnx PROP.vnnlib --out r.txt --shard domains
"""

from gpufield.verify.dist.alpha_shard import RowSplit, clause_block, sharded_alpha_crown
from gpufield.verify.dist.bab_shard import SpecSplit
from gpufield.verify.dist.bounds import BoundsConfig, case_bounds
from gpufield.verify.dist.comm import Comm, DistConfig, init_from_env, shutdown, staged
from gpufield.verify.dist.domains import DomainSync, plan, serve
from gpufield.verify.dist.fsdp import ShardedOp, shard_graph, shard_rows
from gpufield.verify.dist.memory import MemoryReport, StorageTracker, measure, storage_bytes
from gpufield.verify.dist.session import Session, bounds_instance, run_bounds
from gpufield.verify.dist.tp import tp_crown, tp_graph

__all__ = [
    "BoundsConfig",
    "Comm",
    "DistConfig",
    "DomainSync",
    "MemoryReport",
    "RowSplit",
    "Session",
    "ShardedOp",
    "SpecSplit",
    "StorageTracker",
    "bounds_instance",
    "case_bounds",
    "clause_block",
    "init_from_env",
    "measure",
    "plan",
    "run_bounds",
    "serve",
    "shard_graph",
    "shard_rows",
    "sharded_alpha_crown",
    "shutdown",
    "staged",
    "storage_bytes",
    "tp_crown",
    "tp_graph",
]
