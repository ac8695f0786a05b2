#!/bin/bash
# run 65 (session 13, final commit): the CUDA tests (4 xdist workers) and whole transforms with cuFFT
S=$(cd "$(dirname "$0")" && pwd)
R=$OUT/res; mkdir -p $R
export PYTHONUNBUFFERED=1
cat $S/snap/COMMIT > $R/commit.txt
cd $S/snap
TRITON_CACHE_DIR=/tmp/tc_new PYTHONPATH=src timeout 430 python3 -m pytest -q -n 4 -p no:cacheprovider tests/fp64/test_fft_fused_gluon.py tests/fp64/test_fft_epilogue_f64.py tests/fp64/test_fft_launch.py tests/fp64/test_fft_fused_epi.py -k "not compiles" -rA > $R/tests.log 2>&1
echo "tests rc $?" >> $R/rc.txt
grep -E "passed|failed|FAILED|ERROR" $R/tests.log | tail -12 | cut -c1-220
TRITON_CACHE_DIR=/tmp/tc_new PYTHONPATH=src timeout 120 python3 benchmarks/fp64_fft_bits.py --out /tmp/bits --sizes 256,512,1024 --bits 58/56 --reps 5 > $R/bits.log 2>&1
echo "bits rc $?" >> $R/rc.txt
cut -c1-400 $R/bits.log
cat $R/rc.txt
