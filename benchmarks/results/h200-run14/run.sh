#!/bin/bash
# usage: [W=N] run.sh OUTDIR NAME:SECONDS:GPU ...  (256x4 vnnlib stems; W Gurobi workers each, default 8 (run 15: 30); MIP first, 0.8 of the time)
set -u
O=$1; shift
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ../whl/*.whl
export PYTHONPATH=/tmp/site:src PYTHONUNBUFFERED=1
for e in "$@"; do
  IFS=: read p sec gpu <<< "$e"
  CUDA_VISIBLE_DEVICES=$gpu python3 benchmarks/verify_bench_gpu.py --data ../vnncomp2022 --out $O/$p \
    --select "256x4.*/${p}\.vnnlib" --instance-s $sec --max-instance-s $sec --total-s $((sec + 30)) --bab-memory-gb 24 \
    --mip-solver gurobi --mip-layers 3 --mip-total-s 400 --mip-fraction 0.8 --mip-after-s 0 --mip-neuron-s 15 \
    --mip-workers ${W:-8} > $O/$p.log 2>&1 &
done
wait
for e in "$@"; do p=${e%%:*}; echo "== $p"; grep -v "━" $O/$p.log | tail -5; python3 -c "
import json,glob; r=json.load(open(glob.glob('$O/$p/*.json')[0])); print(r['rows'], r['margins'])" 2>&1 | tail -3; done
