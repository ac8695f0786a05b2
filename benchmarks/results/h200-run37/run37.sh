#!/bin/bash
# run 37: the defaults after session 8 (Gluon kernel, FP64 fold): whole transforms 256^3..1024^3 with cuFFT,
# the integer fold at 256^3 in the same call, then CUDA tests (FP64 fold, Gluon, the fused-stage tests not run on CUDA before)
S=$(cd "$(dirname "$0")" && pwd)
R=/tmp/res; rm -rf $R; mkdir -p $R
export PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/tc
cat $S/snap/COMMIT > $R/commit.txt
cd $S/snap
PYTHONPATH=src timeout 150 python3 benchmarks/fp64_fft_gpu.py --out $R/fft --configs int8/crt/g8/fusedepi,int8/kulisch/g8/fusedepi --no-extras --budget-s 145 --cache-dir /tmp/tc > $R/fft.log 2>&1
echo "fft rc $?" >> $R/rc.txt
grep -E "^\[.*(fusedepi|cufft)" $R/fft.log | grep -v worker | cut -c1-250
GPUFIELD_FUSED_EPI_FOLD=int PYTHONPATH=src timeout 45 python3 benchmarks/fp64_fft_gpu.py --out $R/fft_int --sizes 256 --configs int8/crt/g8/fusedepi --no-extras --budget-s 40 --cache-dir /tmp/tc > $R/fft_int.log 2>&1
echo "fft int rc $?" >> $R/rc.txt
grep -E "^\[.*(fusedepi|cufft)" $R/fft_int.log | grep -v worker | cut -c1-250
T="python3 -m pytest -v -p no:cacheprovider"
PYTHONPATH=src timeout 110 $T tests/fp64/test_fft_epilogue_f64.py > $R/tests_f64.log 2>&1
echo "tests f64 rc $?" >> $R/rc.txt
PYTHONPATH=src timeout 120 $T tests/fp64/test_fft_fused_gluon.py -k "not compiles" > $R/tests_gluon.log 2>&1
echo "tests gluon rc $?" >> $R/rc.txt
PYTHONPATH=src timeout 150 $T tests/fp64/test_fft_fused_epi.py -k "shape3 or strided or split or barrett or interleaved or refused or in_place or shape0" > $R/tests_fused.log 2>&1
echo "tests fused rc $?" >> $R/rc.txt
grep -hE "PASSED|FAILED|ERROR" $R/tests_*.log | cut -c1-150
cat $R/rc.txt
tar czf $OUT/run37.tgz -C /tmp res
