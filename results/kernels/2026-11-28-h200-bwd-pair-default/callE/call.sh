#!/bin/bash
# Session 2026-11-28e, call E (one H200), backward variant 5 the default (the build of this commit): cuDNN's dense
# layer at 128K first, then ours in the same job: dense, vs-topp:0.95 layer 0 and all 36 layers (the mean layer);
# calibrate on this build (gpu.bar_walk_pairs); a vs-topp:0.95 layer at 64K with --predict on that calibration.
O=${OUT:-/tmp/out}; mkdir -p $O/logs
nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm,power.limit,memory.total --format=csv > $O/gpu.txt
. scripts/gpu/mpi.sh
t0=$(date +%s)
el() { echo $(( $(date +%s)-t0 )); }
SEQS="128K" RUNS='dense topp topp-all' OUT=$O/l128 SR_BUDGET_S=150 timeout 300 bash scripts/gpu/layer_vs_cudnn.sh > $O/l128.console 2>&1
echo "128K: exit $? $(el) s"; tail -6 $O/l128/summary.txt
timeout 120 $MPIRUN --oversubscribe --bind-to none -np 1 bin/sparsering-exec calibrate --backend cuda --cluster models/clusters/h200-1x1-calibrated.json --out $O/h200-1x1-pair.json --log $O/calib-pair.csv > $O/calibrate-pair.log 2>&1
echo "calibrate: exit $? $(el) s"; grep -E "bars' backward walk|pairs|rror" $O/calibrate-pair.log | cut -c1-200
CAL=$O/h200-1x1-pair.json; [ -s $CAL ] || CAL=models/clusters/h200-1x1-calibrated.json
timeout 60 $MPIRUN --oversubscribe --bind-to none -np 1 bin/sparsering-exec attn --backend cuda --model qwen2.5-3b --cluster $CAL --seq 64K --strategy mtraining --pattern vs-topp:0.95 --layers 2 --repeat 3 --predict > $O/logs/attn64.log 2>&1
echo "attn 64K: exit $? $(el) s"; grep -E "per layer|predicted|note|calibrat" $O/logs/attn64.log | cut -c1-220
tar czf $O/all.tgz -C $O --exclude all.tgz . 2>/dev/null
