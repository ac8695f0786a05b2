#!/bin/bash
# run 60 (session 12): staggered start (GPUFIELD_FUSED_EPI_STAGGER_NS) of the first wave's second program per SM.
# Stage times (six-step layout, queued) at N = 16 and 32 for several offsets, then whole transforms alternating
S=$(cd "$(dirname "$0")" && pwd)
R=$OUT/res; mkdir -p $R
export PYTHONUNBUFFERED=1
cat $S/snap/COMMIT > $R/commit.txt
cd $S/snap
export PYTHONPATH=src TRITON_CACHE_DIR=/tmp/tc_new
for ns in 0 4000 8000 14000 0 4000 8000 14000; do
  GPUFIELD_FUSED_EPI_STAGGER_NS=$ns timeout 40 python3 benchmarks/fp64_fused_epi_shapes.py --out /tmp/st_$ns --layout sixstep --shapes '16:64,8,16,128,1;32:64,8,32,128,2' --budget-s 35 2>&1 | grep '"ms"' | sed "s/^/ns=$ns /" | sed 's/"first_call_s[^,]*, //' | cut -c1-200 >> $R/stages.log
done
cat $R/stages.log
for rep in 1 2; do for ns in 0 X; do
  [ $ns = X ] && ns16=5000 && ns32=14000 || { ns16=0; ns32=0; }
  GPUFIELD_FUSED_EPI_STAGGER_NS=$ns16 timeout 40 python3 benchmarks/fp64_fft_bits.py --out /tmp/b16 --sizes 256 --bits 58/56 --reps 5 2>&1 | sed "s/^/ns=$ns16 /" | cut -c1-300 >> $R/whole.log
  GPUFIELD_FUSED_EPI_STAGGER_NS=$ns32 timeout 60 python3 benchmarks/fp64_fft_bits.py --out /tmp/b32 --sizes 1024 --bits 58/56 --reps 3 2>&1 | sed "s/^/ns=$ns32 /" | cut -c1-300 >> $R/whole.log
done; done
cat $R/whole.log
