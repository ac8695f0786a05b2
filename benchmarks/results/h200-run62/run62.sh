#!/bin/bash
# run 62 (session 12): whole transforms 512^3 and 1024^3, two rounds alternating: 92b1686 (new: the next row
# block's loads before this block's residues) against HEAD (old: the kernels of run 55)
S=$(cd "$(dirname "$0")" && pwd)
R=$OUT/res; mkdir -p $R
export PYTHONUNBUFFERED=1
(cat $S/snap/COMMIT; cat $S/snap_old/COMMIT) > $R/commits.txt
for rep in 1 2 3; do for v in new old; do
  d=$S/snap; [ $v = old ] && d=$S/snap_old
  cd $d && TRITON_CACHE_DIR=/tmp/tc_$v PYTHONPATH=src timeout 75 python3 $S/snap_old/benchmarks/fp64_fft_bits.py --out /tmp/b_${v}_$rep --sizes 512,1024 --bits 58/56 --reps 3 2>&1 | sed "s/^/$v$rep /" | cut -c1-330 >> $R/whole.log
done; done
cat $R/whole.log
