#!/bin/bash
# Issue 24 throughput on the lent H200 machine's CPU side, restricted to 2 cores (taskset -c 0,1):
# the whole `gpufield triage FILE --json` on the dense 100 MB and 1 GB logs of benchmarks/triage_scale.py,
# default (2 processes) and --workers 1, optionally beside a baseline checkout's src/ (main before this
# branch). No GPU is used; nothing is changed on the machine; the logs are written to a temporary folder
# and deleted. Run from the repo root:
#
#     bash benchmarks/triage_scale_h200.sh $OUT/scale [BASELINE_SRC]
#
# Needs: python3 with numpy, pyarrow, google-re2, drain3, typer, rich (the lead's carried wheels), and the
# shared triage cases (27 *.log files, 128 kB) at ../shared/data/triage-cases (or CASES=DIR).
# SIZES="10 100" overrides the sizes (MB); BASE1=1 also runs the baseline with --workers 1 (+~40 s). Wall time: ~2-2.5 min with a baseline (log builds ~25 s of it), ~1.5 min without.
set -u
out=${1:?usage: triage_scale_h200.sh OUTDIR [BASELINE_SRC]}
base=${2:-}
cases=${CASES:-../shared/data/triage-cases}
mkdir -p "$out"
py=${PYTHON:-python3}
{
  date -u; nproc; uname -a; $py --version
  grep -m1 "model name" /proc/cpuinfo; cat /proc/loadavg
  $py -c "import re2, drain3, numpy, pyarrow; print('re2', re2.__file__); print('numpy', numpy.__version__, 'pyarrow', pyarrow.__version__)"
  ls "$cases" | wc -l
} > "$out/env.txt" 2>&1
work=$(mktemp -d /tmp/triage-scale-XXXXXX)
extra=()
if [ -n "$base" ]; then extra=(--baseline-src "$base"); fi
if [ -n "$base" ] && [ "${BASE1:-0}" = 1 ]; then extra+=(--baseline-one-worker-too); fi
t0=$($py -c "import time; print(time.time())")
PYTHONPATH=src timeout 175 taskset -c 0,1 $py benchmarks/triage_scale.py --sizes-mb ${SIZES:-100 1000} --dir "$work" \
    --one-worker-too --cases "$cases" "${extra[@]}" > "$out/triage-scale.jsonl" 2> "$out/triage-scale.stderr"
rc=$?
t1=$($py -c "import time; print(time.time())")
rm -rf "$work"
{ echo "rc $rc"; echo "wall_s $($py -c "print(round($t1 - $t0, 1))")"; cat /proc/loadavg; } >> "$out/env.txt"
cat "$out/triage-scale.jsonl"
exit $rc
