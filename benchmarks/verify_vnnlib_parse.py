"""VNN-LIB parser robustness/speed cases of issue 26, timed (seconds, ``time.perf_counter``) with
peak Python allocation (``tracemalloc``, MB).

Cases: one-line files of growing length (tokeniser cost per token should stay flat), five
``(or ...)`` of nine atoms on top of a 784-input box (59049 DNF conjuncts: refused at once by the
default cap; built with the cap raised), and a 3000-deep ``(and ...)``.

Usage::

    PYTHONPATH=src python benchmarks/verify_vnnlib_parse.py [--mnist PROP.vnnlib]
"""

from __future__ import annotations

import argparse
import time
import tracemalloc
from pathlib import Path

from gpufield.errors import SpecFormatError
from gpufield.verify.io.vnnlib import parse_vnnlib, tokenize


def _run(fn):
    try:
        return fn()
    except SpecFormatError as e:
        return f"SpecFormatError: {str(e)[:90]}"


def _timed(fn):
    """(seconds of a plain run, peak MB of a second run under tracemalloc, the result)."""
    t = time.perf_counter()
    out = _run(fn)
    dt = time.perf_counter() - t
    tracemalloc.start()
    _run(fn)
    peak = tracemalloc.get_traced_memory()[1] / 1e6
    tracemalloc.stop()
    return dt, peak, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mnist", type=Path,
                    default=Path(__file__).resolve().parents[1] / "../shared/data/vnncomp2022/mnist_fc/vnnlib/prop_0_0.03.vnnlib")
    a = ap.parse_args()
    lines = [ln for ln in a.mnist.read_text().splitlines() if not ln.startswith(";")]
    one = " ".join(lines)
    for k in (1, 4, 16):
        text = " ".join([one] * k)  # tokenise only: the declarations would repeat
        dt, peak, toks = _timed(lambda text=text: tokenize(text))
        print(f"tokenize one line x{k:<3} {len(text):>9} chars {len(toks):>7} tokens {dt:8.3f} s "
              f"{1e6 * dt / len(toks):6.2f} us/token  peak {peak:7.1f} MB")
    dt, peak, p = _timed(lambda: parse_vnnlib("one.vnnlib", one))
    print(f"parse mnist one-line            {dt:8.3f} s  peak {peak:7.1f} MB  cases {len(p.cases)}")
    box = " ".join(ln for ln in lines if "X_" in ln)  # the declarations and the 784-input box
    ors = "".join("(assert (or " + " ".join(f"(<= Y_{i} {j}.5)" for i in range(9)) + "))" for j in range(5))
    big = box + " ".join(ln for ln in lines if "declare-const Y_" in ln) + ors
    dt, peak, out = _timed(lambda: parse_vnnlib("ors.vnnlib", big))
    print(f"5 x (or 9 atoms), default cap   {dt:8.3f} s  peak {peak:7.1f} MB  {out}")
    dt, peak, p = _timed(lambda: parse_vnnlib("ors.vnnlib", big, max_disjuncts=100_000))
    print(f"5 x (or 9 atoms), cap 100000    {dt:8.3f} s  peak {peak:7.1f} MB  clauses {len(p.cases[0].clauses)}")
    deep = ("(declare-const X_0 Real)(declare-const Y_0 Real)(declare-const Y_1 Real)"
            "(assert (<= X_0 1))(assert (>= X_0 0))(assert " + "(and " * 3000 + "(<= Y_0 Y_1)" + ")" * 3001)
    dt, peak, p = _timed(lambda: parse_vnnlib("deep.vnnlib", deep))
    print(f"3000-deep (and ...)             {dt:8.3f} s  peak {peak:7.1f} MB  cases {len(p.cases)}")


if __name__ == "__main__":
    main()
