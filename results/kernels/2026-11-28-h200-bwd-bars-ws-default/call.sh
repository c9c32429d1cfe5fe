#!/bin/bash
# Session 2026-11-28d, call 3 (one H200): backward variant 4 as the default (the 4s fix): GPU test of every backward
# variant; calibrate on this build (bars on the warp-specialized kernel: gpu.bar_walk_ws); a vs-topp:0.95 layer at 64K
# with the default against SR_BWD_VARIANT=3, --predict on the new calibration; the trainer at 64K against the compiled
# peer (default) and ours with variant 3; a vs-online:0.95 layer at 256K kept as a trace, and its launches under ncu.
O=${OUT:-/tmp/out}; mkdir -p $O/logs
nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm,power.limit,memory.total --format=csv > $O/gpu.txt
. scripts/gpu/mpi.sh
t0=$(date +%s)
el() { echo $(( $(date +%s)-t0 )); }
timeout 100 bin/sparsering-gpu-test --bwd > $O/gpu-test-bwd.log 2>&1; echo "gpu-test --bwd: exit $? $(el) s; $(tail -1 $O/gpu-test-bwd.log)"
timeout 200 $MPIRUN --oversubscribe --bind-to none -np 1 bin/sparsering-exec calibrate --backend cuda --cluster models/clusters/h200-1x1-calibrated.json --out $O/h200-1x1-ws.json --log $O/calib-ws.csv > $O/calibrate-ws.log 2>&1
echo "calibrate: exit $? $(el) s"; grep -E "bars' backward walk|held|rror" $O/calibrate-ws.log | cut -c1-200
CAL=$O/h200-1x1-ws.json; [ -s $CAL ] || CAL=models/clusters/h200-1x1-calibrated.json
A="bin/sparsering-exec attn --backend cuda --model qwen2.5-3b --cluster $CAL --seq 64K --strategy mtraining --pattern vs-topp:0.95 --layers 2 --repeat 3 --predict"
for r in 1 2; do for v in 3 4; do
  SR_BWD_VARIANT=$v timeout 60 $MPIRUN --oversubscribe --bind-to none -np 1 $A > $O/logs/attn64-b$v-r$r.log 2>&1; echo "attn b$v r$r: $? $(el) s; $(grep -E 'per layer' $O/logs/attn64-b$v-r$r.log | cut -c60-200)"
done; done
OUT=$O/peer64 CAL=$CAL RUNS='compiled topp' timeout 260 bash scripts/gpu/train_vs_peer.sh 64K > $O/peer64.console 2>&1; echo "peer 64K: exit $? $(el) s"
tail -4 $O/peer64/table.txt
SR_BWD_VARIANT=3 OUT=$O/b3-64 CAL=$CAL RUNS='topp' timeout 100 bash scripts/gpu/train_vs_peer.sh 64K > $O/b3-64.console 2>&1; echo "ours b3 64K: exit $? $(el) s"
tail -2 $O/b3-64/table.txt
if [ $(el) -lt 420 ]; then
B="bin/sparsering-exec attn --backend cuda --model qwen2.5-3b --cluster $CAL --seq 256K --inputs vs --repeat 3"
timeout 90 $MPIRUN --oversubscribe --bind-to none -np 1 $B --strategy mtraining --pattern vs-online:0.95 --predict --trace-out $O/logs/vson-256K-1gpu.trace > $O/logs/vson-256K-1gpu.log 2>&1; echo "vson: $? $(el) s"
grep -hE "fwd .* bwd|predicted|work:" $O/logs/vson-256K-1gpu.log | cut -c1-200
[ $(el) -lt 500 ] && { timeout 80 $MPIRUN --oversubscribe --bind-to none -np 1 ncu --metrics gpu__time_duration.sum --csv --log-file $O/logs/ncu-vson.csv $B --strategy mtraining --pattern vs-online:0.95 > $O/logs/ncu-vson.log 2>&1; echo "ncu: $? $(el) s"; }
fi
find $O -name "*.i32" -delete
tar czf $O/all.tgz -C $O --exclude all.tgz . 2>/dev/null
