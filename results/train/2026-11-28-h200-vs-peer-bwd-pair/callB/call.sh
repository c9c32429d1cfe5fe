#!/bin/bash
# Session 2026-11-28e, call B (one H200): calibrate with backward variant 5; the trainer at 64K against the compiled
# PyTorch peer in the same job: ours with SR_BWD_VARIANT=5 and with 4 (the default), --predict on the new calibration.
O=${OUT:-/tmp/out}; mkdir -p $O/logs
nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm,power.limit,memory.total --format=csv > $O/gpu.txt
. scripts/gpu/mpi.sh
t0=$(date +%s)
el() { echo $(( $(date +%s)-t0 )); }
SR_BWD_VARIANT=5 timeout 200 $MPIRUN --oversubscribe --bind-to none -np 1 bin/sparsering-exec calibrate --backend cuda --cluster models/clusters/h200-1x1-calibrated.json --out $O/h200-1x1-v5.json --log $O/calib-v5.csv > $O/calibrate-v5.log 2>&1
echo "calibrate: exit $? $(el) s"; grep -E "bars' backward walk|held|rror" $O/calibrate-v5.log | cut -c1-200
CAL=$O/h200-1x1-v5.json; [ -s $CAL ] || CAL=models/clusters/h200-1x1-calibrated.json
SR_BWD_VARIANT=5 OUT=$O/peer64 CAL=$CAL RUNS='compiled topp' timeout 270 bash scripts/gpu/train_vs_peer.sh 64K > $O/peer64.console 2>&1; echo "peer + v5 64K: exit $? $(el) s"
tail -3 $O/peer64/table.txt
SR_BWD_VARIANT=4 OUT=$O/b4-64 CAL=$CAL RUNS='topp' timeout 100 bash scripts/gpu/train_vs_peer.sh 64K > $O/b4-64.console 2>&1; echo "ours v4 64K: exit $? $(el) s"
tail -2 $O/b4-64/table.txt
grep -h "^predict: qwen" $O/peer64/logs/ours-*.log $O/b4-64/logs/ours-*.log | cut -c1-220
tar czf $O/all.tgz -C $O --exclude all.tgz . 2>/dev/null
