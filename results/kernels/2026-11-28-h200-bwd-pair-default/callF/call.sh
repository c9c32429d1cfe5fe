#!/bin/bash
# Session 2026-11-28e, call F (one H200), call E's build (backward variant 5 the default): cuDNN's dense layer at 128K
# first, then ours in the same job over all 36 layers of vs-topp:0.95 (the mean layer), the tile form and the forward
# on the runs form (--fwd-runs).
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm,power.limit,memory.total --format=csv > $O/gpu.txt
t0=$(date +%s)
SEQS="128K" RUNS='topp-all topp-all-runs' OUT=$O/l128 SR_BUDGET_S=200 timeout 330 bash scripts/gpu/layer_vs_cudnn.sh > $O/l128.console 2>&1
echo "128K: exit $? $(( $(date +%s)-t0 )) s"; tail -5 $O/l128/summary.txt
tar czf $O/all.tgz -C $O --exclude all.tgz . 2>/dev/null
