"""Discrete-event twin of one prefill/decode lane pair (vectorised event loop, no simpy needed).

The prefill lane (FIFO queue, chunked prefill up to ``max_batched_tokens`` per step, LRU prefix cache
over Mooncake-style block hashes) runs first and yields KV-handoff times; the decode lane (continuous
batching up to ``max_num_seqs`` and the KV capacity) consumes them. Lanes interact only through the
handoff, so simulating them in sequence is exact. Every ``control_period_s`` each lane's policy sees
:class:`~gpufield.power.types.LaneSignals` computed from the simulated requests and returns a
:class:`~gpufield.power.types.LaneSetting`, which the lane's :class:`~gpufield.power.twin.gpu.Firmware`
applies. Energy = sum over busy segments of P * dt * tp plus idle energy, up to the end of the run.

Definitions (reported by :class:`SimResult`): TTFT = arrival -> first token out of the decode lane;
ITL = gap between consecutive tokens of a request (one decode iteration); e2e = arrival -> last token;
tokens/J = output tokens / board energy of every GPU of both lanes.
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_left
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from gpufield.power.twin.gpu import Firmware
from gpufield.power.twin.load import Workload
from gpufield.power.twin.model import CostModel
from gpufield.power.types import Lane, LaneSetting, LaneSignals

__all__ = ["LanePair", "SimResult", "PrefillOutcome", "simulate", "simulate_prefill", "weighted_quantile",
           "prefix_new_tokens"]

PolicyFn = Callable[[Lane, LaneSignals], LaneSetting]
#: ``progress(sim_s, sim_total_s)``: simulated seconds done of the run's expected length
ProgressFn = Callable[[float, float], None]
FAST_S, SLOW_S = 30.0, 300.0


def weighted_quantile(values: np.ndarray, weights: np.ndarray, q: float) -> float:
    """Quantile ``q`` of ``values`` where value ``i`` occurs ``weights[i]`` times (NaN if empty).

    Uses the inverted CDF (the lowest value whose cumulative weight reaches ``q`` of the total),
    i.e. ``numpy.quantile(..., method="inverted_cdf")`` of the expanded sample.
    """
    if len(values) == 0 or float(np.sum(weights)) <= 0:
        return math.nan
    order = np.argsort(values, kind="stable")
    cw = np.cumsum(np.asarray(weights, float)[order])
    k = int(np.searchsorted(cw, q * cw[-1] - 1e-9))
    return float(np.asarray(values)[order][min(k, len(cw) - 1)])


@dataclass(frozen=True, kw_only=True, slots=True)
class LanePair:
    """A prefill lane and a decode lane: cost models, GPU counts and the control period.

    Raises:
        ValueError: GPU counts not a multiple of TP, or a non-positive period.
    """

    prefill: CostModel
    decode: CostModel
    prefill_gpus: int
    decode_gpus: int
    kv_capacity_tokens: int
    control_period_s: float = 5.0
    itl_jitter: float = 0.03

    def __post_init__(self) -> None:
        for n, g, c in (("prefill", self.prefill_gpus, self.prefill), ("decode", self.decode_gpus, self.decode)):
            if g < c.tp or g % c.tp:
                raise ValueError(f"{n}_gpus({g}) must be a positive multiple of tp({c.tp})")
        if self.decode_gpus != self.decode.tp:
            raise ValueError(f"the twin runs one decode instance: decode_gpus({self.decode_gpus})"
                             f" must equal decode tp({self.decode.tp})")
        if self.control_period_s <= 0 or self.kv_capacity_tokens < 1:
            raise ValueError("control_period_s and kv_capacity_tokens must be > 0")


@dataclass(slots=True)
class SimResult:
    """Outcome of one twin run (per-request arrays are float64 ``(n,)``, times in s).

    Attributes:
        arrival_s, handoff_s, first_token_s, finish_s, output_tokens: per request.
        it_end_s, it_dt_s, it_tokens: per decode iteration (end time, duration, ITL samples).
        prefill_energy_j / decode_energy_j: lane energy over ``[0, end_s]``.
        energy_windows_j: energy of both lanes per window of ``window_s`` (for bootstrap).
        settings: ``(t_s, lane, LaneSetting)`` every time a policy changed a lane.
        floor_violation_s: prefill busy time spent below the locked floor (cap won).
    """

    arrival_s: np.ndarray
    handoff_s: np.ndarray
    first_token_s: np.ndarray
    finish_s: np.ndarray
    output_tokens: np.ndarray
    it_end_s: np.ndarray
    it_dt_s: np.ndarray
    it_tokens: np.ndarray
    prefill_energy_j: float
    decode_energy_j: float
    end_s: float
    window_s: float
    energy_windows_j: np.ndarray
    settings: list[tuple[float, str, LaneSetting]] = field(default_factory=list)
    floor_violation_s: float = 0.0

    @property
    def energy_j(self) -> float:
        """Board energy of every GPU of both lanes (J)."""
        return self.prefill_energy_j + self.decode_energy_j

    @property
    def tokens_per_j(self) -> float:
        """Output tokens per joule of GPU board energy."""
        return float(self.output_tokens.sum()) / self.energy_j

    @property
    def ttft_s(self) -> np.ndarray:
        """Per-request TTFT (s)."""
        return self.first_token_s - self.arrival_s

    @property
    def e2e_s(self) -> np.ndarray:
        """Per-request end-to-end latency (s)."""
        return self.finish_s - self.arrival_s

    def itl_p99_windows(self, min_tokens: int = 200) -> np.ndarray:
        """ITL p99 (s) in each window of ``window_s`` with at least ``min_tokens`` ITL samples."""
        out = []
        edges = np.arange(0.0, self.end_s + self.window_s, self.window_s)
        for a, b in zip(edges[:-1], edges[1:], strict=True):
            i, j = np.searchsorted(self.it_end_s, [a, b])
            if self.it_tokens[i:j].sum() >= min_tokens:
                out.append(weighted_quantile(self.it_dt_s[i:j], self.it_tokens[i:j], 0.99))
        return np.array(out)

    def itl_p99_s(self) -> float:
        """ITL p99 over the whole run (s)."""
        return weighted_quantile(self.it_dt_s, self.it_tokens, 0.99)


class _Energy:
    """Accumulates a lane's energy overall and per window."""

    def __init__(self, window_s: float) -> None:
        self.total_j, self.window_s, self.bins = 0.0, window_s, np.zeros(64)

    def add(self, t0: float, dt: float, energy_j: float) -> None:
        self.total_j += energy_j
        k = int((t0 + dt / 2) // self.window_s)
        if k >= len(self.bins):
            self.bins = np.concatenate([self.bins, np.zeros(k + 64 - len(self.bins))])
        self.bins[k] += energy_j


def _copy_fw(fw: Firmware) -> Firmware:
    c = Firmware.__new__(Firmware)
    c.__dict__.update(fw.__dict__)
    return c


def _tick_signals(now, ends, vals, weights, ttft_ends, ttft_vals, queue, kv) -> LaneSignals:
    def wq(e, v, w, span):
        i = bisect_left(e, now - span)
        if i >= len(e):
            return math.nan
        return weighted_quantile(np.asarray(v[i:]), np.asarray(w[i:]) if w is not None else np.ones(len(e) - i), 0.99)
    return LaneSignals(now_s=now, itl_p99_fast_s=wq(ends, vals, weights, FAST_S) if ends is not None else math.nan,
                       itl_p99_slow_s=wq(ends, vals, weights, SLOW_S) if ends is not None else math.nan,
                       ttft_p99_fast_s=wq(ttft_ends, ttft_vals, None, FAST_S),
                       ttft_p99_slow_s=wq(ttft_ends, ttft_vals, None, SLOW_S),
                       queue_depth=queue, kv_usage=kv)


def prefix_new_tokens(w: Workload, eng) -> np.ndarray:
    """Tokens each request must prefill after LRU prefix-cache hits over its ``hash_ids`` blocks.

    The cache is visited in arrival order with ``eng.prefix_cache_blocks`` capacity; a request's hit
    is the longest run of leading blocks already cached (at least one token is always computed).
    """
    cache: OrderedDict[int, None] = OrderedDict()
    new_tok = np.empty(len(w), dtype=np.int64)
    for r in range(len(w)):
        hits = 0
        for h in w.hash_ids[r]:
            if h not in cache:
                break
            hits += 1
        for h in w.hash_ids[r]:
            cache[h] = None
            cache.move_to_end(h)
        while len(cache) > eng.prefix_cache_blocks:
            cache.popitem(last=False)
        new_tok[r] = max(1, int(w.input_tokens[r]) - hits * eng.prefix_block_tokens)
    return new_tok


def _prefill_lane(pair: LanePair, w: Workload, policy: PolicyFn, energy: _Energy, log,
                  progress: ProgressFn | None = None):
    cost, eng = pair.prefill, pair.prefill.engine
    n_inst = pair.prefill_gpus // cost.tp
    fws = [Firmware(cost.gpu) for _ in range(n_inst)]
    free_at = [0.0] * n_inst
    n = len(w)
    handoff = np.full(n, math.nan)
    new_tok = prefix_new_tokens(w, eng)
    head, head_left = 0, int(new_tok[0]) if n else 0
    static = getattr(policy, "static", False)
    next_tick, setting = 0.0, LaneSetting()
    ttft_end: list[float] = []
    ttft_val: list[float] = []
    floor_viol = 0.0
    total = float(w.arrival_s[-1]) if n else 0.0
    while head < n:
        k = min(range(n_inst), key=free_at.__getitem__)
        t = max(free_at[k], float(w.arrival_s[head]))
        if progress is not None and next_tick <= t:
            progress(min(next_tick, total), total)
        while next_tick <= t:  # control ticks up to now
            q = int(np.searchsorted(w.arrival_s, next_tick, side="right")) - head
            sig = LaneSignals(now_s=next_tick) if static else \
                _tick_signals(next_tick, None, None, None, ttft_end, ttft_val, max(q, 0), 0.0)
            new = policy(Lane.PREFILL, sig)
            if new != setting:
                setting = new
                log.append((next_tick, Lane.PREFILL.value, new))
                for fw in fws:
                    fw.configure(new.power_limit_w, new.clock_window_mhz)
            next_tick += pair.control_period_s
        gap = t - free_at[k]
        if gap > 0:
            energy.add(free_at[k], gap, fws[k].idle(gap) * cost.tp)
        budget, tokens, pairs, done = eng.max_batched_tokens, 0, 0.0, []
        while head < n and w.arrival_s[head] <= t and budget > 0:
            chunk = min(head_left, budget)
            prior = int(w.input_tokens[head]) - head_left
            tokens += chunk
            pairs += chunk * (prior + chunk / 2.0)
            budget -= chunk
            head_left -= chunk
            if head_left == 0:
                done.append(head)
                head += 1
                head_left = int(new_tok[head]) if head < n else 0
        t_tab, p_tab = cost.prefill(tokens, pairs)
        op = fws[k].choose(p_tab, float(t_tab[fws[k]._hi_index, 0]))
        dt = float(t_tab[op.clock_index, op.mem_state])
        energy.add(t, dt, op.power_w * dt * cost.tp)
        if op.floor_violated:
            floor_viol += dt
        free_at[k] = t + dt
        for r in done:
            handoff[r] = free_at[k] + cost.kv_transfer_s(float(w.input_tokens[r]))
            ttft_end.append(free_at[k])
            ttft_val.append(handoff[r] - float(w.arrival_s[r]))
    if progress is not None:
        progress(total, total)
    return handoff, floor_viol, (fws, free_at)


@dataclass(slots=True)
class PrefillOutcome:
    """What the prefill lane produced: KV-handoff time per request and the lane's energy record."""

    handoff_s: np.ndarray
    floor_violation_s: float
    energy: _Energy
    firmwares: list
    free_at_s: list
    settings: list


def simulate_prefill(pair: LanePair, w: Workload, policy: PolicyFn, *, window_s: float = 30.0,
                     progress: ProgressFn | None = None) -> PrefillOutcome:
    """Run only the prefill lane (its result does not depend on the decode lane).

    ``progress(sim_s, sim_total_s)``, if given, is called at control ticks with the simulated time
    reached (capped at the last arrival, ``sim_total_s``) and once with ``(sim_total_s, sim_total_s)``
    at the end; it only observes the run.
    """
    energy, log = _Energy(window_s), []
    handoff, floor_viol, (fws, free) = _prefill_lane(pair, w, policy, energy, log, progress)
    return PrefillOutcome(handoff, floor_viol, energy, fws, free, log)


def simulate(pair: LanePair, w: Workload, policy: PolicyFn, *, horizon_s: float | None = None,
             window_s: float = 30.0, seed: int = 0, prefill: PrefillOutcome | None = None,
             progress: ProgressFn | None = None) -> SimResult:
    """Run the lane pair on a workload under a policy.

    Args:
        pair: lanes and cost models. w: the load (open loop, or closed loop for calibration).
        policy: ``policy(lane, signals) -> LaneSetting``, called every ``pair.control_period_s``.
        horizon_s: stop admitting at this time (closed loop) / energy is counted until all requests
            finish or this time, whichever is later.
        window_s: window for ITL p99 attainment and the energy bootstrap.
        seed: seed of the ITL jitter.
        prefill: a prefill-lane outcome to reuse (from :func:`simulate_prefill` on the same ``w``);
            its policy then does not matter for the prefill lane.
        progress: optional ``progress(sim_s, sim_total_s)`` observer (no effect on the result), called
            at the decode lane's control ticks with the simulated time reached, capped at
            ``sim_total_s`` (``horizon_s`` for a closed loop, else the last arrival), and once with
            ``(sim_total_s, sim_total_s)`` at the end. A prefill lane simulated here is not reported.

    Returns:
        A :class:`SimResult`.
    """
    rng = np.random.default_rng(seed)
    e_dec = _Energy(window_s)
    n = len(w)
    closed = w.closed_concurrency
    if closed:
        pre = PrefillOutcome(np.zeros(n), 0.0, _Energy(window_s), [], [], [])
    else:
        pre = prefill if prefill is not None else simulate_prefill(pair, w, policy, window_s=window_s)
    e_pre = _Energy(window_s)
    e_pre.total_j, e_pre.bins = pre.energy.total_j, pre.energy.bins.copy()
    handoff, floor_viol = pre.handoff_s.copy(), pre.floor_violation_s
    pre_fws = [_copy_fw(f) for f in pre.firmwares]
    pre_free = list(pre.free_at_s)
    log = list(pre.settings)
    pre_end = max(pre_free, default=0.0)
    cost = pair.decode
    fw = Firmware(cost.gpu)
    order = np.argsort(handoff, kind="stable")
    first, finish = np.full(n, math.nan), np.full(n, math.nan)
    ends: list[float] = []
    dts: list[float] = []
    ntok: list[int] = []
    ttft_end: list[float] = []
    ttft_val: list[float] = []
    fin_heap: list[tuple[int, int]] = []
    running, ctx_sum, kv_used, it_idx, nxt, t = 0, 0.0, 0, 0, 0, 0.0
    next_tick, setting = 0.0, LaneSetting()
    stop = horizon_s if horizon_s is not None else math.inf
    static = getattr(policy, "static", False)  # static policies need no signals
    jitter = np.exp(rng.normal(0.0, pair.itl_jitter, 1 << 16)) if pair.itl_jitter else np.ones(1 << 16)
    total = (horizon_s if closed and horizon_s is not None else
             max(float(w.arrival_s[-1]) if n else 0.0, horizon_s or 0.0))
    while True:
        if progress is not None and next_tick <= t:
            progress(min(next_tick, total), total)
        while next_tick <= t:
            waiting = int(np.searchsorted(handoff[order], next_tick, side="right")) - nxt
            sig = LaneSignals(now_s=next_tick) if static else \
                _tick_signals(next_tick, ends, dts, ntok, ttft_end, ttft_val, max(waiting, 0),
                              kv_used / pair.kv_capacity_tokens)
            new = policy(Lane.DECODE, sig)
            if new != setting:
                setting = new
                log.append((next_tick, Lane.DECODE.value, new))
                fw.configure(new.power_limit_w, new.clock_window_mhz)
            next_tick += pair.control_period_s
        admitted = []
        while nxt < n and handoff[order[nxt]] <= t and running < cost.engine.max_num_seqs and t < stop:
            r = int(order[nxt])
            need = int(w.input_tokens[r] + w.output_tokens[r])
            if kv_used + need > pair.kv_capacity_tokens and running:
                break
            admitted.append(r)
            kv_used += need
            ctx_sum += float(w.input_tokens[r])
            heapq.heappush(fin_heap, (it_idx + int(w.output_tokens[r]) - 1, r))
            running += 1
            nxt += 1
        if running == 0:
            if nxt >= n or t >= stop:
                break
            t_next = min(float(handoff[order[nxt]]), next_tick)
            e_dec.add(t, t_next - t, fw.idle(t_next - t) * pair.decode_gpus)
            t = t_next
            continue
        t_tab, p_tab, neg_tab = cost.decode(running, ctx_sum)
        op = fw.choose(p_tab, float(t_tab[fw._hi_index, 0]), neg_tab)
        dt = float(t_tab[op.clock_index, op.mem_state]) * float(jitter[it_idx & 0xFFFF])
        e_dec.add(t, dt, op.power_w * dt * pair.decode_gpus)
        t += dt
        for r in admitted:
            first[r] = t
            ttft_end.append(t)
            ttft_val.append(t - float(w.arrival_s[r]))
        ends.append(t)
        dts.append(dt)
        ntok.append(running - len(admitted))
        ctx_sum += running
        while fin_heap and fin_heap[0][0] <= it_idx:
            _, r = heapq.heappop(fin_heap)
            finish[r] = t
            running -= 1
            kv_used -= int(w.input_tokens[r] + w.output_tokens[r])
            ctx_sum -= float(w.input_tokens[r] + w.output_tokens[r])
            if closed and t < stop:  # closed loop: a finished sequence is replaced at once
                heapq.heappush(fin_heap, (it_idx + int(w.output_tokens[r]), r))
                running += 1
                kv_used += int(w.input_tokens[r] + w.output_tokens[r])
                ctx_sum += float(w.input_tokens[r])
        it_idx += 1
        if closed and t >= stop:
            break
    end = max(t, pre_end, horizon_s or 0.0)
    if progress is not None:
        progress(total, total)
    if end > t:
        e_dec.add(t, end - t, fw.idle(end - t) * pair.decode_gpus)
    # prefill lane idles until the end of the run as well
    for fw_k, free_k in zip(pre_fws, pre_free, strict=True):
        if end > free_k:
            e_pre.add(free_k, end - free_k, fw_k.idle(end - free_k) * pair.prefill.tp)
    nb = max(len(e_pre.bins), len(e_dec.bins))
    windows = np.zeros(nb)
    windows[:len(e_pre.bins)] += e_pre.bins
    windows[:len(e_dec.bins)] += e_dec.bins
    done = ~np.isnan(finish)
    return SimResult(arrival_s=w.arrival_s[done].astype(float), handoff_s=handoff[done],
                     first_token_s=first[done], finish_s=finish[done],
                     output_tokens=w.output_tokens[done].astype(float) if not closed else
                     np.array([float(sum(ntok) + n)]),
                     it_end_s=np.array(ends), it_dt_s=np.array(dts), it_tokens=np.array(ntok, float),
                     prefill_energy_j=e_pre.total_j, decode_energy_j=e_dec.total_j, end_s=end,
                     window_s=window_s, energy_windows_j=windows[:int(math.ceil(end / window_s)) + 1],
                     settings=log, floor_violation_s=floor_viol)
