#!/bin/bash
# run 49: session 10's final state (new) side by side with its steps: 40ea6b1 (q on the integer pipe, mid2),
# de1ffc6 (residue pairs, mid) and ccbfde2 (session start, old): CUDA tests, stage times alternating, whole
# transforms with cuFFT (new: 256^3..1024^3; old: 256^3, 512^3), graph replay
S=$(cd "$(dirname "$0")" && pwd)
R=/tmp/res; rm -rf $R; mkdir -p $R
export PYTHONUNBUFFERED=1
cat $S/snap/COMMIT > $R/commit.txt
T="python3 -m pytest -v -p no:cacheprovider"
cd $S/snap
TRITON_CACHE_DIR=/tmp/tc_new PYTHONPATH=src timeout 200 $T tests/fp64/test_fft_fused_gluon.py tests/fp64/test_fft_launch.py tests/fp64/test_fft_fused_epi.py -k "not compiles" > $R/tests.log 2>&1
echo "tests rc $?" >> $R/rc.txt
grep -hE "PASSED|FAILED|ERROR|^E " $R/tests.log | cut -c1-160 | head -60
SH='16:64,8,16,128;32:64,16,32,0'
for v in new mid2 mid old new mid2 mid old; do
  d=$S/snap_$v; [ $v = new ] && d=$S/snap
  [ -f $R/shapes_${v}_1.log ] && n=2 || n=1
  cd $d && TRITON_CACHE_DIR=/tmp/tc_$v PYTHONPATH=src timeout 60 python3 benchmarks/fp64_fused_epi_shapes.py --out $R/shapes_${v}_$n --shapes "$SH" --budget-s 50 > $R/shapes_${v}_$n.log 2>&1
  echo "shapes $v $n rc $?" >> $R/rc.txt
done
grep -H '"ms"\|WRONG' $R/shapes_*.log | sed 's/.*shapes_//' | cut -c1-200
cd $S/snap && TRITON_CACHE_DIR=/tmp/tc_new PYTHONPATH=src timeout 150 python3 benchmarks/fp64_fft_gpu.py --out $R/fft --configs int8/kulisch/g8/fusedepi,int8/crt/g8/fusedepi --no-extras --budget-s 145 --cache-dir /tmp/tc_new > $R/fft.log 2>&1
echo "fft new rc $?" >> $R/rc.txt
grep -E "^\[.*(fusedepi|cufft)" $R/fft.log | grep -v worker | cut -c1-250
cd $S/snap_old && TRITON_CACHE_DIR=/tmp/tc_old PYTHONPATH=src timeout 80 python3 benchmarks/fp64_fft_gpu.py --out $R/fft_old --sizes 256,512 --configs int8/kulisch/g8/fusedepi --no-extras --budget-s 75 --cache-dir /tmp/tc_old > $R/fft_old.log 2>&1
echo "fft old rc $?" >> $R/rc.txt
grep -E "^\[.*(fusedepi|cufft)" $R/fft_old.log | grep -v worker | cut -c1-250
cd $S/snap && TRITON_CACHE_DIR=/tmp/tc_new PYTHONPATH=src timeout 60 python3 benchmarks/fp64_fft_graph.py --out $R/graph --sizes 256,512 --reps 10 > $R/graph.log 2>&1
echo "graph rc $?" >> $R/rc.txt
cut -c1-300 $R/graph.log
cat $R/rc.txt
tar czf $OUT/run49.tgz -C /tmp res
