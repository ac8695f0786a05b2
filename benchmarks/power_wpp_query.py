"""Read-only query: does this GPU's driver support NVML workload power profiles (Max-Q / Max-P)?

Run from the repo root (no GPU work, a few seconds)::

    PYTHONPATH=src python3 benchmarks/power_wpp_query.py OUT_DIR            # the real pynvml
    PYTHONPATH=src python3 benchmarks/power_wpp_query.py OUT_DIR --fake     # gpufield.testing.FakeNvml

Only read calls are made, through :class:`gpufield.power.actuators.dryrun.ReadOnlyNvml` (an allow-list:
any setter raises before it reaches the driver) inside :class:`gpufield.telemetry.nvml_deadline.BoundedNvml`
(every call returns within 10 s or the script stops querying). Per GPU: name, UUID, driver and NVML
versions, whether pynvml has the ``nvmlDeviceWorkloadPowerProfile*`` calls,
``nvmlDeviceWorkloadPowerProfileGetProfilesInfo`` (offered profile ids, priorities, conflicts) and
``...GetCurrentProfiles`` (requested / enforced masks) via
:func:`gpufield.power.actuators.wpp.read_workload_profiles`, or the NVML error they answered; and an
attestation (power limits, locked-clock bit, application clocks, requested/enforced profile masks)
before and after, which must be equal. Writes ``OUT_DIR/wpp_query.json`` and ``OUT_DIR/wpp_query.log``.
Exit 0 when the query ran and nothing changed (supported or not), 1 when the attestation differs.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict
from pathlib import Path

from gpufield.power.actuators.dryrun import ReadOnlyNvml
from gpufield.power.actuators.wpp import PROFILE_IDS, read_workload_profiles
from gpufield.power.shadow import attest, attestation_unchanged
from gpufield.telemetry.nvml_deadline import BoundedNvml


def _text(v) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def query(raw) -> dict:
    """Query every GPU of ``raw`` (a pynvml-like module) read-only; the result record."""
    nv = BoundedNvml(ReadOnlyNvml(raw), timeout_s=10.0)
    rec: dict = {"t": time.time(), "pynvml_has_calls": {n: hasattr(raw, n) for n in (
        "nvmlDeviceWorkloadPowerProfileGetProfilesInfo", "nvmlDeviceWorkloadPowerProfileGetCurrentProfiles",
        "nvmlDeviceWorkloadPowerProfileSetRequestedProfiles")}, "profile_ids": PROFILE_IDS, "gpus": {}}
    nv.nvmlInit()
    try:
        for k, fn in (("driver", "nvmlSystemGetDriverVersion"), ("nvml", "nvmlSystemGetNVMLVersion")):
            try:
                rec[k] = _text(getattr(nv, fn)())
            except Exception as e:  # noqa: BLE001 - recorded
                rec[k] = f"error: {type(e).__name__}: {e}"
        before = attest(nv)
        masks_before = {}
        for i in range(nv.nvmlDeviceGetCount()):
            h = nv.nvmlDeviceGetHandleByIndex(i)
            uuid = _text(nv.nvmlDeviceGetUUID(h))
            g: dict = {"index": i, "name": _text(nv.nvmlDeviceGetName(h))}
            try:
                wp = read_workload_profiles(nv, h)
                g["workload_profiles"] = asdict(wp)
                masks_before[uuid] = (wp.requested, wp.enforced)
            except Exception as e:  # noqa: BLE001 - any other NVML error is the answer we record
                g["workload_profiles"] = {"supported": False, "reason": f"{type(e).__name__}: {e}"}
            rec["gpus"][uuid] = g
        after = attest(nv)
        ok, diffs = attestation_unchanged(before, after)
        for i in range(nv.nvmlDeviceGetCount()):
            h = nv.nvmlDeviceGetHandleByIndex(i)
            uuid = _text(nv.nvmlDeviceGetUUID(h))
            if uuid in masks_before:
                wp = read_workload_profiles(nv, h)
                if (wp.requested, wp.enforced) != masks_before[uuid]:
                    ok = False
                    diffs.append(f"{uuid}: profile masks {masks_before[uuid]} -> {(wp.requested, wp.enforced)}")
        rec.update(attest_before=before, attest_after=after, unchanged=ok, diffs=diffs)
    finally:
        nv.nvmlShutdown()
        nv.close()
    return rec


def main(argv: list[str] | None = None) -> int:
    """CLI (module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", help="output directory")
    ap.add_argument("--fake", action="store_true", help="gpufield.testing.FakeNvml H200 (CPU check)")
    a = ap.parse_args(argv)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    if a.fake:
        from gpufield.testing import FakeNvml, h200

        raw = FakeNvml([h200(0)], read_only=True)
    else:
        import pynvml as raw
    try:
        rec = query(raw)
    except Exception as e:  # noqa: BLE001 - the record says what failed
        rec = {"error": f"{type(e).__name__}: {e}", "unchanged": None}
    text = json.dumps(rec, indent=1, default=str)
    (out / "wpp_query.json").write_text(text)
    lines = [f"driver {rec.get('driver')} nvml {rec.get('nvml')}", f"pynvml calls: {rec.get('pynvml_has_calls')}"]
    for u, g in rec.get("gpus", {}).items():
        w = g["workload_profiles"]
        lines.append(f"{u} {g['name']}: supported={w.get('supported')} reason={w.get('reason', '')!r} "
                     f"available={w.get('available')} requested={w.get('requested')} enforced={w.get('enforced')}")
    lines.append(f"settings unchanged: {rec.get('unchanged')} {rec.get('diffs', '')} {rec.get('error', '')}")
    (out / "wpp_query.log").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0 if rec.get("unchanged") else 1


if __name__ == "__main__":
    sys.exit(main())
