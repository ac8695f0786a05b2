"""Calibration profiles: JSON on disk, keyed by everything that moves the optimum (power.md 7.4).

The key is (model id + revision, quantization, engine + version, GPU SKU + driver + VBIOS, TP/EP/DP,
lane, load bucket, mode). :func:`load_profile` refuses a profile whose key differs from the current
setup or whose age exceeds ``max_age_days`` (30), naming every mismatching field, so a controller never
runs a point calibrated for something else.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from gpufield._files import atomic_write
from gpufield.errors import InputError, ProfileMismatchError
from gpufield.power.types import LaneSetting

__all__ = ["ProfileKey", "Profile", "save_profile", "load_profile", "SCHEMA"]

SCHEMA = "gpufield.power.profile/1"


@dataclass(frozen=True, kw_only=True, slots=True)
class ProfileKey:
    """What a calibrated point is valid for.

    Raises:
        ValueError: empty identity fields or non-positive parallelism.
    """

    model: str
    model_revision: str
    quantization: str
    engine: str
    engine_version: str
    gpu: str
    driver: str
    vbios: str
    tp: int
    ep: int
    dp: int
    lane: str
    load_bucket: str
    mode: str

    def __post_init__(self) -> None:
        for f in ("model", "gpu", "lane", "mode", "engine"):
            if not getattr(self, f):
                raise ValueError(f"ProfileKey.{f} must not be empty")
        if min(self.tp, self.ep, self.dp) < 1:
            raise ValueError(f"tp/ep/dp must be >= 1, got {self.tp}/{self.ep}/{self.dp}")

    def diff(self, other: ProfileKey) -> list[str]:
        """Fields that differ, as ``"name: saved != current"``."""
        return [f"{f.name}: {getattr(self, f.name)!r} != {getattr(other, f.name)!r}"
                for f in fields(self) if getattr(self, f.name) != getattr(other, f.name)]


@dataclass(frozen=True, kw_only=True, slots=True)
class Profile:
    """A calibrated lane setting with its evidence.

    Attributes:
        key: validity key. setting: the calibrated point. actuator: ``power_cap``, ``clock_lock``,
        ``vendor-maxq`` or ``default``. slo: SLOs used (s). evidence: sweep data, fits and CIs.
        created_s: calibration time (epoch s). trace_hash: hash of the calibration trace.
    """

    key: ProfileKey
    setting: LaneSetting
    actuator: str
    slo: dict[str, float]
    evidence: dict[str, Any] = field(default_factory=dict)
    created_s: float = field(default_factory=time.time)
    trace_hash: str = ""


def save_profile(p: Profile, path: str | Path) -> None:
    """Write ``p`` as JSON (never over an existing file of another key: that raises)."""
    path = Path(path)
    if path.is_file() and not path.is_symlink():  # a FIFO is never read (it would block); atomic_write refuses it
        old = json.loads(path.read_text())
        if old.get("key") != asdict(p.key):
            raise InputError("refusing to overwrite a profile of another key", path=str(path))
    d = {"schema": SCHEMA, **asdict(p)}
    atomic_write(path, json.dumps(d, indent=1, default=float), force=True, option="--out")


def load_profile(path: str | Path, expected: ProfileKey, *, now_s: float | None = None,
                 max_age_days: float = 30.0) -> Profile:
    """Load a profile and check it against the current setup.

    Raises:
        ProfileMismatchError: key mismatch (fields listed) or older than ``max_age_days``.
        InputError: unreadable file or wrong schema.
    """
    from gpufield._files import read_text

    path = Path(path)
    try:  # read_text: a FIFO is refused (never a hang), invalid UTF-8 names the line
        d = json.loads(read_text(path, what="a profile JSON from gpufield power calibrate"))
    except InputError:
        raise
    except (OSError, ValueError) as e:
        raise InputError(f"cannot read profile: {getattr(e, 'strerror', None) or e}", path=str(path)) from e
    if not isinstance(d, dict):
        raise InputError(f"expected a JSON object (a profile from gpufield power calibrate), got {type(d).__name__}",
                         path=str(path))
    if d.get("schema") != SCHEMA:
        raise InputError(f"expected schema {SCHEMA!r}, got {d.get('schema')!r}", path=str(path))
    try:
        key = ProfileKey(**d["key"])
        s = d["setting"]
        setting = LaneSetting(power_limit_w=s["power_limit_w"], label=s.get("label", ""),
                              workload_profile=s.get("workload_profile"),
                              clock_window_mhz=tuple(s["clock_window_mhz"]) if s["clock_window_mhz"] else None)
        prof = Profile(key=key, setting=setting, actuator=d["actuator"], slo=d["slo"],
                       evidence=d.get("evidence", {}), created_s=float(d["created_s"]),
                       trace_hash=d.get("trace_hash", ""))
    except (KeyError, TypeError, ValueError) as e:
        raise InputError(f"malformed profile: {e}", path=str(path)) from e
    diffs = key.diff(expected)
    if diffs:
        raise ProfileMismatchError("profile does not match this setup: " + "; ".join(diffs), path=str(path))
    age_d = ((time.time() if now_s is None else now_s) - prof.created_s) / 86400.0
    if age_d > max_age_days:
        raise ProfileMismatchError(f"profile is stale: {age_d:.1f} days old > {max_age_days:g}", path=str(path))
    return prof
