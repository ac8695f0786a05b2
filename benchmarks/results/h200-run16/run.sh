#!/bin/bash
# HiGHS against Gurobi on 256x4 prop_5_0.05, side by side on one H200 (8 MIP workers each, 240 s cap)
set -u
O=$1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ../whl/*.whl
export PYTHONPATH=/tmp/site:src PYTHONUNBUFFERED=1
nproc
for s in highs gurobi; do
  python3 benchmarks/verify_bench_gpu.py --data ../vnncomp2022 --out $O/$s \
    --select "256x4.*/prop_5_0.05\.vnnlib" --max-instance-s 240 --total-s 250 --bab-memory-gb 24 \
    --mip-solver $s --mip-layers 3 --mip-total-s 240 --mip-neuron-s 15 --mip-workers 8 > $O/$s.log 2>&1 &
done
wait
for s in highs gurobi; do echo "== $s"; grep -v "━" $O/$s.log | tail -4; python3 -c "
import json,glob; r=json.load(open(glob.glob('$O/$s/*.json')[0])); print(r['rows'], r['margins'])" 2>&1 | tail -2; done
