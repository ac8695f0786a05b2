"""Cost model of an LLM on a lane of GPUs: prefill compute-bound, decode memory-bound (power.md 6.2).

Decode iteration of batch ``b`` with ``ctx`` context tokens in total, on ``tp`` GPUs::

    experts(b) = E * (1 - (1 - k/E)^b)                         expected distinct experts touched
    bytes      = (W_dense + W_expert * experts(b)/E) * bytes_per_param + ctx * kv_bytes_per_token
    flops      = 2 * N_active * b + 4 * n_layers * n_q_heads * head_dim * ctx
    t_mem      = bytes / tp / (BW(m) * min(1, f / f_mlp)),   t_comp = flops / tp / (eta * F(f))
    t_iter     = t_fixed + (t_mem^4 + t_comp^4)^(1/4)
    a_c        = sm_act * flops / tp / t_iter / F(f) + stream_sm_activity * t_mem / t_iter
    a_m        = bytes / tp / t_iter / BW_peak

``a_c`` and ``a_m`` are the GPU power model's inputs (twin.gpu): achieved FLOP/s over the dense peak
at the clock and achieved bytes/s over the datasheet peak, both averaged over the iteration; its busy
fraction is ``(t_iter - t_fixed) / t_iter``, so the fixed time (launch, sampling) is spent at
``P_ctx(f)``: the launch-bound regime of small batches.

A dense model is the special case ``n_experts = 0``. Prefill of ``n`` new tokens uses the same
formulas with all experts of the batch and attention over ``n * (prior + n/2)`` pairs. The returned
tables are per GPU over every (SM clock, HBM state) of the SKU, so the firmware can pick a point.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from gpufield.power.twin.gpu import GpuModel

__all__ = ["ModelSpec", "EngineSpec", "CostModel"]

_P_NORM = 4.0  # soft-max exponent combining memory and compute time (power.md 6.2: p ~ 4-8)


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelSpec:
    """Architecture of the served model (from its model card; sources in ``sources``).

    Raises:
        ValueError: inconsistent parameter counts or expert routing.
    """

    name: str
    total_params: float
    active_params: float
    n_layers: int
    n_q_heads: int
    n_kv_heads: int
    head_dim: int
    n_experts: int = 0
    top_k: int = 0
    weight_bytes_per_param: float = 2.0
    kv_bytes_per_elem: float = 2.0
    fp8_compute: bool = False
    quantization: str = "bf16"
    sources: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not 0 < self.active_params <= self.total_params:
            raise ValueError(f"{self.name}: need 0 < active_params <= total_params")
        if self.n_experts and not 0 < self.top_k <= self.n_experts:
            raise ValueError(f"{self.name}: need 0 < top_k({self.top_k}) <= n_experts({self.n_experts})")

    @property
    def expert_params(self) -> float:
        """Parameters in routed experts, from ``total - dense = E/k * (active - dense)``."""
        if not self.n_experts:
            return 0.0
        frac = self.top_k / self.n_experts
        return (self.total_params - self.active_params) / (1.0 - frac)

    @property
    def dense_params(self) -> float:
        """Parameters every token uses (attention, embeddings, shared experts)."""
        return self.total_params - self.expert_params

    @property
    def kv_bytes_per_token(self) -> float:
        """KV-cache bytes per token over all layers: ``2 * n_layers * n_kv_heads * head_dim * bytes``."""
        return 2.0 * self.n_layers * self.n_kv_heads * self.head_dim * self.kv_bytes_per_elem

    def experts_touched(self, batch_tokens: np.ndarray | float) -> np.ndarray:
        """Expected distinct experts per layer for ``batch_tokens`` routed tokens: ``E(1-(1-k/E)^b)``."""
        b = np.asarray(batch_tokens, dtype=float)
        if not self.n_experts:
            return np.zeros_like(b)
        return self.n_experts * (1.0 - (1.0 - self.top_k / self.n_experts) ** b)

    def weight_bytes(self, batch_tokens: np.ndarray | float) -> np.ndarray:
        """Weight bytes streamed for one forward pass over ``batch_tokens`` tokens."""
        touched = self.experts_touched(batch_tokens)
        frac = touched / self.n_experts if self.n_experts else 0.0
        return (self.dense_params + self.expert_params * frac) * self.weight_bytes_per_param


@dataclass(frozen=True, kw_only=True, slots=True)
class EngineSpec:
    """Serving-engine constants of the twin ([RECON] unless the scenario names a source).

    Attributes:
        decode_fixed_s: per-iteration time not spent in weight/KV streaming (launch, sampling, TP
            all-reduce latency).
        prefill_fixed_s: per-batch fixed time of a prefill step.
        decode_compute_efficiency / prefill_compute_efficiency: fraction of tensor peak reached.
        prefill_sm_activity: SM activity of prefill kernels relative to a dense GEMM.
        mlp_clock_fraction: SM clock (fraction of max) below which HBM bandwidth can no longer be
            saturated (memory-level parallelism).
        kv_link_bytes_per_s: KV-transfer bandwidth between lanes; kv_transfer_overhead_s: per transfer.
        max_batched_tokens: prefill token budget per step; max_num_seqs: decode batch limit.
        prefix_block_tokens: prefix-cache block size (Mooncake ``hash_ids`` use 512).
        prefix_cache_blocks: prefix-cache capacity of the prefill lane, in blocks.
    """

    decode_fixed_s: float = 0.004
    prefill_fixed_s: float = 0.010
    decode_compute_efficiency: float = 0.35
    prefill_compute_efficiency: float = 0.55
    prefill_sm_activity: float = 0.85
    mlp_clock_fraction: float = 0.35
    kv_link_bytes_per_s: float = 2.0e11
    kv_transfer_overhead_s: float = 0.005
    max_batched_tokens: int = 16384
    max_num_seqs: int = 256
    prefix_block_tokens: int = 512
    prefix_cache_blocks: int = 200_000

    def __post_init__(self) -> None:
        for n in ("decode_compute_efficiency", "prefill_compute_efficiency", "prefill_sm_activity",
                  "mlp_clock_fraction"):
            if not 0 < getattr(self, n) <= 1:
                raise ValueError(f"EngineSpec.{n} must lie in (0, 1], got {getattr(self, n)}")
        if self.max_batched_tokens < 1 or self.max_num_seqs < 1:
            raise ValueError("EngineSpec: max_batched_tokens and max_num_seqs must be >= 1")


class CostModel:
    """Time and power tables of prefill steps and decode iterations on one lane.

    Args:
        gpu: SKU model; model: served model; engine: engine constants; tp: GPUs sharing one step.
    """

    def __init__(self, gpu: GpuModel, model: ModelSpec, engine: EngineSpec, tp: int) -> None:
        if tp < 1:
            raise ValueError(f"tp must be >= 1, got {tp}")
        self.gpu, self.model, self.engine, self.tp = gpu, model, engine, tp
        f = gpu.sm_clocks_mhz.astype(float)
        self._f = f[:, None]
        self._mem = np.arange(len(gpu.mem_clocks_mhz))[None, :]
        mlp = np.minimum(1.0, f / (engine.mlp_clock_fraction * gpu.sm_clock_max_mhz))[:, None]
        self._bw = gpu.bandwidth_bytes_per_s(self._mem) * mlp  # (n_f, n_m) bytes/s
        self._flops = gpu.flops_per_s(self._f, fp8=model.fp8_compute)  # (n_f, 1)
        self._peak_bw = gpu.hbm_bandwidth_bytes_per_s
        self._decode_cache: dict[tuple[int, int], tuple[np.ndarray, np.ndarray, np.ndarray]] = {}

    def _tables(self, bytes_, flops, eff, fixed_s, sm_act):
        t_mem = bytes_ / self.tp / self._bw
        t_comp = flops / self.tp / (eff * self._flops)
        core = (t_mem ** _P_NORM + t_comp ** _P_NORM) ** (1.0 / _P_NORM)
        t = fixed_s + core
        a_m = np.minimum(1.0, bytes_ / self.tp / t / self._peak_bw)
        # a_c: achieved FLOP/s over the dense peak at each clock (the GPU model's SM activity), scaled by
        # the kernels' activity relative to a dense GEMM; plus the (H200-fit: zero) streaming SM share
        u_c = flops / self.tp / t / self._flops
        a_c = np.minimum(1.0, sm_act * u_c + self.gpu.stream_sm_activity * t_mem / t)
        p = self.gpu.power_w(self._f, self._mem, a_c, a_m, busy=core / t)
        return t, p

    def decode(self, batch: int, ctx_tokens: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Iteration time (s), per-GPU power (W) and its negation, each shape ``(n_clocks, n_mem)``.

        Args:
            batch: sequences in the iteration (>= 1); ctx_tokens: their summed context length.
        """
        key = (int(batch), int(ctx_tokens) >> 11)  # 2048-token context buckets
        hit = self._decode_cache.get(key)
        if hit is None:
            m = self.model
            ctx = (key[1] + 0.5) * 2048.0
            bytes_ = float(m.weight_bytes(batch)) + ctx * m.kv_bytes_per_token
            flops = 2.0 * m.active_params * batch + 4.0 * m.n_layers * m.n_q_heads * m.head_dim * ctx
            t, p = self._tables(bytes_, flops, self.engine.decode_compute_efficiency,
                                self.engine.decode_fixed_s, 1.0)
            hit = (t, p, -p)
            self._decode_cache[key] = hit
        return hit

    def prefill(self, new_tokens: float, attn_pairs: float) -> tuple[np.ndarray, np.ndarray]:
        """Prefill-step time (s) and per-GPU power (W), each shape ``(n_clocks, n_mem)``.

        Args:
            new_tokens: tokens computed this step; attn_pairs: sum over requests of
                ``new * (prior + new/2)`` query-key pairs.
        """
        m = self.model
        bytes_ = float(m.weight_bytes(new_tokens))
        flops = 2.0 * m.active_params * new_tokens + 4.0 * m.n_layers * m.n_q_heads * m.head_dim * attn_pairs
        return self._tables(bytes_, flops, self.engine.prefill_compute_efficiency,
                            self.engine.prefill_fixed_s, self.engine.prefill_sm_activity)

    def kv_transfer_s(self, ctx_tokens: float) -> float:
        """KV handoff time from the prefill to the decode lane (s)."""
        return (self.engine.kv_transfer_overhead_s
                + ctx_tokens * self.model.kv_bytes_per_token / self.engine.kv_link_bytes_per_s)
