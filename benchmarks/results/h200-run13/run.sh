#!/bin/bash
# usage: run13.sh OUTDIR INST1 INST2 INST3 INST4  (instances as vnnlib stems of 256x4; 2 per GPU)
set -u
O=$1; shift
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ../whl/*.whl
export PYTHONPATH=/tmp/site:src PYTHONUNBUFFERED=1
python3 -c "import gurobipy as g; m=g.Model(); x=m.addVar(vtype='B'); m.setObjective(x); m.Params.OutputFlag=0; m.optimize(); print('gurobi ok', g.gurobi.version(), m.Status)"
nproc; nvidia-smi --query-gpu=name --format=csv,noheader
i=0
for p in "$@"; do
  gpu=$((i / 2))
  CUDA_VISIBLE_DEVICES=$gpu python3 benchmarks/verify_bench_gpu.py --data ../vnncomp2022 --out $O/$p \
    --select "256x4.*/${p}\.vnnlib" --max-instance-s 300 --total-s 330 --bab-memory-gb 24 \
    --mip-solver gurobi --mip-layers 3 --mip-total-s 240 --mip-neuron-s 15 --mip-workers 8 > $O/$p.log 2>&1 &
  i=$((i + 1))
done
wait
for p in "$@"; do echo "== $p"; grep -v "━" $O/$p.log | tail -6; python3 -c "
import json,glob; r=json.load(open(glob.glob('$O/$p/*.json')[0])); print(r['rows'], r['margins'])" 2>&1 | tail -3; done
