#!/bin/bash
# run 58 (session 12): N = 32 stage (64 rows, 8 warps, 128 registers, 2 column passes; six-step layout, queued),
# alternating: a7de3ac (old: row blocks loaded one after the other) against 92b1686 (new: the next block's loads
# before this block's residues), the new one with 0 (default), 2 and 4 residue pairs; then whole transforms
S=$(cd "$(dirname "$0")" && pwd)
R=$OUT/res; mkdir -p $R
export PYTHONUNBUFFERED=1
cat $S/snap/COMMIT > $R/commit.txt; cat $S/snap_old/COMMIT > $R/commit_old.txt
SH='32:64,8,32,128,2'
for rep in 1 2; do for v in old new0 new2 new4; do
  d=$S/snap; P=${v#new}; [ $v = old ] && d=$S/snap_old && P=0
  cd $d && GPUFIELD_FUSED_EPI_PAIRS=$P TRITON_CACHE_DIR=/tmp/tc_$v PYTHONPATH=src timeout 45 python3 benchmarks/fp64_fused_epi_shapes.py --out $R/sh_${v}_$rep --layout sixstep --sizes 32 --shapes "$SH" --budget-s 40 > $R/sh_${v}_$rep.log 2>&1
  echo "shapes $v $rep rc $?" >> $R/rc.txt
done; done
grep -H '"ms"\|WRONG' $R/sh_*.log | sed 's/.*sh_//' | sed 's/"first_call_s[^,]*, //' | cut -c1-200
cd $S/snap && TRITON_CACHE_DIR=/tmp/tc_new0 PYTHONPATH=src timeout 120 python3 benchmarks/fp64_fft_bits.py --out $R/bits --sizes 512,1024 --bits 58/56 --reps 3 > $R/bits.log 2>&1
echo "bits rc $?" >> $R/rc.txt
cut -c1-400 $R/bits.log
cat $R/rc.txt
