#!/bin/bash
# run 33: Gluon N = 16 stage register caps 128 (2 programs/SM), 80 (3 programs/SM), 96; alternating repeats
S=$(cd "$(dirname "$0")" && pwd)
R=/tmp/res; rm -rf $R; mkdir -p $R
export PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/tc
cat $S/snap/COMMIT > $R/commit.txt
cd $S/snap
for rep in 1 2 3; do
  PYTHONPATH=src timeout 60 python3 benchmarks/fp64_fused_epi_shapes.py --out $R/caps_$rep --sizes 16 --shapes "16:64,8,16,128;16:64,8,16,80;16:64,8,16,96;16:64,8,16,128" --budget-s 50 > $R/caps_$rep.log 2>&1
  echo "caps $rep rc $?" >> $R/rc.txt
done
grep -H '"ms"' $R/caps_*.log | sed 's/.*caps_//' | cut -c1-200
cat $R/rc.txt
tar czf $OUT/run33.tgz -C /tmp res
