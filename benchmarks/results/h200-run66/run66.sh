#!/bin/bash
# run 66 (session 13, final commit): the CUDA tests of the paths this session changed, verbose, 4 xdist workers
S=$(cd "$(dirname "$0")" && pwd)
R=$OUT/res; mkdir -p $R
export PYTHONUNBUFFERED=1
cat $S/snap/COMMIT > $R/commit.txt
cd $S/snap
TRITON_CACHE_DIR=/tmp/tc_new PYTHONPATH=src timeout 500 python3 -m pytest -v -n 4 -p no:cacheprovider -p no:benchmark --durations=20 tests/fp64/test_fft_launch.py "tests/fp64/test_fft_fused_epi.py::test_residue_pairs_knob_and_moduli_bound" tests/fp64/test_fft_fused_gluon.py -k "not compiles" > $R/tests.log 2>&1
echo "tests rc $?" >> $R/rc.txt
grep -E "PASSED|FAILED|ERROR|passed|failed" $R/tests.log | sed 's/^\[gw[0-9]\] //' | cut -c1-200 | tail -45
cat $R/rc.txt
