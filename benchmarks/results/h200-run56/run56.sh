#!/bin/bash
# run 56 (session 11, after review, final): CUDA tests of the Gluon kernel and the FP64 fold; transforms 256^3, 512^3
S=$(cd "$(dirname "$0")" && pwd)
R=$OUT/res; mkdir -p $R
export PYTHONUNBUFFERED=1
cat $S/snap/COMMIT > $R/commit.txt
cd $S/snap
TRITON_CACHE_DIR=/tmp/tc_new PYTHONPATH=src timeout 125 python3 -m pytest -v -p no:cacheprovider tests/fp64/test_fft_fused_gluon.py tests/fp64/test_fft_epilogue_f64.py -k "not compiles" > $R/tests.log 2>&1
echo "tests rc $?" >> $R/rc.txt
grep -hE "PASSED|FAILED|ERROR|^E " $R/tests.log | cut -c1-170 | head -40
TRITON_CACHE_DIR=/tmp/tc_new PYTHONPATH=src timeout 50 python3 benchmarks/fp64_fft_gpu.py --out $R/fft --sizes 256,512 --configs int8/kulisch/g8/fusedepi --no-extras --budget-s 45 --cache-dir /tmp/tc_new > $R/fft.log 2>&1
echo "fft rc $?" >> $R/rc.txt
grep -E "^\[.*(fusedepi|cufft):" $R/fft.log | grep -v worker | cut -c1-250
cat $R/rc.txt
ls $R
