#!/bin/bash
# run 74 (session 16): one H200. Snapshot of main + power-run + power-twin in .gpudata/snap (commit in snap/COMMIT),
# with gpm_lock_patch.py applied to src/gpufield/power/twin/probe.py (GPM calls under one lock).
# 1) gpufield power run --shadow beside a real GPU workload (read-only; run 73's try lacked pydantic for typer),
# 2) the power twin probe again (a second H200 machine: held-out check; GPM if it survives the canaries).
T0=$(date +%s)
cd .gpudata/snap || exit 1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ../../.whl/*.whl > $OUT/pip.log 2>&1 || { echo pip failed; tail $OUT/pip.log; }
export PYTHONPATH=/tmp/site:src PYTHONUNBUFFERED=1
python3 -c "import typer, pydantic, prometheus_client, httpx, pynvml; print('deps ok', typer.__version__, pydantic.__version__)"
R=/tmp/r74; mkdir -p $R/power-run $R/power-twin
cp COMMIT $R/commit.txt; cp ../run74.sh ../gpm_lock_patch.py $R/
Q=name,uuid,driver_version,power.limit,power.default_limit,clocks.sm,clocks.mem,clocks.applications.graphics,temperature.gpu,memory.used
nvidia-smi --query-gpu=$Q --format=csv > $R/smi_before.csv 2>&1
echo "== power-run $(( $(date +%s)-T0 )) s"
timeout 265 python3 -X faulthandler benchmarks/power_run_gpu.py --out $R/power-run --duration-s 180 > $R/power-run.log 2>&1; echo "power-run rc $?" | tee -a $R/rc.txt
echo "== power-twin $(( $(date +%s)-T0 )) s"
timeout 235 python3 -X faulthandler benchmarks/power_twin_probe.py --out $R/power-twin > $R/power-twin.log 2>&1; echo "power-twin rc $?" | tee -a $R/rc.txt
nvidia-smi --query-gpu=$Q --format=csv > $R/smi_after.csv 2>&1
echo "== end $(( $(date +%s)-T0 )) s"
(cd $R && tar czf $OUT/r74.tgz .)
tail -20 $R/power-run.log; tail -25 $R/power-twin.log; cat $R/rc.txt; cat $R/smi_before.csv $R/smi_after.csv
