#!/bin/bash
# run 75 (session 16): one H200. Snapshot of main + verify-shard + fp64-house in .gpudata/snap (commit in snap/COMMIT;
# benchmarks/results and the triage corpus left out of the snapshot; mnist_fc 256x4 + prop_1_0.05 copied under snap/shared).
# 1) verify.dist: P=1 vs 2 processes sharing the GPU over gloo, 2) fp64 KernelConfig variants: bits and times,
# 3) triage at scale on an idle 16-core machine (only if the image has pyarrow): 1 GB dense log, 1 vs 2 processes.
T0=$(date +%s)
cd .gpudata/snap || exit 1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ../../.whl/*.whl > $OUT/pip.log 2>&1 || { echo pip failed; tail $OUT/pip.log; }
export PYTHONPATH=/tmp/site:src PYTHONUNBUFFERED=1
R=/tmp/r75; mkdir -p $R/verify-shard $R/fp64-house $R/triage-scale
cp COMMIT $R/commit.txt; cp ../run75.sh $R/
nvidia-smi --query-gpu=name,uuid,driver_version,power.limit,clocks.sm,clocks.applications.graphics,memory.used --format=csv > $R/smi_before.csv 2>&1
echo "== verify-shard $(( $(date +%s)-T0 )) s"
timeout 160 python3 -X faulthandler benchmarks/verify_dist_gpu.py --out $R/verify-shard > $R/verify-shard.log 2>&1; echo "verify-shard rc $?" | tee -a $R/rc.txt
echo "== fp64-house $(( $(date +%s)-T0 )) s"
timeout 100 python3 -X faulthandler benchmarks/fp64_house_gpu.py --out $R/fp64-house --budget-s 90 > $R/fp64-house.log 2>&1; echo "fp64-house rc $?" | tee -a $R/rc.txt
echo "== triage-scale $(( $(date +%s)-T0 )) s"
if python3 -c "import pyarrow, re2, drain3" 2> $R/triage-scale/import.err; then
  nproc > $R/triage-scale/nproc.txt; cat /proc/loadavg >> $R/triage-scale/nproc.txt
  LEFT=$(( 430 - ($(date +%s)-T0) )); echo "left $LEFT s"
  timeout $LEFT python3 benchmarks/triage_scale.py --sizes-mb 300 --dir /tmp/ts --one-worker-too > $R/triage-scale.log 2>&1; echo "triage-scale rc $?" | tee -a $R/rc.txt
else echo "triage-scale skipped: $(tail -1 $R/triage-scale/import.err)" | tee -a $R/rc.txt; fi
nvidia-smi --query-gpu=name,uuid,driver_version,power.limit,clocks.sm,clocks.applications.graphics,memory.used --format=csv > $R/smi_after.csv 2>&1
echo "== end $(( $(date +%s)-T0 )) s"
(cd $R && tar czf $OUT/r75.tgz .)
tail -25 $R/verify-shard.log; tail -20 $R/fp64-house.log; tail -15 $R/triage-scale.log 2>/dev/null; cat $R/rc.txt
