"""Static instruction counts of the FFT epilogue kernels, compiled for sm_90 without a GPU.

Triton's NVIDIA backend compiles to PTX and (with its bundled ptxas) to a cubin on any machine; the
bundled ``cuobjdump -sass`` lists the SASS. Both epilogue kernels are fully unrolled (no loops), so the
static count per thread is the dynamic count; per real output it is
``SASS per thread * 32 * warps / (2 * BLOCK)`` (a complex output is two real outputs). The predicted
time of the issue-bound kernel is ``count * n_real_outputs / P_INT`` (fp64.md 1.4: H200 P_INT = 16.7 T
instructions/s, 132 SM x 64 lanes x 1.98 GHz; conversions and IMAD.WIDE/HI may issue at a lower rate).

Usage (no GPU needed; the interpreter must be off)::

    TRITON_INTERPRET=0 PYTHONPATH=src python tools/fp64_sass_count.py int8 16
    TRITON_INTERPRET=0 PYTHONPATH=src python tools/fp64_sass_count.py fused

(Moved out of ``src/`` from ``gpufield.fp64.kernels.sass_count``, issue 30: a tool, not the package's API.)

(``fused``: the fused stage kernels, Triton and Gluon (integer and FP64 fold), at their default launch
shapes, N = 16 and 32.)
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from collections import Counter

P_INT_H200 = 16.7e12
"""H200 INT32 instruction rate (instructions/s), fp64.md 1.4."""


def _ast_source(kind: str, r: int, variant: str, impl: str, block: int, grouped: bool, asm: bool = False):
    from triton.compiler import ASTSource

    from gpufield.fp64.fft.epilogue import (
        BULK_FRAC_BITS,
        BULK_LIMB,
        FRAC_BITS,
        VARIANTS,
        epilogue_tables,
    )
    from gpufield.fp64.kernels import fft_epilogue, fft_epilogue_int64

    tab = epilogue_tables(kind, r)
    ints = {"n_out": "i32", "S_c": "i32", "S_q": "i32"}
    ones = {} if grouped else {"K": 1, "S_m": 1, "GROUP": 1}
    rt = {k: "i32" for k in ("K", "S_s", "S_m") if k not in ones}
    div16 = ["T_ptr", "n_out", "S_c", "S_q", "shift_ptr", "out_ptr"] + (["K", "S_s", "S_m"] if grouped else [])
    if impl == "int32":
        fn = fft_epilogue._fft_epilogue_i32_kernel
        const = {**fft_epilogue.kernel_constants(tab, variant), "BLOCK": block, "EVEN": True, **ones}
        const["VEC"] = 4 if grouped else 1
        const["ASM"] = asm
        const["SRL"] = 1
        if grouped:
            const["GROUP"] = 8
        ptrs = {"T_ptr": "*i32", "shift_ptr": "*i64", "out_ptr": "*fp64"}
    else:
        fn = fft_epilogue_int64._fft_epilogue_kernel
        tb = fft_epilogue_int64._padded_tables(tab, "cpu")
        const = dict(R=r, RP=tb["RP"], CP=tb["CP"], NB=tb["NB"], VARIANT=VARIANTS.index(variant), FRAC=FRAC_BITS,
                     BFRAC=BULK_FRAC_BITS, BLIMB=BULK_LIMB, BLOCK=block, **ones)
        if grouped:
            const["GROUP"] = 8
        ptrs = {"T_ptr": "*i32", "shift_ptr": "*i64", "out_ptr": "*fp64", "p_ptr": "*i64", "invp_ptr": "*fp32",
                "C_ptr": "*i64", "M_ptr": "*i64", "frac_ptr": "*i64", "inv_ptr": "*i64", "bulk_ptr": "*fp16"}
        div16 += [k for k in ptrs if k not in div16]
    sig = {}
    for name in fn.arg_names:
        sig[name] = "constexpr" if name in const else ptrs.get(name) or ints.get(name) or rt.get(name)
    attrs = {(fn.arg_names.index(k),): [["tt.divisibility", 16]] for k in div16 if sig.get(k) != "constexpr"}
    return ASTSource(fn=fn, signature=sig, constexprs={k: v for k, v in const.items() if k in fn.arg_names},
                     attrs=attrs)


def sass_histogram(cubin: bytes) -> Counter:
    """Opcode histogram of a cubin's SASS (bundled cuobjdump); key ``"REG"``: registers per thread."""
    sass = _sass_text(cubin)
    ops = Counter(op for op, _ in _sass_ops(sass))
    reg = re.search(r"REG:(\d+)", sass)
    if reg:
        ops["REG"] = int(reg.group(1))
    return ops


def _sass_text(cubin: bytes) -> str:
    import triton

    tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        return subprocess.run([tool, "-sass", "-res-usage", f.name], capture_output=True, text=True,
                              check=True).stdout


def _sass_ops(sass: str) -> list[tuple[str, str]]:
    """(opcode, whole line) of every SASS instruction in listing order, NOP and BRA left out."""
    out = []
    for ln in sass.splitlines():
        m = re.match(r"\s*/\*[0-9a-f]{4,}\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", ln)
        if m and not m.group(2).startswith(("NOP", "BRA")):
            out.append((m.group(2), ln))
    return out


def sass_phases(sass: str) -> dict[str, int]:
    """Split a fused stage kernel's SASS listing (straight-line code but for the exits) into its three phases.

    ``residues``: everything before the first wgmma (IGMMA): tile loads, row loads, row split, the residues of the
    input and their shared-memory stores; ``fold``: from a column pass's first IGMMA to its last (the passes are
    the IGMMA runs that a barrier, BAR, separates): the products and the CRT fold of every modulus but the last;
    ``finish``: the rest: the last modulus's fold (it needs the last product), the lift, the one rounding, the
    stores and the next pass's tile copies. With the FP64 fold ptxas keeps the phases apart (the residues end
    at the barrier before the first wgmma, and the passes are two IGMMA runs around the tile reload); with the
    integer fold it issues most products first and sinks the fold after the last one, so there the split says
    little and :func:`fused_static_count` does not report it. The total is exact.

    Args:
        sass: ``cuobjdump -sass`` text of one kernel.

    Returns:
        {"residues": n, "fold": n, "finish": n}: instructions per thread (NOP and BRA left out).

    Raises:
        ValueError: the listing has no IGMMA (not a fused stage kernel).
    """
    ops = [op for op, _ in _sass_ops(sass)]
    mma = [i for i, op in enumerate(ops) if op.startswith("IGMMA")]
    if not mma:
        raise ValueError("no IGMMA: not a fused stage kernel listing")
    bars = [i for i, op in enumerate(ops) if op.startswith("BAR")]
    passes = [[mma[0], mma[0]]]
    for i in mma[1:]:
        if any(passes[-1][1] < b < i for b in bars):
            passes.append([i, i])
        passes[-1][1] = i
    fold = sum(last + 1 - first for first, last in passes)
    return {"residues": mma[0], "fold": fold, "finish": len(ops) - mma[0] - fold}


def static_count(kind: str, r: int, variant: str, impl: str = "int32", block: int = 128, num_warps: int = 4,
                 grouped: bool = False, asm: bool = False) -> dict:
    """Compile one epilogue kernel for sm_90 and count its instructions.

    Args:
        kind, r: moduli set (``"int8"``/``"fp8"``, count).
        variant: ``"crt"``, ``"kulisch"`` or ``"garner"`` (int64 kernel only).
        impl: ``"int32"`` (:mod:`.fft_epilogue`) or ``"int64"`` (:mod:`.fft_epilogue_int64`).
        block, num_warps: launch shape.
        grouped: the grouped INT8 layout (runtime row length K, 8 moduli per group).

    Returns:
        dict: ``sass_per_thread``, ``ptx_per_thread``, ``regs``, ``sass_per_real_output`` and the
        opcode histogram ``ops`` (per thread).
    """
    import triton
    from triton.backends.compiler import GPUTarget

    src = _ast_source(kind, r, variant, impl, block, grouped, asm)
    k = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": num_warps})
    ops = sass_histogram(k.asm["cubin"])
    regs = ops.pop("REG", None)
    ptx = sum(1 for ln in k.asm["ptx"].splitlines() if ln.strip()[:1].isalpha() or ln.strip()[:1] == "@")
    n = sum(ops.values())
    return {"sass_per_thread": n, "ptx_per_thread": ptx, "regs": regs,
            "sass_per_real_output": n * 32 * num_warps / (2 * block), "ops": dict(ops.most_common())}


def fused_static_count(n: int = 16, block_m: int = 64, num_warps: int = 8, block_k: int | None = None,
                       variant: str = "crt", kind: str = "int8", r: int = 16,
                       max_registers: int | None = None, gluon: bool = False, fold: str = "int",
                       xrows: bool = True, pairs: int | None = None, passes: int = 1) -> dict:
    """Compile the fused stage kernel (:mod:`gpufield.fp64.fft.gemm_fused_epi`) for sm_90 and count it.

    Args:
        n: stage length N (the K outputs per row equal N, as in the six-step stages).
        block_m, num_warps: rows per program and warps.
        block_k: outputs of a row per program (None: all, padded to >= 16).
        variant, kind, r: epilogue variant and moduli set.
        max_registers: ptxas register cap (Triton ``maxnreg``), None for none.
        gluon: the Gluon kernel (:mod:`gpufield.fp64.fft.gemm_fused_gluon`) instead of the Triton one.
        fold: ``"int"`` or ``"f64"`` (:data:`gpufield.fp64.fft.gemm_fused_epi.FOLDS`).
        xrows: the Gluon kernel's load along rows (consecutive rows one complex element apart, as every
            six-step stage reads them) rather than along each row's elements.
        pairs: residue pairs (:func:`gpufield.fp64.kernels.fft_epilogue_consts.residue_schedule`; None: the
            default :data:`~gpufield.fp64.kernels.fft_epilogue_consts.RESIDUE_PAIRS` of the padded N).
        passes: the Gluon kernel's column passes (``passes`` of
            :func:`gpufield.fp64.fft.gemm_fused_epi.fused_epi_stage_triton`).

    Returns:
        dict as :func:`static_count`; ``sass_per_real_output`` = SASS per thread x threads / (2 BR BK),
        ``spills`` = local-memory load/store instructions per thread, ``shared_bytes`` = shared memory per
        program (bytes); Gluon kernel with the FP64 fold only: ``phases_per_real_output`` =
        :func:`sass_phases` per real output (``residues``, ``fold``, ``finish``; they add up to
        ``sass_per_real_output``).
    """
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from triton.runtime.jit import mangle_type

    from gpufield.fp64.fft import gemm_fused_epi
    from gpufield.fp64.fft.epilogue import epilogue_tables
    from gpufield.fp64.kernels.fft_epilogue_consts import (
        RESIDUE_PAIRS,
        barrett_constants,
        kernel_constants,
        residue_schedule,
    )
    from gpufield.fp64.kernels.fft_epilogue_f64 import f64_constants

    fn = gemm_fused_epi._fused_epi_kernel
    if gluon:
        from gpufield.fp64.fft import gemm_fused_gluon

        fn = gemm_fused_gluon._fused_epi_gluon_kernel
    np_ = max(16, 1 << (n - 1).bit_length())
    bk = block_k or np_
    tab = epilogue_tables(kind, r)
    rk, fb = residue_schedule(tab.moduli, RESIDUE_PAIRS[np_], strict=False) if pairs is None else \
        residue_schedule(tab.moduli, pairs)
    const = dict(kernel_constants(tab, variant), **barrett_constants(tab.moduli, gemm_fused_epi.DOT_BOUND),
                 **f64_constants(tab, variant), FOLD=fold == "f64")
    const.update(NP=np_, BR=block_m, BK=bk, NGM=1, ASM=True, XROWS=xrows, FB=fb, RK=rk, KP=passes,
                 RH=gemm_fused_epi.row_blocks(block_m, np_, num_warps),
                 num_warps=num_warps)
    ptrs = {"B_ptr": "*i8", "s_ptr": "*i64"}
    runtime = {p.name for p in fn.params if not p.is_constexpr}  # e.g. constant tuples passed as arguments
    sig = {a: ("constexpr" if a not in runtime else tuple(mangle_type(v) for v in const.pop(a))) if a in const
           else ptrs.get(a, "*fp64" if a.endswith("_ptr") else "i32") for a in fn.arg_names}
    div16 = [a for a in fn.arg_names if a.endswith("_ptr") or a in ("Rc", "RG", "c0", "K", "S_xg", "S_xe", "S_bg",
                                                                      "S_bi")]
    attrs = {(fn.arg_names.index(a),): [["tt.divisibility", 16]] for a in div16 if sig[a] != "constexpr"}
    if gluon:
        from triton.experimental.gluon._runtime import GluonASTSource as ASTSource  # noqa: N814
    src = ASTSource(fn=fn, signature=sig, constexprs={a: v for a, v in const.items() if a in fn.arg_names},
                    attrs=attrs)
    opts = {"num_warps": num_warps} | ({"maxnreg": max_registers} if max_registers else {})
    k = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=opts)
    sass = _sass_text(k.asm["cubin"])
    ops = Counter(op for op, _ in _sass_ops(sass))
    regs = int(re.search(r"REG:(\d+)", sass).group(1))
    total = sum(ops.values())
    per_out = 32 * num_warps / (2 * block_m * bk)
    out = {"sass_per_thread": total, "regs": regs, "shared_bytes": k.metadata.shared,
           "sass_per_real_output": total * per_out,
           "spills": sum(v for o, v in ops.items() if o.startswith(("LDL", "STL"))), "ops": dict(ops.most_common())}
    if gluon and fold == "f64":
        out["phases_per_real_output"] = {p: v * per_out for p, v in sass_phases(sass).items()}
    return out


def main(argv: list[str]) -> None:
    """Print old vs new counts and the predicted H200 epilogue time per 256^3 transform (2.0e8 real outputs)."""
    if argv[:1] == ["fused"]:
        from gpufield.fp64.fft.gemm_fused_epi import DEFAULT_LAUNCH, GLUON_LAUNCH

        for gluon, fold in ((False, "int"), (True, "int"), (True, "f64")):
            for n in (16, 32):
                bm, warps, cap, passes = GLUON_LAUNCH[n] if gluon else DEFAULT_LAUNCH[n] + (1,)
                c = fused_static_count(n, bm, warps, max_registers=cap, gluon=gluon, fold=fold, passes=passes)
                top = ", ".join(f"{k} {v}" for k, v in list(c["ops"].items())[:8])
                ph = c.get("phases_per_real_output")
                ph = " (" + ", ".join(f"{k} {v:.0f}" for k, v in ph.items()) + ")" if ph else ""
                print(f"fused {'gluon' if gluon else 'triton'} fold {fold} N = {n} {(bm, warps, cap, passes)}: SASS "
                      f"{c['sass_per_thread']}/thread, {c['regs']} regs, {c['spills']} spill instr, "
                      f"{c['sass_per_real_output']:.0f}/real output{ph}; {top}")
        return
    kind, r = (argv[0], int(argv[1])) if len(argv) >= 2 else ("int8", 16)
    n_real = 6 * 2 * 256**3
    for impl, variant, block, warps, asm in (("int64", "crt", 32, 2, False), ("int64", "kulisch", 32, 2, False),
                                             ("int64", "crt", 128, 4, False), ("int32", "crt", 256, 4, False),
                                             ("int32", "crt", 256, 8, True), ("int32", "crt", 256, 4, True),
                                             ("int32", "kulisch", 256, 8, True), ("int32", "crt", 512, 4, True)):
        for grouped in (False, True) if impl == "int32" and asm and (block, warps) == (256, 8) else (False,):
            c = static_count(kind, r, variant, impl, block, warps, grouped=grouped, asm=asm)
            top = ", ".join(f"{k} {v}" for k, v in list(c["ops"].items())[:6])
            print(f"{impl} {variant} block {block} warps {warps}{' asm' if asm else ''}{' grouped' if grouped else ''}: "
                  f"SASS {c['sass_per_thread']}/thread, {c['regs']} regs, {c['sass_per_real_output']:.0f}/real output "
                  f"-> {c['sass_per_real_output'] * n_real / P_INT_H200 * 1e3:.1f} ms per 256^3 transform; {top}")

if __name__ == "__main__":
    main(sys.argv[1:])
