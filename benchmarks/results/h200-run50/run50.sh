#!/bin/bash
# run 50: CUDA tests at the final fp64 commit (1821565) that run 49's capped test step did not reach
S=$(cd "$(dirname "$0")" && pwd)
R=/tmp/res; rm -rf $R; mkdir -p $R
export PYTHONUNBUFFERED=1
cat $S/snap/COMMIT > $R/commit.txt
T="python3 -m pytest -v -p no:cacheprovider"
cd $S/snap
TRITON_CACHE_DIR=/tmp/tc_new PYTHONPATH=src timeout 250 $T tests/fp64/test_fft_fused_epi.py tests/fp64/test_fft_launch.py -k "knob or pair or schedule or grid_rows or strided or in_place or stages_read or graphed or non_finite or split or interleaved" > $R/tests.log 2>&1
echo "tests rc $?" >> $R/rc.txt
grep -hE "PASSED|FAILED|ERROR|^E " $R/tests.log | cut -c1-160 | head -60
cat $R/rc.txt
tar czf $OUT/run50.tgz -C /tmp res
