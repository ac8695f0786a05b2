#!/bin/bash
# run 46: residue pairs as the default at N = 16 (session 10): CUDA tests, whole transforms 256^3..1024^3 with
# cuFFT (new), 256^3 and 512^3 with ccbfde2 (old) in the same call
S=$(cd "$(dirname "$0")" && pwd)
R=/tmp/res; rm -rf $R; mkdir -p $R
export PYTHONUNBUFFERED=1
cat $S/snap/COMMIT > $R/commit.txt
T="python3 -m pytest -v -p no:cacheprovider"
cd $S/snap
TRITON_CACHE_DIR=/tmp/tc_new PYTHONPATH=src timeout 150 $T tests/fp64/test_fft_fused_gluon.py tests/fp64/test_fft_fused_epi.py -k "not compiles and (gluon or pair or schedule)" > $R/tests.log 2>&1
echo "tests rc $?" >> $R/rc.txt
grep -hE "PASSED|FAILED|ERROR|^E " $R/tests.log | cut -c1-200 | head -40
TRITON_CACHE_DIR=/tmp/tc_new PYTHONPATH=src timeout 160 python3 benchmarks/fp64_fft_gpu.py --out $R/fft --configs int8/kulisch/g8/fusedepi,int8/crt/g8/fusedepi --no-extras --budget-s 155 --cache-dir /tmp/tc_new > $R/fft.log 2>&1
echo "fft new rc $?" >> $R/rc.txt
grep -E "^\[.*(fusedepi|cufft)" $R/fft.log | grep -v worker | cut -c1-250
cd $S/snap_old && TRITON_CACHE_DIR=/tmp/tc_old PYTHONPATH=src timeout 100 python3 benchmarks/fp64_fft_gpu.py --out $R/fft_old --sizes 256,512 --configs int8/kulisch/g8/fusedepi --no-extras --budget-s 95 --cache-dir /tmp/tc_old > $R/fft_old.log 2>&1
echo "fft old rc $?" >> $R/rc.txt
grep -E "^\[.*(fusedepi|cufft)" $R/fft_old.log | grep -v worker | cut -c1-250
cat $R/rc.txt
tar czf $OUT/run46.tgz -C /tmp res
