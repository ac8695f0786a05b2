#!/bin/bash
# run 19 (two-H200 host, 32 cores; snapshot of commit a4a2c3d in .gpudata/snap): the command as run.
cd .gpudata/snap && python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ../whl/*.whl
export PYTHONPATH=/tmp/site:src PYTHONUNBUFFERED=1; R=/tmp/r19; mkdir -p $R
CUDA_VISIBLE_DEVICES=0 python3 benchmarks/verify_bench_gpu.py --data ../vnncomp2022 --out $R/p2 \
  --select "256x4.*/prop_2_0\.05\.vnnlib" --instance-s 555 --max-instance-s 555 --total-s 570 --bab-memory-gb 24 \
  --mip-solver gurobi --mip-workers 32 > $R/p2.log 2>&1
cd $R && tar czf $OUT/r19.tgz .
