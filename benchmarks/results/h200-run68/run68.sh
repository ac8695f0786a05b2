#!/bin/bash
# run 68 (session 14): the CUDA tests never run on a GPU (R < 16 cuBLAS fallback, the inverse's division on the
# fused_epi path incl. 32 x 64, backends built with kernels="triton" on CUDA), then forward + inverse timings
S=$(cd "$(dirname "$0")" && pwd)
R=$OUT/res; mkdir -p $R
export PYTHONUNBUFFERED=1
cat $S/snap/COMMIT > $R/commit.txt
cd $S/snap
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv > $R/gpu.txt 2>&1
TRITON_CACHE_DIR=/tmp/tc_new PYTHONPATH=src timeout 330 python3 -m pytest -v -n 4 -p no:cacheprovider -p no:benchmark --durations=15 "tests/fp64/test_fft_launch.py::test_inverse_division_in_the_last_rounding_same_bits_on_every_path" "tests/fp64/test_fft_launch.py::test_stages_with_few_rows_per_group_on_cuda_match_the_cpu_bits" tests/fp64/test_interpreter_setup.py tests/fp64/test_kernels.py > $R/tests.log 2>&1
echo "tests rc $?" >> $R/rc.txt
grep -E "PASSED|FAILED|ERROR|passed|failed|SKIPPED" $R/tests.log | sed 's/^\[gw[0-9]\] //' | cut -c1-170 | tail -60
TRITON_CACHE_DIR=/tmp/tc_new PYTHONPATH=src timeout 200 python3 benchmarks/fp64_fft_bits.py --out $R --sizes 256,512,1024 --bits 58/56 --reps 5 --inverse > $R/bits.log 2>&1
echo "bits rc $?" >> $R/rc.txt
cut -c1-900 $R/bits.log
cat $R/rc.txt
