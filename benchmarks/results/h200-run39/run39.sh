#!/bin/bash
# run 39: host gaps at 256^3 (eager vs enqueue vs CUDA-graph replay, cProfile), ncu with per-instruction stall
# samples of the N = 16 stage (contiguous rows), whole 1024^3 with one chunk per stage
S=$(cd "$(dirname "$0")" && pwd)
R=/tmp/res; rm -rf $R; mkdir -p $R
export PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/tc
cat $S/snap/COMMIT > $R/commit.txt
cd $S/snap
PYTHONPATH=src timeout 120 python3 hostprobe.py 256 > $R/host256.log 2>&1
echo "host256 rc $?" >> $R/rc.txt
head -12 $R/host256.log
grep -A 30 "tottime" $R/host256.log | head -32 | cut -c1-160
PYTHONPATH=src timeout 90 ncu --clock-control none --kernel-name regex:fused_epi --launch-skip 1 --launch-count 1 \
   --section SpeedOfLight --section ComputeWorkloadAnalysis --section SchedulerStats --section WarpStateStats --section InstructionStats --section Occupancy --section SourceCounters \
   --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,regex:sm__inst_executed_pipe_.*\.avg\.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active" \
   -o $R/ncu16 -f python3 benchmarks/fp64_fused_epi_shapes.py --out /tmp/ncu_g --sizes 16 --shapes "16:64,8,16,128" --reps 1 > $R/ncu16.log 2>&1
echo "ncu rc $?" >> $R/rc.txt
timeout 40 ncu --import $R/ncu16.ncu-rep --page details > $R/ncu16_details.txt 2>&1
timeout 60 ncu --import $R/ncu16.ncu-rep --page source --csv --print-source sass > $R/ncu16_source.csv 2>&1
echo "ncu source rc $?" >> $R/rc.txt
grep -iE "Issue Slots|Warp Cycles Per Issued|Registers Per|Achieved Occ|Duration|stalled_(math|not_sel|wait|long|selected|short|mio|lg_thr|barrier|dispatch|no_inst|branch|drain|imc|membar|sleep|tex)|pipe_(alu|fmaheavy|fmalite|fp64|uniform|lsu|tensor).*avg" $R/ncu16_details.txt | head -40
wc -c $R/ncu16_source.csv
PYTHONPATH=src timeout 120 python3 benchmarks/fp64_fft_gpu.py --out $R/fft1024 --sizes 1024 --configs int8/kulisch/g8/fusedepi,int8/crt/g8/fusedepi --no-extras --budget-s 115 --cache-dir /tmp/tc > $R/fft1024.log 2>&1
echo "fft1024 rc $?" >> $R/rc.txt
grep -E "^\[.*(fusedepi|cufft)" $R/fft1024.log | grep -v worker | cut -c1-250
cat $R/rc.txt
tar czf $OUT/run39.tgz -C /tmp res
