#!/bin/bash
# run 32: new residue step (snap) vs run 31's commit (snap_old): stage digests + times (alternating), whole
# transforms at the defaults (crt; kulisch at 256^3/512^3), the Gluon / fused CUDA tests
S=$(cd "$(dirname "$0")" && pwd)
R=/tmp/res; rm -rf $R; mkdir -p $R
export PYTHONUNBUFFERED=1
echo "old $(cat $S/snap_old/COMMIT) new $(cat $S/snap/COMMIT)" > $R/commit.txt
SH="16:64,8,16,128;32:64,16,32,0"
for v in old new old2 new2; do
  d=$S/snap; [ "${v:0:3}" = old ] && d=$S/snap_old
  (cd $S/snap && TRITON_CACHE_DIR=/tmp/tc_${v:0:3} PYTHONPATH=$d/src timeout 60 python3 benchmarks/fp64_fused_epi_shapes.py --out $R/shapes_$v --shapes "$SH" --budget-s 50) > $R/shapes_$v.log 2>&1
  echo "shapes $v rc $?" >> $R/rc.txt
done
grep -H '"ms"' $R/shapes_*.log | sed 's/.*shapes_//' | cut -c1-200
cd $S/snap
PYTHONPATH=src timeout 170 python3 benchmarks/fp64_fft_gpu.py --out $R/fft --configs int8/crt/g8/fusedepi,int8/kulisch/g8/fusedepi --no-extras --budget-s 160 --cache-dir /tmp/tc_new > $R/fft.log 2>&1
echo "fft rc $?" >> $R/rc.txt
grep -E "^\[.*(fusedepi|cufft)" $R/fft.log | grep -v worker | cut -c1-250
TRITON_CACHE_DIR=/tmp/tc_new PYTHONPATH=src timeout 200 python3 -m pytest -q -p no:cacheprovider tests/fp64/test_fft_fused_gluon.py tests/fp64/test_fft_fused_epi.py::test_residue_without_rounding_instructions_on_every_half_integer_boundary tests/fp64/test_fft_fused_epi.py -k "gluon or residue or transform_equals or unfused_paths or cutting_groups or refused" > $R/tests.log 2>&1
echo "tests rc $?" >> $R/rc.txt
tail -5 $R/tests.log
cat $R/rc.txt
tar czf $OUT/run32.tgz -C /tmp res
