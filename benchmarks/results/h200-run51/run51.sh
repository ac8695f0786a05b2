#!/bin/bash
# run 51 (session 11): CUDA tests of the new code; stage times alternating new (6d77647: quotient from the top
# digit sum, column passes) and old (a59ee5a, session start) at the default shapes, plus the new launch
# shapes (N = 32 as two programs of 8 warps per SM in two column passes; N = 16 as four programs of 4 warps);
# Nsight Compute phases of the new default N = 16 and N = 32 stages
S=$(cd "$(dirname "$0")" && pwd)
R=/tmp/res; rm -rf $R; mkdir -p $R
export PYTHONUNBUFFERED=1
cat $S/snap/COMMIT > $R/commit.txt; cat $S/snap_old/COMMIT > $R/commit_old.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv > $R/smi.txt 2>&1
T="python3 -m pytest -v -p no:cacheprovider"
cd $S/snap
TRITON_CACHE_DIR=/tmp/tc_new PYTHONPATH=src timeout 170 $T tests/fp64/test_fft_fused_gluon.py tests/fp64/test_fft_epilogue_f64.py -k "not compiles" > $R/tests.log 2>&1
echo "tests rc $?" >> $R/rc.txt
grep -hE "PASSED|FAILED|ERROR|^E " $R/tests.log | cut -c1-160 | head -40
SHN='16:64,8,16,128;16:64,4,16,128,2;32:64,16,32,0;32:64,8,32,128,2'
SHO='16:64,8,16,128;32:64,16,32,0'
for v in new old new old; do
  d=$S/snap_$v; [ $v = new ] && d=$S/snap
  SH=$SHN; [ $v = old ] && SH=$SHO
  [ -f $R/shapes_${v}_1.log ] && n=2 || n=1
  cd $d && TRITON_CACHE_DIR=/tmp/tc_$v PYTHONPATH=src timeout 75 python3 benchmarks/fp64_fused_epi_shapes.py --out $R/shapes_${v}_$n --shapes "$SH" --budget-s 65 > $R/shapes_${v}_$n.log 2>&1
  echo "shapes $v $n rc $?" >> $R/rc.txt
done
grep -H '"ms"\|WRONG' $R/shapes_*.log | sed 's/.*shapes_//' | cut -c1-230
cd $S/snap
for N in 16 32; do
  SH='16:64,8,16,128'; [ $N = 32 ] && SH='32:64,16,32,0'
  TRITON_CACHE_DIR=/tmp/tc_new PYTHONPATH=src timeout 110 ncu --clock-control none --kernel-name regex:fused_epi --launch-skip 1 --launch-count 1 \
   --section SpeedOfLight --section SchedulerStats --section WarpStateStats --section Occupancy --section SourceCounters \
   --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,regex:sm__inst_executed_pipe_(fp64|alu|fmaheavy|fmalite|lsu|uniform)\.avg\.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active" \
   -o $R/ncu$N -f python3 benchmarks/fp64_fused_epi_shapes.py --out /tmp/ncu_g$N --sizes $N --shapes "$SH" --reps 1 > $R/ncu$N.log 2>&1
  echo "ncu $N rc $?" >> $R/rc.txt
  timeout 40 ncu --import $R/ncu$N.ncu-rep --page details > $R/ncu${N}_details.txt 2>&1
  timeout 60 ncu --import $R/ncu$N.ncu-rep --page source --csv --print-source sass > $R/ncu${N}_source.csv 2>&1
  python3 benchmarks/results/h200-run39/ncu_phases.py $R/ncu${N}_source.csv > $R/ncu${N}_phases.txt 2>&1; head -8 $R/ncu${N}_phases.txt
  grep -iE "Issue Slots|Warp Cycles Per Issued|Duration|stalled_(math|not_sel|wait|long|short|lg_thr|barrier|dispatch|drain|gmma)|pipe_(alu|fmaheavy|fp64).*avg" $R/ncu${N}_details.txt | head -20
  rm -f $R/ncu$N.ncu-rep; gzip -f $R/ncu${N}_source.csv
done
cat $R/rc.txt
tar czf $OUT/run51.tgz -C /tmp res
