#!/bin/bash
# run 69 (session 14): the inverse on conjugate roots (aa72b22) against the conj(fft(conj)) inverse (ee34dbe),
# whole transforms alternating between the two snapshots (separate processes, shared Triton cache), then the
# CUDA tests of the inverse paths at aa72b22
S=$(cd "$(dirname "$0")" && pwd)
R=$OUT/res; mkdir -p $R
export PYTHONUNBUFFERED=1
cat $S/snap/COMMIT $S/snap_old/COMMIT > $R/commit.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv > $R/gpu.txt 2>&1
for round in 1 2; do
  for arm in old new; do
    d=$S/snap; [ $arm = old ] && d=$S/snap_old
    (cd $d && TRITON_CACHE_DIR=/tmp/tc_new PYTHONPATH=src timeout 150 python3 benchmarks/fp64_fft_bits.py --out /tmp/b_$arm$round --sizes 256,512,1024 --bits 58/56 --reps 5 --inverse > $R/ab_${arm}${round}.log 2>&1; echo "ab $arm $round rc $?" >> $R/rc.txt)
  done
done
python3 - $R <<'PY'
import json, sys, glob, statistics as st
R = sys.argv[1]
for f in sorted(glob.glob(R + "/ab_*.log")):
    for line in open(f):
        if line[:1].isdigit():
            n, js = line.split(" ", 1); r = json.loads(js)
            print(f.split("/")[-1][:-4], n, "fwd %.3f inv %.3f  cufft fwd %.3f inv %.3f  err inv %.3g" % (
                st.median(r["58/56_ms"]), st.median(r["58/56_inverse_ms"]), r["cufft_ms"], r["cufft_inverse_ms"],
                r["58/56_inverse_rank1_rel_l2"]))
PY
cd $S/snap
TRITON_CACHE_DIR=/tmp/tc_new PYTHONPATH=src timeout 280 python3 -m pytest -v -n 4 -p no:cacheprovider -p no:benchmark tests/fp64/test_fft_launch.py -k "graphed or inverse or few_rows or three_full" > $R/tests.log 2>&1
echo "tests rc $?" >> $R/rc.txt
grep -E "PASSED|FAILED|ERROR|passed|failed" $R/tests.log | sed 's/^\[gw[0-9]\] //' | cut -c1-170 | tail -20
cat $R/rc.txt
