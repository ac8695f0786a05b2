#!/bin/bash
# run 26: the fused-stage test files on CUDA (they run in the Triton interpreter on CPU CI)
S=$(cd "$(dirname "$0")" && pwd)
R=/tmp/res; rm -rf $R; mkdir -p $R
export PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/tc
cat $S/snap/COMMIT > $R/commit.txt
cd $S/snap
PYTHONPATH=src timeout 420 python3 -m pytest -q -p no:cacheprovider --timeout 400 --durations 10 \
  tests/fp64/test_fft_fused_epi.py tests/fp64/test_fft_launch.py --junitxml $R/junit.xml > $R/pytest.log 2>&1
echo "pytest rc $?" >> $R/rc.txt
tail -n 30 $R/pytest.log; cat $R/rc.txt
tar czf $OUT/run26.tgz -C /tmp res
