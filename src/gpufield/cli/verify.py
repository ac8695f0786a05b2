"""`gpufield verify`: command-line layer over :mod:`gpufield.verify`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(help="Verify ReLU networks (ONNX + VNN-LIB): IBP, CROWN, alpha-CROWN, beta-CROWN BaB, PGD.",
                  no_args_is_help=True)

Method = Annotated[str, typer.Option(help="ibp | crown | alpha")]
Device = Annotated[str, typer.Option(help="cpu, cuda, cuda:N")]
Dtype = Annotated[str, typer.Option(help="float32 | float64")]
AlphaIters = Annotated[int, typer.Option(help="alpha-CROWN Adam steps")]


Branching = Annotated[str, typer.Option(help="beta-CROWN BaB branching: fsb | babsr")]
NoBab = Annotated[bool, typer.Option("--no-bab", help="no branch and bound (incomplete v1 pipeline)")]


def _config(method: str, device: str, dtype: str, alpha_iterations: int, branching: str = "fsb",
            no_bab: bool = False, progress: bool = False):
    from gpufield.verify import AlphaConfig, RefineConfig, VerifyConfig

    return VerifyConfig(method=method, device=device, dtype=dtype,
                        alpha=AlphaConfig(iterations=alpha_iterations), progress=progress,
                        refine=None if no_bab else RefineConfig(branching=branching))


@app.command("run")
def run(
    model: Annotated[Path, typer.Argument(help="ONNX model (.onnx or .onnx.gz)")],
    prop: Annotated[Path, typer.Argument(help="VNN-LIB property (.vnnlib or .vnnlib.gz)")],
    out: Annotated[Path, typer.Option("--out", help="VNN-COMP result file to write")],
    timeout: Annotated[float, typer.Option("--timeout", help="seconds, loading included")] = 60.0,
    force: Annotated[bool, typer.Option("--force", help="overwrite an existing result file")] = False,
    method: Method = "alpha",
    device: Device = "cpu",
    dtype: Dtype = "float32",
    alpha_iterations: AlphaIters = 100,
    branching: Branching = "fsb",
    no_bab: NoBab = False,
) -> None:
    """Decide one instance and write its VNN-COMP result file.

    Example:
        gpufield verify run mnist-net_256x2.onnx prop_0_0.03.vnnlib --timeout 120 --out result.txt
    """
    from gpufield.verify import run_instance

    res = run_instance(model, prop, out, timeout_s=timeout, force=force,
                       config=_config(method, device, dtype, alpha_iterations, branching, no_bab,
                                      progress=True))
    typer.echo(f"{res.verdict} ({res.seconds:.2f} s) {res.message}")


@app.command("bench")
def bench(
    bench_dir: Annotated[Path, typer.Argument(help="benchmark directory with instances.csv")],
    out: Annotated[Path, typer.Option("--out", help="results CSV")] = Path("verify_results.csv"),
    reference: Annotated[Path | None, typer.Option("--reference", help="published results CSV")] = None,
    max_instance_s: Annotated[float | None, typer.Option("--max-instance-s", help="cap per-instance timeout")] = None,
    total_s: Annotated[float | None, typer.Option("--total-s", help="wall budget for the whole run")] = None,
    resume: Annotated[bool, typer.Option("--resume", help="skip rows already in --out")] = False,
    force: Annotated[bool, typer.Option("--force", help="overwrite --out")] = False,
    limit: Annotated[int | None, typer.Option("--limit", help="first N instances only")] = None,
    method: Method = "alpha",
    device: Device = "cpu",
    dtype: Dtype = "float32",
    alpha_iterations: AlphaIters = 100,
    branching: Branching = "fsb",
    no_bab: NoBab = False,
    select: Annotated[str | None, typer.Option("--select", help="regex on 'onnx,vnnlib'")] = None,
) -> None:
    """Run a VNN-COMP benchmark directory and print counts (and agreement with --reference).

    Example:
        gpufield verify bench mnist_fc --out res.csv --reference alpha_beta_crown_mnist_fc_results.csv
    """
    from gpufield.verify import bench as run_bench

    s = run_bench(bench_dir, out, reference=reference, max_instance_s=max_instance_s,
                  total_budget_s=total_s, resume=resume, force=force, limit=limit, select=select,
                  config=_config(method, device, dtype, alpha_iterations, branching, no_bab))
    typer.echo(f"counts: {s.counts}  total {s.total_s:.1f} s")
    if s.reference_counts is not None:
        typer.echo(f"reference: {s.reference_counts}  agree {s.agree}  wrong {s.wrong} {s.wrong_instances}")
