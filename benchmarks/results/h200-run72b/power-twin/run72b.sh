#!/bin/bash
# run 72b (session 16): the power twin probe again (run 72 died with SIGSEGV 1 s in, no output): first each NVML
# call in its own child (nvml_diag.py), then the probe under faulthandler with the crashing calls disabled.
cd .gpudata/snap || exit 1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ../../.whl/*.whl > $OUT/pip.log 2>&1
export PYTHONPATH=/tmp/site:src PYTHONUNBUFFERED=1
R=/tmp/r72b; mkdir -p $R; cp COMMIT $R/commit.txt; cp ../run72b.sh ../nvml_diag.py ../probe_safe.py $R/
python3 ../nvml_diag.py > $R/nvml_diag.json 2>&1; cat $R/nvml_diag.json
timeout 245 python3 -X faulthandler ../probe_safe.py $R/nvml_diag.json --out $R/power-twin > $R/power-twin.log 2>&1; rc=$?; echo "power-twin rc $rc" | tee $R/rc.txt
if [ $rc -ge 128 ]; then echo '{"crashed": ["gpm_support", "fieldvalues", "reasons", "energy"]}' > $R/force_off.json
  rm -rf $R/power-twin; timeout 240 python3 -X faulthandler ../probe_safe.py $R/force_off.json --out $R/power-twin > $R/power-twin-2.log 2>&1; echo "power-twin retry rc $?" | tee -a $R/rc.txt; tail -30 $R/power-twin.log; fi
nvidia-smi --query-gpu=name,uuid,power.limit,clocks.sm,clocks.applications.graphics --format=csv > $R/smi_after.csv 2>&1
(cd $R && tar czf $OUT/r72b.tgz .)
tail -40 $R/power-twin.log
