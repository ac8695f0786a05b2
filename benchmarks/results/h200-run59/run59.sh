#!/bin/bash
# run 59 (session 12): CUDA tests of the Gluon kernel at d0b706d (2 residue pairs at N = 32); whole transforms
# 256^3..1024^3 alternating d0b706d (new) and a7de3ac (old: no pairs at N = 32), two rounds, with cuFFT
S=$(cd "$(dirname "$0")" && pwd)
R=$OUT/res; mkdir -p $R
export PYTHONUNBUFFERED=1
(cat $S/snap/COMMIT; cat $S/snap_old/COMMIT) > $R/commits.txt
cd $S/snap
TRITON_CACHE_DIR=/tmp/tc_new PYTHONPATH=src timeout 170 python3 -m pytest -v -p no:cacheprovider tests/fp64/test_fft_fused_gluon.py -k "stage_equals_oracle or row_blocks" > $R/tests.log 2>&1
echo "tests rc $?" >> $R/rc.txt
grep -hE "PASSED|FAILED|ERROR|^E " $R/tests.log | cut -c1-160 | head -20
for rep in 1 2; do for v in new old; do
  d=$S/snap; [ $v = old ] && d=$S/snap_old
  cd $d && TRITON_CACHE_DIR=/tmp/tc_$v PYTHONPATH=src timeout 100 python3 $S/snap/benchmarks/fp64_fft_bits.py --out /tmp/bits_${v}_$rep --sizes 256,512,1024 --bits 58/56 --reps 3 > $R/bits_${v}_$rep.log 2>&1
  echo "bits $v $rep rc $?" >> $R/rc.txt
done; done
grep -H "" $R/bits_*.log | sed 's/.*bits_//' | cut -c1-330
cat $R/rc.txt
