#!/bin/bash
# run 72 (session 16): one H200. Snapshot of the merged helper branches in .gpudata/snap (commit in snap/COMMIT).
# Order: power twin probe first (GPU idle at start), then the fp64 crossover, then preflight (read-only).
T0=$(date +%s)
cd .gpudata/snap || exit 1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ../../.whl/*.whl > $OUT/pip.log 2>&1 || { echo pip failed; tail $OUT/pip.log; }
export PYTHONPATH=/tmp/site:src PYTHONUNBUFFERED=1
R=/tmp/r72; mkdir -p $R/power-twin $R/fp64-emulate $R/preflight
cp COMMIT $R/commit.txt; cp ../run72.sh $R/
nvidia-smi -q > $R/smi_before.txt 2>&1
nvidia-smi --query-gpu=name,uuid,driver_version,power.limit,power.default_limit,clocks.sm,clocks.mem,clocks.applications.graphics,temperature.gpu,memory.used --format=csv > $R/smi_before.csv 2>&1
echo "== power-twin $(( $(date +%s)-T0 )) s"
eval "timeout 245 $(cat ../cmd-power-twin)" > $R/power-twin.log 2>&1; echo "power-twin rc $?" | tee -a $R/rc.txt
echo "== fp64 $(( $(date +%s)-T0 )) s"
eval "timeout 215 $(cat ../cmd-fp64-emulate)" > $R/fp64-emulate.log 2>&1; echo "fp64 rc $?" | tee -a $R/rc.txt
echo "== preflight $(( $(date +%s)-T0 )) s"
timeout 90 python3 benchmarks/harden_preflight.py --out $R/preflight/h200-preflight.json --repeat 3 --expect-gpus 1 --expect-model "NVIDIA H200" > $R/preflight.log 2>&1; echo "preflight rc $?" | tee -a $R/rc.txt
nvidia-smi --query-gpu=name,uuid,driver_version,power.limit,power.default_limit,clocks.sm,clocks.mem,clocks.applications.graphics,temperature.gpu,memory.used --format=csv > $R/smi_after.csv 2>&1
nvidia-smi -q > $R/smi_after.txt 2>&1
echo "== end $(( $(date +%s)-T0 )) s"
(cd $R && tar czf $OUT/r72.tgz .)
tail -15 $R/power-twin.log; tail -15 $R/fp64-emulate.log; tail -5 $R/preflight.log; cat $R/rc.txt
