"""Load for the twin: Poisson requests, synthetic agentic sessions, Mooncake JSONL trace replay.

Every generator returns a :class:`Workload`: requests sorted by arrival, each with its prompt
length, output length and prefix-block hashes (Mooncake's ``hash_ids``: one id per 512-token block,
equal ids = equal content), from which the prefill lane's prefix cache derives cache hits.

Mooncake format (https://github.com/kvcache-ai/Mooncake, ``FAST25-release/traces``)::

    {"timestamp": 27482, "input_length": 6955, "output_length": 52, "hash_ids": [46, 47, ...]}

with ``timestamp`` in milliseconds. Agentic sessions are replayed open-loop, as traces are.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gpufield.errors import InputError

__all__ = ["Workload", "poisson", "agentic_sessions", "read_mooncake", "fixed_concurrency"]


@dataclass(frozen=True, slots=True)
class Workload:
    """Requests of one run, sorted by arrival.

    Attributes:
        arrival_s: float64 ``(n,)`` arrival times (s, from 0).
        input_tokens / output_tokens: int64 ``(n,)``.
        hash_ids: per request, the tuple of prefix-block ids (may be empty: no reuse).
        closed_concurrency: if > 0, a closed loop that keeps this many requests in decode
            (calibration load); arrivals are then ignored.
    """

    arrival_s: np.ndarray
    input_tokens: np.ndarray
    output_tokens: np.ndarray
    hash_ids: tuple[tuple[int, ...], ...]
    closed_concurrency: int = 0

    def __post_init__(self) -> None:
        n = len(self.arrival_s)
        if not (len(self.input_tokens) == len(self.output_tokens) == len(self.hash_ids) == n):
            raise ValueError("Workload arrays must have equal length")
        if n and np.any(np.diff(self.arrival_s) < 0):
            raise ValueError("Workload arrivals must be sorted")

    def __len__(self) -> int:
        return len(self.arrival_s)

    def window(self, start_s: float, end_s: float) -> Workload:
        """The requests arriving in ``[start_s, end_s)``, re-based to start at 0."""
        idx = np.nonzero((self.arrival_s >= start_s) & (self.arrival_s < end_s))[0]
        return Workload(self.arrival_s[idx] - start_s, self.input_tokens[idx],
                        self.output_tokens[idx], tuple(self.hash_ids[i] for i in idx))


def _lognormal(rng: np.random.Generator, mean: float, sigma: float, size=None) -> np.ndarray:
    return rng.lognormal(np.log(mean) - sigma * sigma / 2.0, sigma, size)


def poisson(*, rate_per_s: float, duration_s: float, input_mean: int, output_mean: int,
            seed: int, sigma: float = 0.6) -> Workload:
    """Independent requests with exponential gaps and log-normal lengths (no prefix reuse)."""
    if rate_per_s <= 0 or duration_s <= 0:
        raise ValueError("poisson: rate_per_s and duration_s must be > 0")
    rng = np.random.default_rng(seed)
    n = max(1, int(rng.poisson(rate_per_s * duration_s)))
    t = np.sort(rng.uniform(0.0, duration_s, n))
    inp = np.maximum(16, _lognormal(rng, input_mean, sigma, n)).astype(np.int64)
    out = np.maximum(4, _lognormal(rng, output_mean, sigma, n)).astype(np.int64)
    return Workload(t, inp, out, tuple(() for _ in range(n)))


def agentic_sessions(*, session_rate_per_s: float, duration_s: float, turns_mean: float,
                     system_prompt_tokens: int, first_input_mean: int, tool_output_mean: int,
                     output_mean: int, tool_gap_mean_s: float, itl_guess_s: float, seed: int,
                     n_agents: int = 4, block_tokens: int = 512) -> Workload:
    """Multi-turn agent sessions: shared system prompt, growing context, tool-call gaps.

    Turn ``t+1`` of a session arrives ``output_tokens * itl_guess_s + tool_gap`` after turn ``t``
    (open loop) and its prompt is the whole previous context plus the tool output, so all earlier
    blocks are prefix-cache hits. Sessions of the same agent share the system-prompt blocks.
    """
    if session_rate_per_s <= 0 or duration_s <= 0 or turns_mean < 1:
        raise ValueError("agentic_sessions: rates/duration must be > 0 and turns_mean >= 1")
    rng = np.random.default_rng(seed)
    n_sess = max(1, int(rng.poisson(session_rate_per_s * duration_s)))
    starts = np.sort(rng.uniform(0.0, duration_s, n_sess))
    next_id = 1_000_000
    sys_blocks = {a: tuple(range(a * 10_000, a * 10_000 + system_prompt_tokens // block_tokens))
                  for a in range(n_agents)}
    rows: list[tuple[float, int, int, tuple[int, ...]]] = []
    for s0 in starts:
        agent = int(rng.integers(n_agents))
        turns = int(rng.geometric(1.0 / turns_mean))
        ctx = system_prompt_tokens + int(max(64, _lognormal(rng, first_input_mean, 0.5)))
        blocks = list(sys_blocks[agent])
        t = float(s0)
        for _ in range(turns):
            if t >= duration_s:
                break
            need = ctx // block_tokens - len(blocks)
            blocks.extend(range(next_id, next_id + max(0, need)))
            next_id += max(0, need)
            out = int(max(4, _lognormal(rng, output_mean, 0.7)))
            rows.append((t, ctx, out, tuple(blocks)))
            t += out * itl_guess_s + float(_lognormal(rng, tool_gap_mean_s, 0.8))
            ctx += out + int(max(16, _lognormal(rng, tool_output_mean, 0.8)))
    rows.sort(key=lambda r: r[0])
    return Workload(np.array([r[0] for r in rows]), np.array([r[1] for r in rows], dtype=np.int64),
                    np.array([r[2] for r in rows], dtype=np.int64), tuple(r[3] for r in rows))


def read_mooncake(path: str | Path, *, time_scale: float = 1.0, max_requests: int | None = None) -> Workload:
    """Read a Mooncake-format JSONL trace (``timestamp`` ms, ``input_length``, ``output_length``, ``hash_ids``).

    Args:
        path: the ``.jsonl`` file.
        time_scale: multiply inter-arrival times (0.5 doubles the rate).
        max_requests: keep only the first requests.

    Raises:
        InputError: unreadable line or missing/invalid field (file and line named).
    """
    p = Path(path)
    rows = []
    try:
        lines = p.read_text().splitlines()
    except OSError as e:
        raise InputError(f"cannot read Mooncake trace: {e}", path=str(p)) from e
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            d = json.loads(line)
            ts, il, ol = float(d["timestamp"]), int(d["input_length"]), int(d["output_length"])
            h = tuple(int(x) for x in d.get("hash_ids", ()))
        except (ValueError, KeyError, TypeError) as e:
            raise InputError(f"expected a JSON object with timestamp (ms), input_length, output_length"
                             f" and hash_ids, got {line[:80]!r} ({type(e).__name__}: {e})",
                             path=str(p), line=i) from e
        if il < 1 or ol < 1 or ts < 0:
            raise InputError("input_length/output_length must be >= 1 and timestamp >= 0",
                             path=str(p), line=i)
        rows.append((ts / 1000.0, il, ol, h))
        if max_requests and len(rows) >= max_requests:
            break
    if not rows:
        raise InputError("trace has no requests", path=str(p))
    rows.sort(key=lambda r: r[0])
    t = np.array([r[0] for r in rows])
    t = (t - t[0]) * time_scale
    return Workload(t, np.array([r[1] for r in rows], dtype=np.int64),
                    np.array([r[2] for r in rows], dtype=np.int64), tuple(r[3] for r in rows))


def fixed_concurrency(*, concurrency: int, context_tokens: int, output_tokens: int, n: int) -> Workload:
    """Closed-loop calibration load: ``concurrency`` sequences always decoding at ``context_tokens``."""
    if concurrency < 1 or n < concurrency:
        raise ValueError("fixed_concurrency: need 1 <= concurrency <= n")
    return Workload(np.zeros(n), np.full(n, context_tokens, dtype=np.int64),
                    np.full(n, output_tokens, dtype=np.int64), tuple(() for _ in range(n)),
                    closed_concurrency=concurrency)
