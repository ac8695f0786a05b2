#!/bin/bash
# run 70 (session 14): bitwise (int64-view) comparisons in the CUDA tests, the GraphedFftn operand pin, and
# the same eviction scenario with the pin dropped (diagnostic: does the test see the hazard?)
S=$(cd "$(dirname "$0")" && pwd)
R=$OUT/res; mkdir -p $R
export PYTHONUNBUFFERED=1
cat $S/snap/COMMIT > $R/commit.txt
cd $S/snap
TRITON_CACHE_DIR=/tmp/tc_new PYTHONPATH=src timeout 120 python3 - > $R/pin_diag.log 2>&1 <<'PY'
import numpy as np, torch
from gpufield.fp64.fft import GraphedFftn, EmulatedFftPlan, fftn_fp64_emulated, operands
plan = EmulatedFftPlan(backend="int8", epilogue="triton")
rng0 = np.random.default_rng(10)
x = torch.from_numpy((rng0.standard_normal((16, 16, 256)) + 1j * rng0.standard_normal((16, 16, 256)))).cuda()
want = fftn_fp64_emulated(x, plan).cpu().numpy().view(np.int64)
for pinned in (True, False):
    operands._CACHE.clear()
    f = GraphedFftn((16, 16, 256), plan)
    if not pinned:
        f._operands = ()
    own = [t.shape for d in operands.cached_on(f.input.device) for t in d["wres"]]
    rng = np.random.default_rng(0)
    for _ in range(40):
        operands.stage_operands(rng.integers(0, 1024, (1, 16, 16)), plan.twiddle_bits, (251, 241), torch.int8, 1, f.input.device)
    junk = [torch.full(sh, 77, dtype=torch.int8, device="cuda") for sh in own for _ in range(4)]
    got = f(x).cpu().numpy().view(np.int64)
    print("pinned" if pinned else "unpinned", "same bits as eager:", bool(np.array_equal(got, want)), "differing words:", int((got != want).sum()))
    del f, junk
PY
cat $R/pin_diag.log
TRITON_CACHE_DIR=/tmp/tc_new PYTHONPATH=src timeout 420 python3 -m pytest -v -n 4 -p no:cacheprovider -p no:benchmark tests/fp64/test_fft_launch.py tests/fp64/test_fft_kernels.py > $R/tests.log 2>&1
echo "tests rc $?" >> $R/rc.txt
grep -E "FAILED|ERROR|passed|failed" $R/tests.log | sed 's/^\[gw[0-9]\] //' | cut -c1-200 | tail -20
cat $R/rc.txt
