#!/bin/bash
# run 55 (session 11, final state 81ac053): CUDA tests of the Gluon kernel and the FP64 fold, whole
# transforms 256^3..1024^3 with cuFFT, eager against graph replay
S=$(cd "$(dirname "$0")" && pwd)
R=/tmp/res; rm -rf $R; mkdir -p $R
export PYTHONUNBUFFERED=1
cat $S/snap/COMMIT > $R/commit.txt
cd $S/snap
TRITON_CACHE_DIR=/tmp/tc_new PYTHONPATH=src timeout 150 python3 -m pytest -v -p no:cacheprovider -x tests/fp64/test_fft_fused_gluon.py tests/fp64/test_fft_epilogue_f64.py -k "not compiles" > $R/tests.log 2>&1
echo "tests rc $?" >> $R/rc.txt
grep -hE "PASSED|FAILED|ERROR|^E " $R/tests.log | cut -c1-170 | head -40
TRITON_CACHE_DIR=/tmp/tc_new PYTHONPATH=src timeout 125 python3 benchmarks/fp64_fft_gpu.py --out $R/fft --configs int8/kulisch/g8/fusedepi --no-extras --budget-s 120 --cache-dir /tmp/tc_new > $R/fft.log 2>&1
echo "fft rc $?" >> $R/rc.txt
grep -E "^\[.*(fusedepi|cufft)" $R/fft.log | grep -v worker | cut -c1-250
TRITON_CACHE_DIR=/tmp/tc_new PYTHONPATH=src timeout 75 python3 benchmarks/fp64_fft_graph.py --out $R/graph --sizes 256,512,1024 --reps 3 > $R/graph.log 2>&1
echo "graph rc $?" >> $R/rc.txt
cut -c1-300 $R/graph.log
cat $R/rc.txt
tar czf $OUT/run55.tgz -C /tmp res
