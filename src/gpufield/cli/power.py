"""`gpufield power`: command-line layer over :mod:`gpufield.power`."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Literal

import typer

app = typer.Typer(help="Phase-decoupled power control for disaggregated LLM serving (see gpufield.power).",
                  no_args_is_help=True)


def _clean(o):
    if isinstance(o, float) and not math.isfinite(o):
        return None
    if isinstance(o, dict):
        return {k: _clean(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_clean(v) for v in o]
    return o


def _positive(value: float | None, option: str) -> float | None:
    if value is not None and not value > 0:  # also NaN
        raise typer.BadParameter(f"must be > 0, got {value:g}", param_hint=f"'{option}'")
    return value


@app.command()
def scenarios() -> None:
    """List the bundled twin scenarios.

    Example: gpufield power scenarios
    """
    from gpufield.power import bundled_scenarios, load_scenario

    for name in bundled_scenarios():
        typer.echo(f"{name}: {load_scenario(name).description}")


@app.command()
def simulate(scenario: str = typer.Argument(..., help="bundled scenario name or path to a scenario JSON"),
             as_json: bool = typer.Option(False, "--json", help="print the full report as JSON"),
             duration_s: float = typer.Option(None, "--duration", help="override the load duration (s, > 0)",
                                              callback=lambda v: _positive(v, "--duration")),
             oracle: bool = typer.Option(True, "--oracle/--no-oracle", help="exhaustive static search"),
             efficiency: bool = typer.Option(True, "--efficiency/--no-efficiency", help="also run efficiency mode")
             ) -> None:
    """A/B in the twin: default, Max-Q stand-in, static clock lock, static cap, balanced, oracle.

    Example: gpufield power simulate moe-agentic-b200 --json
    """
    from gpufield.power import load_scenario, simulate_ab

    rep = simulate_ab(load_scenario(scenario), duration_s=duration_s, oracle=oracle, efficiency=efficiency)
    d = rep.to_dict()
    if as_json:
        typer.echo(json.dumps(_clean(d), indent=1))
        return
    typer.echo(f"{rep.scenario} ({rep.gpu} x{rep.n_gpus}, {rep.model}), {rep.requests} requests, "
               f"SLO TTFT p99 {rep.slo['ttft_p99_s']} s / ITL p99 {rep.slo['itl_p99_s'] * 1e3:.0f} ms [simulated]")
    for a in d["arms"] + [x for x in (d["oracle"], d["oracle_slo_only"]) if x]:
        lo, hi = a["tokens_per_j_ci"]
        typer.echo(f"  {a['name']:18s} tokens/J {a['tokens_per_j']:.4f} [{lo:.4f}, {hi:.4f}] "
                   f"({a['tokens_per_j_vs_default'] * 100:+.1f}%)  e2e {a['e2e_mean_s']:.2f} s "
                   f"({a['e2e_mean_vs_default'] * 100:+.1f}%)  TTFT99 {a['ttft_p99_s']:.2f} s  "
                   f"ITL99 {a['itl_p99_s'] * 1e3:.1f} ms  SLO windows {a['slo_attainment'] * 100:.0f}%")
    if "balanced_over_oracle_tokens_per_j" in d:
        typer.echo(f"  balanced / oracle tokens/J: {d['balanced_over_oracle_tokens_per_j']:.3f}")


@app.command()
def calibrate(scenario: str = typer.Argument(..., help="bundled scenario name or path"),
              out: str = typer.Option(..., "--out", help="directory for the profile JSON files"),
              mode: Literal["balanced", "efficiency"] = typer.Option("balanced", help="balanced or efficiency")
              ) -> None:
    """Calibrate both lanes of a scenario in the twin and save the profiles (JSON).

    Example: gpufield power calibrate moe-agentic-b200 --out profiles/
    """
    from gpufield.power import Mode, load_scenario
    from gpufield.power.ab import calibrate_twin

    if Path(out).exists() and not Path(out).is_dir():
        raise typer.BadParameter(f"{out!r} exists and is not a directory (--out names a directory for the "
                                 "profile files)", param_hint="'--out'")
    for p in calibrate_twin(load_scenario(scenario), mode=Mode(mode), out_dir=out):
        typer.echo(f"{p.key.lane}: {p.setting.label} ({p.actuator})")


@app.command()
def restore(ctx: typer.Context,
            state_dir: str = typer.Option("/var/tmp/gpufield-power", help="where saved settings live"),
            allow: list[str] = typer.Option([], "--allow", help="GPU UUID that may be written (repeat)"),  # noqa: B008
            i_own_this_gpu: bool = typer.Option(False, "--i-own-this-gpu", help="explicit write flag")) -> None:
    """Restore GPUs left changed by a crashed run (needs --allow UUIDs and --i-own-this-gpu).

    Example: sudo gpufield power restore --allow GPU-7a0e... --i-own-this-gpu
    """
    missing = [f for f, given in (("--allow UUID", allow), ("--i-own-this-gpu", i_own_this_gpu)) if not given]
    if missing:  # before NVML: a command that cannot write anything is a usage error, whatever the machine
        from gpufield.cli import _click

        raise _click().exceptions.UsageError(f"restore writes GPU settings: it needs --allow UUID (repeat per GPU) and "
                                  f"--i-own-this-gpu; missing: {', '.join(missing)}", ctx=ctx)
    bad = [u for u in allow if not u.startswith(("GPU-", "MIG-"))]
    if bad:
        raise typer.BadParameter(f"expected NVML UUIDs starting with 'GPU-' or 'MIG-', got {', '.join(bad)}",
                                 param_hint="'--allow'")
    from gpufield.power import NvmlActuator, WriteConfig

    cfg = WriteConfig(allow_uuids=frozenset(allow), i_own_this_gpu=i_own_this_gpu, state_dir=state_dir)
    with NvmlActuator(cfg, install_signal_handlers=False) as act:
        typer.echo(f"restored: {act.orphans_restored or 'nothing'}")
