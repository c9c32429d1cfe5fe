#!/bin/bash
# Session 2026-11-28c, call 6 (one H100, kind nvidia-h100-x1): MTraining with online estimation (vs-online:0.95) at 256K
# on one GPU on vertical-slash inputs, its estimated pattern kept as a trace (a third vs-online layer for repredict), with
# every launch timed by ncu in a second run; then the trainer with whole-layer keeping against the compiled peer at 64K.
O=${OUT:-/tmp/out}; mkdir -p $O/logs
nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm,power.limit,memory.total --format=csv > $O/gpu.txt
. scripts/gpu/mpi.sh
t0=$(date +%s)
A="bin/sparsering-exec attn --backend cuda --model qwen2.5-3b --cluster models/clusters/h100-1x1-calibrated.json --seq 256K --inputs vs --repeat 3"
timeout 120 $MPIRUN --oversubscribe --bind-to none -np 1 $A --strategy mtraining --pattern vs-online:0.95 --predict --trace-out $O/logs/vson-256K-1gpu.trace > $O/logs/vson-256K-1gpu.log 2>&1; echo "vson: $? $(( $(date +%s)-t0 )) s"
timeout 120 $MPIRUN --oversubscribe --bind-to none -np 1 $A --strategy dense-ring --predict > $O/logs/dense-256K-1gpu.log 2>&1; echo "dense: $? $(( $(date +%s)-t0 )) s"
grep -hE "fwd .* bwd|predicted|work:" $O/logs/vson-256K-1gpu.log $O/logs/dense-256K-1gpu.log | cut -c1-200
timeout 120 $MPIRUN --oversubscribe --bind-to none -np 1 ncu --metrics gpu__time_duration.sum --csv --log-file $O/logs/ncu-vson.csv $A --strategy mtraining --pattern vs-online:0.95 > $O/logs/ncu-vson.log 2>&1; echo "ncu: $? $(( $(date +%s)-t0 )) s"
OUT=$O/peer64 RUNS='compiled topp' timeout 200 bash scripts/gpu/train_vs_peer.sh 64K > $O/peer64.console 2>&1; echo "peer 64K: exit $? $(( $(date +%s)-t0 )) s"
tail -3 $O/peer64/table.txt
find $O -name "*.i32" -delete
tar czf $O/all.tgz -C $O --exclude all.tgz . 2>/dev/null
