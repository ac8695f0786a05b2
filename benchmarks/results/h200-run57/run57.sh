#!/bin/bash
# run 57 (session 12, a7de3ac): CUDA tests not yet run on a GPU at the final code; default plan (58/56, 16 moduli)
# against 57/52 (15 moduli), alternating, with cuFFT, 256^3..1024^3; the CLI's GPU default; Nsight Compute
# phases of the N = 32 two-pass stage kernel
S=$(cd "$(dirname "$0")" && pwd)
R=$OUT/res; mkdir -p $R
export PYTHONUNBUFFERED=1
cat $S/snap/COMMIT > $R/commit.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv > $R/smi.txt 2>&1
cd $S/snap
export TRITON_CACHE_DIR=/tmp/tc_new PYTHONPATH=src
timeout 170 python3 -m pytest -v -p no:cacheprovider tests/fp64/test_fft_epilogue_f64.py tests/fp64/test_fft_fused_gluon.py -k "row_blocks or environment or f64_fold or refused" > $R/tests.log 2>&1
echo "tests rc $?" >> $R/rc.txt
grep -hE "PASSED|FAILED|ERROR|^E " $R/tests.log | cut -c1-160 | head -30
timeout 210 python3 benchmarks/fp64_fft_bits.py --out $R/bits --sizes 256,512,1024 --bits 58/56,57/52 --reps 3 > $R/bits.log 2>&1
echo "bits rc $?" >> $R/rc.txt
cut -c1-600 $R/bits.log | tail -8
if python3 -c "import typer, rich" 2>/dev/null; then
  timeout 60 python3 -m gpufield fp64 fft --shape 64,64,64 --backend int8 --json > $R/cli.json 2> $R/cli.err
else  # no typer on the image: the library call the CLI makes
  timeout 60 python3 -c "import json; from gpufield.fp64.fft.check import check_fft; print(json.dumps(check_fft(shape=(64, 64, 64), backend='int8')))" > $R/cli.json 2> $R/cli.err
fi
echo "cli rc $?" >> $R/rc.txt
head -c 800 $R/cli.json; tail -3 $R/cli.err
SH='32:64,8,32,128,2'
timeout 110 ncu --clock-control none --kernel-name regex:fused_epi --launch-skip 1 --launch-count 1 \
   --section SpeedOfLight --section SchedulerStats --section WarpStateStats --section Occupancy --section SourceCounters \
   --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,regex:sm__inst_executed_pipe_(fp64|alu|fmaheavy|fmalite|lsu|uniform)\.avg\.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active" \
   -o $R/ncu32 -f python3 benchmarks/fp64_fused_epi_shapes.py --out /tmp/ncu_g32 --sizes 32 --shapes "$SH" --reps 1 > $R/ncu32.log 2>&1
echo "ncu rc $?" >> $R/rc.txt
timeout 40 ncu --import $R/ncu32.ncu-rep --page details > $R/ncu32_details.txt 2>&1
timeout 60 ncu --import $R/ncu32.ncu-rep --page source --csv --print-source sass > $R/ncu32_source.csv 2>&1
python3 benchmarks/results/h200-run39/ncu_phases.py $R/ncu32_source.csv > $R/ncu32_phases.txt 2>&1; head -8 $R/ncu32_phases.txt
grep -iE "Issue Slots|Warp Cycles Per Issued|Duration|stalled_(math|not_sel|wait|long|short|lg_thr|barrier|dispatch|drain|gmma)|pipe_(alu|fmaheavy|fp64).*avg" $R/ncu32_details.txt | head -20
rm -f $R/ncu32.ncu-rep; gzip -f $R/ncu32_source.csv
cat $R/rc.txt
