"""sm_90 SASS counts of the residue kernels (no GPU): the 32-bit kernel of :mod:`gpufield.fp64.kernels.residue`
and the previous int64-lane kernel (benchmarks/fp64_residue_int64.py).

    PYTHONPATH=src python tools/fp64_residue_sass_count.py [int8|fp8 L]

Prints SASS per complex element at the FFT shape and per element at the DGEMM shape, and the predicted H200
time per 256^3 transform at the catalogue's INT32 rate. Moved out of gpufield.fp64.kernels.residue_consts
(a tool, not library code).
"""

from __future__ import annotations

import os
import re
import sys
from collections import Counter

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))

from gpufield.fp64.kernels.residue_consts import kernel_constants  # noqa: E402


def _sass(cubin: bytes) -> str:
    import os
    import subprocess
    import tempfile

    import triton

    tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        return subprocess.run([tool, "-sass", "-res-usage", f.name], capture_output=True, text=True,
                              check=True).stdout


def _histogram(sass: str) -> Counter:
    """Opcode histogram (as ``sass_count.sass_histogram``, whose 4-hex-digit address pattern stops at
    instruction 4096: these kernels are longer)."""
    ops = Counter()
    for ln in sass.splitlines():
        m = re.match(r"\s*/\*[0-9a-f]{4,}\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", ln)
        if m and not m.group(2).startswith(("NOP", "BRA")):
            ops[m.group(2)] += 1
    reg = re.search(r"REG:(\d+)", sass)
    if reg:
        ops["REG"] = int(reg.group(1))
    return ops


def _loop_free_count(sass: str, L: int) -> int:
    """Dynamic SASS count of one thread in a tile without big values, from a kernel with one runtime loop
    over moduli (the int64 kernel): straight-line code + L x (loop body minus the regions skipped by its
    conditional forward branches, which are the ``any_big`` mantissa/exponent paths: one per component)."""
    lines = []
    for ln in sass.splitlines():
        m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)(.*)", ln)
        if m and not m.group(3).startswith("NOP"):
            lines.append((int(m.group(1), 16), m.group(2), m.group(3), m.group(4)))
    addr = [a for a, *_ in lines]
    loop = [(a, int(t, 16)) for a, _, op, rest in lines if op.startswith("BRA")
            for t in re.findall(r"0x([0-9a-f]+)", rest) if int(t, 16) < a]
    (end, start), = loop  # exactly one backward branch: the while loop over moduli
    skip = [(a, int(t, 16)) for a, pred, op, rest in lines if op.startswith("BRA") and pred and start <= a < end
            for t in re.findall(r"0x([0-9a-f]+)", rest) if a < int(t, 16) <= end]
    body = [a for a in addr if start <= a <= end]
    skipped = {a for a in body for b, t in skip if b < a < t}
    count = lambda xs: sum(1 for a, _, op, _r in lines if a in xs and not op.startswith("BRA"))  # noqa: E731
    outside = set(addr) - set(body)
    return count(outside) + L * count(set(body) - skipped)


def static_count(kind: str = "int8", L: int = 16, impl: str = "int32", complex_: bool = True, group: int = 8,
                 block: tuple[int, int] = (64, 16), num_warps: int = 4, big: bool = False, K: int = 16) -> dict:
    """Compile a residue kernel for sm_90 (no GPU) and count SASS per element on a tile without |y| >= 2^62.

    Args:
        kind, L: moduli set; impl: ``"int32"`` (:mod:`gpufield.fp64.kernels.residue`) or ``"int64"``
            (benchmarks/fp64_residue_int64.py).
        complex_, group: FFT shape (complex input, grouped layout of ``group`` moduli).
        block: (BLOCK_R, BLOCK_K); num_warps: warps per program.
        big: int32 kernel only: count the second launch (MODE 1, the big-value pass of flagged tiles).
        K: row length (the FFT's 16): a block wider than K runs masked lanes, counted as overhead.

    Returns:
        dict: ``sass_per_thread`` (dynamic, tiles without big values), ``per_element``, ``regs``, ``ops``.
    """
    import fp64_residue_int64 as residue_int64
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from gpufield.fp64.kernels import residue
    from gpufield.fp64.ozaki.moduli import moduli_table

    t = moduli_table(kind, L)
    out_t = "*i8" if kind == "int8" else "*i16"
    const = dict(COMPLEX=complex_, OUT_INT8=kind == "int8", GROUP=group, DIGITS=False, BLOCK_R=block[0],
                 BLOCK_K=block[1])
    if impl == "int32":
        fn = residue._scale_residue_i32_kernel
        const.update(kernel_constants(t.moduli), L=L, MODE=int(big), SQ=tuple([0] * L))
        ptrs = {"x_ptr": "*fp64", "x2_ptr": "*fp64", "shift_ptr": "*i64", "tab_ptr": "*i32", "out_ptr": out_t,
                "flag_ptr": "*i32"}
    else:
        fn = residue_int64._scale_residue_kernel
        ptrs = {"x_ptr": "*fp64", "x2_ptr": "*fp64", "shift_ptr": "*i64", "mod_ptr": "*i64", "invp_ptr": "*fp64",
                "tab_ptr": "*i64", "out_ptr": out_t, "sq_ptr": "*i64", "lut_ptr": "*i32"}
    sig = {n: "constexpr" if n in const else ptrs.get(n, "i32") for n in fn.arg_names}
    div16 = [n for n in fn.arg_names if n in ptrs or n in ("stride_r", "K", "so_comp", "so_grp", "so_row")]
    attrs = {(fn.arg_names.index(k),): [["tt.divisibility", 16]] for k in div16}
    src = ASTSource(fn=fn, signature=sig, constexprs={k: v for k, v in const.items() if k in fn.arg_names},
                    attrs=attrs)
    k = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": num_warps})
    sass = _sass(k.asm["cubin"])
    ops = _histogram(sass)
    regs = ops.pop("REG", None)
    n = sum(ops.values()) if impl == "int32" else _loop_free_count(sass, L)
    per_thread_elems = block[0] * min(block[1], K) / (32 * num_warps)
    return {"sass_per_thread": n, "per_element": n / per_thread_elems, "regs": regs, "ops": dict(ops.most_common())}


def main(argv: list[str]) -> None:
    """Print old vs new SASS per complex element and the predicted H200 time per 256^3 transform."""
    P_INT_H200 = 16.7e12  # H200 INT32 instruction rate (instructions/s), fp64.md 1.4

    kind, L = (argv[0], int(argv[1])) if len(argv) >= 2 else ("int8", 16)
    n_elem = 6 * 256**3  # complex elements scaled per 256^3 transform (6 stages)
    for impl, block, warps in (("int64", (32, 32), 4), ("int32", (128, 16), 4), ("int32", (64, 16), 4)):
        c = static_count(kind, L, impl, block=block, num_warps=warps)
        top = ", ".join(f"{k} {v}" for k, v in list(c["ops"].items())[:8])
        print(f"FFT (complex, g8, K 16) {impl} block {block} warps {warps}: {c['sass_per_thread']} SASS/thread, "
              f"{c['regs']} regs, {c['per_element']:.0f}/complex element -> "
              f"{c['per_element'] * n_elem / P_INT_H200 * 1e3:.2f} ms per 256^3 transform; {top}")
    for impl, block in (("int64", (32, 32)), ("int32", (128, 16))):  # the DGEMM path: real rows, K >= 32
        c = static_count(kind, L, impl, complex_=False, group=1, block=block, K=4096)
        print(f"DGEMM (real, K >= 32) {impl} block {block}: {c['per_element']:.0f}/element, {c['regs']} regs")


if __name__ == "__main__":
    main(sys.argv[1:])
