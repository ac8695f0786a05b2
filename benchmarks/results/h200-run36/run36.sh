#!/bin/bash
# run 36: the FP64 fold (GPUFIELD_FUSED_EPI_FOLD=f64) against the integer fold in the Gluon stage kernel:
# stage times + digests alternating (N = 16 and 32), whole transforms (f64: 256^3..1024^3, int: 256^3, 512^3), ncu of f64
S=$(cd "$(dirname "$0")" && pwd)
R=/tmp/res; rm -rf $R; mkdir -p $R
export PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/tc
cat $S/snap/COMMIT > $R/commit.txt
cd $S/snap
for rep in 1 2; do
  for fold in int f64; do
    GPUFIELD_FUSED_EPI_FOLD=$fold PYTHONPATH=src timeout 55 python3 benchmarks/fp64_fused_epi_shapes.py --out $R/sh_${fold}_$rep --shapes "16:64,8,16,128;32:64,16,32,0" --budget-s 50 > $R/sh_${fold}_$rep.log 2>&1
    echo "shapes $fold $rep rc $?" >> $R/rc.txt
  done
done
grep -H '"ms"' $R/sh_*.log | sed 's/.*sh_//' | cut -c1-190
GPUFIELD_FUSED_EPI_FOLD=f64 PYTHONPATH=src timeout 200 python3 benchmarks/fp64_fft_gpu.py --out $R/fft_f64 --configs int8/crt/g8/fusedepi --no-extras --budget-s 195 --cache-dir /tmp/tc > $R/fft_f64.log 2>&1
echo "fft f64 rc $?" >> $R/rc.txt
grep -E "^\[.*(fusedepi|cufft)" $R/fft_f64.log | grep -v worker | cut -c1-250
GPUFIELD_FUSED_EPI_FOLD=int PYTHONPATH=src timeout 75 python3 benchmarks/fp64_fft_gpu.py --out $R/fft_int --sizes 256,512 --configs int8/crt/g8/fusedepi --no-extras --budget-s 70 --cache-dir /tmp/tc > $R/fft_int.log 2>&1
echo "fft int rc $?" >> $R/rc.txt
grep -E "^\[.*(fusedepi|cufft)" $R/fft_int.log | grep -v worker | cut -c1-250
GPUFIELD_FUSED_EPI_FOLD=f64 PYTHONPATH=src timeout 60 ncu --clock-control none --kernel-name regex:fused_epi --launch-skip 1 --launch-count 1 \
   --section SpeedOfLight --section ComputeWorkloadAnalysis --section SchedulerStats --section WarpStateStats --section InstructionStats --section Occupancy --section LaunchStats \
   --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,regex:sm__inst_executed_pipe_.*\.avg\.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active" \
   -o $R/ncu_f64 -f python3 benchmarks/fp64_fused_epi_shapes.py --out /tmp/ncu_g --sizes 16 --shapes "16:64,8,16,128" --reps 1 > $R/ncu_f64.log 2>&1
echo "ncu rc $?" >> $R/rc.txt
timeout 25 ncu --import $R/ncu_f64.ncu-rep --page details > $R/ncu_f64_details.txt 2>&1
grep -iE "Issue Slots|Warp Cycles Per Issued|Registers Per|Achieved Occ|Duration|stalled_(math|not_sel|wait|long|selected|short)|pipe_(alu|fmaheavy|fp64|uniform)\.avg" $R/ncu_f64_details.txt | head -24
cat $R/rc.txt
tar czf $OUT/run36.tgz -C /tmp res
