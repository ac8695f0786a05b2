"""`gpufield verify`: command-line layer over :mod:`gpufield.verify`."""

from __future__ import annotations

from pathlib import Path

import typer

app = typer.Typer(help="Verify ReLU networks (ONNX + VNN-LIB): IBP, CROWN, alpha-CROWN, PGD.",
                  no_args_is_help=True)


def _config(method: str, device: str, dtype: str, alpha_iterations: int):
    from gpufield.verify import AlphaConfig, VerifyConfig

    return VerifyConfig(method=method, device=device, dtype=dtype,
                        alpha=AlphaConfig(iterations=alpha_iterations))


@app.command("run")
def run(
    model: Path = typer.Argument(..., help="ONNX model (.onnx or .onnx.gz)"),
    prop: Path = typer.Argument(..., help="VNN-LIB property (.vnnlib or .vnnlib.gz)"),
    timeout: float = typer.Option(60.0, "--timeout", help="seconds, loading included"),
    out: Path = typer.Option(..., "--out", help="VNN-COMP result file to write"),
    force: bool = typer.Option(False, "--force", help="overwrite an existing result file"),
    method: str = typer.Option("alpha", help="ibp | crown | alpha"),
    device: str = typer.Option("cpu", help="cpu, cuda, cuda:N"),
    dtype: str = typer.Option("float32", help="float32 | float64"),
    alpha_iterations: int = typer.Option(100, help="alpha-CROWN Adam steps"),
) -> None:
    """Decide one instance and write its VNN-COMP result file.

    Example:
        gpufield verify run mnist-net_256x2.onnx prop_0_0.03.vnnlib --timeout 120 --out result.txt
    """
    from gpufield.verify import run_instance

    res = run_instance(model, prop, out, timeout_s=timeout, force=force,
                       config=_config(method, device, dtype, alpha_iterations))
    typer.echo(f"{res.verdict} ({res.seconds:.2f} s) {res.message}")


@app.command("bench")
def bench(
    bench_dir: Path = typer.Argument(..., help="benchmark directory with instances.csv"),
    out: Path = typer.Option(Path("verify_results.csv"), "--out", help="results CSV"),
    reference: Path = typer.Option(None, "--reference", help="published results CSV to compare with"),
    max_instance_s: float = typer.Option(None, "--max-instance-s", help="cap per-instance timeout"),
    resume: bool = typer.Option(False, "--resume", help="skip rows already in --out"),
    force: bool = typer.Option(False, "--force", help="overwrite --out"),
    limit: int = typer.Option(None, "--limit", help="first N instances only"),
    method: str = typer.Option("alpha", help="ibp | crown | alpha"),
    device: str = typer.Option("cpu", help="cpu, cuda, cuda:N"),
    dtype: str = typer.Option("float32", help="float32 | float64"),
    alpha_iterations: int = typer.Option(100, help="alpha-CROWN Adam steps"),
) -> None:
    """Run a VNN-COMP benchmark directory and print counts (and agreement with --reference).

    Example:
        gpufield verify bench mnist_fc --out res.csv --reference alpha_beta_crown_mnist_fc_results.csv
    """
    from gpufield.verify import bench as run_bench

    s = run_bench(bench_dir, out, reference=reference, max_instance_s=max_instance_s,
                  resume=resume, force=force, limit=limit,
                  config=_config(method, device, dtype, alpha_iterations))
    typer.echo(f"counts: {s.counts}  total {s.total_s:.1f} s")
    if s.reference_counts is not None:
        typer.echo(f"reference: {s.reference_counts}  agree {s.agree}  wrong {s.wrong} {s.wrong_instances}")
