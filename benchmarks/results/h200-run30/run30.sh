#!/bin/bash
# run 30: Gluon fused stage kernel vs Triton kernel (same commit): stage times + digests, whole transforms, ncu
S=$(cd "$(dirname "$0")" && pwd)
R=/tmp/res; rm -rf $R; mkdir -p $R
export PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/tc
cat $S/snap/COMMIT > $R/commit.txt
cd $S/snap
SH="16:64,8,16,128;32:64,16,32,0"
run_shapes() {  # name impl maxnreg-env shapes
  GPUFIELD_FUSED_EPI_IMPL=$2 GPUFIELD_FUSED_EPI_MAXNREG=$3 PYTHONPATH=src timeout 90 python3 benchmarks/fp64_fused_epi_shapes.py --out $R/shapes_$1 --shapes "$4" --budget-s 80 > $R/shapes_$1.log 2>&1
  echo "shapes $1 rc $?" >> $R/rc.txt
}
run_shapes triton triton "" "$SH"
run_shapes gluon gluon "" "$SH"
run_shapes gluon_nocap gluon 0 "16:64,8,16,0;32:64,16,32,0"
run_shapes triton2 triton "" "$SH"
run_shapes gluon2 gluon "" "$SH"
grep -h '"ms"' $R/shapes_*.log | cut -c1-200
GPUFIELD_FUSED_EPI_IMPL=gluon PYTHONPATH=src timeout 150 python3 benchmarks/fp64_fft_gpu.py --out $R/fft_gluon --configs int8/crt/g8/fusedepi --no-extras --budget-s 140 --cache-dir /tmp/tc > $R/fft_gluon.log 2>&1
echo "fft gluon rc $?" >> $R/rc.txt
grep -E "^\[.*(fusedepi|cufft)" $R/fft_gluon.log | grep -v worker | cut -c1-250
GPUFIELD_FUSED_EPI_IMPL=gluon PYTHONPATH=src timeout 100 ncu --clock-control none --kernel-name regex:fused_epi --launch-skip 1 --launch-count 1 \
   --section SpeedOfLight --section ComputeWorkloadAnalysis --section SchedulerStats --section WarpStateStats --section InstructionStats --section Occupancy --section LaunchStats --section SourceCounters \
   --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,regex:sm__inst_executed_pipe_.*\.avg\.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active" \
   -o $R/ncu_gluon -f python3 benchmarks/fp64_fused_epi_shapes.py --out /tmp/ncu_g --sizes 16 --shapes "16:64,8,16,128" --reps 1 > $R/ncu_gluon.log 2>&1
echo "ncu gluon rc $?" >> $R/rc.txt
timeout 60 ncu --import $R/ncu_gluon.ncu-rep --page details > $R/ncu_gluon_details.txt 2>&1
timeout 60 ncu --import $R/ncu_gluon.ncu-rep --page source --csv --print-source sass > $R/ncu_gluon_source.csv 2>&1
grep -iE "stall|Issue Slots|Warp Cycles|Registers|Achieved Occ|Duration" $R/ncu_gluon_details.txt | head -40
cat $R/rc.txt
tar czf $OUT/run30.tgz -C /tmp res
