#!/bin/bash
# run 25: destination layouts of the fused stage kernel (256^3, 512^3, 1024^3 shapes), then whole transforms
S=$(cd "$(dirname "$0")" && pwd)
R=/tmp/res; rm -rf $R; mkdir -p $R
export PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/tc
cat $S/snap/COMMIT > $R/commit.txt
cd $S/snap
for n in 1024 512 256; do
  PYTHONPATH=src timeout 100 python3 benchmarks/fp64_fused_epi_layouts.py --n $n --out $R/layouts > $R/layouts$n.log 2>&1
  echo "layouts $n rc $?" >> $R/rc.txt
done
PYTHONPATH=src timeout 200 python3 benchmarks/fp64_fft_gpu.py --out $R/fft --configs int8/crt/g8/fusedepi --no-extras --budget-s 190 --cache-dir /tmp/tc > $R/fft.log 2>&1
echo "fft rc $?" >> $R/rc.txt
cat $R/layouts*.log | cut -c1-300; grep -E "^\[.*(fusedepi|cufft)" $R/fft.log | grep -v worker; cat $R/rc.txt
tar czf $OUT/run25.tgz -C /tmp res
