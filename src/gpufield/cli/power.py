"""`gpufield power`: command-line layer over :mod:`gpufield.power`.

``simulate`` and ``calibrate`` run for tens of seconds; while they do, a rich progress bar on stderr
shows the scenario, the stage (calibration, arm, oracle grid), the run under way and its simulated
seconds, fed by the library's ``progress`` callback. It never touches stdout (``--json`` output is
the same with or without it) and is off when stderr is not a terminal or with ``--quiet``. Ctrl-C
ends the run with a one-line message on stderr and exit status 130 (no partial report: the library
returns nothing until every arm has run, and calibrate writes its profiles only at the end).

``run`` is the long-running controller (:func:`gpufield.power.run_lanes`): it runs until SIGTERM or
SIGINT, then exits 0 after restoring (write mode) and closing its decision log; start-up problems
exit 4 with every problem listed, a bad ``lanes.toml`` exits 2 naming file, line and key.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Literal

import typer

from gpufield.cli._interrupt import interrupted

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


def _stderr_is_terminal() -> bool:
    """Whether stderr is a terminal (rich's test, so FORCE_COLOR / TTY_COMPATIBLE are honoured)."""
    from rich.console import Console

    return Console(stderr=True).is_terminal


class _Tracker:
    """Remembers the last progress report (for the Ctrl-C message) and forwards it to the display."""

    def __init__(self, show=None) -> None:
        self.last, self.show = None, show

    def __call__(self, p) -> None:
        self.last = p
        if self.show is not None:
            self.show(p)


@contextmanager
def _progress(quiet: bool, command: str) -> Iterator[_Tracker]:
    """A :class:`gpufield.power.SimProgress` callback drawing a rich progress bar on stderr.

    The bar is drawn only when stderr is a terminal and ``quiet`` is false (the callback then only
    records). Ctrl-C inside the block stops the bar, prints what was under way and exits 130.
    """
    tracker = _Tracker()
    try:
        if quiet or not _stderr_is_terminal():
            yield tracker
            return
        from rich.console import Console
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        # two rows: steps of the whole command, then the run under way in simulated seconds
        with Progress(TextColumn("{task.description}"), BarColumn(bar_width=20), TextColumn("{task.fields[count]}"),
                      TimeElapsedColumn(), console=Console(stderr=True), transient=True) as bar:
            task = bar.add_task(command, total=None, count="")
            run = bar.add_task("", total=None, count="", visible=False)

            def show(p) -> None:
                bar.update(task, description=f"{p.scenario}: {p.stage}", completed=p.done, total=p.total,
                           count=f"{p.done}/{p.total} steps")
                if p.run:
                    bar.update(run, description=f"  {p.run}", completed=p.sim_s, total=max(p.sim_total_s, 1e-9),
                               count=f"{p.sim_s:.0f}/{p.sim_total_s:.0f} s simulated", visible=True)
            tracker.show = show
            yield tracker
    except KeyboardInterrupt:
        p = tracker.last
        where = "" if p is None else f" during {p.stage} ({p.done}/{p.total} steps done)"
        interrupted(f"gpufield: {command} interrupted{where}; nothing was printed or written "
                    "(results come only from a finished run)")


_QUIET_HELP = "no progress bar on stderr (it is also off when stderr is not a terminal)"


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
             efficiency: bool = typer.Option(True, "--efficiency/--no-efficiency", help="also run efficiency mode"),
             quiet: bool = typer.Option(False, "--quiet", "-q", help=_QUIET_HELP),
             ) -> None:
    """A/B in the twin: default, Max-Q stand-in, static clock lock, static cap, balanced, oracle.

    Example: gpufield power simulate moe-agentic-b200 --json
    """
    from gpufield.power import load_scenario, simulate_ab

    sc = load_scenario(scenario)
    with _progress(quiet, "power simulate") as progress:
        rep = simulate_ab(sc, duration_s=duration_s, oracle=oracle, efficiency=efficiency, progress=progress)
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


def _check_out_dir(out: Path) -> None:
    """Before the work: --out (or its nearest existing parent) is a writable directory, not a link."""
    from gpufield.errors import InputError

    if out.is_symlink():
        raise InputError("--out is a symbolic link; name the directory itself", path=str(out))
    probe = out
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if probe.exists() and not probe.is_dir():  # out = FILE/sub: mkdir would fail after the whole calibration
        raise InputError("is a file, so --out cannot be created under it; expected a directory", path=str(probe))
    if not os.access(probe if str(probe) else ".", os.W_OK | os.X_OK):
        raise InputError("--out directory is not writable", path=str(probe))


def _int_list(text: str, option: str) -> tuple[int, ...]:
    try:
        vals = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise typer.BadParameter(f"expected comma-separated integers, got {text!r}", param_hint=f"'{option}'") from None
    if not vals or min(vals) < 1:
        raise typer.BadParameter(f"expected integers >= 1, got {text!r}", param_hint=f"'{option}'")
    return vals


def _float_list(text: str, option: str) -> tuple[float, ...]:
    try:
        vals = tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise typer.BadParameter(f"expected comma-separated numbers, got {text!r}", param_hint=f"'{option}'") from None
    if not vals or not all(math.isfinite(v) and v > 0 for v in vals):
        raise typer.BadParameter(f"expected numbers > 0, got {text!r}", param_hint=f"'{option}'")
    return vals


@app.command()
def calibrate(ctx: typer.Context,
              scenario: str = typer.Argument(None, help="twin: bundled scenario name or path (omit with --engine)"),
              out: str = typer.Option(..., "--out", help="twin: directory for the profiles; --engine: profile JSON file"),
              mode: Literal["balanced", "efficiency"] = typer.Option("balanced", help="balanced or efficiency (twin)"),
              quiet: bool = typer.Option(False, "--quiet", "-q", help=_QUIET_HELP),
              engine: str = typer.Option(None, "--engine", help="calibrate against this OpenAI-compatible server "
                                         "(base URL, e.g. http://127.0.0.1:8000)"),
              metrics_url: list[str] = typer.Option([], "--metrics-url", help="engine /metrics URL (repeat; "  # noqa: B008
                                                    "default: the lane's metrics, else <engine>/metrics)"),
              lane: str = typer.Option(None, "--lane", help="lane name in --config, or the role prefill/decode"),
              config: str = typer.Option(None, "--config", help="lanes.toml: the lane's GPUs, engine, metrics, SLOs"),
              engine_kind: str = typer.Option(None, "--engine-kind", help="vllm | sglang | dynamo (default: the "
                                              "lane's engine, else vllm)"),
              api: Literal["completions", "chat"] = typer.Option("completions", "--api", help="/v1/completions or "
                                                                 "/v1/chat/completions"),
              model: str = typer.Option(None, "--model", help="model id (default: the first of /v1/models)"),
              concurrency: str = typer.Option("1,4,16", "--concurrency", help="fixed concurrencies, comma-separated"),
              duration_s: float = typer.Option(60.0, "--duration-s", help="load time per concurrency (s)",
                                               callback=lambda v: _positive(v, "--duration-s")),
              settle_s: float = typer.Option(15.0, "--settle-s", help="wait after each written step (s)"),
              max_tokens: int = typer.Option(128, "--max-tokens", min=1, help="max_tokens of each request"),
              prompt: str = typer.Option("Write a long story about a lighthouse keeper.", "--prompt"),
              itl_slo_s: float = typer.Option(None, "--itl-p99-slo-s", help="ITL p99 SLO (s; default: the lane's)",
                                              callback=lambda v: _positive(v, "--itl-p99-slo-s")),
              ttft_slo_s: float = typer.Option(None, "--ttft-p99-slo-s", help="TTFT p99 SLO (s; default: the lane's)",
                                               callback=lambda v: _positive(v, "--ttft-p99-slo-s")),
              headroom: float = typer.Option(0.10, "--headroom", min=0.0, max=0.99, help="gate at (1 - h) x SLO"),
              write: bool = typer.Option(False, "--write", help="step the lane's power limit (needs --allow)"),
              allow: list[str] = typer.Option([], "--allow", help="GPU UUID the sweep may write (repeat)"),  # noqa: B008
              caps_w: str = typer.Option(None, "--caps-w", help="power limits to step through with --write (W, "
                                         "comma-separated)"),
              force: bool = typer.Option(False, "--force", help="replace an existing profile file of the same key"),
              ) -> None:
    """Calibrate in the twin (SCENARIO) or against a real engine (--engine URL) and save the profile(s).

    With --engine: a fixed-concurrency streaming load sweep, gated on the engine's own TTFT/ITL histograms;
    shadow by default (one as-is step, nothing written); --write --allow UUID --caps-w 700,650,600 steps the
    lane's power limit and restores it.

    Examples: gpufield power calibrate moe-agentic-b200 --out profiles/
              gpufield power calibrate --engine http://127.0.0.1:8000 --lane decode --itl-p99-slo-s 0.05
                  --ttft-p99-slo-s 2 --concurrency 1,4,16 --duration-s 60 --out decode-profile.json
    """
    if engine is not None:
        _calibrate_engine(ctx, engine=engine, scenario=scenario, out=out, quiet=quiet, metrics_url=metrics_url,
                          lane=lane, config=config, engine_kind=engine_kind, api=api, model=model,
                          concurrency=concurrency, duration_s=duration_s, settle_s=settle_s, max_tokens=max_tokens,
                          prompt=prompt, itl_slo_s=itl_slo_s, ttft_slo_s=ttft_slo_s, headroom=headroom, write=write,
                          allow=allow, caps_w=caps_w, force=force)
        return
    if scenario is None:
        from gpufield.cli import _click

        raise _click().exceptions.UsageError("give a twin SCENARIO, or --engine URL to calibrate against a real "
                                             "engine", ctx=ctx)
    from gpufield.power import Mode, load_scenario
    from gpufield.power.ab import calibrate_twin

    if Path(out).exists() and not Path(out).is_dir():
        raise typer.BadParameter(f"{out!r} exists and is not a directory (--out names a directory for the "
                                 "profile files)", param_hint="'--out'")
    _check_out_dir(Path(out))
    sc = load_scenario(scenario)
    with _progress(quiet, "power calibrate") as progress:
        profiles = calibrate_twin(sc, mode=Mode(mode), out_dir=out, progress=progress)
    for p in profiles:
        typer.echo(f"{p.key.lane}: {p.setting.label} ({p.actuator})")


def _calibrate_engine(ctx: typer.Context, *, engine: str, scenario: str | None, out: str, quiet: bool,
                      metrics_url: list[str], lane: str | None, config: str | None, engine_kind: str | None,
                      api: str, model: str | None, concurrency: str, duration_s: float, settle_s: float,
                      max_tokens: int, prompt: str, itl_slo_s: float | None, ttft_slo_s: float | None,
                      headroom: float, write: bool, allow: list[str], caps_w: str | None, force: bool) -> None:
    """``calibrate --engine``: options -> :func:`gpufield.power.calibrate.engine.calibrate_engine` -> profile."""
    from gpufield.cli import _click

    usage = _click().exceptions.UsageError
    if scenario is not None:
        raise usage("--engine calibrates a real engine: drop the SCENARIO argument", ctx=ctx)
    if not engine.startswith(("http://", "https://")):
        raise typer.BadParameter(f"expected an http:// or https:// URL, got {engine!r}", param_hint="'--engine'")
    if lane is None:
        raise usage("--engine needs --lane (a lane name of --config, or prefill/decode)", ctx=ctx)
    if write != bool(caps_w) or (allow and not write):
        raise usage("--write, --allow UUID and --caps-w go together (without them the sweep writes nothing: "
                    "one as-is step)", ctx=ctx)
    if write and not allow:
        raise usage("--write needs --allow UUID for every GPU of the lane", ctx=ctx)
    conc = _int_list(concurrency, "--concurrency")
    caps = _float_list(caps_w, "--caps-w") if caps_w else ()
    from gpufield._files import check_output
    from gpufield.power.calibrate.engine import (
        AS_IS,
        EngineSweepConfig,
        calibrate_engine,
        engine_profile,
    )
    from gpufield.power.types import Lane, LaneSetting

    check_output(out, force=force, option="--out")  # before any load: a link, a FIFO, a directory are refused
    ln = None
    rc = None
    if config is not None:
        from gpufield.power.lanes_config import load_run_config

        rc = load_run_config(config)
        ln = next((x for x in rc.lanes if x.name == lane), None)
        if ln is None:
            raise typer.BadParameter(f"no lane {lane!r} in {config} (lanes: {', '.join(x.name for x in rc.lanes)})",
                                     param_hint="'--lane'")
    elif lane not in ("prefill", "decode"):
        raise typer.BadParameter(f"without --config, --lane is the role 'prefill' or 'decode', got {lane!r}",
                                 param_hint="'--lane'")
    itl = itl_slo_s if itl_slo_s is not None else (ln.itl_p99_slo_s if ln else None)
    ttft = ttft_slo_s if ttft_slo_s is not None else (ln.ttft_p99_slo_s if ln else None)
    if itl is None or ttft is None:
        raise usage("without --config, give --itl-p99-slo-s and --ttft-p99-slo-s", ctx=ctx)
    gpus = tuple(ln.gpus) if ln else tuple(allow)
    if write and set(allow) != set(gpus):
        raise usage(f"--allow must name exactly the lane's GPUs ({', '.join(gpus)})", ctx=ctx)
    steps = tuple(LaneSetting(power_limit_w=w, label=f"cap {w:g} W") for w in caps) if write else (AS_IS,)
    cfg = EngineSweepConfig(engine_url=engine, metrics_urls=tuple(metrics_url) or (tuple(ln.metrics) if ln else ()),
                            engine=engine_kind or (ln.engine if ln else "vllm"),
                            lane=ln.role if ln else Lane(lane), gpus=gpus, api=api, model=model, prompt=prompt,
                            max_tokens=max_tokens, concurrency=conc, duration_s=duration_s, settle_s=settle_s,
                            steps=steps, itl_p99_slo_s=itl, ttft_p99_slo_s=ttft, headroom=headroom)
    echo = (lambda m: None) if quiet else (lambda m: typer.echo(f"gpufield power calibrate: {m}", err=True))
    if gpus and rc is not None:
        from gpufield.power.startup import open_nvml

        from gpufield.telemetry.nvml_deadline import BoundedNvml

        nv = BoundedNvml(open_nvml(rc, write), timeout_s=rc.nvml_call_timeout_s)  # [nvml] call_timeout_s
        if write:
            from gpufield.power.actuators.nvml import NvmlActuator
            from gpufield.power.config import WriteConfig

            act_cm = NvmlActuator(WriteConfig(allow_uuids=frozenset(allow), i_own_this_gpu=True,
                                              state_dir=rc.state_dir), nvml=nv)
        else:
            from gpufield.power.actuators.dryrun import DryRunActuator

            act_cm = DryRunActuator(nvml=nv)
        with act_cm as act:
            cal = calibrate_engine(cfg, actuator=act, progress=echo)
    else:
        if write:
            raise usage("--write needs --config with the lane's GPUs (NVML handles and limits)", ctx=ctx)
        cal = calibrate_engine(cfg, progress=echo)
    prof = engine_profile(cal)
    from gpufield.power.profiles import save_profile

    save_profile(prof, out)  # a temp file beside --out, then a rename
    for r in cal.results:
        e = r.engine
        typer.echo(f"  {r.setting.label:12s} c={r.concurrency:<3d} {r.requests} req, {r.tokens_per_s:.1f} tok/s, "
                   f"client TTFT p99 {r.client['ttft_p99'] * 1e3:.1f} ms ITL p99 {r.client['itl_p99'] * 1e3:.1f} ms"
                   f" {r.client['itl_p99_ci'][0] * 1e3:.1f}-{r.client['itl_p99_ci'][1] * 1e3:.1f}; engine "
                   f"TTFT p99 {_ms(e.get('ttft_p99'))} ITL p99 {_ms(e.get('itl_p99'))}: "
                   f"{'pass' if r.gate_passed else 'FAIL (' + '; '.join(r.gate_reasons) + ')'}")
    typer.echo(f"{cfg.lane.value}: {cal.chosen.label} ({prof.actuator}), gate {'passed' if cal.gate_passed else 'FAILED'}"
               f"; profile {out}")


def _ms(v: float | None) -> str:
    return "missing" if v is None else f"{v * 1e3:.1f} ms" if math.isfinite(v) else "empty"


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


@app.command("run")
def run_cmd(ctx: typer.Context,
            config: str = typer.Option(..., "--config", help="lanes.toml (see gpufield.power.lanes_config)"),
            shadow: bool = typer.Option(False, "--shadow", help="log intents, write nothing (the default)"),
            write: bool = typer.Option(False, "--write", help="apply settings to the GPUs named by --allow"),
            allow: list[str] = typer.Option([], "--allow", help="GPU UUID that --write may change (repeat)"),  # noqa: B008
            max_ticks: int = typer.Option(None, "--max-ticks", min=1, help="stop after this many ticks"),
            ) -> None:
    """Run the controller of a deployment's lanes until SIGTERM/SIGINT (shadow unless --write --allow UUID).

    Example: gpufield power run --config lanes.toml --shadow
    """
    from gpufield.cli import _click

    if shadow and write:
        raise _click().exceptions.UsageError("--shadow and --write exclude each other", ctx=ctx)
    if write and not allow:
        raise _click().exceptions.UsageError("--write needs --allow UUID for every GPU it may change (repeat per "
                                             "GPU); refusing to start", ctx=ctx)
    if allow and not write:
        raise _click().exceptions.UsageError("--allow only applies with --write (shadow mode writes nothing)", ctx=ctx)
    bad = [u for u in allow if not u.startswith(("GPU-", "MIG-"))]
    if bad:
        raise typer.BadParameter(f"expected NVML UUIDs starting with 'GPU-' or 'MIG-', got {', '.join(bad)}",
                                 param_hint="'--allow'")
    from gpufield.power.lanes_config import load_run_config
    from gpufield.power.serve import run_lanes

    s = run_lanes(load_run_config(config), write=write, allow=allow, max_ticks=max_ticks)
    typer.echo(f"{s.mode}: {s.ticks} ticks, period {s.period_mean_s:.3f} s (max {s.period_max_s:.3f}), tick "
               f"{s.tick_p50_ms:.2f} ms p50, {s.intents} intents, would have saved "
               f"{sum(s.would_save_j.values()):.1f} J of {sum(s.energy_j.values()):.1f} J; log {s.log_path}")
