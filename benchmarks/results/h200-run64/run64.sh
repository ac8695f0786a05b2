#!/bin/bash
# run 64 (session 13): CUDA tests at HEAD (Gluon kernel, FP64 fold, launch paths incl. the inverse's division
# in the last rounding); whole transforms 256^3 and 512^3, two rounds alternating: HEAD (new: int64 row max)
# against c88fc3d (old: NaN-aware float64 row max)
S=$(cd "$(dirname "$0")" && pwd)
R=$OUT/res; mkdir -p $R
export PYTHONUNBUFFERED=1
(cat $S/snap/COMMIT; cat $S/snap_old/COMMIT) > $R/commits.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv > $R/gpu.txt 2>&1
cd $S/snap
TRITON_CACHE_DIR=/tmp/tc_new PYTHONPATH=src timeout 300 python3 -m pytest -q -p no:cacheprovider tests/fp64/test_fft_fused_gluon.py tests/fp64/test_fft_epilogue_f64.py tests/fp64/test_fft_launch.py tests/fp64/test_interpreter_setup.py -k "not compiles" > $R/tests.log 2>&1
echo "tests rc $?" >> $R/rc.txt
tail -15 $R/tests.log
for rep in 1 2; do for v in new old; do
  d=$S/snap; [ $v = old ] && d=$S/snap_old
  cd $d && TRITON_CACHE_DIR=/tmp/tc_$v PYTHONPATH=src timeout 80 python3 $S/snap/benchmarks/fp64_fft_bits.py --out /tmp/b_${v}_$rep --sizes 256,512 --bits 58/56 --reps 5 2>&1 | sed "s/^/$v$rep /" | cut -c1-330 >> $R/whole.log
  echo "$v$rep rc $?" >> $R/rc.txt
done; done
cat $R/whole.log
cat $R/rc.txt
