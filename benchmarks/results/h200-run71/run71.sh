#!/bin/bash
# run 71 (session 14): bitwise (int64-view) comparisons in the CUDA tests, the GraphedFftn operand pin, and
# the same eviction scenario with the pin dropped (diagnostic: does the test see the hazard?)
S=$(cd "$(dirname "$0")" && pwd)
R=$OUT/res; mkdir -p $R
export PYTHONUNBUFFERED=1
cat $S/snap/COMMIT > $R/commit.txt
cd $S/snap
TRITON_CACHE_DIR=/tmp/tc_new PYTHONPATH=src timeout 120 python3 - > $R/pin_diag.log 2>&1 <<'PY'
import gc, weakref, numpy as np, torch
from gpufield.fp64.fft import GraphedFftn, EmulatedFftPlan, operands
plan = EmulatedFftPlan(backend="int8", epilogue="triton")
for pinned in (True, False):
    operands._CACHE.clear()
    f = GraphedFftn((16, 16, 256), plan)
    if not pinned:
        f._operands = ()
    refs = []
    for d in operands.cached_on(f.input.device):
        for k, v in d.items():
            refs += [(k, weakref.ref(t)) for t in (v if isinstance(v, list) else [v]) if isinstance(t, torch.Tensor)]
    rng = np.random.default_rng(0)
    for _ in range(40):
        operands.stage_operands(rng.integers(0, 1024, (1, 16, 16)), plan.twiddle_bits, (251, 241), torch.int8, 1, f.input.device)
    gc.collect()
    print("pinned" if pinned else "unpinned", "tensors", [k for k, _ in refs], "alive", sum(r() is not None for _, r in refs))
    del f
PY
cat $R/pin_diag.log
TRITON_CACHE_DIR=/tmp/tc_new PYTHONPATH=src timeout 200 python3 -m pytest -v -n 4 -p no:cacheprovider -p no:benchmark tests/fp64/test_fft_launch.py -k graphed > $R/tests.log 2>&1
echo "tests rc $?" >> $R/rc.txt
grep -E "FAILED|ERROR|passed|failed" $R/tests.log | sed 's/^\[gw[0-9]\] //' | cut -c1-200 | tail -20
cat $R/rc.txt
