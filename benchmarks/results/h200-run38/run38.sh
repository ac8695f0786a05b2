#!/bin/bash
# run 38: stages read rows in place (no per-axis copies) + Gluon constants as kernel arguments (new) against
# e44b3a2 (old) side by side: CUDA tests, stage timings (contiguous rows, digests), whole transforms
S=$(cd "$(dirname "$0")" && pwd)
R=/tmp/res; rm -rf $R; mkdir -p $R
export PYTHONUNBUFFERED=1
cat $S/snap/COMMIT > $R/commit.txt
T="python3 -m pytest -v -p no:cacheprovider"
cd $S/snap
TRITON_CACHE_DIR=/tmp/tc PYTHONPATH=src timeout 150 $T tests/fp64/test_fft_fused_gluon.py -k "not compiles" > $R/tests_gluon.log 2>&1
echo "tests gluon rc $?" >> $R/rc.txt
TRITON_CACHE_DIR=/tmp/tc PYTHONPATH=src timeout 150 $T tests/fp64/test_fft_launch.py -k "stages_read or chunks_cutting or pass_buffers or grouped_path" tests/fp64/test_fft_fused_epi.py -k "grid_rows or strided or transform_equals or in_place or interleaved or split" > $R/tests_fused.log 2>&1
echo "tests fused rc $?" >> $R/rc.txt
grep -hE "PASSED|FAILED|ERROR" $R/tests_*.log | cut -c1-150
cat $R/rc.txt
SH='16:64,8,16,128;32:64,16,32,0'
for v in new old new old; do
  d=$S/snap; [ $v = old ] && d=$S/snap_old
  cd $d && TRITON_CACHE_DIR=/tmp/tc_$v PYTHONPATH=src timeout 100 python3 benchmarks/fp64_fused_epi_shapes.py --out $R/shapes_$v --shapes "$SH" --budget-s 90 >> $R/shapes_$v.log 2>&1
  echo "shapes $v rc $?" >> $R/rc.txt
done
grep -hE "ms|digest" $R/shapes_new.log | head -20
echo ---old; grep -hE "ms|digest" $R/shapes_old.log | head -20
cd $S/snap && TRITON_CACHE_DIR=/tmp/tc_new PYTHONPATH=src timeout 150 python3 benchmarks/fp64_fft_gpu.py --out $R/fft --configs int8/crt/g8/fusedepi,int8/kulisch/g8/fusedepi --no-extras --budget-s 145 --cache-dir /tmp/tc_new > $R/fft.log 2>&1
echo "fft new rc $?" >> $R/rc.txt
grep -E "^\[.*(fusedepi|cufft)" $R/fft.log | grep -v worker | cut -c1-250
cd $S/snap_old && TRITON_CACHE_DIR=/tmp/tc_old PYTHONPATH=src timeout 100 python3 benchmarks/fp64_fft_gpu.py --out $R/fft_old --sizes 256,512 --configs int8/crt/g8/fusedepi --no-extras --budget-s 95 --cache-dir /tmp/tc_old > $R/fft_old.log 2>&1
echo "fft old rc $?" >> $R/rc.txt
grep -E "^\[.*(fusedepi|cufft)" $R/fft_old.log | grep -v worker | cut -c1-250
cat $R/rc.txt
tar czf $OUT/run38.tgz -C /tmp res
