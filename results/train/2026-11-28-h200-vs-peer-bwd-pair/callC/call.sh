#!/bin/bash
# Session 2026-11-28e, call C (one H200): the trainer at 128K against the compiled PyTorch peer in the same job: ours
# (vs-topp:0.95) with SR_BWD_VARIANT=5 and with 4 (the default), --predict on call B's variant-5 calibration.
O=${OUT:-/tmp/out}; mkdir -p $O/logs
nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm,power.limit,memory.total --format=csv > $O/gpu.txt
t0=$(date +%s)
el() { echo $(( $(date +%s)-t0 )); }
CAL=.gpu-c/h200-1x1-v5.json
SR_BWD_VARIANT=5 OUT=$O/peer128 CAL=$CAL RUNS='compiled topp' timeout 380 bash scripts/gpu/train_vs_peer.sh 128K > $O/peer128.console 2>&1; echo "peer + v5 128K: exit $? $(el) s"
tail -3 $O/peer128/table.txt
SR_BWD_VARIANT=4 OUT=$O/b4-128 CAL=$CAL RUNS='topp' timeout $(( 570 - $(el) )) bash scripts/gpu/train_vs_peer.sh 128K > $O/b4-128.console 2>&1; echo "ours v4 128K: exit $? $(el) s"
tail -2 $O/b4-128/table.txt
grep -h "^predict: qwen\|^step" $O/peer128/logs/ours-*.log $O/b4-128/logs/ours-*.log | cut -c1-220
find $O -name "*.i32" -delete
tar czf $O/all.tgz -C $O --exclude all.tgz . 2>/dev/null
