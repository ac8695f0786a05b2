#!/bin/bash
# run 73 (session 16): one H200. Snapshot of main + power-run + fp64-emulate in .gpudata/snap (commit in snap/COMMIT).
# 1) gpufield power run --shadow beside a real GPU workload (read-only), 2) a float64 workload under fp64.emulate().
T0=$(date +%s)
cd .gpudata/snap || exit 1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ../../.whl/*.whl > $OUT/pip.log 2>&1 || { echo pip failed; tail $OUT/pip.log; }
export PYTHONPATH=/tmp/site:src PYTHONUNBUFFERED=1
R=/tmp/r73; mkdir -p $R/power-run $R/fp64-emulate
cp COMMIT $R/commit.txt; cp ../run73.sh $R/
Q=name,uuid,driver_version,power.limit,power.default_limit,clocks.sm,clocks.mem,clocks.applications.graphics,temperature.gpu,memory.used
nvidia-smi --query-gpu=$Q --format=csv > $R/smi_before.csv 2>&1
echo "== power-run $(( $(date +%s)-T0 )) s"
eval "timeout 265 python3 -X faulthandler $(cat ../cmd-power-run | sed 's/^python3 //')" > $R/power-run.log 2>&1; echo "power-run rc $?" | tee -a $R/rc.txt
echo "== fp64 $(( $(date +%s)-T0 )) s"
eval "timeout 125 python3 -X faulthandler $(cat ../cmd-fp64-emulate-73 | sed 's/^python3 //')" > $R/fp64-emulate.log 2>&1; echo "fp64 rc $?" | tee -a $R/rc.txt
nvidia-smi --query-gpu=$Q --format=csv > $R/smi_after.csv 2>&1
echo "== end $(( $(date +%s)-T0 )) s"
(cd $R && tar czf $OUT/r73.tgz .)
tail -25 $R/power-run.log; tail -16 $R/fp64-emulate.log; cat $R/rc.txt; cat $R/smi_before.csv $R/smi_after.csv
