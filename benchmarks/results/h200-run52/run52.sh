#!/bin/bash
# run 52 (session 11): stage times queued back to back (new 6d77647+ vs old a59ee5a, both layouts, pairs
# variants), per-kernel GPU times inside eager 256^3 / 512^3 transforms (torch.profiler) and the host profile,
# whole transforms with cuFFT (new 256..1024, old 512), graph replay
S=$(cd "$(dirname "$0")" && pwd)
R=/tmp/res; rm -rf $R; mkdir -p $R
export PYTHONUNBUFFERED=1
cat $S/snap/COMMIT > $R/commit.txt; cat $S/snap_old/COMMIT > $R/commit_old.txt
B=$S/snap/benchmarks/fp64_fused_epi_shapes.py
run_sh() { # name tree layout pairs shapes
  cd $S/$2 && GPUFIELD_FUSED_EPI_PAIRS=$4 TRITON_CACHE_DIR=/tmp/tc_$2_$4 PYTHONPATH=src timeout 60 python3 $B --out $R/sh_$1 --layout $3 --shapes "$5" --budget-s 50 > $R/sh_$1.log 2>&1
  echo "shapes $1 rc $?" >> $R/rc.txt
}
D='16:64,8,16,128;32:64,16,32,0'
run_sh new_rows_1 snap rows "" "$D"
run_sh old_rows_1 snap_old rows "" "$D"
run_sh new_six_1 snap sixstep "" "$D"
run_sh old_six_1 snap_old sixstep "" "$D"
run_sh new_six_p7 snap sixstep 7 '16:64,8,16,128'
run_sh new_six_p4 snap sixstep 4 '32:64,16,32,0;32:64,8,32,128,2'
run_sh new_six_2 snap sixstep "" "$D"
run_sh old_six_2 snap_old sixstep "" "$D"
grep -H '"ms"\|WRONG' $R/sh_*.log | sed 's/.*sh_//' | sed 's/"first_call_s[^,]*, //; s/"maxnreg": //' | cut -c1-230
cd $S/snap && TRITON_CACHE_DIR=/tmp/tc_snap_ PYTHONPATH=src timeout 100 python3 $S/prof_fft.py 256,512 $R/prof.json > $R/prof.log 2>&1
echo "prof rc $?" >> $R/rc.txt
grep -E "^(256|512) " $R/prof.log
cd $S/snap && TRITON_CACHE_DIR=/tmp/tc_snap_ PYTHONPATH=src timeout 150 python3 benchmarks/fp64_fft_gpu.py --out $R/fft --configs int8/kulisch/g8/fusedepi --no-extras --budget-s 145 --cache-dir /tmp/tc_snap_ > $R/fft.log 2>&1
echo "fft new rc $?" >> $R/rc.txt
grep -E "^\[.*(fusedepi|cufft)" $R/fft.log | grep -v worker | cut -c1-250
cd $S/snap_old && TRITON_CACHE_DIR=/tmp/tc_snap_old_ PYTHONPATH=src timeout 55 python3 benchmarks/fp64_fft_gpu.py --out $R/fft_old --sizes 512 --configs int8/kulisch/g8/fusedepi --no-extras --budget-s 50 --cache-dir /tmp/tc_snap_old_ > $R/fft_old.log 2>&1
echo "fft old rc $?" >> $R/rc.txt
grep -E "^\[.*(fusedepi|cufft)" $R/fft_old.log | grep -v worker | cut -c1-250
cd $S/snap && TRITON_CACHE_DIR=/tmp/tc_snap_ PYTHONPATH=src timeout 50 python3 benchmarks/fp64_fft_graph.py --out $R/graph --sizes 256,512 --reps 10 > $R/graph.log 2>&1
echo "graph rc $?" >> $R/rc.txt
cut -c1-300 $R/graph.log
cat $R/rc.txt
tar czf $OUT/run52.tgz -C /tmp res
