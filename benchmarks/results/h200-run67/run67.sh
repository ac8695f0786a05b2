#!/bin/bash
# run 67 (session 13): the one CUDA test that did not finish in run 66, alone, with a stack dump after 200 s
S=$(cd "$(dirname "$0")" && pwd)
R=$OUT/res; mkdir -p $R
export PYTHONUNBUFFERED=1
cd $S/snap
TRITON_CACHE_DIR=/tmp/tc_new PYTHONPATH=src timeout 280 python3 -m pytest -v -s -p no:cacheprovider -p no:benchmark -o faulthandler_timeout=200 "tests/fp64/test_fft_launch.py::test_inverse_division_in_the_last_rounding_same_bits_on_every_path[fused_epi]" > $R/t.log 2>&1
echo "rc $?" >> $R/t.log
grep -vE "^\s*$" $R/t.log | grep -E "File|PASS|FAIL|rc |Error|line" | cut -c1-200 | tail -60
