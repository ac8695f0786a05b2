#!/bin/bash
# run 24: per-phase kernel profile of 512^3 and 1024^3 at the final defaults
S=$(cd "$(dirname "$0")" && pwd)
R=/tmp/res; rm -rf $R; mkdir -p $R
export PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/tc
cat $S/snap/COMMIT > $R/commit.txt
cd $S/snap
for n in 512 1024; do
  PYTHONPATH=src timeout 150 python3 benchmarks/fp64_fft_profile.py --n $n --out $R/prof > $R/prof$n.log 2>&1
  echo "prof $n rc $?" >> $R/rc.txt
done
cat $R/prof512.log $R/prof1024.log | cut -c1-600; cat $R/rc.txt
tar czf $OUT/run24.tgz -C /tmp res
