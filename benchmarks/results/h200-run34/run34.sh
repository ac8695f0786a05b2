#!/bin/bash
# run 34: the rest of the fused-stage CUDA tests (Gluon kernel the default on Hopper), one process, 420 s cap
S=$(cd "$(dirname "$0")" && pwd)
R=/tmp/res; rm -rf $R; mkdir -p $R
export PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/tc
cat $S/snap/COMMIT > $R/commit.txt
cd $S/snap
PYTHONPATH=src timeout 420 python3 -m pytest -v -p no:cacheprovider tests/fp64/test_fft_fused_epi.py -k "not cutting_groups and not residue" > $R/tests.log 2>&1
echo "tests rc $?" >> $R/rc.txt
grep -E "PASSED|FAILED|ERROR|passed|failed" $R/tests.log | cut -c1-160 | tail -30
cat $R/rc.txt
tar czf $OUT/run34.tgz -C /tmp res
