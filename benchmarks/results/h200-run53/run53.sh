#!/bin/bash
# run 53 (session 11): N = 32 in two column passes as the Gluon default (new) against one program of 16
# warps (prev = ee56f65): CUDA tests, stage times (six-step layout, queued), whole transforms 512^3 / 1024^3
# alternating new and prev, cuFFT in the same processes
S=$(cd "$(dirname "$0")" && pwd)
R=/tmp/res; rm -rf $R; mkdir -p $R
export PYTHONUNBUFFERED=1
cat $S/snap/COMMIT > $R/commit.txt; cat $S/snap_prev/COMMIT > $R/commit_prev.txt
T="python3 -m pytest -v -p no:cacheprovider"
cd $S/snap
TRITON_CACHE_DIR=/tmp/tc_new PYTHONPATH=src timeout 190 $T tests/fp64/test_fft_fused_gluon.py tests/fp64/test_fft_launch.py -k "not compiles" > $R/tests.log 2>&1
echo "tests rc $?" >> $R/rc.txt
grep -hE "PASSED|FAILED|ERROR|^E " $R/tests.log | cut -c1-160 | head -40
for rep in 1 2; do
  cd $S/snap && TRITON_CACHE_DIR=/tmp/tc_new PYTHONPATH=src timeout 60 python3 benchmarks/fp64_fused_epi_shapes.py --out $R/sh_six_$rep --layout sixstep --sizes 32 --shapes '32:64,8,32,128,2;32:64,16,32,0,1' --budget-s 50 > $R/sh_six_$rep.log 2>&1
  echo "shapes six $rep rc $?" >> $R/rc.txt
done
grep -H '"ms"\|WRONG' $R/sh_*.log | sed 's/.*sh_//' | sed 's/"first_call_s[^,]*, //' | cut -c1-230
for v in new prev new prev; do
  d=$S/snap_$v; [ $v = new ] && d=$S/snap
  [ -f $R/fft_${v}_1.log ] && n=2 || n=1
  cd $d && TRITON_CACHE_DIR=/tmp/tc_$v PYTHONPATH=src timeout 75 python3 benchmarks/fp64_fft_gpu.py --out $R/fft_${v}_$n --sizes 512,1024 --configs int8/kulisch/g8/fusedepi --no-extras --budget-s 70 --cache-dir /tmp/tc_$v > $R/fft_${v}_$n.log 2>&1
  echo "fft $v $n rc $?" >> $R/rc.txt
  grep -E "^\[.*(fusedepi|cufft):" $R/fft_${v}_$n.log | grep -v worker | cut -c1-200 | sed "s/^/$v $n /"
done
cat $R/rc.txt
tar czf $OUT/run53.tgz -C /tmp res
