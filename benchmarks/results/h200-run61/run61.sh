#!/bin/bash
# run 61 (session 12): N = 32 residue phase in 4 row blocks of 16 rows (GPUFIELD_FUSED_EPI_ROWBLOCKS=4) against the
# default 2 blocks of 32: stage times alternating (six-step layout, queued), then whole 1024^3 transforms alternating
S=$(cd "$(dirname "$0")" && pwd)
R=$OUT/res; mkdir -p $R
export PYTHONUNBUFFERED=1
cat $S/snap/COMMIT > $R/commit.txt
cd $S/snap
export PYTHONPATH=src TRITON_CACHE_DIR=/tmp/tc_new
for rh in 2 4 2 4; do
  GPUFIELD_FUSED_EPI_ROWBLOCKS=$rh timeout 40 python3 benchmarks/fp64_fused_epi_shapes.py --out /tmp/st_$rh --layout sixstep --sizes 32 --shapes '32:64,8,32,128,2' --budget-s 35 2>&1 | grep '"ms"\|WRONG' | sed "s/^/rh=$rh /" | sed 's/"first_call_s[^,]*, //' | cut -c1-200 >> $R/stages.log
done
cat $R/stages.log
for rh in 2 4 2 4; do
  GPUFIELD_FUSED_EPI_ROWBLOCKS=$rh timeout 60 python3 benchmarks/fp64_fft_bits.py --out /tmp/b32 --sizes 1024 --bits 58/56 --reps 3 2>&1 | sed "s/^/rh=$rh /" | cut -c1-300 >> $R/whole.log
done
cat $R/whole.log
