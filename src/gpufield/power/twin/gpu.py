"""Per-GPU power and clock model of the twin, and the firmware that enforces caps and clock windows.

Power model (power.md section 6.1: Afzal et al.'s linear + super-linear form, with the terms issue #29
names; H200 coefficients fitted to read-only measurements by :mod:`gpufield.power.twin.fit`)::

    P(f, m; b, a_c, a_m, L) = P_ctx(f) + (b * P_busy + a_c * P_sm) * g(f) + a_m * (P_hbm * r_m + P_path * g(f))
                              + P_launch * g(f) * L / 1e5
    P_ctx(f)             = idle_ctx_w + (idle_max_clock_w - idle_ctx_w) * (f - f_min) / (f_max - f_min)
    g(f)                 = f * V(f)^2 / (f_max * V(f_max)^2),  V linear above the voltage knee, flat below

* ``f``: SM clock (MHz); ``m``: HBM clock state (0 = full), ``r_m`` its clock ratio.
* ``b``: busy fraction, the share of time kernels occupy the GPU (1 for back-to-back kernels; the
  cost model uses ``1 - t_fixed / t_iter``). ``P_busy`` is what busy SMs draw beyond idle whatever
  they compute (a GEMV waiting on HBM draws it too).
* ``a_c``: SM (tensor) activity = achieved FLOP/s over the dense peak at ``f``
  (``bf16_flops_per_clock * f``, FP8 doubles it), 0..1. The SM-clock-scaled power of SMs that
  issue memory traffic is in ``P_path`` (``stream_sm_activity`` adds ``a_c`` per unit of memory
  time in the cost model; the measured H200 fit folds it into ``P_path`` and sets it to 0).
* ``a_m``: HBM traffic = achieved bytes/s over the datasheet peak ``hbm_bandwidth_bytes_per_s``,
  so ``a_m * (P_hbm + P_path)`` is an energy per byte (times bytes/s) at ``f_max``.
* ``L``: kernel launches per second. Launch-bound regime (batch-1 decode without CUDA graphs): the
  SMs idle between launches, ``a_c`` and ``a_m`` are small, the clock stays at the top, so the power
  is ``P_ctx(f_max)`` (idle with a live CUDA context at full clock) plus ``P_launch`` per 1e5
  launches/s.
* ``P_ctx``: idle with a live CUDA context; ``idle_w`` is idle before any context (parked clock).

Firmware: the power cap is enforced on a ~1 s running average (LACT issue #1128, power.md 6.3): at
the start of every busy segment of length ``d`` the firmware picks the highest SM clock of the window
whose power keeps the exponential average (tau = 1 s) at or below the cap by the end of the segment;
it lowers the SM clock first and drops HBM to its lower state only when the clock would fall below
``hbm_gate_mhz`` (the "decode power floor" of Dynamo's power-planner design). A clock-window floor
yields to the cap, as NVML documents for ``nvmlDeviceSetGpuLockedClocks``. Idle gaps run at the top
of the clock window for ``idle_hold_s`` (measured on the H200 with a live context: it never parked
within 8 s) before parking at the floor.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from importlib import resources

import numpy as np

__all__ = ["GpuModel", "Firmware", "OperatingPoint", "load_gpu_model", "gpu_model_from_dict", "LAUNCH_REF_PER_S"]

_TAU_S = 1.0  # cap enforcement averaging window (LACT #1128; NVML GetPowerUsage is a 1 s average)
LAUNCH_REF_PER_S = 1e5  #: launches/s at which ``launch_w`` is given


@dataclass(frozen=True, kw_only=True, slots=True)
class GpuModel:
    """Physical parameters of one GPU SKU (units in the names; sources in ``sources``).

    Raises:
        ValueError: inconsistent limits, clocks or negative powers.
    """

    name: str
    nvml_name: str
    tdp_w: float
    min_limit_w: float
    max_limit_w: float
    sm_clock_max_mhz: int
    sm_clock_min_mhz: int
    sm_clock_step_mhz: float
    mem_clocks_mhz: tuple[int, ...]
    idle_w: float
    idle_max_clock_w: float
    hbm_bandwidth_bytes_per_s: float
    mem_efficiency: float
    bf16_flops_per_clock: float
    hbm_w: float
    mem_path_sm_w: float
    sm_dynamic_w: float
    voltage_knee_mhz: int
    voltage_min_ratio: float
    hbm_gate_mhz: int
    stream_sm_activity: float
    gemm_mem_activity: float
    idle_ctx_w: float | None = None
    busy_w: float = 0.0
    launch_w: float = 0.0
    idle_hold_s: float = 1.0
    sources: dict[str, str] = field(default_factory=dict)
    sm_clocks_mhz: np.ndarray = field(init=False, repr=False, compare=False)
    mem_ratio: np.ndarray = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.min_limit_w <= self.tdp_w <= self.max_limit_w:
            raise ValueError(f"{self.name}: need min_limit_w({self.min_limit_w}) <= tdp_w({self.tdp_w})"
                             f" <= max_limit_w({self.max_limit_w})")
        if not self.sm_clock_min_mhz < self.sm_clock_max_mhz:
            raise ValueError(f"{self.name}: sm_clock_min_mhz must be < sm_clock_max_mhz")
        if list(self.mem_clocks_mhz) != sorted(self.mem_clocks_mhz, reverse=True):
            raise ValueError(f"{self.name}: mem_clocks_mhz must be highest first (NVML order)")
        if self.idle_ctx_w is None:
            object.__setattr__(self, "idle_ctx_w", self.idle_w)
        if not self.idle_hold_s >= 0:
            raise ValueError(f"{self.name}: idle_hold_s must be >= 0")
        for n in ("idle_w", "idle_ctx_w", "hbm_w", "mem_path_sm_w", "sm_dynamic_w", "busy_w", "launch_w"):
            if getattr(self, n) < 0:
                raise ValueError(f"{self.name}: {n} must be >= 0")
        if not 0 < self.mem_efficiency <= 1 or not 0 < self.voltage_min_ratio <= 1:
            raise ValueError(f"{self.name}: mem_efficiency and voltage_min_ratio must lie in (0, 1]")
        # supported SM clocks, highest first, whole MHz as NVML reports them
        n = int(round((self.sm_clock_max_mhz - self.sm_clock_min_mhz) / self.sm_clock_step_mhz))
        clocks = self.sm_clock_max_mhz - self.sm_clock_step_mhz * np.arange(n + 1)
        object.__setattr__(self, "sm_clocks_mhz",
                           np.unique(np.floor(clocks + 1e-9).astype(int))[::-1].copy())
        m = np.asarray(self.mem_clocks_mhz, dtype=float)
        object.__setattr__(self, "mem_ratio", m / m[0])  # HBM-state clock ratio, 1 for the highest

    def voltage_scale(self, clock_mhz: np.ndarray | float) -> np.ndarray:
        """``g(f) = f V(f)^2 / (f_max V_max^2)``: dynamic-power scale, 1 at ``f_max``."""
        f = np.asarray(clock_mhz, dtype=float)
        span = self.sm_clock_max_mhz - self.voltage_knee_mhz
        v = self.voltage_min_ratio + (1 - self.voltage_min_ratio) * np.clip(
            (f - self.voltage_knee_mhz) / span, 0.0, 1.0)
        return f * v * v / self.sm_clock_max_mhz

    def idle_power_w(self, clock_mhz: np.ndarray | float) -> np.ndarray:
        """``P_ctx(f)``: power with a live CUDA context and no kernel running at ``clock_mhz`` (W)."""
        f = np.asarray(clock_mhz, dtype=float)
        frac = (f - self.sm_clock_min_mhz) / (self.sm_clock_max_mhz - self.sm_clock_min_mhz)
        return self.idle_ctx_w + (self.idle_max_clock_w - self.idle_ctx_w) * np.clip(frac, 0.0, 1.0)

    def power_w(self, clock_mhz, mem_state, sm_activity, mem_activity, launches_per_s=0.0,
                busy=1.0) -> np.ndarray:
        """Board power (W) from the model in the module docstring; arguments broadcast.

        Args:
            clock_mhz: SM clock ``f`` (MHz). mem_state: HBM state index (0 = full clock).
            sm_activity: ``a_c`` (0..1). mem_activity: ``a_m`` = bytes/s over the datasheet peak.
            launches_per_s: kernel launches per second ``L``. busy: busy fraction ``b`` (0..1).
        """
        g = self.voltage_scale(clock_mhz)
        r = self.mem_ratio[np.asarray(mem_state)]
        return (self.idle_power_w(clock_mhz)
                + (np.asarray(busy) * self.busy_w + np.asarray(sm_activity) * self.sm_dynamic_w) * g
                + np.asarray(mem_activity) * (self.hbm_w * r + self.mem_path_sm_w * g)
                + self.launch_w * g * (np.asarray(launches_per_s, dtype=float) / LAUNCH_REF_PER_S))

    def flops_per_s(self, clock_mhz, *, fp8: bool) -> np.ndarray:
        """Dense tensor-core peak at ``clock_mhz`` (FLOP/s); FP8 doubles BF16 (Hopper/Blackwell)."""
        return self.bf16_flops_per_clock * (2.0 if fp8 else 1.0) * np.asarray(clock_mhz, float) * 1e6

    def bandwidth_bytes_per_s(self, mem_state) -> np.ndarray:
        """Achievable HBM bandwidth in the given memory state (bytes/s)."""
        return self.hbm_bandwidth_bytes_per_s * self.mem_efficiency * self.mem_ratio[np.asarray(mem_state)]

    def snap_clock_mhz(self, clock_mhz: float, *, up: bool = True) -> int:
        """Nearest supported SM clock at or above (``up``) / at or below ``clock_mhz``."""
        c = self.sm_clocks_mhz
        if up:
            ok = c[c >= clock_mhz - 1e-9]
            return int(ok.min()) if ok.size else int(c[0])
        ok = c[c <= clock_mhz + 1e-9]
        return int(ok.max()) if ok.size else int(c[-1])


def gpu_model_from_dict(name: str, d: dict) -> GpuModel:
    """Build a :class:`GpuModel` from one ``twin_gpus.json`` entry (its ``fit`` record and ``_`` keys are ignored)."""
    d = {k: v for k, v in d.items() if k != "fit" and not k.startswith("_")}
    d["mem_clocks_mhz"] = tuple(d["mem_clocks_mhz"])
    return GpuModel(name=name, **d)


def load_gpu_model(name: str) -> GpuModel:
    """Load the twin parameters of ``name`` (``"H200"``, ``"B200"``, ``"B300"``) from package data.

    Raises:
        ValueError: unknown SKU (the message lists the known ones).
    """
    data = json.loads(resources.files("gpufield.power.data").joinpath("twin_gpus.json").read_text())
    gpus = data["gpus"]
    key = name.upper().replace("NVIDIA ", "").split()[0] if name else name
    if key not in gpus:
        raise ValueError(f"unknown GPU {name!r}; the twin knows {sorted(gpus)}")
    return gpu_model_from_dict(key, gpus[key])


@dataclass(frozen=True, slots=True)
class OperatingPoint:
    """What the firmware chose for one busy segment.

    Attributes:
        clock_index: index into ``GpuModel.sm_clocks_mhz``.
        mem_state: 0 = full HBM clock, 1 = lower state.
        power_w: board power during the segment.
        cap_bound: the cap forced a clock below the window top (``SwPowerCap`` reason).
        floor_violated: the clock went below the locked window floor.
    """

    clock_index: int
    mem_state: int
    power_w: float
    cap_bound: bool
    floor_violated: bool


class Firmware:
    """On-chip power/clock controller of one GPU (or of a lane of identical TP GPUs).

    Args:
        model: the GPU SKU.
        cap_w: enforced power limit (W), clamped into the SKU's constraints.
        window_mhz: locked SM-clock window ``(lo, hi)`` or ``None`` for the default governor.
    """

    def __init__(self, model: GpuModel, cap_w: float | None = None,
                 window_mhz: tuple[int, int] | None = None) -> None:
        self.model = model
        self.ema_w = model.idle_w
        self.last_clock_index = len(model.sm_clocks_mhz) - 1
        self.configure(cap_w, window_mhz)

    def configure(self, cap_w: float | None, window_mhz: tuple[int, int] | None) -> None:
        """Apply a new cap (W) and clock window (MHz); ``None`` means the vendor default."""
        m = self.model
        self.cap_w = float(np.clip(m.tdp_w if cap_w is None else cap_w, m.min_limit_w, m.max_limit_w))
        c = m.sm_clocks_mhz
        lo, hi = window_mhz if window_mhz is not None else (int(c[-1]), int(c[0]))
        if lo > hi:
            raise ValueError(f"clock window lo({lo}) > hi({hi}) MHz")
        self.window_mhz = (lo, hi)
        self._hi_index = int(np.argmax(c <= hi)) if (c <= hi).any() else len(c) - 1
        self._lo_clock = lo
        self._gate_index = int(np.nonzero(c >= m.hbm_gate_mhz)[0].max())

    def choose(self, power_table_w: np.ndarray, duration_s: float,
               neg_power_table_w: np.ndarray | None = None) -> OperatingPoint:
        """Pick the operating point for a busy segment and advance the running average.

        Args:
            power_table_w: power of this segment's work at every (clock, mem state), shape
                ``(n_clocks, n_mem)``, clocks highest first.
            duration_s: segment length at the chosen point (an estimate is fine).
            neg_power_table_w: ``-power_table_w`` if the caller caches it (saves a copy per call).

        The table must fall monotonically along the clock axis (true of the twin's power model:
        every term grows with the clock, and activity falls as the segment stretches).
        """
        e = math.exp(-max(duration_s, 1e-6) / _TAU_S)
        bound = (self.cap_w - self.ema_w * e) / (1.0 - e)
        hi, gate = self._hi_index, self._gate_index
        # power falls monotonically with the clock index (clocks highest first), so the first
        # index at or under the bound is a binary search on the negated column
        n_f, n_m = power_table_w.shape
        neg = -power_table_w if neg_power_table_w is None else neg_power_table_w
        if hi <= gate:
            k = int(neg[hi:gate + 1, 0].searchsorted(-bound))
        else:
            k = gate + 1  # window top below the HBM gate: full HBM state never preferred
        if hi + k <= gate:
            i, mstate = hi + k, 0
        else:
            k = int(neg[hi:, n_m - 1].searchsorted(-bound))
            i, mstate = (hi + k, n_m - 1) if hi + k < n_f else (n_f - 1, n_m - 1)
        p = float(power_table_w[i, mstate])
        self.ema_w = self.ema_w * e + p * (1 - e)
        self.last_clock_index = i
        clock = int(self.model.sm_clocks_mhz[i])
        return OperatingPoint(i, mstate, p, cap_bound=(i > hi or mstate > 0),
                              floor_violated=clock < self._lo_clock)

    def idle(self, duration_s: float) -> float:
        """Advance through an idle gap; return its energy (J).

        With a live context the idle clock goes to the top of the clock window (H200 run72b: 1980 MHz
        right after GEMMs the cap had held at 1485-1755 MHz; the earlier probe: 124 W at 1980 MHz after
        load) and stays there for ``idle_hold_s``, then parks at the window floor (a locked floor keeps
        idle power up).
        """
        if duration_s <= 0:
            return 0.0
        m = self.model
        park = max(float(m.sm_clocks_mhz[-1]), float(self._lo_clock))
        hold = min(duration_s, m.idle_hold_s)
        top = max(float(m.sm_clocks_mhz[self._hi_index]), park)
        p_hold, p_park = float(m.idle_power_w(top)), float(m.idle_power_w(park))
        energy = p_hold * hold + p_park * (duration_s - hold)
        e = math.exp(-duration_s / _TAU_S)
        self.ema_w = self.ema_w * e + (energy / duration_s) * (1 - e)
        return energy
