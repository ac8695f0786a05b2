#!/bin/bash
# run 31: default (Gluon) vs Triton stage digests + times, whole transforms at the defaults (crt, kulisch), CUDA tests
S=$(cd "$(dirname "$0")" && pwd)
R=/tmp/res; rm -rf $R; mkdir -p $R
export PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/tc
cat $S/snap/COMMIT > $R/commit.txt
cd $S/snap
SH="16:64,8,16,128;32:64,16,32,0"
for v in triton gluon; do
  GPUFIELD_FUSED_EPI_IMPL=$v PYTHONPATH=src timeout 60 python3 benchmarks/fp64_fused_epi_shapes.py --out $R/shapes_$v --shapes "$SH" --budget-s 50 > $R/shapes_$v.log 2>&1
  echo "shapes $v rc $?" >> $R/rc.txt
done
grep -h '"ms"' $R/shapes_*.log | cut -c1-200
PYTHONPATH=src timeout 200 python3 benchmarks/fp64_fft_gpu.py --out $R/fft --configs int8/crt/g8/fusedepi,int8/kulisch/g8/fusedepi --no-extras --budget-s 190 --cache-dir /tmp/tc > $R/fft.log 2>&1
echo "fft rc $?" >> $R/rc.txt
grep -E "^\[.*(fusedepi|cufft)" $R/fft.log | grep -v worker | cut -c1-250
PYTHONPATH=src timeout 200 python3 -m pytest -q -p no:cacheprovider tests/fp64/test_fft_fused_gluon.py tests/fp64/test_fft_fused_epi.py -k "gluon or transform_equals or unfused_paths or cutting_groups or refused" > $R/tests.log 2>&1
echo "tests rc $?" >> $R/rc.txt
tail -15 $R/tests.log
cat $R/rc.txt
tar czf $OUT/run31.tgz -C /tmp res
