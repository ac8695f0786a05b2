#!/bin/bash
# run 45: residue pairs (session 10): CUDA tests of the new residue schedule and the Gluon kernel, then stage
# times alternating: new default (4 pairs), new with 0 pairs (only p = 256 from the low byte), new with 7
# pairs, and ccbfde2 (old); N = 32 also at (64, 8, 32, uncapped)
S=$(cd "$(dirname "$0")" && pwd)
R=/tmp/res; rm -rf $R; mkdir -p $R
export PYTHONUNBUFFERED=1
cat $S/snap/COMMIT > $R/commit.txt
T="python3 -m pytest -v -p no:cacheprovider"
cd $S/snap
TRITON_CACHE_DIR=/tmp/tc_p4 PYTHONPATH=src timeout 170 $T tests/fp64/test_fft_fused_gluon.py -k "not compiles" tests/fp64/test_fft_fused_epi.py -k "not compiles and (pair or schedule or half_integer or transform_equals or grid_rows)" > $R/tests.log 2>&1
echo "tests rc $?" >> $R/rc.txt
grep -hE "PASSED|FAILED|ERROR|^E " $R/tests.log | cut -c1-200 | head -40
SH='16:64,8,16,128;32:64,16,32,0'
for rep in 1 2; do
for v in p4 p0 old p7; do
  d=$S/snap; [ $v = old ] && d=$S/snap_old
  P=${v#p}; [ $v = old ] && P=""
  SHV=$SH; [ $v = p4 ] && [ $rep = 2 ] && SHV="$SH;32:64,8,32,0"
  cd $d && GPUFIELD_FUSED_EPI_PAIRS=$P TRITON_CACHE_DIR=/tmp/tc_$v PYTHONPATH=src timeout 90 python3 benchmarks/fp64_fused_epi_shapes.py --out $R/shapes_${v}_$rep --shapes "$SHV" --budget-s 80 > $R/shapes_${v}_$rep.log 2>&1
  echo "shapes $v $rep rc $?" >> $R/rc.txt
done; done
grep -H '"ms"\|digest\|WRONG' $R/shapes_*.log | sed 's/.*shapes_//' | cut -c1-220
cat $R/rc.txt
tar czf $OUT/run45.tgz -C /tmp res
