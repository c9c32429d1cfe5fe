#!/bin/bash
# Session 2026-11-28e, call D (one H200): Qwen2.5-3B attention layers at 128K and 512K next to cuDNN's dense layer in
# the same job, backward variant 5 (SR_BWD_VARIANT=5): our dense layer, vs-topp:0.95's layer 0, and all 36 layers
# (the mean layer; at 128K also with --fwd-runs).
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=index,name,driver_version,clocks.max.sm,power.limit,memory.total --format=csv > $O/gpu.txt
t0=$(date +%s)
SR_BWD_VARIANT=5 SEQS="128K" RUNS='dense topp topp-all topp-all-runs' OUT=$O/l128 SR_BUDGET_S=150 timeout 200 bash scripts/gpu/layer_vs_cudnn.sh > $O/l128.console 2>&1
echo "128K: exit $? $(( $(date +%s)-t0 )) s"; tail -6 $O/l128/summary.txt
SR_BWD_VARIANT=5 SEQS="512K" RUNS='dense topp topp-all' OUT=$O/l512 SR_BUDGET_S=200 timeout $(( 565 - $(date +%s) + t0 )) bash scripts/gpu/layer_vs_cudnn.sh > $O/l512.console 2>&1
echo "512K: exit $? $(( $(date +%s)-t0 )) s"; tail -5 $O/l512/summary.txt
tar czf $O/all.tgz -C $O --exclude all.tgz . 2>/dev/null
