#!/bin/bash
# run 42: the session's final state: CUDA tests (graphed FFT, in-place passes, Gluon), whole transforms
# 256^3..1024^3 with cuFFT, eager vs CUDA-graph replay at 256^3 and 512^3
S=$(cd "$(dirname "$0")" && pwd)
R=/tmp/res; rm -rf $R; mkdir -p $R
export PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/tc
cat $S/snap/COMMIT > $R/commit.txt
T="python3 -m pytest -v -p no:cacheprovider"
cd $S/snap
PYTHONPATH=src timeout 150 python3 benchmarks/fp64_fft_gpu.py --out $R/fft --configs int8/crt/g8/fusedepi,int8/kulisch/g8/fusedepi --no-extras --budget-s 145 --cache-dir /tmp/tc > $R/fft.log 2>&1
echo "fft rc $?" >> $R/rc.txt
grep -E "^\[.*(fusedepi|cufft)" $R/fft.log | grep -v worker | cut -c1-250
PYTHONPATH=src timeout 90 python3 benchmarks/fp64_fft_graph.py --out $R/graph --sizes 256,512 > $R/graph.log 2>&1
echo "graph rc $?" >> $R/rc.txt
cat $R/graph.log | cut -c1-300
PYTHONPATH=src timeout 200 $T tests/fp64/test_fft_launch.py tests/fp64/test_fft_fused_gluon.py -k "not compiles" > $R/tests.log 2>&1
echo "tests rc $?" >> $R/rc.txt
grep -hE "PASSED|FAILED|ERROR|^E " $R/tests.log | cut -c1-200 | head -40
cat $R/rc.txt
tar czf $OUT/run42.tgz -C /tmp res
