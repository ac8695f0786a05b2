"""``lanes.toml``: the configuration of ``gpufield power run`` (read with :mod:`tomllib`, validated).

Layout (every table but ``[lanes.*]`` is optional; units in the key names)::

    [controller]
    period_s = 5.0                                # control period
    state_dir = "/var/tmp/gpufield-power"         # lock (one controller per directory) + saved settings
    decision_log = "decisions-{start}.jsonl"      # JSON lines; {start} = UTC start time; never overwritten
    log_ticks = "all"                             # or "changes": tick records only when something changed
    metrics_addr = "127.0.0.1"                    # Prometheus exporter (localhost only by default)
    metrics_port = 9464                           # 0 = any free port (written to the log's start record)
    fast_window_s = 30.0
    slow_window_s = 300.0

    [guard]                                       # optional GuardConfig overrides (power.md 7.5)
    dwell_s = 60.0

    [nvml]
    backend = "pynvml"                            # "fake": gpufield.testing.FakeNvml (tests, CPU dry runs)
    call_timeout_s = 2.0                          # deadline of every NVML call (a wedged driver fails the
                                                  # lane safe instead of stalling the loop)

    [lanes.decode]                                # one table per lane; the name is free
    role = "decode"                               # "prefill" or "decode" (default: the lane's name)
    gpus = ["GPU-..."]                            # NVML UUIDs
    engine = "vllm"                               # vllm | sglang | dynamo
    metrics = ["http://127.0.0.1:8000/metrics"]   # several URLs (Dynamo: frontend and worker ports)
    itl_p99_slo_s = 0.05
    ttft_p99_slo_s = 2.0
    plan = "twin"                                 # or: profile = "decode-profile.json"
                                                  # or: plan = "fixed" + power_limit_w / clock_window_mhz
                                                  #     / workload_profile ("max-q", "max-p", ...: NVML
                                                  #     workload power profiles, where the GPU has them)

Relative paths (``state_dir``, ``decision_log``, ``profile``) are taken from the config file's
directory, not the working directory (a systemd unit's working directory is ``/``).

Every error is an :class:`~gpufield.errors.InputError` naming the file, the line and the key
(``lanes.toml:14: lanes.decode.itl_p99_slo_s: expected a number > 0, got "50ms"``). ``tomllib``
reports syntax errors with their line; it keeps no positions for values, so the line of a key is
found by scanning the text for its table header and its ``key =`` line.
"""

from __future__ import annotations

import math
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpufield._files import read_text
from gpufield.errors import InputError
from gpufield.power.config import GuardConfig
from gpufield.power.engines import ENGINES
from gpufield.power.types import Lane

__all__ = ["LaneConfig", "RunConfig", "load_run_config"]

_GUARD_KEYS = ("fast_breaches", "slow_frac", "relax_frac", "relax_s", "recover_s", "queue_s", "kv_usage_max",
               "dwell_s", "stale_periods", "max_level")


@dataclass(frozen=True, kw_only=True, slots=True)
class LaneConfig:
    """One lane of ``lanes.toml``.

    Attributes:
        name: the table name (``[lanes.<name>]``). role: prefill or decode.
        gpus: NVML UUIDs. engine: key of :data:`gpufield.power.engines.ENGINES`.
        metrics: ``/metrics`` URLs merged for this lane.
        itl_p99_slo_s / ttft_p99_slo_s: SLOs (s). plan: ``"twin"``, ``"profile"`` or ``"fixed"``.
        profile: path of a calibration profile (``plan == "profile"``).
        power_limit_w / clock_window_mhz: the operator's own point (``plan == "fixed"``; W, MHz).
        workload_profile: a workload power profile name of the fixed point (``plan == "fixed"``).
        step_w / clock_step_mhz: one guard notch (W / MHz).
    """

    name: str
    role: Lane
    gpus: tuple[str, ...]
    engine: str
    metrics: tuple[str, ...]
    itl_p99_slo_s: float
    ttft_p99_slo_s: float
    plan: str = "twin"
    profile: str | None = None
    power_limit_w: float | None = None
    clock_window_mhz: tuple[int, int] | None = None
    workload_profile: str | None = None
    step_w: float = 25.0
    clock_step_mhz: float = 90.0

    def __post_init__(self) -> None:
        if not self.gpus or not self.metrics:
            raise ValueError(f"lane {self.name}: needs gpus and metrics")
        if self.plan not in ("twin", "profile", "fixed") or (self.plan == "profile") != (self.profile is not None):
            raise ValueError(f"lane {self.name}: plan must be 'twin', 'fixed' or a profile path")
        if (self.plan == "fixed") != (self.power_limit_w is not None or self.clock_window_mhz is not None
                                      or self.workload_profile is not None):
            raise ValueError(f"lane {self.name}: plan 'fixed' needs power_limit_w, clock_window_mhz and/or "
                             "workload_profile")


@dataclass(frozen=True, kw_only=True, slots=True)
class RunConfig:
    """The whole ``lanes.toml`` (see the module docstring for keys and defaults).

    Attributes:
        path: the config file. lanes: its lanes in file order.
        period_s, state_dir, decision_log, log_ticks, metrics_addr, metrics_port, fast_window_s, slow_window_s:
            ``[controller]``. guard: ``[guard]`` overrides of :class:`GuardConfig`.
        nvml_backend: ``"pynvml"`` or ``"fake"``; fake_gpus / fake_load: the fake's H200s and load (0..1).
        nvml_call_timeout_s: deadline of each NVML call (s; :class:`~gpufield.telemetry.nvml_deadline.BoundedNvml`).
    """

    path: str
    lanes: tuple[LaneConfig, ...]
    period_s: float = 5.0
    state_dir: str = "/var/tmp/gpufield-power"
    decision_log: str = "decisions-{start}.jsonl"
    log_ticks: str = "all"
    metrics_addr: str = "127.0.0.1"
    metrics_port: int = 9464
    fast_window_s: float = 30.0
    slow_window_s: float = 300.0
    guard: dict[str, Any] = field(default_factory=dict)
    nvml_backend: str = "pynvml"
    fake_gpus: int = 1
    fake_load: float = 0.0
    nvml_call_timeout_s: float = 2.0

    def __post_init__(self) -> None:
        if not self.lanes:
            raise ValueError("at least one lane is needed")

    def guard_config(self, lane: LaneConfig) -> GuardConfig:
        """The guard of ``lane``: its SLOs, this period and the ``[guard]`` overrides."""
        return GuardConfig(itl_p99_slo_s=lane.itl_p99_slo_s, ttft_p99_slo_s=lane.ttft_p99_slo_s,
                           period_s=self.period_s, **self.guard)


_HEADER = re.compile(r"^\s*\[\s*([^\[\]]+?)\s*\]\s*(#.*)?$")


def _split_key(s: str) -> tuple[str, ...]:
    return tuple(p.strip().strip("\"'") for p in s.split("."))


def key_line(text: str, table: tuple[str, ...], key: str | None) -> int | None:
    """1-based line of ``key`` inside ``[table]`` (or of the header when ``key`` is None/not found)."""
    cur: tuple[str, ...] = ()
    header = None
    pat = re.compile(rf"^\s*[\"']?{re.escape(key)}[\"']?\s*=") if key else None
    for n, line in enumerate(text.splitlines(), 1):
        m = _HEADER.match(line)
        if m:
            cur = _split_key(m.group(1))
            if cur == table:
                header = n
            continue
        if cur == table and pat is not None and pat.match(line):
            return n
    return header


class _Reader:
    """Typed access to one table with file/line/key in every error."""

    def __init__(self, path: str, text: str, data: dict, table: tuple[str, ...]) -> None:
        self.path, self.text, self.data, self.table = path, text, data, table
        self.used: set[str] = set()

    def fail(self, key: str | None, msg: str) -> InputError:
        name = ".".join((*self.table, key) if key else self.table) or "(top level)"
        return InputError(f"{name}: {msg}", path=self.path, line=key_line(self.text, self.table, key))

    def get(self, key: str, kind: str, default: Any = ..., *, check=None, expect: str = "") -> Any:
        self.used.add(key)
        if key not in self.data:
            if default is ...:
                raise self.fail(None, f"missing key {key!r} ({expect or kind})")
            return default
        v = self.data[key]
        ok = {"num": isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v),
              "int": isinstance(v, int) and not isinstance(v, bool),
              "str": isinstance(v, str) and v != "",
              "strs": isinstance(v, list) and bool(v) and all(isinstance(x, str) and x for x in v)}[kind]
        if not ok or (check is not None and not check(v)):
            want = expect or {"num": "a finite number", "int": "an integer", "str": "a non-empty string",
                              "strs": "a non-empty list of strings"}[kind]
            raise self.fail(key, f"expected {want}, got {v!r}")
        return float(v) if kind == "num" else tuple(v) if kind == "strs" else v

    def done(self) -> None:
        extra = [k for k in self.data if k not in self.used]
        if extra:
            raise self.fail(extra[0], f"unknown key {extra[0]!r} (known: {', '.join(sorted(self.used))})")


def _rel(base: Path, p: str) -> str:
    return str(p if Path(p).is_absolute() else base / p)


def _pos(v: float) -> bool:
    return v > 0


def _lane(path: str, text: str, name: str, d: Any, base: Path) -> LaneConfig:
    r = _Reader(path, text, d if isinstance(d, dict) else {}, ("lanes", name))
    if not isinstance(d, dict):
        raise r.fail(None, "expected a table of lane settings")
    role = r.get("role", "str", name, check=lambda v: v in ("prefill", "decode"), expect="'prefill' or 'decode'")
    gpus = r.get("gpus", "strs", check=lambda v: all(u.startswith(("GPU-", "MIG-")) for u in v) and len(set(v)) == len(v),
                 expect="a list of distinct NVML UUIDs ('GPU-...')")
    engine = r.get("engine", "str", check=lambda v: v in ENGINES, expect=f"one of {', '.join(sorted(ENGINES))}")
    metrics = r.get("metrics", "strs", check=lambda v: all(u.startswith(("http://", "https://")) for u in v),
                    expect="a list of http:// URLs")
    itl = r.get("itl_p99_slo_s", "num", check=_pos, expect="a number > 0 (seconds)")
    ttft = r.get("ttft_p99_slo_s", "num", check=_pos, expect="a number > 0 (seconds)")
    profile = r.get("profile", "str", None)
    plan = r.get("plan", "str", "profile" if profile else "twin", check=lambda v: v in ("twin", "profile", "fixed"),
                 expect="'twin', 'profile' or 'fixed'")
    if (plan == "profile") != (profile is not None):
        raise r.fail("plan" if "plan" in d else None, "plan = 'profile' needs profile = \"path.json\" (and a profile"
                     " path needs plan = 'profile')")
    cap = r.get("power_limit_w", "num", None, check=_pos, expect="a number > 0 (W)")
    win = None
    r.used.add("clock_window_mhz")
    if "clock_window_mhz" in d:
        w = d["clock_window_mhz"]
        if not (isinstance(w, list) and len(w) == 2 and all(isinstance(x, int) and not isinstance(x, bool) for x in w)
                and 0 < w[0] <= w[1]):
            raise r.fail("clock_window_mhz", f"expected [low, high] integer MHz with 0 < low <= high, got {w!r}")
        win = (w[0], w[1])
    from gpufield.power.actuators.wpp import PROFILE_IDS

    wpp = r.get("workload_profile", "str", None, check=lambda v: v in PROFILE_IDS,
                expect=f"one of {', '.join(PROFILE_IDS)}")
    if (plan == "fixed") != (cap is not None or win is not None or wpp is not None):
        key = ("plan" if plan == "fixed" else "power_limit_w" if cap is not None else "clock_window_mhz"
               if win is not None else "workload_profile")
        raise r.fail(key, "plan = 'fixed' needs power_limit_w, clock_window_mhz and/or workload_profile (and they "
                     "need plan = 'fixed')")
    step_w = r.get("step_w", "num", 25.0, check=_pos, expect="a number > 0 (W)")
    clock_step = r.get("clock_step_mhz", "num", 90.0, check=_pos, expect="a number > 0 (MHz)")
    r.done()
    return LaneConfig(name=name, role=Lane(role), gpus=gpus, engine=engine, metrics=metrics, itl_p99_slo_s=itl,
                      ttft_p99_slo_s=ttft, plan=plan, profile=_rel(base, profile) if profile else None,
                      power_limit_w=cap, clock_window_mhz=win, workload_profile=wpp, step_w=step_w,
                      clock_step_mhz=clock_step)


def load_run_config(path: str | Path) -> RunConfig:
    """Read and validate ``lanes.toml``.

    Raises:
        InputError: unreadable file, TOML syntax (line and column from ``tomllib``), unknown or
            missing keys, wrong types, out-of-range values, a GPU in two lanes (file, line, key).
    """
    p = str(path)
    text = read_text(p, what="a TOML lanes file")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        line = getattr(e, "lineno", None)
        if line is None:
            m = re.search(r"line (\d+)", str(e))
            line = int(m.group(1)) if m else None
        raise InputError(f"invalid TOML: {getattr(e, 'msg', e)}", path=p, line=line) from None
    base = Path(p).resolve().parent
    top = _Reader(p, text, data, ())
    for k in ("controller", "guard", "nvml", "lanes"):
        top.used.add(k)
        if k in data and not isinstance(data[k], dict):
            raise top.fail(k, "expected a table")
    top.done()
    c = _Reader(p, text, data.get("controller", {}), ("controller",))
    kw: dict[str, Any] = dict(
        period_s=c.get("period_s", "num", 5.0, check=lambda v: 0.05 <= v <= 3600, expect="a number in [0.05, 3600] (s)"),
        state_dir=_rel(base, c.get("state_dir", "str", "/var/tmp/gpufield-power")),
        decision_log=_rel(base, c.get("decision_log", "str", "decisions-{start}.jsonl")),
        log_ticks=c.get("log_ticks", "str", "all", check=lambda v: v in ("all", "changes"),
                        expect="'all' or 'changes'"),
        metrics_addr=c.get("metrics_addr", "str", "127.0.0.1"),
        metrics_port=c.get("metrics_port", "int", 9464, check=lambda v: 0 <= v <= 65535, expect="a port 0-65535"),
        fast_window_s=c.get("fast_window_s", "num", 30.0, check=_pos, expect="a number > 0 (s)"),
    )
    kw["slow_window_s"] = c.get("slow_window_s", "num", 300.0, check=lambda v: v >= kw["fast_window_s"],
                                expect=f"a number >= fast_window_s ({kw['fast_window_s']:g} s)")
    c.done()
    g = _Reader(p, text, data.get("guard", {}), ("guard",))
    guard = {}
    for k in _GUARD_KEYS:
        ints = k in ("fast_breaches", "stale_periods", "max_level")
        v = g.get(k, "int" if ints else "num", None, check=lambda v: v >= 0, expect="a number >= 0")
        if v is not None:
            guard[k] = v
    g.done()
    try:
        GuardConfig(itl_p99_slo_s=1.0, ttft_p99_slo_s=1.0, period_s=kw["period_s"], **guard)
    except ValueError as e:
        raise g.fail(None, str(e)) from None
    n = _Reader(p, text, data.get("nvml", {}), ("nvml",))
    kw["nvml_backend"] = n.get("backend", "str", "pynvml", check=lambda v: v in ("pynvml", "fake"),
                               expect="'pynvml' or 'fake'")
    kw["fake_gpus"] = n.get("fake_gpus", "int", 1, check=lambda v: 1 <= v <= 64, expect="an integer 1-64")
    kw["fake_load"] = n.get("fake_load", "num", 0.0, check=lambda v: 0 <= v <= 1, expect="a number in [0, 1]")
    kw["nvml_call_timeout_s"] = n.get("call_timeout_s", "num", 2.0, check=lambda v: 0 < v <= 60,
                                      expect="a number in (0, 60] (s)")
    n.done()
    lanes_d = data.get("lanes")
    if not lanes_d:
        raise InputError("no [lanes.<name>] table: at least one lane is needed", path=p, line=None)
    lanes = tuple(_lane(p, text, name, d, base) for name, d in lanes_d.items())
    seen: dict[str, str] = {}
    for ln in lanes:
        for u in ln.gpus:
            if u in seen:
                raise InputError(f"lanes.{ln.name}.gpus: {u} is also in lane {seen[u]!r} (a GPU belongs to one lane)",
                                 path=p, line=key_line(text, ("lanes", ln.name), "gpus"))
            seen[u] = ln.name
    return RunConfig(path=p, lanes=lanes, guard=guard, **kw)
