#!/bin/bash
# run 54 (session 11): twiddle tiles by cp.async (new) against 7c73315 (prev): CUDA tests, stage times
# (six-step layout, queued) alternating, whole transforms 256^3..1024^3 each, graph replay (new)
S=$(cd "$(dirname "$0")" && pwd)
R=/tmp/res; rm -rf $R; mkdir -p $R
export PYTHONUNBUFFERED=1
cat $S/snap/COMMIT > $R/commit.txt; cat $S/snap_prev/COMMIT > $R/commit_prev.txt
T="python3 -m pytest -v -p no:cacheprovider"
cd $S/snap
TRITON_CACHE_DIR=/tmp/tc_new PYTHONPATH=src timeout 230 $T tests/fp64/test_fft_fused_gluon.py tests/fp64/test_fft_launch.py tests/fp64/test_fft_epilogue_f64.py -k "not compiles" > $R/tests.log 2>&1
echo "tests rc $?" >> $R/rc.txt
grep -hE "FAILED|ERROR|^E " $R/tests.log | cut -c1-160 | head -20; echo "passed: $(grep -c PASSED $R/tests.log)"
for rep in 1 2; do for v in new prev; do
  d=$S/snap_$v; [ $v = new ] && d=$S/snap
  cd $d && TRITON_CACHE_DIR=/tmp/tc_$v PYTHONPATH=src timeout 60 python3 $S/snap/benchmarks/fp64_fused_epi_shapes.py --out $R/sh_${v}_$rep --layout sixstep --shapes '16:64,8,16,128,1;32:64,8,32,128,2' --budget-s 50 > $R/sh_${v}_$rep.log 2>&1
  echo "shapes $v $rep rc $?" >> $R/rc.txt
done; done
grep -H '"ms"\|WRONG' $R/sh_*.log | sed 's/.*sh_//' | sed 's/"first_call_s[^,]*, //' | cut -c1-230
for v in new prev; do
  d=$S/snap_$v; [ $v = new ] && d=$S/snap
  cd $d && TRITON_CACHE_DIR=/tmp/tc_$v PYTHONPATH=src timeout 75 python3 benchmarks/fp64_fft_gpu.py --out $R/fft_$v --configs int8/kulisch/g8/fusedepi --no-extras --budget-s 70 --cache-dir /tmp/tc_$v > $R/fft_$v.log 2>&1
  echo "fft $v rc $?" >> $R/rc.txt
  grep -E "^\[.*(fusedepi|cufft):" $R/fft_$v.log | grep -v worker | cut -c1-200 | sed "s/^/$v /"
done
cd $S/snap && TRITON_CACHE_DIR=/tmp/tc_new PYTHONPATH=src timeout 50 python3 benchmarks/fp64_fft_graph.py --out $R/graph --sizes 256,512 --reps 10 > $R/graph.log 2>&1
echo "graph rc $?" >> $R/rc.txt
cut -c1-300 $R/graph.log
cat $R/rc.txt
tar czf $OUT/run54.tgz -C /tmp res
