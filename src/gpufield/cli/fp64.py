"""`gpufield fp64`: command-line layer over :mod:`gpufield.fp64`.

Commands:
    model  the emulated-FFT floor model (roof, native, epilogue floor, emulated time) per GPU
    fft    run the emulated FP64 FFT on random data and report its error against numpy.fft
"""

from __future__ import annotations

import json
from typing import Annotated

import typer

app = typer.Typer(help="FP64 on low-precision tensor cores: Ozaki-II DGEMM, emulated FFT, floor model.", no_args_is_help=True)


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x * 1e3:.2f}"


@app.command("model")
def model_cmd(
    gpu: Annotated[list[str] | None, typer.Option("--gpu", help="GPU name (repeatable); default B300 B200 Rubin H100 H200")] = None,
    c_epi: Annotated[list[float] | None, typer.Option("--c-epi", help="epilogue instructions per real output (repeatable); default 203 281")] = None,
    n: Annotated[int, typer.Option(help="points per axis (power of two)")] = 1024,
    dims: Annotated[int, typer.Option(help="number of axes")] = 3,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON instead of a table")] = False,
) -> None:
    """Emulated FP64 3-D FFT floor model (FP8 is All You Need, Part 3) per GPU."""
    from gpufield.fp64.model import model_table

    rows = model_table(gpu or None, c_epi=c_epi or None, n=n, dims=dims)
    if as_json:
        typer.echo(json.dumps([r.to_dict() for r in rows], indent=1))
        return
    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"emulated FP64 FFT {n}^{dims} (times in ms; floor = INT32 instr/s needed for the roof)")
    for col in ("GPU", "roof", "native", "c_epi", "emulated", "x roof", "x native", "floor T/s", "TC int8/fp8"):
        t.add_column(col, no_wrap=True)
    for r in rows:
        for i, c in enumerate(r.c_epi):
            t.add_row(
                (r.gpu + ("*" if r.projected else "")) if i == 0 else "", _ms(r.roof_s) if i == 0 else "",
                _ms(r.native_s) if i == 0 else "", f"{c:g}", _ms(r.emulated_s[i]), f"{r.ratio_to_roof[i]:.2f}",
                f"{r.ratio_to_native[i]:.2f}", f"{r.int32_floor_instr_per_s[i] / 1e12:.0f}",
                f"{_ms(r.tensor_s.get('int8'))}/{_ms(r.tensor_s.get('fp8'))}" if i == 0 else "",
            )
    con = Console()
    con.print(t)
    for r in rows:
        rem = "; ".join(f"{k} (c_epi {'-'.join(f'{c:g}' for c in v['c_epi'])}): "
                        f"{'-'.join(_ms(s) for s in v['emulated_s'])} ms" for k, v in r.remedies.items())
        con.print(f"{r.gpu} remedies: {rem}")
    if any(r.projected for r in rows):
        con.print("* projected numbers (not shipping hardware)")


@app.command("fft")
def fft_cmd(
    shape: Annotated[str, typer.Option(help="comma-separated power-of-two sides (1 to 3 axes)")] = "16,16,16",
    backend: Annotated[str, typer.Option(help="cpu | int8 | fp8")] = "cpu",
    variant: Annotated[str, typer.Option(help="garner | crt | kulisch")] = "crt",
    seed: Annotated[int, typer.Option(help="random seed")] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
) -> None:
    """Run the emulated FP64 FFT on random complex data; print its error next to numpy.fft's."""
    from gpufield.fp64.fft.check import check_fft

    res = check_fft(shape=tuple(int(s) for s in shape.split(",") if s.strip()), backend=backend,
                    variant=variant, seed=seed)
    if as_json:
        typer.echo(json.dumps(res, indent=1))
    else:
        for k, v in res.items():
            typer.echo(f"{k}: {v}")
