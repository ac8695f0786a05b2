#!/bin/bash
# run 35: Gluon stage kernel occupancy: N = 16 at 16 warps / 64 registers (2 programs = 32 warps per SM) and
# N = 32 at 32 warps / 64 registers vs the defaults (8 warps / 128, 16 warps uncapped), alternating; ncu of
# the N = 16 candidate; whole transforms at the current defaults (snap) and with the candidates as defaults (snap_b)
S=$(cd "$(dirname "$0")" && pwd)
R=/tmp/res; rm -rf $R; mkdir -p $R
export PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/tc
echo "snap $(cat $S/snap/COMMIT) snap_b $(cat $S/snap_b/COMMIT)" > $R/commit.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv > $R/gpu.txt 2>&1
cd $S/snap
PYTHONPATH=src timeout 110 python3 benchmarks/fp64_fused_epi_shapes.py --out $R/shapes16 --shapes "16:64,8,16,128;16:64,16,16,64;16:64,16,16,0;16:64,8,16,128;16:64,16,16,64;16:64,8,16,128;16:64,16,16,64" --budget-s 100 > $R/shapes16.log 2>&1
echo "shapes16 rc $?" >> $R/rc.txt
PYTHONPATH=src timeout 90 python3 benchmarks/fp64_fused_epi_shapes.py --out $R/shapes32 --shapes "32:64,16,32,0;32:64,32,32,64;32:64,16,32,0;32:64,32,32,64;32:64,16,32,0;32:64,32,32,64" --budget-s 80 > $R/shapes32.log 2>&1
echo "shapes32 rc $?" >> $R/rc.txt
grep -h '"ms"' $R/shapes*.log | cut -c1-200
for v in b a; do
  d=$S/snap; [ $v = b ] && d=$S/snap_b
  (cd $d && PYTHONPATH=src timeout 125 python3 benchmarks/fp64_fft_gpu.py --out $R/fft_$v --configs int8/crt/g8/fusedepi --no-extras --budget-s 118 --cache-dir /tmp/tc_$v) > $R/fft_$v.log 2>&1
  echo "fft $v rc $?" >> $R/rc.txt
  grep -E "^\[.*(fusedepi|cufft)" $R/fft_$v.log | grep -v worker | cut -c1-250
done
PYTHONPATH=src timeout 80 ncu --clock-control none --kernel-name regex:fused_epi --launch-skip 1 --launch-count 1 \
   --section SpeedOfLight --section ComputeWorkloadAnalysis --section SchedulerStats --section WarpStateStats --section InstructionStats --section Occupancy --section LaunchStats \
   --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,regex:sm__inst_executed_pipe_.*\.avg\.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active" \
   -o $R/ncu16 -f python3 benchmarks/fp64_fused_epi_shapes.py --out /tmp/ncu_g --sizes 16 --shapes "16:64,16,16,64" --reps 1 > $R/ncu16.log 2>&1
echo "ncu rc $?" >> $R/rc.txt
timeout 30 ncu --import $R/ncu16.ncu-rep --page details > $R/ncu16_details.txt 2>&1
grep -iE "stall|Issue Slots|Warp Cycles|Registers|Achieved Occ|Duration|pipe" $R/ncu16_details.txt | head -30
cat $R/rc.txt
tar czf $OUT/run35.tgz -C /tmp res
