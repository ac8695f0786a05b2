"""`gpufield verify`: command-line layer over :mod:`gpufield.verify`."""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import re
import stat
import sys
import time
from pathlib import Path
from typing import Annotated, Literal

import typer

from gpufield._files import atomic_write, check_output
from gpufield.cli._interrupt import interrupted
from gpufield.errors import InputError

app = typer.Typer(help="Verify ReLU networks (ONNX + VNN-LIB): IBP, CROWN, alpha-CROWN, beta-CROWN BaB, PGD.",
                  no_args_is_help=True)

# the choices are spelled out here (gpufield.verify.runner.METHODS, _DTYPES, refine.BRANCHING) so that
# parsing the command line does not import torch; tests/test_cli_errors.py checks they match
Method = Annotated[Literal["ibp", "crown", "alpha"], typer.Option(help="ibp | crown | alpha")]
def _device(value: str, param: typer.CallbackParam) -> str:
    """Option callback: a torch device the verifier runs on (``cpu``, ``cuda``, ``cuda:N``)."""
    if not re.fullmatch(r"cpu|cuda(?::\d+)?", value):
        raise typer.BadParameter(f"{value!r}: expected cpu, cuda or cuda:N", param=param)
    return value


Device = Annotated[str, typer.Option(help="cpu, cuda, cuda:N", callback=_device)]
Dtype = Annotated[Literal["float32", "float64"], typer.Option(help="float32 | float64")]
AlphaIters = Annotated[int, typer.Option(min=0, help="alpha-CROWN Adam steps")]


def _positive(value: float | None, param: typer.CallbackParam) -> float | None:
    """Option callback: a number of seconds must be finite and > 0 (None: not given).

    ``inf`` is refused: ``--timeout inf`` ran the PGD attack rounds forever, and the bench caps
    refused it later with the library's parameter name instead of the option's.
    """
    if value is not None and not (math.isfinite(value) and value > 0):  # also NaN
        raise typer.BadParameter(f"expected a finite number of seconds > 0, got {value:g}", param=param)
    return value


def _report_needs_shard(report: Path | None, shard: str) -> None:
    """``--report`` is written by ``--shard`` runs only: without one it is a usage error, not silently ignored."""
    if report is not None and shard == "none":
        raise typer.BadParameter("written only by --shard runs (rank 0); pass --shard domains (or another) or drop "
                                 "--report", param_hint="'--report'")


def _regex(value: str | None, param: typer.CallbackParam) -> str | None:
    """Option callback: a regular expression that compiles."""
    if value is not None:
        try:
            re.compile(value)
        except re.error as e:
            raise typer.BadParameter(f"{value!r} is not a valid regular expression: {e}", param=param) from None
    return value


Branching = Annotated[Literal["fsb", "babsr"], typer.Option(help="beta-CROWN BaB branching: fsb | babsr")]
NoBab = Annotated[bool, typer.Option("--no-bab", help="no branch and bound (incomplete v1 pipeline)")]
MipSolver = Annotated[Literal["highs", "gurobi"], typer.Option(
    help="solver of the root MIP refinement of deep ReLU chains: highs (scipy) | gurobi (needs gurobipy)")]
# gpufield.verify.dist.session.MODES
Shard = Annotated[Literal["none", "tp", "fsdp", "alpha", "domains"], typer.Option(
    help="spread the work over the ranks torchrun started (one process alone works too): domains (branch "
         "and bound domains), fsdp | alpha | tp (float64 sharded bounds, incomplete) | none")]
InputSplit = Annotated[int, typer.Option(
    "--input-split-max-dims", min=0,
    help="networks with at most this many inputs are split on the input box (batched CROWN, "
         "sensitivity branching) instead of on ReLUs; 0: never")]
Report = Annotated[Path | None, typer.Option("--report", help="JSON with every rank's peak memory, errors and "
                                              "branch-and-bound counts (--shard runs; written by rank 0)")]


def _config(method: str, device: str, dtype: str, alpha_iterations: int, branching: str = "fsb",
            no_bab: bool = False, progress: bool = False, mip_solver: str = "highs",
            input_split_max_dims: int = 16):
    from gpufield.verify import AlphaConfig, RefineConfig, VerifyConfig

    if mip_solver != "highs":
        from gpufield.verify.mip_solvers import backend

        backend(mip_solver)  # gurobipy missing: a one-line error before any work
    return VerifyConfig(method=method, device=device, dtype=dtype,
                        alpha=AlphaConfig(iterations=alpha_iterations), progress=progress,
                        refine=None if no_bab else RefineConfig(branching=branching, mip_solver=mip_solver,
                                                                input_split_max_dims=input_split_max_dims))


#: results that decide nothing: a retry may replace them (see ``run``'s help)
RETRYABLE = ("error", "unknown", "timeout")
VERDICTS = ("sat", "unsat", *RETRYABLE)


def _sidecar(out: Path) -> Path:
    """Where ``verify run`` records that it wrote ``out`` (only for error/unknown/timeout results)."""
    return out.with_name(f".{out.name}.gpufield.json")


def _fingerprint(path: Path) -> dict | None:
    try:
        st = path.stat()
        if not stat.S_ISREG(st.st_mode):  # a FIFO or device: never opened (reading a FIFO blocks)
            return None
        data = path.read_bytes()
    except OSError:
        return None
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": hashlib.sha256(data).hexdigest(),
            "verdict": data.decode("utf-8", "replace").split("\n", 1)[0].strip()}


def _instance(model: Path, prop: Path) -> dict:
    return {"model": str(model.resolve()), "property": str(prop.resolve())}


def _record(out: Path, model: Path, prop: Path, before: dict | None, *, bad_input: bool = False) -> None:
    """After a run wrote ``out``: leave a sidecar record when its result decides nothing, else none.

    ``before`` is ``out``'s fingerprint before the run; an unchanged file is not claimed.
    ``bad_input``: the 'error' is about inputs that could not be loaded, not about this instance.
    """
    side = _sidecar(out)
    fp = _fingerprint(out)
    if fp is not None and fp == before:
        return
    try:
        if fp is None or fp["verdict"] not in RETRYABLE:
            side.unlink(missing_ok=True)
            return
        atomic_write(side, json.dumps({"written_by": "gpufield verify run", **_instance(model, prop), **fp,
                                       "bad_input": bad_input}, indent=1), force=True)
    except (OSError, InputError):  # no record: a retry then needs --force, nothing is lost
        pass


def _overwrite_refusal(out: Path, model: Path, prop: Path) -> str | None:
    """None when ``out`` may be (re)written without --force, else why not."""
    if not out.exists() and not out.is_symlink():
        return None
    fp = _fingerprint(out)
    try:
        rec = json.loads(_sidecar(out).read_text())
    except (OSError, ValueError):
        rec = None
    ours = isinstance(rec, dict) and fp is not None and all(rec.get(k) == fp[k] for k in fp)
    holds = f" (it holds {fp['verdict']!r})" if fp is not None and fp["verdict"] in VERDICTS else ""
    if not ours or fp["verdict"] not in RETRYABLE:
        return (f"result file exists{holds}; without --force a run replaces only an error/unknown/timeout "
                "result that 'gpufield verify run' wrote for the same instance, unchanged since")
    if not rec.get("bad_input") and any(rec.get(k) != v for k, v in _instance(model, prop).items()):
        return (f"result file exists with {fp['verdict']!r} for another instance "
                f"({Path(rec.get('model', '?')).name}, {Path(rec.get('property', '?')).name})")
    return None


@app.command("run")
def run(
    model: Annotated[Path, typer.Argument(help="ONNX model (.onnx or .onnx.gz)")],
    prop: Annotated[Path, typer.Argument(help="VNN-LIB property (.vnnlib or .vnnlib.gz)")],
    out: Annotated[Path, typer.Option("--out", help="VNN-COMP result file to write")],
    timeout: Annotated[float, typer.Option("--timeout", help="seconds (> 0), loading included",
                                           callback=_positive)] = 60.0,
    force: Annotated[bool, typer.Option("--force", help="overwrite an existing result file, whatever it holds")] = False,
    method: Method = "alpha",
    device: Device = "cpu",
    dtype: Dtype = "float32",
    alpha_iterations: AlphaIters = 100,
    branching: Branching = "fsb",
    no_bab: NoBab = False,
    mip_solver: MipSolver = "highs",
    shard: Shard = "none",
    report: Report = None,
    input_split_max_dims: InputSplit = 16,
) -> None:
    """Decide one instance and write its VNN-COMP result file.

    The model and property are checked first: a bad input is reported (exit 2) and written as 'error' to --out where --out may be written.

    --out is never overwritten without --force, except by a retry of the same instance over an error, unknown or timeout result that an earlier 'gpufield verify run' wrote (recorded in a hidden .NAME.gpufield.json beside it), or over its 'error' for unreadable inputs.

    With --shard, start it under torchrun (every rank runs the same command; rank 0 writes --out and --report):

        torchrun --standalone --nproc-per-node 2 -m gpufield verify run NET.onnx PROP.vnnlib --out r.txt --shard domains

    Example:
        gpufield verify run mnist-net_256x2.onnx prop_0_0.03.vnnlib --timeout 120 --out result.txt
    """
    session = None
    _report_needs_shard(report, shard)
    if shard != "none":
        from gpufield.verify.dist.session import Session

        if report is not None:
            check_output(report, force=True, inputs=(model, prop), option="--report")
        session = Session(shard, timeout_s=timeout, device=device)
        if not session.is_root:  # the other ranks never touch --out or --report
            raise typer.Exit(session.worker(model, prop, _config(method, device, dtype, alpha_iterations, branching,
                                                                 no_bab, mip_solver=mip_solver,
                                                                 input_split_max_dims=input_split_max_dims)))
    res, failed = None, False
    try:
        res = _run(model, prop, out, timeout, force, method, device, dtype, alpha_iterations, branching, no_bab,
                   mip_solver, session, input_split_max_dims=input_split_max_dims)
    finally:
        if session is not None:
            for r, msg in session.finish(report, res):
                last = msg.strip().splitlines()[-1] if msg.strip() else msg
                print(f"gpufield: rank {r if r >= 0 else '?'} failed: {last}", file=sys.stderr)
                failed = True
    typer.echo(f"{res.verdict} ({res.seconds:.2f} s) {res.message}")
    if failed:
        raise typer.Exit(1)


def _run(model, prop, out, timeout, force, method, device, dtype, alpha_iterations, branching, no_bab, mip_solver,
         session, input_split_max_dims: int = 16):
    """``run``'s body on rank 0 (or alone); returns the :class:`~gpufield.verify.runner.VerifyResult`."""
    from gpufield.deadline import (  # torch-free
        Deadline,
        ProcessResultSeal,
        ResultSeal,
        write_text_atomic,
    )

    t0 = time.monotonic()
    # a process started for this command (gpufield verify run ..., python -m gpufield verify run ...)
    # counts its budget from its own start, as VNN-COMP's run_instance.sh measures it
    own = sys.argv[1:3] == ["verify", "run"]
    deadline = Deadline.from_process_start(timeout) if own else Deadline.after(timeout, start_s=t0)
    before = _fingerprint(out)
    refusal = None if force else _overwrite_refusal(out, model, prop)
    # armed before the heavy imports and the loading: the file is final by the deadline + 0.5 s
    # (VerifyConfig.grace_s's default; the config needs the imports)
    try:  # devices, FIFOs, links and the command's own inputs are never written (reported after loading)
        check_output(out, force=True, inputs=(model, prop), option="--out")
        unsafe = None
    except InputError as e:
        unsafe = e
    writable = refusal is None and unsafe is None and out.parent.is_dir() and not out.is_dir()
    # the backstop runs in a forked child where the OS has fork: a timer thread cannot fire while importing
    # torch holds the GIL (it sealed 0.6 s late that way on a loaded 2-core machine)
    if not writable:
        seal = None
    elif hasattr(os, "fork"):
        seal = ProcessResultSeal(deadline.end_s + 0.5, out, "timeout\n")
    else:
        seal = ResultSeal(deadline.end_s + 0.5, lambda: write_text_atomic(out, "timeout\n"))
    with seal if seal is not None else contextlib.nullcontext():
        from gpufield.verify import run_instance, write_result_file
        from gpufield.verify.runner import load_instance

        try:  # inputs first: a bad model or property is the error to report, whatever --out holds
            loaded = load_instance(model, prop)
        except InputError:
            try:
                if refusal is not None or unsafe is not None:
                    raise OSError(refusal or str(unsafe)) from None

                def write():
                    write_result_file(out, "error", force=True)

                if seal is None:
                    write()
                elif not seal.finish(write):
                    raise OSError("loading outlasted the deadline; the file says timeout")
                _record(out, model, prop, before, bad_input=True)
            except (OSError, InputError) as e:  # InputError: --out is a device, FIFO, link or an input
                print(f"gpufield: note: 'error' not written to {out} ({e})", file=sys.stderr)
            raise
        if not out.parent.is_dir():
            raise InputError("the folder of the result file does not exist", path=str(out))
        if out.is_dir():
            raise InputError("is a folder; --out names the result file to write", path=str(out))
        if unsafe is not None:
            raise unsafe
        if refusal is not None:
            raise InputError(f"{refusal}; pass --force to overwrite it", path=str(out))
        config = _config(method, device, dtype, alpha_iterations, branching, no_bab, progress=True,
                         mip_solver=mip_solver, input_split_max_dims=input_split_max_dims)
        try:
            if session is not None and session.shard != "domains":
                from gpufield.verify.dist.session import run_bounds

                res = run_bounds(session, out, loaded=loaded, config=config, deadline_s=deadline.end_s, seal=seal)
            else:
                if session is not None and config.refine is not None:  # branch and bound over the ranks
                    from dataclasses import replace

                    config = replace(config, refine=replace(config.refine, sync=session.refine_sync(model)))
                res = run_instance(model, prop, out, timeout_s=max(0.0, timeout - (time.monotonic() - t0)),
                                   force=True, loaded=loaded, deadline=deadline, seal=seal, config=config)
        except KeyboardInterrupt:  # typer would exit 130 silently
            fp = _fingerprint(out)
            wrote = f"; wrote '{fp['verdict']}' to {out}" if fp is not None and fp != before else ""
            interrupted(f"gpufield: verify run interrupted after {time.monotonic() - t0:.1f} s{wrote}")
        finally:  # also after a bad input or Ctrl-C, which write error / unknown
            _record(out, model, prop, before)
    return res


@app.command("bench")
def bench(
    bench_dir: Annotated[Path, typer.Argument(help="benchmark directory with instances.csv", exists=True,
                                              file_okay=False, dir_okay=True)],
    out: Annotated[Path, typer.Option("--out", help="results CSV")] = Path("verify_results.csv"),
    reference: Annotated[Path | None, typer.Option("--reference", help="published results CSV", exists=True,
                                                   file_okay=True, dir_okay=False)] = None,
    max_instance_s: Annotated[float | None, typer.Option("--max-instance-s", help="cap per-instance timeout",
                                                         callback=_positive)] = None,
    total_s: Annotated[float | None, typer.Option("--total-s", help="wall budget for the whole run",
                                                  callback=_positive)] = None,
    resume: Annotated[bool, typer.Option("--resume", help="skip rows already in --out")] = False,
    force: Annotated[bool, typer.Option("--force", help="overwrite --out")] = False,
    limit: Annotated[int | None, typer.Option("--limit", min=0, help="first N instances only")] = None,
    method: Method = "alpha",
    device: Device = "cpu",
    dtype: Dtype = "float32",
    alpha_iterations: AlphaIters = 100,
    branching: Branching = "fsb",
    no_bab: NoBab = False,
    mip_solver: MipSolver = "highs",
    select: Annotated[str | None, typer.Option("--select", help="regex on 'onnx,vnnlib'", callback=_regex)] = None,
    shard: Annotated[Literal["none", "domains"], typer.Option(
        help="domains: spread each branch and bound over the ranks torchrun started | none")] = "none",
    report: Report = None,
    input_split_max_dims: InputSplit = 16,
) -> None:
    """Run a VNN-COMP benchmark directory and print counts (and agreement with --reference).

    Example:
        gpufield verify bench mnist_fc --out res.csv --reference alpha_beta_crown_mnist_fc_results.csv
    """
    from gpufield.verify import bench as run_bench

    ins = [bench_dir / "instances.csv", *([reference] if reference else [])]
    config = _config(method, device, dtype, alpha_iterations, branching, no_bab, mip_solver=mip_solver,
                     input_split_max_dims=input_split_max_dims)
    session = None
    _report_needs_shard(report, shard)
    if shard != "none":  # rank 0 runs the benchmark; the others join its branch-and-bound searches
        from dataclasses import replace

        from gpufield.verify.dist.session import Session

        if report is not None:
            check_output(report, force=True, inputs=ins, option="--report")
        session = Session(shard, timeout_s=(max_instance_s or 900.0), device=device)
        if not session.is_root:
            raise typer.Exit(session.worker(None, None, config))
        if config.refine is not None:
            config = replace(config, refine=replace(config.refine, sync=session.refine_sync(bench_dir)))
    s = None
    try:
        for o in (out, Path(str(out) + ".summary.json")):  # before any instance runs
            check_output(o, force=True, inputs=ins, option="--out")
        s = run_bench(bench_dir, out, reference=reference, max_instance_s=max_instance_s,
                      total_budget_s=total_s, resume=resume, force=force, limit=limit, select=select,
                      config=config)
    except KeyboardInterrupt:  # typer would exit 130 silently
        interrupted(f"gpufield: verify bench interrupted; the instances finished so far are in {out} "
                    "(run again with --resume to continue)")
    finally:
        if session is not None:
            for r, msg in session.finish(report):
                print(f"gpufield: rank {r if r >= 0 else '?'} failed: {msg.strip().splitlines()[-1:]}", file=sys.stderr)
    typer.echo(f"counts: {s.counts}  total {s.total_s:.1f} s")
    if s.reference_counts is not None:
        typer.echo(f"reference: {s.reference_counts}  agree {s.agree}  wrong {s.wrong} {s.wrong_instances}")
