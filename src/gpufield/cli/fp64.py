"""`gpufield fp64`: command-line layer over :mod:`gpufield.fp64`.

Commands:
    model  the emulated-FFT floor model (roof, native, epilogue floor, emulated time) per GPU
    fft    run the emulated FP64 FFT on random data and report its error against numpy.fft
    crossover  the measured crossover table per GPU and the path emulate() takes for a shape
"""

from __future__ import annotations

import json
from typing import Annotated

import typer

app = typer.Typer(help="FP64 on low-precision tensor cores: the emulated FFT check and the floor model "
                       "(Ozaki-II DGEMM is Python only: gpufield.fp64.ozaki_matmul).", no_args_is_help=True)


def _ms(x: float | None) -> str:
    """Seconds as milliseconds: two decimals, or three significant digits below 1 ms (small sizes)."""
    if x is None:
        return "-"
    v = x * 1e3
    return f"{v:.2f}" if v >= 0.995 else f"{v:.3g}"


#: table columns: (header, shown by default); --wide shows all of them
_MODEL_COLUMNS = (("GPU", True), ("roof", True), ("native", True), ("c_epi", True), ("conv", True),
                  ("emulated", True), ("x roof", True), ("x native", True), ("floor T/s", False),
                  ("TC int8/fp8", False))


_MODEL_HELP = (
    "Emulated FP64 FFT floor model (FP8 is All You Need, Part 3) per GPU, for n^dims points, with and without "
    "the input-conversion term.\n\n"
    "The paper counts only the per-output epilogue (c_epi 203-281 instructions per real output). The stage kernel "
    "also converts its input (scaling and residues) first: \"conv\" instructions per real output, counted in the "
    "kernel's committed sm_90 SASS (gpufield/fp64/data/conversion_counts.json; GPUs without a listing use the "
    "H200's as a stand-in, marked ~). Each GPU gets rows with conv 0 (the paper's model) and with the count.\n\n"
    "Times in ms (roof, native FP64, emulated) and the emulated time as a multiple of the roof and of native "
    "(above 1: emulation loses); a sentence per GPU says where emulation loses. --measured compares the model at "
    "the measured counts with the measured H200 times. --wide adds \"floor T/s\" (the INT32 instructions per "
    "second the epilogue would need to reach the roof, in tera) and the INT8/FP8 tensor-core times; --json prints "
    "every field."
)


def _span(xs: list[float], fmt: str = "{:.2f}") -> str:
    lo, hi = min(xs), max(xs)
    return fmt.format(lo) if fmt.format(lo) == fmt.format(hi) else f"{fmt.format(lo)}-{fmt.format(hi)}"


def _verdict(row: dict) -> str:
    """One plain sentence per GPU: does emulation lose to native FP64, by how much, with and without the term."""
    wo, wc = row["without"]["ratio_to_native"], (row["with"] or {}).get("ratio_to_native")
    worst = wc if wc else wo
    if min(worst) > 1:
        head = "emulation LOSES to native FP64"
    elif max(worst) <= 1:
        head = "emulation beats native FP64"
    else:
        head = "emulation loses to native FP64 at the high c_epi"
    tail = f"{_span(wc)}x with the conversion term" if wc else "no conversion count for these stage lengths"
    return f"{row['gpu']}: {head} ({_span(wo)}x native's time in the paper's model; {tail})"


def _measured_table(con) -> None:
    from rich.table import Table

    from gpufield.fp64.model_counts import measured_check

    chk = measured_check("H200")
    t = Table(title=f"{chk['gpu']}: model at the measured SASS counts vs measured, ms")
    for h in ("n", "conv", "c_epi", "measured", "max()", "err", "sum", "err", "cuFFT"):
        t.add_column(h, justify="right", overflow="fold")
    for r in chk["rows"]:
        t.add_row(f"{r['n']}^3", f"{r['c_conv']:.1f}", f"{r['c_epi']:.1f}", _ms(r["measured_s"]),
                  _ms(r["overlapped_s"]), f"{100 * r['overlapped_err']:+.1f}%", _ms(r["serialized_s"]),
                  f"{100 * r['serialized_err']:+.1f}%", _ms(r["cufft_s"]))
    con.print(t)
    plan = " / ".join(f"{_ms(r['serialized_plan_s'])} ms ({100 * r['serialized_plan_err']:+.1f}%)" for r in chk["rows"])
    con.print(f"max() = the paper's overlapped form, sum = serialized (roof + instructions); err = model / "
              f"measured - 1. Rates from the catalogue, nothing fitted. Times: {chk['source']}. With the bytes "
              f"the plan moves (every stage one HBM round trip, twice the paper's roof), serialized: {plan}. "
              f"Picking the form on the other two sizes ({chk['holdout']}^3 held out) gives {chk['choice']}, "
              f"which misses {chk['holdout']}^3 by {100 * chk['holdout_err']:+.1f}%. No form is right per stage: "
              f"N = 32 stages issue at 45 % of the SM's rate, N = 16 at 51-58 %, the model assumes 50 % "
              f"(H200 run 76, benchmarks/fp64_RESULTS.md).")


@app.command("model", help=_MODEL_HELP)
def model_cmd(
    gpu: Annotated[list[str] | None, typer.Option("--gpu", help="GPU name (repeatable); default B300 B200 Rubin H100 H200")] = None,
    c_epi: Annotated[list[float] | None, typer.Option("--c-epi", help="epilogue instructions per real output (repeatable); default 203 281")] = None,
    n: Annotated[int, typer.Option(help="points per axis (power of two)")] = 1024,
    dims: Annotated[int, typer.Option(help="number of axes")] = 3,
    combine: Annotated[str, typer.Option(help="overlapped (the paper's max of roof and instructions) | serialized (their sum)")] = "overlapped",
    measured: Annotated[bool, typer.Option("--measured", help="also compare the model at the measured SASS counts with the measured H200 times")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON instead of a table")] = False,
    wide: Annotated[bool, typer.Option("--wide", help="add the INT32-floor and tensor-core time columns "
                                       "(wider than 80 columns)")] = False,
) -> None:
    """The floor model table (help: :data:`_MODEL_HELP`, one paragraph per line so that it wraps cleanly)."""
    from gpufield.fp64.model import FftFloorModel
    from gpufield.fp64.model_counts import measured_check, projection_rows

    rows = projection_rows(gpu or None, n=n, dims=dims, c_epi=c_epi or None, combine=combine)
    if as_json:
        out: dict | list = rows
        if measured:
            out = {"projections": rows, "measured_check": measured_check("H200")}
        typer.echo(json.dumps(out, indent=1))
        return
    from rich.console import Console
    from rich.table import Table

    shown = [i for i, (_, default) in enumerate(_MODEL_COLUMNS) if wide or default]
    t = Table(title=f"emulated FP64 FFT {n}^{dims}, times in ms ({combine})")
    for i in shown:
        # fold instead of "…": a narrow terminal wraps a value, it never hides digits
        t.add_column(_MODEL_COLUMNS[i][0], overflow="fold", justify="left" if i == 0 else "right")
    for row in rows:
        cnt = row["counts"]
        for part in ("without", "with"):
            if row[part] is None:
                continue
            r = FftFloorModel(**{**row[part], "c_epi": tuple(row[part]["c_epi"])})
            conv = "0" if part == "without" else f"{'' if cnt['measured'] else '~'}{r.c_conv:.0f}"
            for k, c in enumerate(r.c_epi):
                first = k == 0 and part == "without"
                cells = (
                    (r.gpu + ("*" if r.projected else "")) if first else "", _ms(r.roof_s) if first else "",
                    _ms(r.native_s) if first else "", f"{c:g}", conv if k == 0 else "", _ms(r.emulated_s[k]),
                    f"{r.ratio_to_roof[k]:.2f}", f"{r.ratio_to_native[k]:.2f}",
                    f"{r.int32_floor_instr_per_s[k] / 1e12:.0f}",
                    f"{_ms(r.tensor_s.get('int8'))}/{_ms(r.tensor_s.get('fp8'))}" if first else "",
                )
                t.add_row(*(cells[i] for i in shown))
    con = Console()
    if wide:  # as wide as the table needs, also when stdout is a pipe (rich's default there is 80)
        con = Console(width=max(con.width, con.measure(t, options=con.options.update_width(10_000)).maximum))
    con.print(t)
    for row in rows:
        con.print(_verdict(row))
    for row in rows:
        rem = "; ".join(f"{k} (c_epi {'-'.join(f'{c:g}' for c in v['c_epi'])}): "
                        f"{'-'.join(_ms(s) for s in v['emulated_s'])} ms"
                        for k, v in row["without"]["remedies"].items())
        con.print(f"{row['gpu']} remedies (no conversion term): {rem}")
    if any(r["without"]["projected"] for r in rows):
        con.print("* projected numbers (not shipping hardware)")
    if any(r["counts"] and not r["counts"]["measured"] for r in rows):
        con.print("~ conversion count: the H200's sm_90 SASS count, a stand-in (no listing for that GPU; for B300 "
                  "optimistic: the H200 conversion runs on the FP64 pipe that B300 cuts to 1.3 TF)")
    if measured:
        _measured_table(con)
    if not wide:
        con.print("--wide adds the INT32-floor (T/s) and tensor-core time columns; --json prints every field")


def _shape(value: str) -> tuple[int, ...]:
    """``--shape`` text to a tuple of sides: 1 to 3 comma-separated powers of two (the library checks the
    upper limit)."""
    try:
        sides = tuple(int(s) for s in value.split(","))
    except ValueError:  # text, or an empty field ("8,,8", "8,")
        sides = ()
    if not 1 <= len(sides) <= 3 or any(n <= 0 or n & (n - 1) for n in sides):
        raise typer.BadParameter(f"{value!r}: expected 1 to 3 comma-separated powers of two, e.g. 16,16,16",
                                 param_hint="'--shape'")
    return sides


@app.command("fft")
def fft_cmd(
    shape: Annotated[str, typer.Option(help="comma-separated power-of-two sides up to 1024 (1 to 3 axes)")] = "16,16,16",
    backend: Annotated[str, typer.Option(help="cpu-exact | int8 | fp8")] = "cpu-exact",
    variant: Annotated[str, typer.Option(help="garner | crt | kulisch")] = "crt",
    epilogue: Annotated[str | None, typer.Option(help="torch | triton; default: triton (the fused stage kernel) "
                                                      "for int8 on a GPU, else torch")] = None,
    input_bits: Annotated[int, typer.Option(help="bits of the scaled input integers (8-60)")] = 58,
    twiddle_bits: Annotated[int, typer.Option(help="bits of the twiddle integers (8-60)")] = 56,
    seed: Annotated[int, typer.Option(help="random seed (>= 0)")] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
) -> None:
    """Run the emulated FP64 FFT on random complex data; print its error next to numpy.fft's and against a
    long-double reference (the whole DFT up to 32^3 points, sampled outputs at every size)."""
    from gpufield.fp64.fft.check import check_fft

    def say_plan(need: dict) -> None:
        est = need["estimated_s"]
        if est is not None and est >= SLOW_CPU_S:
            typer.echo(f"note: the CPU path will take about {est / 60:.0f} min here (forward + inverse + sampled "
                       f"reference, at the rate measured on {need['rate_source']}); --backend int8 on a GPU "
                       "takes seconds", err=True)

    sides = _shape(shape)
    res = check_fft(shape=sides, backend=backend, variant=variant, seed=seed, epilogue=epilogue,
                    input_bits=input_bits, twiddle_bits=twiddle_bits, on_plan=say_plan)
    if as_json:
        typer.echo(json.dumps(res, indent=1))
    else:
        for k, v in res.items():
            if k == "plan":
                continue
            typer.echo(f"{k}: {'n/a (numpy.fft is the reference)' if v is None else v}")


@app.command("kernels")
def kernels_cmd(
    shape: Annotated[str, typer.Option(help="comma-separated power-of-two sides (1 to 3 axes)")] = "256,256,256",
    device: Annotated[str, typer.Option(help="h200 | h100 | a100 | b200 | b300 | cpu | major.minor")] = "h200",
    variant: Annotated[str, typer.Option(help="garner | crt | kulisch")] = "crt",
    int8_gemm: Annotated[str | None, typer.Option(help="cublas | triton | fused | fused_epi (default: the plan's)")] = None,
    implementation: Annotated[str, typer.Option(help="fused kernel: gluon | triton")] = "gluon",
    fold: Annotated[str | None, typer.Option(help="fused kernel's CRT fold: int | f64 (default: per kernel)")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
) -> None:
    """Which stage kernel runs: every DFT-GEMM stage of an INT8 emulated FFT (``EmulatedFftPlan(backend="int8",
    epilogue="triton")``) of --shape on --device, from the one dispatch table (gpufield.fp64.fft.kernel_config)."""
    from gpufield.fp64.fft import EmulatedFftPlan
    from gpufield.fp64.fft.kernel_config import KernelConfig, parse_device, stage_table

    sides = _shape(shape)
    plan = EmulatedFftPlan(backend="int8", epilogue="triton", variant=variant, int8_gemm=int8_gemm,
                           kernels=KernelConfig(implementation=implementation, fold=fold))
    rows = stage_table(sides, plan, parse_device(device))
    if as_json:
        typer.echo(json.dumps({"shape": list(sides), "device": device, "int8_gemm": plan.int8_gemm, "stages": rows},
                              indent=1))
        return
    typer.echo(f"{'x'.join(map(str, sides))} on {device}, int8/{variant}, int8_gemm={plan.int8_gemm}, "
               f"{plan.kernels}")
    for r in rows:
        typer.echo(f"axis {r['axis']} (N={r['N']}) stage {r['stage']}: length {r['length']}, {r['groups']} groups x "
                   f"{r['rows_per_group']} rows -> {r['path']}")


SLOW_CPU_S = 60.0
"""Estimated CPU seconds from which ``gpufield fp64 fft`` says up front that the run will take minutes."""


@app.command("crossover")
def crossover_cmd(
    gpu: Annotated[str | None, typer.Option(help="GPU name or table key (e.g. 'NVIDIA H200' or h200); default: "
                                            "this machine's GPU")] = None,
    table: Annotated[str | None, typer.Option(help="a crossover table JSON instead of the committed one")] = None,
    op: Annotated[str | None, typer.Option(help="matmul | fftn: with --shape, which path a call takes")] = None,
    shape: Annotated[str | None, typer.Option(help="matmul: M,K,N; fftn: the sides, e.g. 256,256,256")] = None,
    tol: Annotated[float | None, typer.Option(help="with --shape: also the 'speed' choice at this a-priori bound")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
) -> None:
    """The measured crossover table of a GPU (native FP64 vs Ozaki-II vs cuBLAS emulation vs emulated FFT):
    every path's median time and error per shape and the path ``gpufield.fp64.emulate()`` takes under each
    policy; with --op and --shape, the path, the table entry and the reason for one call."""
    from gpufield.errors import InputError
    from gpufield.fp64.crossover import choose, committed_keys, load_table, path_bound

    if table is None and gpu is None:
        import torch

        if not torch.cuda.is_available():
            raise InputError(f"no GPU here: give --gpu (committed tables: {', '.join(committed_keys())}) or --table")
        gpu = torch.cuda.get_device_name()
    t = load_table(path=table) if table else load_table(gpu)
    if t is None:
        raise InputError(f"no committed crossover table for {gpu!r} (committed: {', '.join(committed_keys())}; "
                         "measure one with benchmarks/fp64_crossover_gpu.py, or pass --table)")
    if (op is None) != (shape is None):
        raise typer.BadParameter("give --op and --shape together", param_hint="'--op'")
    if op is not None:
        if op not in ("matmul", "fftn"):
            raise typer.BadParameter(f"{op!r}: expected matmul or fftn", param_hint="'--op'")
        try:
            dims = [int(s) for s in shape.split(",")]
        except ValueError:
            dims = []
        if (op == "matmul" and len(dims) != 3) or not dims or any(d <= 0 for d in dims):
            raise typer.BadParameter(f"{shape!r}: expected positive integers, M,K,N for matmul",
                                     param_hint="'--shape'")
        pols = [("speed", None), ("accuracy", None)] + ([("speed", tol)] if tol is not None else [])
        res = []
        for pol, tl in pols:
            c = choose(t, op, dims, policy=pol, tol=tl)
            bd = {"K": dims[1]} if op == "matmul" else {"shape": dims, "plan": ((c.entry or {}).get("paths", {})
                                                                            .get(c.path, {}).get("plan"))}
            res.append({"policy": pol, "tol": tl, "path": c.path, "reason": c.reason,
                        "bound": path_bound(op, c.path, bd),
                        "entry": None if c.entry is None else {k: v for k, v in c.entry.items() if k != "paths"}})
        if as_json:
            typer.echo(json.dumps({"device": t["device"], "provenance": t["provenance"], "choices": res}, indent=1))
            return
        typer.echo(f"{t['device']} ({t['provenance'].get('run')}), {op} {shape}:")
        for r in res:
            b = "unknown" if r["bound"] is None else f"{r['bound']:.2e}"
            pol = r["policy"] if r["tol"] is None else f"{r['policy']} (tol {r['tol']:g})"
            typer.echo(f"  {pol}: {r['path']} (a-priori bound {b}) - {r['reason']}")
        return
    if as_json:
        typer.echo(json.dumps(t, indent=1))
        return
    from rich.console import Console
    from rich.table import Table

    tab = Table(title=f"{t['device']}: crossover ({t['provenance'].get('run')}, {t['provenance'].get('date')}); "
                      "median time / measured error")
    for h in ("op", "shape", "paths (fastest first)", "speed", "accuracy"):
        tab.add_column(h, overflow="fold")
    for e in t["entries"]:
        dims = [e["M"], e["K"], e["N"]] if e["op"] == "matmul" else e["shape"]
        cells = [f"{p} {_ms(r['time_s'])} ms / {r.get('err_norm', r.get('err_rel_l2', float('nan'))):.1e}"
                 for p, r in sorted(e["paths"].items(), key=lambda kv: kv[1]["time_s"])]
        tab.add_row(e["op"], "x".join(map(str, dims)), "\n".join(cells),
                    choose(t, e["op"], dims, policy="speed").path, choose(t, e["op"], dims, policy="accuracy").path)
    con = Console()
    con.print(tab)
    con.print("matmul error: max |C - R| / (||a_i|| ||b_j||) on sampled entries; fftn: relative L2 (rank-1 input, exact "
              f"DFT). Command: {t['provenance'].get('command')}")
