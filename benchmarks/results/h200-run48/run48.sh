#!/bin/bash
# run 48: the CRT quotient on the integer pipe (40ea6b1, new) against the residue pairs alone (de1ffc6, mid):
# CUDA tests, stage times alternating (new, new with 4 pairs at N = 32 too, mid), whole transforms with cuFFT,
# graph replay 256^3 and 512^3
S=$(cd "$(dirname "$0")" && pwd)
R=/tmp/res; rm -rf $R; mkdir -p $R
export PYTHONUNBUFFERED=1
cat $S/snap/COMMIT > $R/commit.txt
T="python3 -m pytest -v -p no:cacheprovider"
cd $S/snap
TRITON_CACHE_DIR=/tmp/tc_new PYTHONPATH=src timeout 170 $T tests/fp64/test_fft_epilogue_f64.py tests/fp64/test_fft_fused_gluon.py tests/fp64/test_fft_fused_epi.py -k "not compiles and (f64 or gluon or pair or schedule or transform_equals)" > $R/tests.log 2>&1
echo "tests rc $?" >> $R/rc.txt
grep -hE "PASSED|FAILED|ERROR|^E " $R/tests.log | cut -c1-200 | head -40
SH='16:64,8,16,128;32:64,16,32,0'
for rep in 1 2; do
for v in new mid newp4; do
  d=$S/snap; [ $v = mid ] && d=$S/snap_mid
  P=""; [ $v = newp4 ] && P=4
  cd $d && GPUFIELD_FUSED_EPI_PAIRS=$P TRITON_CACHE_DIR=/tmp/tc_$v PYTHONPATH=src timeout 80 python3 benchmarks/fp64_fused_epi_shapes.py --out $R/shapes_${v}_$rep --shapes "$SH" --budget-s 70 > $R/shapes_${v}_$rep.log 2>&1
  echo "shapes $v $rep rc $?" >> $R/rc.txt
done; done
grep -H '"ms"\|WRONG' $R/shapes_*.log | sed 's/.*shapes_//' | cut -c1-200
cd $S/snap && TRITON_CACHE_DIR=/tmp/tc_new PYTHONPATH=src timeout 150 python3 benchmarks/fp64_fft_gpu.py --out $R/fft --configs int8/kulisch/g8/fusedepi,int8/crt/g8/fusedepi --no-extras --budget-s 145 --cache-dir /tmp/tc_new > $R/fft.log 2>&1
echo "fft new rc $?" >> $R/rc.txt
grep -E "^\[.*(fusedepi|cufft)" $R/fft.log | grep -v worker | cut -c1-250
TRITON_CACHE_DIR=/tmp/tc_new PYTHONPATH=src timeout 60 python3 benchmarks/fp64_fft_graph.py --out $R/graph --sizes 256,512 --reps 10 > $R/graph.log 2>&1
echo "graph rc $?" >> $R/rc.txt
cut -c1-300 $R/graph.log
cat $R/rc.txt
tar czf $OUT/run48.tgz -C /tmp res
