#!/bin/bash
# run 29: fused stage old (snap_old) vs new (snap) per-stage times + digests, new whole transforms, ncu profiles
S=$(cd "$(dirname "$0")" && pwd)
R=/tmp/res; rm -rf $R; mkdir -p $R
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv > $R/gpu.txt 2>&1
python3 -c "import torch, triton; print(torch.__version__, triton.__version__)" >> $R/gpu.txt 2>&1
uname -r >> $R/gpu.txt; which ncu >> $R/gpu.txt 2>&1
echo "old $(cat $S/snap_old/COMMIT) new $(cat $S/snap/COMMIT)" >> $R/gpu.txt
SH="16:64,8,16,128;32:64,16,32,0"
for v in old new new2 old2; do
  d=$S/snap; [ "${v:0:3}" = old ] && d=$S/snap_old
  (cd $S/snap && TRITON_CACHE_DIR=/tmp/tc_${v:0:3} PYTHONPATH=$d/src timeout 90 python3 benchmarks/fp64_fused_epi_shapes.py --out $R/shapes_$v --shapes "$SH" --budget-s 80) > $R/shapes_$v.log 2>&1
  echo "shapes $v rc $?" >> $R/rc.txt
done
(cd $S/snap && PYTHONPATH=src timeout 200 python3 benchmarks/fp64_fft_gpu.py --out $R/fft --configs int8/crt/g8/fusedepi --no-extras --budget-s 185 --cache-dir /tmp/tc_new) > $R/fft.log 2>&1
echo "fft rc $?" >> $R/rc.txt
for v in old new; do
  d=$S/snap; [ $v = old ] && d=$S/snap_old
  (cd $S/snap && TRITON_CACHE_DIR=/tmp/tc_$v PYTHONPATH=$d/src timeout 120 ncu --clock-control none --kernel-name regex:fused_epi --launch-skip 1 --launch-count 1 \
     --section SpeedOfLight --section ComputeWorkloadAnalysis --section SchedulerStats --section WarpStateStats --section InstructionStats --section Occupancy --section LaunchStats --section SourceCounters \
     --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,regex:sm__inst_executed_pipe_.*\.avg\.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active" \
     -o $R/ncu_$v -f python3 benchmarks/fp64_fused_epi_shapes.py --out /tmp/ncu_$v --sizes 16 --shapes "16:64,8,16,128" --reps 1) > $R/ncu_$v.log 2>&1
  echo "ncu $v rc $?" >> $R/rc.txt
  timeout 60 ncu --import $R/ncu_$v.ncu-rep --page details > $R/ncu_${v}_details.txt 2>&1
  timeout 60 ncu --import $R/ncu_$v.ncu-rep --page raw --csv > $R/ncu_${v}_raw.csv 2>&1
  timeout 60 ncu --import $R/ncu_$v.ncu-rep --page source --csv --print-source sass > $R/ncu_${v}_source.csv 2>&1
  echo "ncu import $v rc $?" >> $R/rc.txt
done
grep -h '"ms"' $R/shapes_*.log | cut -c1-220; grep -E "^\[.*(fusedepi|cufft)" $R/fft.log | grep -v worker | cut -c1-250
grep -iE "stall|Issue Slots|Warp Cycles|Registers|Achieved Occ|Duration" $R/ncu_new_details.txt | head -40
cat $R/rc.txt
tar czf $OUT/run29.tgz -C /tmp res
