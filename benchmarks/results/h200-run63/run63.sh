#!/bin/bash
# run 63 (session 12, final commit): CUDA tests of the Gluon kernel and the FP64 fold; whole transforms with cuFFT
S=$(cd "$(dirname "$0")" && pwd)
R=$OUT/res; mkdir -p $R
export PYTHONUNBUFFERED=1
cat $S/snap/COMMIT > $R/commit.txt
cd $S/snap
export PYTHONPATH=src TRITON_CACHE_DIR=/tmp/tc_new
timeout 240 python3 -m pytest -v -p no:cacheprovider tests/fp64/test_fft_fused_gluon.py tests/fp64/test_fft_epilogue_f64.py -k "not compiles" > $R/tests.log 2>&1
echo "tests rc $?" >> $R/rc.txt
grep -hE "PASSED|FAILED|ERROR|^E " $R/tests.log | cut -c1-160 | head -30
timeout 150 python3 benchmarks/fp64_fft_bits.py --out /tmp/bits --sizes 256,512,1024 --bits 58/56 --reps 5 > $R/bits.log 2>&1
echo "bits rc $?" >> $R/rc.txt
cut -c1-400 $R/bits.log
cat $R/rc.txt
