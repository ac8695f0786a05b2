#!/bin/bash
# run 20: fused_epi old (323aaa2) vs new (snap COMMIT) whole transforms, then the launch-shape sweep
S=$(cd "$(dirname "$0")" && pwd)
R=/tmp/res; rm -rf $R; mkdir -p $R
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv > $R/gpu.txt 2>&1
python3 -c "import torch, triton; print(torch.__version__, triton.__version__)" >> $R/gpu.txt 2>&1


(cd $S/snap_old && PYTHONPATH=src timeout 175 python3 benchmarks/fp64_fft_gpu.py --out $R/old --configs int8/crt/g8/fusedepi --no-extras --budget-s 165 --cache-dir /tmp/tc_old) > $R/old.log 2>&1
echo "old rc $?" >> $R/rc.txt
(cd $S/snap && PYTHONPATH=src timeout 175 python3 benchmarks/fp64_fft_gpu.py --out $R/new --configs int8/crt/g8/fusedepi --no-extras --budget-s 165 --cache-dir /tmp/tc_new) > $R/new.log 2>&1
echo "new rc $?" >> $R/rc.txt
(cd $S/snap && PYTHONPATH=src timeout 150 python3 benchmarks/fp64_fused_epi_shapes.py --out $R/shapes --budget-s 120) > $R/shapes.log 2>&1
echo "shapes rc $?" >> $R/rc.txt
tail -n 5 $R/old.log $R/new.log; tail -n 15 $R/shapes.log; cat $R/rc.txt
tar czf $OUT/run20.tgz -C /tmp res
