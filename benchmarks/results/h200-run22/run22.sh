#!/bin/bash
# run 22: launch-shape sweep incl. register caps, then whole transforms default vs GPUFIELD_FUSED_EPI_MAXNREG=128
S=$(cd "$(dirname "$0")" && pwd)
R=/tmp/res; rm -rf $R; mkdir -p $R
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv > $R/gpu.txt 2>&1
cat $S/snap/COMMIT >> $R/gpu.txt
cd $S/snap
PYTHONPATH=src timeout 170 python3 benchmarks/fp64_fused_epi_shapes.py --out $R/shapes --budget-s 150 > $R/shapes.log 2>&1
echo "shapes rc $?" >> $R/rc.txt
PYTHONPATH=src timeout 130 python3 benchmarks/fp64_fft_gpu.py --out $R/default --configs int8/crt/g8/fusedepi --no-extras --budget-s 120 --cache-dir /tmp/tc > $R/default.log 2>&1
echo "default rc $?" >> $R/rc.txt
GPUFIELD_FUSED_EPI_MAXNREG=128 PYTHONPATH=src timeout 130 python3 benchmarks/fp64_fft_gpu.py --out $R/reg128 --configs int8/crt/g8/fusedepi --no-extras --budget-s 120 --cache-dir /tmp/tc128 > $R/reg128.log 2>&1
echo "reg128 rc $?" >> $R/rc.txt
cat $R/shapes.log | cut -c1-200; grep -E "^\[.*fusedepi" $R/default.log $R/reg128.log | grep -v worker; cat $R/rc.txt
tar czf $OUT/run22.tgz -C /tmp res
