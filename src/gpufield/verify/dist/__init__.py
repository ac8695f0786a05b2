"""gpufield.verify.dist: bound propagation sharded over processes with ``torch.distributed``.

Started by ``torchrun`` (gloo on CPU, NCCL on GPUs); one code path for any P (P = 1 issues no
collective). Modes (issue 27):

* ``fsdp`` (:mod:`.fsdp`): Linear/Conv weights sharded by output rows, each layer all-gathered
  just in time and freed after use (re-gathered for α-CROWN's autograd backward); every rank runs
  the single-process propagation code, so IBP/CROWN/α-CROWN bounds are bitwise those of P = 1.
* memory accounting (:mod:`.memory`): per-rank peak bytes of the verifier's tensors, from the CUDA
  allocator on GPU and from a dispatch-mode storage tracker on CPU.

Run a job::

    torchrun --standalone --nproc-per-node 2 -m gpufield.verify.dist.worker job.json out/
"""

from gpufield.verify.dist.bounds import BoundsConfig, case_bounds
from gpufield.verify.dist.comm import Comm, DistConfig, init_from_env, shutdown
from gpufield.verify.dist.fsdp import ShardedOp, shard_graph, shard_rows
from gpufield.verify.dist.memory import MemoryReport, StorageTracker, measure, storage_bytes

__all__ = [
    "BoundsConfig",
    "Comm",
    "DistConfig",
    "MemoryReport",
    "ShardedOp",
    "StorageTracker",
    "case_bounds",
    "init_from_env",
    "measure",
    "shard_graph",
    "shard_rows",
    "shutdown",
    "storage_bytes",
]
