#!/bin/bash
# run 43: the CUDA tests run 42 did not finish (time limit) or failed
S=$(cd "$(dirname "$0")" && pwd)
R=/tmp/res; rm -rf $R; mkdir -p $R
export PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/tc
cat $S/snap/COMMIT > $R/commit.txt
cd $S/snap
PYTHONPATH=src timeout 170 python3 -m pytest -v -p no:cacheprovider tests/fp64/test_fft_launch.py tests/fp64/test_fft_fused_gluon.py -k "non_finite or oracle_and_triton" > $R/tests.log 2>&1
echo "tests rc $?" >> $R/rc.txt
grep -hE "PASSED|FAILED|ERROR|^E " $R/tests.log | cut -c1-200 | head -30
cat $R/rc.txt
tar czf $OUT/run43.tgz -C /tmp res
