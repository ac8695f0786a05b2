#!/bin/bash
# run 23: whole transforms at the new defaults (commit in snap/COMMIT), 256^3 / 512^3 / 1024^3, crt and kulisch
S=$(cd "$(dirname "$0")" && pwd)
R=/tmp/res; rm -rf $R; mkdir -p $R
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv > $R/gpu.txt 2>&1
cat $S/snap/COMMIT >> $R/gpu.txt
cd $S/snap
PYTHONPATH=src timeout 280 python3 benchmarks/fp64_fft_gpu.py --out $R/fft --configs int8/crt/g8/fusedepi,int8/kulisch/g8/fusedepi --no-extras --budget-s 270 --cache-dir /tmp/tc > $R/fft.log 2>&1
echo "fft rc $?" >> $R/rc.txt
grep -E "^\[.*(fusedepi|cuFFT|cufft)" $R/fft.log | grep -v worker; cat $R/rc.txt
tar czf $OUT/run23.tgz -C /tmp res
