"""Calibration against a real serving engine: a fixed-concurrency load sweep gated on the engine's own histograms.

:func:`calibrate_engine` drives an OpenAI-compatible endpoint (``/v1/completions`` or
``/v1/chat/completions``, ``stream: true``) with an async :mod:`httpx` client at each concurrency of
:attr:`EngineSweepConfig.concurrency`, for every lane *step* (a :class:`~gpufield.power.types.LaneSetting`):

1. **Apply the step** to the lane's GPUs, only where writing is allowed (an actuator whose
   ``may_write`` is true for every GPU of the lane); then wait ``settle_s``. The default sweep has
   one step, ``as-is``: nothing is written, the GPUs run whatever they run (shadow calibration).
2. **Per concurrency** ``c``: scrape every metrics URL (start), read the GPUs' energy counters
   (when an actuator is given), run ``c`` workers that each send one streaming request after the
   other until ``duration_s`` has passed (no new request after the deadline; every request started
   finishes), scrape again (end), read the counters again.
3. **Measure.** Client side, per request: TTFT = first content event - request sent; ITL = gaps
   between consecutive content events (one event = one token, as vLLM and SGLang stream). Engine
   side: the bucket-count deltas of the adapter's TTFT and ITL histograms between the two scrapes
   (:func:`gpufield.telemetry.histogram.histogram_delta`; PromQL ``histogram_quantile`` p99), and
   their exact means (``_sum`` / ``_count`` deltas). Because the scrapes bracket whole requests, the
   ITL count delta equals the client's gap count when the engine serves only this load.
4. **Gate** each (step, concurrency) on the engine's own p99s: ITL p99 <= (1 - h) x ITL SLO and
   TTFT p99 <= (1 - h) x TTFT SLO, no failed request, histograms present and non-empty. A missing
   histogram fails the gate (missing is missing; it is never replaced by the client's numbers).
5. **Choose** the step with the lowest power limit (the vendor default counts as the highest) that
   passes at every concurrency; if none does, the vendor default with ``gate_passed = False``.

Intervals: the client-side p99s and means come with a percentile bootstrap interval (resampling
*requests*, as the token gaps of one request are not independent; ``numpy.random.default_rng(seed)``,
``n_boot`` resamples, 95 %).

:func:`engine_profile` turns the result into a :class:`~gpufield.power.profiles.Profile` (evidence:
every step's numbers), written with :func:`~gpufield.power.profiles.save_profile` (a unique temp file
beside the target, then a rename; special files and links refused).
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from gpufield.errors import ActuationError, TelemetryError
from gpufield.power.engines import ENGINES, lane_histogram, merge_families
from gpufield.power.types import Lane, LaneSetting
from gpufield.telemetry.histogram import HistogramSeries, histogram_delta, histogram_quantile
from gpufield.telemetry.prometheus import parse_text

__all__ = ["EngineSweepConfig", "RequestSample", "StepResult", "EngineCalibration", "calibrate_engine",
           "engine_profile", "bootstrap_ci"]

AS_IS = LaneSetting(label="as-is")


@dataclass(frozen=True, kw_only=True, slots=True)
class EngineSweepConfig:
    """What :func:`calibrate_engine` drives and how it gates.

    Attributes:
        engine_url: the server's base URL (``http://host:port``; a trailing ``/v1`` is accepted).
        metrics_urls: ``/metrics`` URLs merged for the engine histograms (default ``<engine_url>/metrics``).
        engine: adapter key of :data:`gpufield.power.engines.ENGINES` (histogram names).
        lane: the lane's role. gpus: its GPU UUIDs (energy counters, and writes where allowed).
        api: ``"completions"`` or ``"chat"``. model: the model id (None: the first of ``/v1/models``).
        prompt / max_tokens: each request's prompt and ``max_tokens``.
        concurrency: fixed concurrencies, e.g. ``(1, 4, 16)``. duration_s: load time per concurrency (s).
        settle_s: wait after applying a step (s). steps: the lane settings to sweep (default: as-is only).
        itl_p99_slo_s / ttft_p99_slo_s: SLOs (s). headroom: h of the gate (fraction of the SLO kept free).
        request_timeout_s: per-request read timeout (s). warmup_requests: untimed requests sent once
            before the first window (connection and first-call costs stay out of the numbers).
        n_boot / seed / ci: the bootstrap.

    Raises:
        ValueError: an empty or non-positive concurrency, non-positive times or SLOs, h outside [0, 1),
            an unknown engine or API.
    """

    engine_url: str
    metrics_urls: tuple[str, ...] = ()
    engine: str = "vllm"
    lane: Lane = Lane.DECODE
    gpus: tuple[str, ...] = ()
    api: str = "completions"
    model: str | None = None
    prompt: str = "w1 w2 w3 w4"
    max_tokens: int = 64
    concurrency: tuple[int, ...] = (1, 4, 16)
    duration_s: float = 60.0
    settle_s: float = 15.0
    steps: tuple[LaneSetting, ...] = (AS_IS,)
    itl_p99_slo_s: float = 0.05
    ttft_p99_slo_s: float = 2.0
    headroom: float = 0.10
    request_timeout_s: float = 60.0
    warmup_requests: int = 1
    n_boot: int = 1000
    seed: int = 0
    ci: float = 0.95

    def __post_init__(self) -> None:
        if not self.engine_url.startswith(("http://", "https://")):
            raise ValueError(f"engine URL must start with http:// or https://, got {self.engine_url!r}")
        if self.engine not in ENGINES:
            raise ValueError(f"engine must be one of {sorted(ENGINES)}, got {self.engine!r}")
        if self.api not in ("completions", "chat"):
            raise ValueError(f"api must be 'completions' or 'chat', got {self.api!r}")
        if not self.concurrency or any(not isinstance(c, int) or c < 1 for c in self.concurrency):
            raise ValueError(f"concurrency must be integers >= 1, got {self.concurrency!r}")
        for name in ("duration_s", "itl_p99_slo_s", "ttft_p99_slo_s", "request_timeout_s"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and v > 0 and math.isfinite(v)):
                raise ValueError(f"{name} must be a positive number, got {v!r}")
        if not (self.settle_s >= 0 and math.isfinite(self.settle_s)):
            raise ValueError(f"settle_s must be >= 0, got {self.settle_s!r}")
        if not 0 <= self.headroom < 1:
            raise ValueError(f"headroom must be in [0, 1), got {self.headroom!r}")
        if self.max_tokens < 1 or self.n_boot < 1 or self.warmup_requests < 0 or not 0 < self.ci < 1:
            raise ValueError("max_tokens and n_boot must be >= 1 and ci in (0, 1)")
        if not self.steps:
            raise ValueError("steps must hold at least one lane setting")

    @property
    def base_url(self) -> str:
        """``engine_url`` without a trailing ``/`` or ``/v1``."""
        u = self.engine_url.rstrip("/")
        return u[:-3] if u.endswith("/v1") else u

    @property
    def scrape_urls(self) -> tuple[str, ...]:
        """The metrics URLs (default ``<base>/metrics``)."""
        return self.metrics_urls or (self.base_url + "/metrics",)


@dataclass(frozen=True, kw_only=True, slots=True)
class RequestSample:
    """One streamed request as the client saw it (monotonic s).

    Attributes:
        t_sent_s: when it was sent. ttft_s: first content event - sent (NaN when none arrived).
        itl_s: gaps between consecutive content events (s), ``tokens - 1`` of them.
        tokens: content events received. error: empty, or what went wrong.
    """

    t_sent_s: float
    ttft_s: float
    itl_s: tuple[float, ...]
    tokens: int
    error: str = ""


@dataclass(frozen=True, kw_only=True, slots=True)
class StepResult:
    """One (step, concurrency) window.

    Attributes:
        setting: the lane setting in force (``as-is``: nothing written). concurrency: workers.
        wall_s: window length (s). requests / errors / tokens: counts. tokens_per_s: output rate.
        client: client-side statistics (s): ``ttft_p50``, ``ttft_p99``, ``itl_p50``, ``itl_p99``,
            ``itl_mean``, each p99/mean with ``*_ci`` ``[lo, hi]`` from the bootstrap.
        engine: the engine's histograms over the window: ``itl_p99``, ``ttft_p99`` (bucket estimates),
            ``itl_mean`` / ``ttft_mean`` (sum/count deltas), ``itl_count`` / ``ttft_count``; None values
            when the histogram is missing.
        energy_j / power_w: GPU energy over the load and its mean power, summed over the lane's GPUs, from
            energy-counter reads right before and after the load (NaN without an actuator).
        tokens_per_j: ``tokens / energy_j`` (NaN without energy).
        gate_passed / gate_reasons: the gate (module docstring) and why it failed.
    """

    setting: LaneSetting
    concurrency: int
    wall_s: float
    requests: int
    errors: int
    tokens: int
    tokens_per_s: float
    client: dict[str, Any]
    engine: dict[str, Any]
    energy_j: float
    power_w: float
    tokens_per_j: float
    gate_passed: bool
    gate_reasons: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True, slots=True)
class EngineCalibration:
    """Result of :func:`calibrate_engine`.

    Attributes:
        config: the sweep. model: the model id served. results: every (step, concurrency) window in
        order. chosen: the calibrated setting. gate_passed: whether ``chosen`` passed everywhere.
        wrote: whether any GPU setting was written (and restored). gpu_name / driver: from NVML, or "".
    """

    config: EngineSweepConfig
    model: str
    results: tuple[StepResult, ...]
    chosen: LaneSetting
    gate_passed: bool
    wrote: bool
    gpu_name: str = ""
    driver: str = ""
    engine_version: str = ""
    notes: tuple[str, ...] = field(default_factory=tuple)


def bootstrap_ci(groups: Sequence[Sequence[float]], q: float | None, *, n_boot: int = 1000, seed: int = 0,
                 ci: float = 0.95) -> tuple[float, float, float]:
    """Point estimate and percentile bootstrap interval of a statistic of the pooled values of ``groups``.

    Groups (requests) are resampled with replacement; each resample pools its groups' values. The
    statistic is the ``q``-quantile (``numpy.quantile``'s default linear method) or, with ``q=None``,
    the mean. Resamples are evaluated as multiplicities of the sorted pooled values (exactly what
    ``numpy.quantile`` of the concatenated resample gives, without building it).

    Args:
        groups: per request its values (s). q: quantile in [0, 1] or None for the mean.
        n_boot / seed / ci: resamples, ``numpy.random.default_rng`` seed, interval coverage.

    Returns:
        ``(estimate, lo, hi)``; all NaN when there are no values.
    """
    arrs = [np.asarray(g, dtype=np.float64) for g in groups if len(g)]
    if not arrs:
        return math.nan, math.nan, math.nan
    pooled = np.concatenate(arrs)
    owner = np.repeat(np.arange(len(arrs)), [len(x) for x in arrs])
    est = float(np.mean(pooled) if q is None else np.quantile(pooled, q))
    rng = np.random.default_rng(seed)
    n = len(arrs)
    idx = rng.integers(0, n, (n_boot, n))
    mult = np.zeros((n_boot, n))
    np.add.at(mult, (np.repeat(np.arange(n_boot), n), idx.ravel()), 1.0)  # (B, n) times each group drawn
    if q is None:
        sums = np.array([x.sum() for x in arrs])
        lens = np.array([len(x) for x in arrs], dtype=np.float64)
        boots = (mult @ sums) / (mult @ lens)
    else:
        order = np.argsort(pooled, kind="stable")
        xs = pooled[order]
        cum = np.cumsum(mult[:, owner[order]], axis=1)  # (B, N): copies of the sorted values up to each
        m = cum[:, -1]
        h = q * (m - 1.0)
        k0 = np.floor(h)
        k1 = np.minimum(k0 + 1.0, m - 1.0)
        j0 = (cum <= k0[:, None]).sum(axis=1)  # the sorted value holding position k0 of the resample
        j1 = (cum <= k1[:, None]).sum(axis=1)
        boots = xs[j0] + (h - k0) * (xs[j1] - xs[j0])
    a = (1.0 - ci) / 2.0
    lo, hi = np.quantile(boots, [a, 1.0 - a])
    return est, float(lo), float(hi)


def _client_stats(samples: Sequence[RequestSample], cfg: EngineSweepConfig) -> dict[str, Any]:
    ok = [s for s in samples if not s.error]
    ttft = [[s.ttft_s] for s in ok if math.isfinite(s.ttft_s)]
    itl = [s.itl_s for s in ok]
    kw = dict(n_boot=cfg.n_boot, seed=cfg.seed, ci=cfg.ci)
    out: dict[str, Any] = {}
    for name, groups in (("ttft", ttft), ("itl", itl)):
        est, lo, hi = bootstrap_ci(groups, 0.99, **kw)
        out[f"{name}_p99"], out[f"{name}_p99_ci"] = est, [lo, hi]
        out[f"{name}_p50"] = bootstrap_ci(groups, 0.5, n_boot=1)[0]
        est, lo, hi = bootstrap_ci(groups, None, **kw)
        out[f"{name}_mean"], out[f"{name}_mean_ci"] = est, [lo, hi]
    out["itl_count"] = sum(len(g) for g in itl)
    return out


def _engine_stats(a: dict[str, HistogramSeries | None], b: dict[str, HistogramSeries | None]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k in ("itl", "ttft"):
        ha, hb = a.get(k), b.get(k)
        if hb is None:
            out.update({f"{k}_p99": None, f"{k}_mean": None, f"{k}_count": None})
            continue
        d = histogram_delta(ha, hb) if ha is not None else hb
        out[f"{k}_p99"] = histogram_quantile(0.99, d) if d.count > 0 else math.nan
        out[f"{k}_mean"] = d.sum / d.count if d.count > 0 else math.nan
        out[f"{k}_count"] = d.count
    return out


def _gate(cfg: EngineSweepConfig, engine: dict[str, Any], errors: int, names: dict[str, str]) -> tuple[str, ...]:
    why = []
    if errors:
        why.append(f"{errors} request(s) failed")
    for k, slo in (("itl", cfg.itl_p99_slo_s), ("ttft", cfg.ttft_p99_slo_s)):
        p = engine.get(f"{k}_p99")
        lim = (1.0 - cfg.headroom) * slo
        if p is None:
            why.append(f"engine histogram {names[k]} not found at {', '.join(cfg.scrape_urls)}")
        elif not math.isfinite(p):
            why.append(f"engine histogram {names[k]} has no observations in the window")
        elif p > lim:
            why.append(f"engine {k.upper()} p99 {p * 1e3:.1f} ms > (1 - h) x SLO = {lim * 1e3:.1f} ms")
    return tuple(why)


class _Client:
    """The async load generator (one ``httpx.AsyncClient`` per concurrency window)."""

    def __init__(self, cfg: EngineSweepConfig, model: str) -> None:
        self.cfg, self.model = cfg, model
        self.url = cfg.base_url + ("/v1/chat/completions" if cfg.api == "chat" else "/v1/completions")

    def _body(self) -> dict[str, Any]:
        c = self.cfg
        body: dict[str, Any] = {"model": self.model, "max_tokens": c.max_tokens, "stream": True, "temperature": 0.0}
        if c.api == "chat":
            body["messages"] = [{"role": "user", "content": c.prompt}]
        else:
            body["prompt"] = c.prompt
        return body

    @staticmethod
    def _content(ev: dict[str, Any]) -> str:
        ch = ev.get("choices") or []
        if not ch:
            return ""
        c0 = ch[0]
        if "delta" in c0:
            return (c0.get("delta") or {}).get("content") or ""
        return c0.get("text") or ""

    async def one(self, http: Any) -> RequestSample:
        import httpx

        t0 = time.monotonic()
        arrivals: list[float] = []
        try:
            async with http.stream("POST", self.url, json=self._body()) as r:
                if r.status_code != 200:
                    body = (await r.aread())[:200].decode(errors="replace")
                    return RequestSample(t_sent_s=t0, ttft_s=math.nan, itl_s=(), tokens=0,
                                         error=f"HTTP {r.status_code}: {body}")
                async for line in r.aiter_lines():
                    if not line.startswith("data:"):
                        continue
                    data = line[5:].strip()
                    if data == "[DONE]":
                        break
                    t = time.monotonic()
                    if self._content(json.loads(data)):
                        arrivals.append(t)
        except (httpx.HTTPError, ValueError) as e:
            return RequestSample(t_sent_s=t0, ttft_s=math.nan, itl_s=(), tokens=len(arrivals),
                                 error=f"{type(e).__name__}: {e}")
        if not arrivals:
            return RequestSample(t_sent_s=t0, ttft_s=math.nan, itl_s=(), tokens=0, error="no content events")
        return RequestSample(t_sent_s=t0, ttft_s=arrivals[0] - t0, tokens=len(arrivals),
                             itl_s=tuple(b - a for a, b in zip(arrivals, arrivals[1:], strict=False)))

    async def burst(self, n: int) -> list[RequestSample]:
        """``n`` requests one after the other (the warm-up)."""
        import httpx

        async with httpx.AsyncClient(timeout=httpx.Timeout(self.cfg.request_timeout_s, connect=5.0),
                                     verify=_verify(self.url)) as http:
            return [await self.one(http) for _ in range(n)]

    async def window(self, concurrency: int, duration_s: float) -> tuple[list[RequestSample], float]:
        import httpx

        out: list[RequestSample] = []
        timeout = httpx.Timeout(self.cfg.request_timeout_s, connect=5.0)
        limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
        t0 = time.monotonic()
        end = t0 + duration_s
        async with httpx.AsyncClient(timeout=timeout, limits=limits, verify=_verify(self.url)) as http:
            async def worker() -> None:
                while time.monotonic() < end:
                    out.append(await self.one(http))
            await asyncio.gather(*(worker() for _ in range(concurrency)))
        return out, time.monotonic() - t0


def _verify(url: str) -> bool:
    """TLS verification for https URLs; plain http needs no CA bundle (loading one costs ~40 ms a client)."""
    return url.startswith("https://")


def _get(http: Any, url: str) -> Any:
    import httpx

    try:
        r = http.get(url)
    except httpx.HTTPError as e:
        raise TelemetryError(f"cannot reach {url}: {type(e).__name__}: {e or 'no answer'}") from None
    if r.status_code != 200:
        raise TelemetryError(f"{url} answered HTTP {r.status_code} (expected 200)")
    return r


def _discover_model(http: Any, cfg: EngineSweepConfig) -> str:
    r = _get(http, cfg.base_url + "/v1/models")
    try:
        data = r.json()["data"]
        return str(data[0]["id"])
    except (ValueError, KeyError, IndexError, TypeError):
        raise TelemetryError(f"{cfg.base_url}/v1/models: expected an OpenAI model list with at least one model"
                             ) from None


def _engine_version(http: Any, cfg: EngineSweepConfig) -> str:
    import httpx

    try:  # vLLM and SGLang answer GET /version with {"version": "..."}; others may not
        r = http.get(cfg.base_url + "/version")
        return str(r.json().get("version", "")) if r.status_code == 200 else ""
    except (httpx.HTTPError, ValueError, AttributeError):
        return ""


def _scrape(http: Any, cfg: EngineSweepConfig) -> dict[str, HistogramSeries | None]:
    m = ENGINES[cfg.engine]
    parts = [parse_text(_get(http, u).text, path=u) for u in cfg.scrape_urls]
    fams = merge_families(parts)
    return {"itl": lane_histogram(fams, m.itl), "ttft": lane_histogram(fams, m.ttft)}


def _energy(act: Any, gpus: Sequence[str]) -> list[Any]:
    """One read per GPU (``GpuState``: energy counter in J at monotonic ``t_s``); empty without an actuator."""
    if act is None or not gpus:
        return []
    return [act.read(g) for g in gpus]


def _power(a: list[Any], b: list[Any]) -> tuple[float, float]:
    """``(energy_j, power_w)`` between two reads of the lane's GPUs (NaN without reads); each GPU's own interval."""
    if not a:
        return math.nan, math.nan
    e = sum(y.energy_j - x.energy_j for x, y in zip(a, b, strict=True))
    p = sum((y.energy_j - x.energy_j) / (y.t_s - x.t_s) for x, y in zip(a, b, strict=True) if y.t_s > x.t_s)
    return float(e), float(p)


def _rank(s: LaneSetting) -> float:
    return s.power_limit_w if s.power_limit_w is not None else math.inf


def calibrate_engine(cfg: EngineSweepConfig, *, actuator: Any = None,
                     progress: Callable[[str], None] | None = None,
                     sleep: Callable[[float], None] = time.sleep) -> EngineCalibration:
    """Run the sweep of ``cfg`` against a live engine (module docstring).

    Args:
        cfg: the sweep. actuator: an *entered* actuator for ``cfg.gpus`` (energy reads; writes only
            when its ``may_write`` is true for every GPU) or None (no GPU reads or writes).
        progress: called with a one-line status before each window. sleep: the settle wait.

    Returns:
        The :class:`EngineCalibration`; written steps are restored (``restore_defaults``) before return.

    Raises:
        TelemetryError: the engine or a metrics URL is unreachable or answers non-200 (the URL named),
            or every request of a window failed.
        ActuationError: a step other than as-is without an actuator allowed to write every lane GPU.
    """
    writes = [s for s in cfg.steps if s != AS_IS]
    may = getattr(actuator, "may_write", None)
    if writes:
        if not cfg.gpus or actuator is None or may is None or not all(may(g) for g in cfg.gpus):
            raise ActuationError("the sweep has steps that change GPU settings "
                                 f"({', '.join(s.label for s in writes)}) but writing is not allowed for every "
                                 f"GPU of the lane ({', '.join(cfg.gpus) or 'no GPUs given'}); "
                                 "run the as-is step only, or allow the lane's GPUs")
    import httpx

    with httpx.Client(timeout=5.0, verify=any(_verify(u) for u in (cfg.base_url, *cfg.scrape_urls))) as http:
        return _calibrate(cfg, http, actuator, writes, progress, sleep)


def _calibrate(cfg: EngineSweepConfig, http: Any, actuator: Any, writes: list[LaneSetting],
               progress: Callable[[str], None] | None, sleep: Callable[[float], None]) -> EngineCalibration:
    model = cfg.model or _discover_model(http, cfg)
    _scrape(http, cfg)  # fail fast, naming the metrics URL, before any load or write
    version = _engine_version(http, cfg)
    names = {"itl": ENGINES[cfg.engine].itl, "ttft": ENGINES[cfg.engine].ttft}
    client = _Client(cfg, model)
    if cfg.warmup_requests:
        for s in asyncio.run(client.burst(cfg.warmup_requests)):
            if s.error:
                raise TelemetryError(f"warm-up request to {client.url} failed: {s.error}")
    results: list[StepResult] = []
    gpu_name = driver = ""
    if actuator is not None and cfg.gpus:
        gpu_name = actuator.capabilities(cfg.gpus[0]).name
    wrote = False
    try:
        for step in cfg.steps:
            if step in writes:
                from gpufield.power.runtime import apply_setting

                for g in cfg.gpus:
                    apply_setting(actuator, g, step, lane=cfg.lane.value, reason=f"calibration step {step.label}")
                wrote = True
                sleep(cfg.settle_s)
            for c in cfg.concurrency:
                if progress is not None:
                    progress(f"step {step.label}: concurrency {c} for {cfg.duration_s:g} s")
                h0 = _scrape(http, cfg)
                e0 = _energy(actuator, cfg.gpus)  # energy brackets the load only, the scrapes bracket both
                samples, wall = asyncio.run(client.window(c, cfg.duration_s))
                e1 = _energy(actuator, cfg.gpus)
                h1 = _scrape(http, cfg)
                errs = [s for s in samples if s.error]
                if samples and len(errs) == len(samples):
                    raise TelemetryError(f"every request to {client.url} failed at concurrency {c}: {errs[0].error}")
                tokens = sum(s.tokens for s in samples if not s.error)
                eng = _engine_stats(h0, h1)
                why = _gate(cfg, eng, len(errs), names)
                energy, power = _power(e0, e1)
                results.append(StepResult(
                    setting=step, concurrency=c, wall_s=wall, requests=len(samples), errors=len(errs),
                    tokens=tokens, tokens_per_s=tokens / wall if wall > 0 else math.nan,
                    client=_client_stats(samples, cfg), engine=eng, energy_j=energy,
                    power_w=power,
                    tokens_per_j=tokens / energy if energy > 0 else math.nan,
                    gate_passed=not why, gate_reasons=why))
    finally:
        if wrote:
            for g in cfg.gpus:
                actuator.restore_defaults(g)
    passing = [s for s in cfg.steps if all(r.gate_passed for r in results if r.setting == s)]
    chosen = min(passing, key=_rank) if passing else LaneSetting(label="default (no step passed the gate)")
    if actuator is not None and hasattr(actuator, "_nvml"):
        try:
            d = actuator._nvml.nvmlSystemGetDriverVersion()
            driver = d.decode() if isinstance(d, bytes) else str(d)
        except Exception:  # noqa: BLE001 - identity only; an unknown driver is recorded as ""
            driver = ""
    return EngineCalibration(config=cfg, model=model, results=tuple(results), chosen=chosen,
                             gate_passed=bool(passing), wrote=wrote, gpu_name=gpu_name, driver=driver,
                             engine_version=version)


def engine_profile(cal: EngineCalibration, *, tp: int = 1, ep: int = 1, dp: int = 1, quantization: str = "",
                   model_revision: str = "", gpu_name: str | None = None) -> Any:
    """The :class:`~gpufield.power.profiles.Profile` of a calibration (evidence: every window's numbers).

    Args:
        cal: the result. tp / ep / dp / quantization / model_revision: parts of the key the engine
            does not report. gpu_name: SKU when no NVML was read (default: ``cal.gpu_name`` or ``"unknown"``).
    """
    from gpufield.power.profiles import Profile, ProfileKey

    c = cal.config
    s = cal.chosen
    key = ProfileKey(model=cal.model, model_revision=model_revision, quantization=quantization, engine=c.engine,
                     engine_version=cal.engine_version, gpu=gpu_name or cal.gpu_name or "unknown",
                     driver=cal.driver, vbios="", tp=tp, ep=ep, dp=dp, lane=c.lane.value,
                     load_bucket=f"c{max(c.concurrency)}", mode="balanced" if cal.wrote else "shadow")
    actuator = "power_cap" if s.power_limit_w is not None else "clock_lock" if s.clock_window_mhz else "default"
    setting = LaneSetting(power_limit_w=s.power_limit_w, clock_window_mhz=s.clock_window_mhz, label=s.label)
    cfg = {k: v for k, v in asdict(c).items() if k != "steps"}
    cfg["steps"] = [asdict(x) for x in c.steps]
    ev = {"source": "engine", "gate_passed": cal.gate_passed, "wrote": cal.wrote, "config": cfg,
          "windows": [{**asdict(r), "setting": asdict(r.setting)} for r in cal.results]}
    ev = _finite(json.loads(json.dumps(ev, default=str)))
    return Profile(key=key, setting=setting, actuator=actuator,
                   slo={"itl_p99_s": c.itl_p99_slo_s, "ttft_p99_s": c.ttft_p99_slo_s, "headroom": c.headroom},
                   evidence=ev)


def _finite(o: Any) -> Any:
    """NaN/inf -> None, recursively (the profile stays strict JSON)."""
    if isinstance(o, float) and not math.isfinite(o):
        return None
    if isinstance(o, dict):
        return {k: _finite(v) for k, v in o.items()}
    if isinstance(o, list):
        return [_finite(v) for v in o]
    return o
