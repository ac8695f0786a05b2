#!/bin/bash
# run18.sh: GPU0 256x4 prop_2_0.05 long attempt (new code, 16 Gurobi processes, 540 s);
# GPU1 side by side on 256x4 prop_9_0.05, 300 s, 8 Gurobi processes each: old code (a6bcb87,
# no re-bounding after a MIP layer) against new (this snapshot). Results tarred into $OUT.
set -u
R=/tmp/r18; mkdir -p $R
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ../whl/*.whl
export PYTHONUNBUFFERED=1
nproc > $R/host.txt; nvidia-smi --query-gpu=name --format=csv,noheader >> $R/host.txt; cat COMMIT ../snap_old/COMMIT >> $R/host.txt
B="--data ../vnncomp2022 --max-instance-s 300 --bab-memory-gb 24 --mip-solver gurobi --mip-total-s 300"
date +%T
CUDA_VISIBLE_DEVICES=0 PYTHONPATH=/tmp/site:src python3 benchmarks/verify_bench_gpu.py $B --out $R/p2_new \
  --select "256x4.*/prop_2_0\.05\.vnnlib" --instance-s 540 --max-instance-s 540 --total-s 560 --mip-workers 16 > $R/p2_new.log 2>&1 &
CUDA_VISIBLE_DEVICES=1 PYTHONPATH=/tmp/site:src python3 benchmarks/verify_bench_gpu.py $B --out $R/p9_new \
  --select "256x4.*/prop_9_0\.05\.vnnlib" --total-s 330 --mip-workers 8 > $R/p9_new.log 2>&1 &
(cd ../snap_old && CUDA_VISIBLE_DEVICES=1 PYTHONPATH=/tmp/site:src python3 benchmarks/verify_bench_gpu.py $B --out $R/p9_old \
  --select "256x4.*/prop_9_0\.05\.vnnlib" --total-s 330 --mip-workers 8 > $R/p9_old.log 2>&1) &
wait
date +%T
cd $R && tar czf $OUT/r18.tgz . 
for n in p9_old p9_new p2_new; do echo "== $n"; grep -v "━" $R/$n.log | tail -3; python3 -c "
import json,glob; r=json.load(open(glob.glob('$R/$n/*.json')[0])); print(r['rows'], r['margins'])" 2>&1 | tail -2; done
