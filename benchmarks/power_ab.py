"""Full A/B of the power wing's twin on every bundled scenario (or those named), with the oracle.

    PYTHONPATH=src python3 benchmarks/power_ab.py [--out DIR] [SCENARIO ...]

Writes ``DIR/power_ab_<scenario>.json`` (the ``gpufield power simulate --json`` report) and prints
one line per arm plus wall and CPU time per scenario. Results are *simulated* (see power_RESULTS.md).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from gpufield.cli.power import _clean
from gpufield.power import bundled_scenarios, load_scenario, simulate_ab


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("scenarios", nargs="*")
    ap.add_argument("--out", default="benchmarks/power_results")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name in args.scenarios or bundled_scenarios():
        t0, c0 = time.perf_counter(), time.process_time()
        rep = simulate_ab(load_scenario(name))
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        d = rep.to_dict()
        d["cpu_s"] = cpu
        (out / f"power_ab_{rep.scenario}.json").write_text(json.dumps(_clean(d), indent=1))
        print(f"{rep.scenario} (peak x{load_scenario(name).peak_rate_factor}): {rep.requests} requests, wall {wall:.0f} s, CPU {cpu:.0f} s")
        for a in d["arms"] + [x for x in (d["oracle"], d["oracle_slo_only"]) if x]:
            lo, hi = a["tokens_per_j_ci"]
            print(f"  {a['name']:18s} {a['tokens_per_j']:.4f} [{lo:.4f},{hi:.4f}] {a['tokens_per_j_vs_default'] * 100:+6.1f}%"
                  f"  e2e {a['e2e_mean_vs_default'] * 100:+5.1f}%  TTFT99 {a['ttft_p99_s']:.2f} s"
                  f"  ITL99 {a['itl_p99_s'] * 1e3:.1f} ms  windows {a['slo_attainment'] * 100:.0f}%"
                  f"  P: {a['prefill']}  D: {a['decode']}")
        print(f"  balanced/oracle {d.get('balanced_over_oracle_tokens_per_j', float('nan')):.3f}"
              f"  balanced/oracle(SLO only) {d.get('balanced_over_oracle_slo_only_tokens_per_j', float('nan')):.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
