#!/bin/bash
# run 41: input residues on the tensor cores (GPUFIELD_FUSED_EPI_RESIDUES=digits) against the FP64 residues:
# tests, stage times alternating, transforms, ncu of the digits N = 16 stage
S=$(cd "$(dirname "$0")" && pwd)
R=/tmp/res; rm -rf $R; mkdir -p $R
export PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/tc
cat $S/snap/COMMIT > $R/commit.txt
T="python3 -m pytest -v -p no:cacheprovider"
cd $S/snap
PYTHONPATH=src timeout 200 $T tests/fp64/test_fft_fused_gluon.py tests/fp64/test_fft_fused_digits.py -k "not compiles" > $R/tests.log 2>&1
echo "tests rc $?" >> $R/rc.txt
grep -hE "PASSED|FAILED|ERROR|^E " $R/tests.log | cut -c1-220 | head -30
SH='16:64,8,16,128;32:64,16,32,0'
for rep in 1 2; do
for v in digits fp64; do
  GPUFIELD_FUSED_EPI_RESIDUES=$v PYTHONPATH=src timeout 100 python3 benchmarks/fp64_fused_epi_shapes.py --out $R/shapes_${v}_$rep --shapes "$SH" --budget-s 90 > $R/shapes_${v}_$rep.log 2>&1
  echo "shapes $v $rep rc $?" >> $R/rc.txt
done; done
grep -H '"ms"' $R/shapes_*.log | sed 's/.*shapes_//' | cut -c1-200
tail -3 $R/shapes_digits_1.log | cut -c1-300
GPUFIELD_FUSED_EPI_RESIDUES=digits PYTHONPATH=src timeout 150 python3 benchmarks/fp64_fft_gpu.py --out $R/fft_digits --configs int8/crt/g8/fusedepi --no-extras --budget-s 145 --cache-dir /tmp/tc > $R/fft_digits.log 2>&1
echo "fft digits rc $?" >> $R/rc.txt
grep -E "^\[.*(fusedepi|cufft)" $R/fft_digits.log | grep -v worker | cut -c1-250
GPUFIELD_FUSED_EPI_RESIDUES=fp64 PYTHONPATH=src timeout 60 python3 benchmarks/fp64_fft_gpu.py --out $R/fft_fp64 --sizes 256 --configs int8/crt/g8/fusedepi --no-extras --budget-s 55 --cache-dir /tmp/tc > $R/fft_fp64.log 2>&1
echo "fft fp64 rc $?" >> $R/rc.txt
grep -E "^\[.*(fusedepi|cufft)" $R/fft_fp64.log | grep -v worker | cut -c1-250
GPUFIELD_FUSED_EPI_RESIDUES=digits PYTHONPATH=src timeout 90 ncu --clock-control none --kernel-name regex:fused_epi --launch-skip 1 --launch-count 1 \
   --section SpeedOfLight --section SchedulerStats --section WarpStateStats --section Occupancy --section SourceCounters --section MemoryWorkloadAnalysis \
   --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,regex:sm__inst_executed_pipe_(fp64|alu|fmaheavy|tensor_op_gmma|uniform)\.avg\.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active,lts__t_bytes.sum.per_second" \
   -o $R/ncu16 -f python3 benchmarks/fp64_fused_epi_shapes.py --out /tmp/ncu_g --sizes 16 --shapes "16:64,8,16,128" --reps 1 > $R/ncu16.log 2>&1
echo "ncu rc $?" >> $R/rc.txt
timeout 40 ncu --import $R/ncu16.ncu-rep --page details > $R/ncu16_details.txt 2>&1
timeout 60 ncu --import $R/ncu16.ncu-rep --page source --csv --print-source sass > $R/ncu16_source.csv 2>&1
grep -iE "Issue Slots|Warp Cycles Per Issued|Duration|L2 Cache Throughput|lts__t_bytes|stalled_(math|not_sel|wait|long|selected|short|dispatch|drain|barrier)|pipe_(alu|fmaheavy|fp64|tensor_op_gmma|uniform).*avg" $R/ncu16_details.txt | head -24
cat $R/rc.txt
tar czf $OUT/run41.tgz -C /tmp res
