#!/bin/bash
# run 40: persistent Gluon stage kernel (cp.async double-buffered rows) against one program per tile (same
# kernel, GPUFIELD_FUSED_EPI_PROGRAMS=0) and against abbe7a5 (old): tests, stage times, transforms, ncu
S=$(cd "$(dirname "$0")" && pwd)
R=/tmp/res; rm -rf $R; mkdir -p $R
export PYTHONUNBUFFERED=1
cat $S/snap/COMMIT > $R/commit.txt
T="python3 -m pytest -v -p no:cacheprovider"
cd $S/snap
TRITON_CACHE_DIR=/tmp/tc_new PYTHONPATH=src timeout 200 $T tests/fp64/test_fft_fused_gluon.py -k "not compiles" > $R/tests_gluon.log 2>&1
echo "tests gluon rc $?" >> $R/rc.txt
grep -hE "PASSED|FAILED|ERROR|^E " $R/tests_gluon.log | cut -c1-200 | head -30
SH='16:64,8,16,128;32:64,16,32,0'
for rep in 1 2; do
for v in new new0 old; do
  d=$S/snap; [ $v = old ] && d=$S/snap_old
  P=""; [ $v = new0 ] && P=0
  cd $d && GPUFIELD_FUSED_EPI_PROGRAMS=$P TRITON_CACHE_DIR=/tmp/tc_$v PYTHONPATH=src timeout 100 python3 benchmarks/fp64_fused_epi_shapes.py --out $R/shapes_${v}_$rep --shapes "$SH" --budget-s 90 > $R/shapes_${v}_$rep.log 2>&1
  echo "shapes $v $rep rc $?" >> $R/rc.txt
done; done
grep -H '"ms"' $R/shapes_*.log | sed 's/.*shapes_//' | cut -c1-200
unset GPUFIELD_FUSED_EPI_PROGRAMS
cd $S/snap && TRITON_CACHE_DIR=/tmp/tc_new PYTHONPATH=src timeout 150 python3 benchmarks/fp64_fft_gpu.py --out $R/fft --configs int8/crt/g8/fusedepi --no-extras --budget-s 145 --cache-dir /tmp/tc_new > $R/fft.log 2>&1
echo "fft new rc $?" >> $R/rc.txt
grep -E "^\[.*(fusedepi|cufft)" $R/fft.log | grep -v worker | cut -c1-250
cd $S/snap_old && TRITON_CACHE_DIR=/tmp/tc_old PYTHONPATH=src timeout 100 python3 benchmarks/fp64_fft_gpu.py --out $R/fft_old --sizes 256,512 --configs int8/crt/g8/fusedepi --no-extras --budget-s 95 --cache-dir /tmp/tc_old > $R/fft_old.log 2>&1
echo "fft old rc $?" >> $R/rc.txt
grep -E "^\[.*(fusedepi|cufft)" $R/fft_old.log | grep -v worker | cut -c1-250
cd $S/snap && TRITON_CACHE_DIR=/tmp/tc_new PYTHONPATH=src timeout 90 ncu --clock-control none --kernel-name regex:fused_epi --launch-skip 1 --launch-count 1 \
   --section SpeedOfLight --section SchedulerStats --section WarpStateStats --section Occupancy --section SourceCounters \
   --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,regex:sm__inst_executed_pipe_(fp64|alu|fmaheavy)\.avg\.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active" \
   -o $R/ncu16 -f python3 benchmarks/fp64_fused_epi_shapes.py --out /tmp/ncu_g --sizes 16 --shapes "16:64,8,16,128" --reps 1 > $R/ncu16.log 2>&1
echo "ncu rc $?" >> $R/rc.txt
timeout 40 ncu --import $R/ncu16.ncu-rep --page details > $R/ncu16_details.txt 2>&1
timeout 60 ncu --import $R/ncu16.ncu-rep --page source --csv --print-source sass > $R/ncu16_source.csv 2>&1
grep -iE "Issue Slots|Warp Cycles Per Issued|Duration|stalled_(math|not_sel|wait|long|selected|short|dispatch|drain|barrier)|pipe_(alu|fmaheavy|fp64).*avg" $R/ncu16_details.txt | head -20
cat $R/rc.txt
tar czf $OUT/run40.tgz -C /tmp res
