"""Fit the twin's H200 power model to a power-probe JSON and report the error per regime.

    PYTHONPATH=src python3 benchmarks/power_twin_fit.py PROBE_JSON [PROBE_JSON ...] [--write] [--commit SHA,...]

Several probes (runs on different boards) are fitted together (``twin.fit.merge_probes``; cases named
``case@run``, the run taken from the results folder name ``h200-<run>``).

Fits :func:`gpufield.power.twin.fit.fit_power_model` on the probe's ``fit`` cases (the split is fixed
in benchmarks/power_twin_probe.py's docstring), prints every case (measured, predicted, error) and the
per-regime error on the fit and the held-out cases, and also the clock the twin's firmware picks for
each loaded case under the enforced limit (the end-to-end check: power *and* clock from the model).
``--write`` stores the fitted parameters in ``src/gpufield/power/data/twin_gpus.json`` (H200 entry)
with a ``fit`` record (probe path, run, commit, date, per-regime errors) and updated ``sources``.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
from pathlib import Path

import numpy as np

from gpufield.power.twin.fit import fit_power_model, merge_probes
from gpufield.power.twin.gpu import Firmware, GpuModel, gpu_model_from_dict

ROOT = Path(__file__).resolve().parents[1]
GPUS_JSON = ROOT / "src" / "gpufield" / "power" / "data" / "twin_gpus.json"


def firmware_clock(m: GpuModel, a_c: float, a_m: float, lam: float, *, compute_bound: bool, busy: float) -> float:
    """Steady clock (MHz) the twin's firmware picks under the default limit for a case's activity.

    A compute-bound case keeps its fraction of peak (``a_c``) as the clock moves; a memory-bound
    one keeps its bytes/s (``a_m``) and FLOP/s (so ``a_c`` scales with ``f_case / f``).
    """
    c = m.sm_clocks_mhz.astype(float)
    tabs = []
    for s in range(len(m.mem_clocks_mhz)):
        ac = np.full_like(c, a_c) if compute_bound else np.minimum(1.0, a_c * c[0] / c)
        tabs.append(m.power_w(c, s, ac, a_m, lam, busy=busy))
    table = np.stack(tabs, 1)
    fw = Firmware(m)
    ops = [fw.choose(table, 0.05) for _ in range(400)]
    return float(np.median(c[[o.clock_index for o in ops[200:]]]))


_SCALED = ("idle_max_clock_w", "sm_dynamic_w", "hbm_w", "mem_path_sm_w")  # busy_w: like sm_dynamic_w


def _rescale_blackwell(data: dict, old_h200: dict) -> None:
    """B200/B300 have no measurement of their own: their [RECON] power terms were H200 values times
    fixed ratios; keep each ratio (new = new H200 x old SKU / old H200) so they follow the refit, and
    give them the H200's measured idle-with-context shape and launch term scaled by idle power."""
    new = data["gpus"]["H200"]
    for sku in ("B200", "B300"):
        e = data["gpus"][sku]
        ratio_idle = e["idle_w"] / old_h200["idle_w"]
        former = e.setdefault("_former", {k: e[k] for k in _SCALED})  # this SKU before any refit (idempotent)
        for k in _SCALED:
            e[k] = round(new[k] * former[k] / old_h200[k], 4)
        e["busy_w"] = round(new["busy_w"] * e["sm_dynamic_w"] / new["sm_dynamic_w"], 4) if new["sm_dynamic_w"] else 0.0
        e["idle_ctx_w"] = round(e["idle_w"] * new["idle_ctx_w"] / new["idle_w"], 4)
        e["launch_w"] = round(new["launch_w"] * ratio_idle, 4)
        e["idle_hold_s"] = new["idle_hold_s"]
        e["stream_sm_activity"] = new["stream_sm_activity"]
        e["gemm_mem_activity"] = new["gemm_mem_activity"]
        e["sources"]["refit"] = ("[RECON] idle_max_clock_w, sm_dynamic_w, hbm_w, mem_path_sm_w: the H200 refit times "
                                 "this SKU's former ratio to the former H200 value; busy_w: H200 busy_w / sm_dynamic_w "
                                 "ratio; idle_ctx_w: this SKU's idle_w x the H200 "
                                 "idle_ctx_w / idle_w; launch_w: H200 x idle_w ratio; idle_hold_s, stream_sm_activity, gemm_mem_activity: as H200")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("probes", nargs="+")
    ap.add_argument("--write", action="store_true", help="store the fit in twin_gpus.json (H200)")
    ap.add_argument("--commit", default="", help="commit(s) the probe ran at, comma-separated")
    a = ap.parse_args(argv)
    runs = [Path(p).resolve().parent.parent.name.removeprefix("h200-") for p in a.probes]
    raw = {r: json.loads(Path(p).read_text()) for r, p in zip(runs, a.probes, strict=True)}
    probe = raw[runs[0]] if len(runs) == 1 else merge_probes(raw)
    data = json.loads(GPUS_JSON.read_text())
    base = gpu_model_from_dict("H200", data["gpus"]["H200"])
    fit = fit_power_model(probe, base)
    print(f"{'case':<13} {'split':<8} {'regime':<13} {'MHz':>5} {'a_c':>6} {'a_m':>6} {'kl/s':>7} "
          f"{'meas W':>7} {'pred W':>7} {'err':>7} {'fw MHz':>6} {'GPM SM%':>7} {'GPM DRAM%':>9} {'TC%':>5}")
    fw_clock = {}
    gpm = {c["name"]: c.get("gpm_window") or {} for c in probe["cases"]}

    def pct(v):
        return f"{v:.1f}" if isinstance(v, (int, float)) else "-"
    for c in fit.cases:
        fwc = ""
        if c.regime not in ("idle", "idle_no_ctx"):
            fw_clock[c.name] = firmware_clock(fit.model, c.a_c, c.a_m, c.launches_per_s,
                                              compute_bound=c.regime == "prefill_gemm",
                                              busy=0.0 if c.regime == "launch_bound" else 1.0)
            fwc = f"{fw_clock[c.name]:6.0f}"
        print(f"{c.name:<13} {c.split:<8} {c.regime:<13} {c.clock_mhz:5.0f} {c.a_c:6.3f} {c.a_m:6.3f} "
              f"{c.launches_per_s / 1e3:7.1f} {c.measured_w:7.1f} {c.predicted_w:7.1f} {c.rel_err * 100:+6.1f}% {fwc:>6} "
              f"{pct(gpm[c.name].get('sm_util_pct')):>7} {pct(gpm[c.name].get('dram_bw_util_pct')):>9} "
              f"{pct(gpm[c.name].get('any_tensor_util_pct')):>5}")
    errs = {s: fit.regime_errors(s) for s in ("fit", "held_out")}
    for s, e in errs.items():
        print(f"-- {s}: " + "; ".join(f"{r} max {v['max_abs_rel_err'] * 100:.1f}% mean {v['mean_abs_rel_err'] * 100:.1f}% "
                                       f"(n={v['n']})" for r, v in sorted(e.items())))
    print("params: " + ", ".join(f"{k}={v:.4g}" for k, v in fit.params.items()))
    for n in fit.notes:
        print("note:", n)
    if a.write:
        entry = data["gpus"]["H200"]
        # the Blackwell ratios refer to the H200 values before any refit (kept in the record: idempotent)
        old_h200 = dict(entry.get("fit", {}).get("former") or {k: entry[k] for k in (*_SCALED, "idle_w")})
        for k, v in fit.params.items():
            entry[k] = round(v, 4) if isinstance(v, float) else v
        src = entry.setdefault("sources", {})
        probe_rel = [os.path.relpath(Path(p).resolve(), ROOT) for p in a.probes]
        for k in ("idle_w", "idle_ctx_w", "idle_max_clock_w", "idle_hold_s", "busy_w", "sm_dynamic_w", "hbm_w", "mem_path_sm_w",
                  "launch_w", "stream_sm_activity", "gemm_mem_activity"):
            src.pop(k, None)
        src.pop("hbm_w/mem_path_sm_w", None)
        src["fitted (idle_w, idle_ctx_w, idle_max_clock_w, idle_hold_s, busy_w, sm_dynamic_w, hbm_w + mem_path_sm_w, "
            "launch_w, gemm_mem_activity)"] = (
            f"gpufield.power.twin.fit on the fit cases of {', '.join(probe_rel)} ({', '.join(runs)}; read-only, "
            "default settings); "
            "see 'fit' for the per-regime error on fit and held-out cases")
        src["hbm_w/mem_path_sm_w split"] = ("kept from the previous H200 model (15.5% of the memory power on the SM "
                                            "clock: 'The Illusion of Power Capping in LLM Decode', arXiv 2605.11999, "
                                            "clock locking recovers <= 32%); not identifiable at default settings")
        src["stream_sm_activity"] = "0: folded into mem_path_sm_w by the fit (twin.fit docstring)"
        entry["fit"] = {"probes": probe_rel, "runs": runs, "commits": a.commit.split(",") if a.commit else [],
                        "date": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%MZ"),
                        "devices": {r: raw[r].get("meta", {}).get("before", {}) for r in runs},
                        "notes": list(fit.notes),
                        "errors": {s: {r: {"max_abs_rel_err": round(v["max_abs_rel_err"], 4),
                                           "cases": {k: round(x, 4) for k, x in v["cases"].items()}}
                                       for r, v in e.items()} for s, e in errs.items()},
                        "firmware_clock_mhz": fw_clock, "former": old_h200}
        _rescale_blackwell(data, old_h200)
        tmp = GPUS_JSON.with_name(f".{GPUS_JSON.name}.tmp")
        tmp.write_text(json.dumps(data, indent=2) + "\n")
        os.replace(tmp, GPUS_JSON)
        print(f"wrote {GPUS_JSON}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
