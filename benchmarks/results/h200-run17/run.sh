#!/bin/bash
# run17.sh: the whole mnist_fc benchmark (minus prop_2_0.05) with the library defaults and Gurobi,
# 4 slots (2 per GPU) fed longest-first by xargs; 8 Gurobi processes per slot; CSV timeouts.
# usage: run17.sh OUTDIR LIMIT_S
set -u
O=$1; LIMIT=$2
mkdir -p $O
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ../whl/*.whl
export PYTHONPATH=/tmp/site:src PYTHONUNBUFFERED=1 O
nproc > $O/host.txt; nvidia-smi --query-gpu=name --format=csv,noheader >> $O/host.txt; cat COMMIT >> $O/host.txt
EASY='256x2|256x4.*prop_([0-57-9]|1[0-4])_0\.03|256x4.*prop_[168]_0\.05'
job() {  # $1: "name select-regex"
  local n sel; read -r n sel <<< "$1"; set -- "$n" "$sel"
  CUDA_VISIBLE_DEVICES=$((SLOT % 2)) python3 benchmarks/verify_bench_gpu.py --data ../vnncomp2022 --out $O/$1 \
    --select "$2" --max-instance-s 300 --total-s 5000 --bab-memory-gb 24 \
    --mip-solver gurobi --mip-workers 8 > $O/$1.log 2>&1
  echo "$(date +%T) done $1 slot $SLOT"
}
export -f job
{
  echo "easy $EASY"
  for p in 9 4 12 13 7 0 5 10 14 11 3; do echo "p${p} 256x4.*/prop_${p}_0\.05\.vnnlib"; done
} > $O/jobs.txt
sed -n 2,3p $O/jobs.txt > /tmp/j1; sed -n 1p $O/jobs.txt >> /tmp/j1
echo "p6_003 256x4.*/prop_6_0\.03\.vnnlib" >> /tmp/j1; sed -n 4,12p $O/jobs.txt >> /tmp/j1
date +%T
timeout $LIMIT xargs -P 4 -d '\n' -n 1 --process-slot-var=SLOT bash -c 'job "$0"' < /tmp/j1
date +%T
cd $O && tar czf ../r17.tgz . && mv ../r17.tgz .
for f in */*.csv; do tail -n +2 $f; done | sort | awk -F, '{print $3, $5, $6}'
