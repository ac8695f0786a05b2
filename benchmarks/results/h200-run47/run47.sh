#!/bin/bash
# run 47: the N = 32 stage (session 10): launch shapes with two programs per SM (64 rows, 8 warps, 16 outputs
# per program: twiddles 32 KB, residues recomputed per half) with and without residue pairs, against the
# default (64, 16, 32); Nsight Compute phases of the default N = 32 stage; graph replay 256^3..1024^3
S=$(cd "$(dirname "$0")" && pwd)
R=/tmp/res; rm -rf $R; mkdir -p $R
export PYTHONUNBUFFERED=1
cat $S/snap/COMMIT > $R/commit.txt
cd $S/snap
SH='32:64,16,32,0;32:64,8,16,128;32:64,8,16,0'
for rep in 1 2; do
for P in 0 4 7; do
  GPUFIELD_FUSED_EPI_PAIRS=$P TRITON_CACHE_DIR=/tmp/tc_p$P PYTHONPATH=src timeout 90 python3 benchmarks/fp64_fused_epi_shapes.py --out $R/shapes_p${P}_$rep --sizes 32 --shapes "$SH" --budget-s 80 > $R/shapes_p${P}_$rep.log 2>&1
  echo "shapes p$P $rep rc $?" >> $R/rc.txt
done; done
grep -H '"ms"\|WRONG' $R/shapes_*.log | sed 's/.*shapes_//' | cut -c1-220
TRITON_CACHE_DIR=/tmp/tc_p0 PYTHONPATH=src timeout 120 ncu --clock-control none --kernel-name regex:fused_epi --launch-skip 1 --launch-count 1 \
   --section SpeedOfLight --section SchedulerStats --section WarpStateStats --section Occupancy --section SourceCounters \
   --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,regex:sm__inst_executed_pipe_(fp64|alu|fmaheavy|fmalite|lsu|uniform)\.avg\.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active" \
   -o $R/ncu32 -f python3 benchmarks/fp64_fused_epi_shapes.py --out /tmp/ncu_g --sizes 32 --shapes "32:64,16,32,0" --reps 1 > $R/ncu32.log 2>&1
echo "ncu rc $?" >> $R/rc.txt
timeout 40 ncu --import $R/ncu32.ncu-rep --page details > $R/ncu32_details.txt 2>&1
timeout 60 ncu --import $R/ncu32.ncu-rep --page source --csv --print-source sass > $R/ncu32_source.csv 2>&1
echo "ncu source rc $?" >> $R/rc.txt
grep -iE "Issue Slots|Warp Cycles Per Issued|Registers Per|Achieved Occ|Duration|stalled_(math|not_sel|wait|long|selected|short|mio|lg_thr|barrier|dispatch|no_inst|branch|drain)|pipe_(alu|fmaheavy|fmalite|fp64|uniform|lsu).*avg" $R/ncu32_details.txt | head -40
python3 ncu_phases.py $R/ncu32_source.csv > $R/ncu32_phases.txt 2>&1; head -30 $R/ncu32_phases.txt
TRITON_CACHE_DIR=/tmp/tc_p0 PYTHONPATH=src timeout 150 python3 benchmarks/fp64_fft_graph.py --out $R/graph --sizes 256,512,1024 --reps 5 > $R/graph.log 2>&1
echo "graph rc $?" >> $R/rc.txt
cut -c1-300 $R/graph.log
rm -f $R/ncu32_source.csv.gz; gzip -f $R/ncu32_source.csv
cat $R/rc.txt
tar czf $OUT/run47.tgz -C /tmp res
